"""ReWOO against ReAct on multi-hop lookups: what each pays in prompt tokens and model calls.

The question follows a line of mentors back from one chemist, one lookup per hop ("who mentored Ada Reyes?",
then who mentored that person, ...). ``ReAct`` calls the lookup tool once a turn and is shown the whole growing
transcript every turn; ``ReWOO`` plans every hop at once (``E2`` looks up ``#E1``, ...), its workers run the plan
without the model, and one solving turn answers. Both start from the same system prompt, and both read the same
lookup results (one name per lookup).

Runs offline on a deterministic simulated model (``provider.Function``) that counts what each request shows it:
prompt tokens with ``loop.approx_tokens`` over the turns, plus the offered tool schemas. It prints a table for
3, 5 and 8 hops.

    python examples/rewoo_vs_react.py
"""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import attrs

import provider
from cognitive import ReAct, ReWOO
from loop import Request, Role, State, Step, Text, Usage, approx_tokens, tool

PEOPLE = ["Ada Reyes", "Bo Lind", "Cai Moreau", "Dana Okafor", "Emil Varga", "Farah Haddad", "Goran Petrov",
          "Hana Sato", "Ines Duarte"]
SYSTEM = ("You are a research assistant for a history-of-science archive. Answer questions about scientists by "
          "looking them up with the tools; never guess a name. Each lookup returns one name from the archive. Keep going until the question is answered, then answer in one sentence naming the person.")


@tool
async def mentor(person: str) -> str:
    """The name of the person who mentored ``person``, from the archive."""
    if person not in PEOPLE[:-1]:
        raise LookupError(f"the archive has no record of {person!r}")
    return PEOPLE[PEOPLE.index(person) + 1]


TOOLS = [mentor]


def question(hops: int) -> str:
    return f"Follow the line of mentors back {hops} generations from Ada Reyes: who is at the end?"


def _hops(request: Request) -> int:
    asked = next((t.text for t in reversed(request.turns) if t.role is Role.USER), "")
    found = re.search(r"back (\d+) generations", asked)
    return int(found[1]) if found else 1


def _name(result: str) -> str:
    return result.split("\n", 1)[0]


@attrs.define(eq=False)
class Simulated:
    """A deterministic stand-in for a model that can run either pattern. It notes every request's prompt tokens
    (its turns by ``loop.approx_tokens``, plus the tool schemas it is offered) and reports them as usage."""

    calls: int = 0
    prompt_tokens: int = 0

    def __call__(self, request: Request) -> list[Any]:
        shown = approx_tokens(request.turns) + len(json.dumps([attrs.asdict(s) for s in request.tools])) // 4
        self.calls += 1
        self.prompt_tokens += shown
        return [*self._reply(request), Usage(shown, 30)]

    def _reply(self, request: Request) -> list[Any]:
        hops = _hops(request)
        schema = request.options.output_schema
        if schema is not None and "steps" in schema.get("properties", {}):  # ReWOO's planner: every hop at once
            steps = [{"id": f"E{i}", "tool": "mentor", "arguments": {"person": "Ada Reyes" if i == 1 else f"#E{i - 1}"},
                      "depends_on": [] if i == 1 else [f"E{i - 1}"]} for i in range(1, hops + 1)]
            return [json.dumps({"steps": steps})]
        evidence = re.findall(rf"^E{hops} returned: (.+)$", request.turns[-1].text, re.M)
        if evidence:  # ReWOO's solver
            return [f"{evidence[0]} is {hops} generations of mentors back from Ada Reyes."]
        results = [r.content for t in request.turns for r in t.tool_results]
        if len(results) < hops and request.options.tool_choice != "none":  # ReAct: one hop a turn
            person = _name(results[-1]) if results else "Ada Reyes"
            return [Text(f"Thought: I need the mentor of {person}."), provider.tool_call("mentor", {"person": person})]
        if results:
            return [f"{_name(results[-1])} is {len(results)} generations of mentors back from Ada Reyes."]
        return ["I follow lines of mentors through the archive: ask me who is some generations back from Ada Reyes."]


@attrs.frozen
class Cost:
    """What one run cost: model ``calls`` and the ``prompt_tokens`` they were shown, and its ``answer``."""

    pattern: str
    hops: int
    calls: int
    prompt_tokens: int
    answer: str


def make_agent(step: Step) -> ReWOO:
    """The ReWOO agent this example serves (``python -m session serve examples.rewoo_vs_react:make_agent``)."""
    return ReWOO(step)


def demo_provider() -> provider.Function:
    return provider.Function(Simulated())


async def compare(hops_list: tuple[int, ...] = (3, 5, 8)) -> list[Cost]:
    """Each pattern run once per hop count on a fresh simulated model; what each run cost."""
    costs: list[Cost] = []
    for hops in hops_list:
        for name, make in (("ReAct", lambda step: ReAct(step, max_turns=hops + 2)), ("ReWOO", ReWOO)):
            model = Simulated()
            state = State().append(Role.SYSTEM, Text(SYSTEM)).append(Role.USER, Text(question(hops)))
            done = await make(Step(provider.Function(model), tools=TOOLS)).run(state)
            costs.append(Cost(name, hops, model.calls, model.prompt_tokens, done.answer or ""))
    return costs


async def main() -> None:
    costs = await compare()
    print(f"{'hops':>4}  {'pattern':<7} {'calls':>5} {'prompt tokens':>13}")
    for cost in costs:
        print(f"{cost.hops:>4}  {cost.pattern:<7} {cost.calls:>5} {cost.prompt_tokens:>13}")
    for hops in sorted({c.hops for c in costs}):
        react, rewoo = (next(c for c in costs if c.hops == hops and c.pattern == p) for p in ("ReAct", "ReWOO"))
        print(f"{hops} hops: ReAct uses {react.prompt_tokens / rewoo.prompt_tokens:.1f}x the prompt tokens of ReWOO "
              f"({react.answer!r} / {rewoo.answer!r})")


if __name__ == "__main__":
    anyio.run(main)
