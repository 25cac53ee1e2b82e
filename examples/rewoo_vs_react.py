"""ReWOO against ReAct on multi-hop lookups: what each pays in prompt tokens and model calls.

An archive agent answers questions about scientists with a toolbox of seven lookups (search, mentor, students,
birth year, institution, field, notable work) over a small table. The question follows a line of mentors back
from one chemist, one lookup per hop ("who mentored Ada Reyes?", then who mentored that person, ...).

``ReAct`` calls one tool a turn, so every turn re-sends the whole prompt: the system prompt, the seven tool
specifications and the growing transcript. ``ReWOO`` plans every hop in one turn (``E2`` looks up ``#E1``, ...),
its workers run the plan without the model, and one solving turn answers from the evidence. Both agents get the
same system prompt, the same tools and the same question, and read the same lookup results.

Runs offline on a deterministic simulated model (``provider.Function``) that counts, for every request, what a
hosted model would bill as input: the turns by ``loop.approx_tokens``, the tool specifications offered with the
request and the output schema asked for natively (each as compact JSON, four characters a token). ReAct is
offered the tools on every turn; ReWOO's planner reads them in its prompt as signature lines and is offered none;
its solver sees neither. Like OpenAI's provider, the simulated one honours ``output_schema`` natively
(``ProviderInfo.json_schema``), so the planner's plan schema is sent, and billed, once: natively, not again in the
prompt. It prints a table for 3, 5 and 8 hops.

    python examples/rewoo_vs_react.py
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import anyio
import attrs

import provider
from cognitive import ReAct, ReWOO
from loop import Request, Role, State, Step, Text, ToolCall, Usage, approx_tokens, tool


@attrs.frozen
class Record:
    born: int
    institution: str
    field: str
    work: str
    mentor: str | None


ARCHIVE: dict[str, Record] = {
    "Ada Reyes": Record(1961, "University of Lisbon", "physical chemistry", "Proton transfer in ice (1994)", "Bo Lind"),
    "Bo Lind": Record(1932, "Uppsala University", "physical chemistry", "Hydrogen bonds in solids (1968)",
                      "Cai Moreau"),
    "Cai Moreau": Record(1905, "University of Strasbourg", "spectroscopy", "Infrared bands of water (1939)",
                         "Dana Okafor"),
    "Dana Okafor": Record(1878, "University of Edinburgh", "spectroscopy", "On the spectra of flames (1910)",
                          "Emil Varga"),
    "Emil Varga": Record(1849, "University of Budapest", "physical chemistry", "The heat of solution (1882)",
                         "Farah Haddad"),
    "Farah Haddad": Record(1821, "University of Paris", "chemistry", "Lectures on affinity (1856)", "Goran Petrov"),
    "Goran Petrov": Record(1790, "University of Saint Petersburg", "chemistry", "Elements of mineral analysis (1824)",
                           "Hana Sato"),
    "Hana Sato": Record(1762, "University of Göttingen", "natural philosophy", "On combustion (1795)", "Ines Duarte"),
    "Ines Duarte": Record(1731, "University of Coimbra", "natural philosophy", "Physical essays (1770)", None),
}
PEOPLE = list(ARCHIVE)  # each one's mentor is the next

SYSTEM = """\
You are the research assistant of a history-of-science archive. You answer questions about scientists: who \
trained whom, where they worked, what they are known for.

Rules:
- Use the archive tools for every fact. Never answer from memory and never guess a name, a year or a title: \
if the archive has no record, say so.
- Pass names to the tools exactly as the archive spells them; when you are unsure of a spelling, search first.
- A question may need several lookups in a row (for example a line of mentors): follow it to the end before \
you answer.
- Answer in one or two plain sentences that name the people involved. Do not show your working or the tool \
calls."""


def _record(person: str) -> Record:
    if person not in ARCHIVE:
        raise LookupError(f"the archive has no record of {person!r}; search_people finds the spelling it uses")
    return ARCHIVE[person]


@tool
async def search_people(query: str, limit: int = 5) -> list[str]:
    """Find people in the archive whose name, institution, field or notable work mentions the query.

    Returns full names, spelled as the archive spells them (the other tools need that spelling), best match
    first. An empty list means the archive has no match.

    Args:
        query: Words to look for, e.g. a partial name ("Okafor"), a field ("spectroscopy") or a place.
        limit: The most names to return, from 1 to 20.
    """
    words = query.lower().split()
    found = [name for name, r in ARCHIVE.items()
             if all(w in f"{name} {r.institution} {r.field} {r.work}".lower() for w in words)]
    return found[:max(1, min(limit, 20))]


@tool
async def mentor(person: str) -> str:
    """The doctoral advisor (mentor) of a person in the archive.

    Returns the mentor's full name alone, spelled as the archive spells it, so that it can be passed straight
    to another lookup. Fails if the archive has no record of the person or no mentor on record for them.

    Args:
        person: The person's full name as the archive spells it, e.g. "Ada Reyes".
    """
    found = _record(person).mentor
    if found is None:
        raise LookupError(f"the archive records no mentor for {person}")
    return found


@tool
async def students(person: str) -> list[str]:
    """The doctoral students a person in the archive supervised, by full name; an empty list if none.

    Args:
        person: The supervisor's full name as the archive spells it.
    """
    _record(person)
    return [name for name, r in ARCHIVE.items() if r.mentor == person]


@tool
async def birth_year(person: str) -> int:
    """The year a person in the archive was born, as a number (e.g. 1878).

    Args:
        person: The person's full name as the archive spells it.
    """
    return _record(person).born


@tool
async def institution(person: str) -> str:
    """The university or institute where a person in the archive did most of their work.

    Args:
        person: The person's full name as the archive spells it.
    """
    return _record(person).institution


@tool
async def field(person: str) -> str:
    """The main field of research of a person in the archive (e.g. "spectroscopy").

    Args:
        person: The person's full name as the archive spells it.
    """
    return _record(person).field


@tool
async def notable_work(person: str) -> str:
    """The best-known publication of a person in the archive: its title and year.

    Args:
        person: The person's full name as the archive spells it.
    """
    return _record(person).work


TOOLS = [search_people, mentor, students, birth_year, institution, field, notable_work]
START = PEOPLE[0]
CAPABILITIES = ("I answer questions about the scientists in a history-of-science archive: who mentored whom, "
                "where they worked, what they are known for. Ask me, say, who is 3 generations of mentors back "
                f"from {START}.")


def question(hops: int) -> str:
    return f"Follow the line of mentors back {hops} generations from {START}: who is at the end?"


def _hops(request: Request) -> int:
    """How many generations the latest question asks for; 0 for anything else."""
    asked = next((t.text for t in reversed(request.turns) if t.role is Role.USER), "")
    found = re.search(r"back (\d+) generations", asked)
    return int(found[1]) if found else 0


def _answer(name: str, hops: int) -> str:
    return f"{name} is {hops} generations of mentors back from {START}."


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@attrs.frozen
class Billed:
    """The input tokens of requests, by what they carried: the ``turns``, the ``tools`` offered with them
    (their specifications), and the output ``schema`` asked for natively."""

    turns: int = 0
    tools: int = 0
    schema: int = 0

    @property
    def total(self) -> int:
        return self.turns + self.tools + self.schema

    def __add__(self, other: Billed) -> Billed:
        return Billed(self.turns + other.turns, self.tools + other.tools, self.schema + other.schema)

    @classmethod
    def of(cls, request: Request) -> Billed:
        """What a hosted model would bill as input for ``request``: the turns by ``loop.approx_tokens``, and the
        tool specifications and native output schema as compact JSON at four characters a token."""
        specs = sum(len(_compact({"name": s.name, "description": s.description, "parameters": s.parameters}))
                    for s in request.tools)
        schema = request.options.output_schema
        return cls(approx_tokens(request.turns), -(-specs // 4), -(-len(_compact(schema)) // 4) if schema else 0)


@attrs.define(eq=False)
class Simulated:
    """A deterministic stand-in for a model that can run either pattern. It notes what every request is
    billed (``Billed.of``) and what it writes, and reports both as usage."""

    calls: int = 0
    billed: Billed = Billed()
    completion_tokens: int = 0

    def __call__(self, request: Request) -> list[Any]:
        shown = Billed.of(request)
        reply = self._reply(request)
        written = sum(len(p) if isinstance(p, str) else len(p.text) if isinstance(p, Text)
                      else len(p.name) + len(p.arguments) for p in reply)
        self.calls += 1
        self.billed += shown
        self.completion_tokens += -(-written // 4)
        return [*reply, Usage(shown.total, -(-written // 4))]

    def _reply(self, request: Request) -> list[str | Text | ToolCall]:
        hops = _hops(request)
        schema: Mapping[str, Any] | None = request.options.output_schema
        if schema is not None and "steps" in schema.get("properties", {}):  # ReWOO's planner: every hop at once
            steps = [{"id": f"E{i}", "tool": "mentor", "arguments": {"person": START if i == 1 else f"#E{i - 1}"},
                      "depends_on": [] if i == 1 else [f"E{i - 1}"]} for i in range(1, hops + 1)]
            return [json.dumps({"steps": steps})]
        evidence = re.findall(r"^E\d+ returned: (.+)$", request.turns[-1].text, re.MULTILINE)
        if evidence:  # ReWOO's solver
            return [_answer(evidence[-1], len(evidence))]
        results = [r.content for t in request.turns for r in t.tool_results]
        if len(results) < hops and request.options.tool_choice != "none":  # ReAct: one hop a turn
            person = results[-1] if results else START
            return [Text(f"Thought: I need the mentor of {person}."), provider.tool_call("mentor", {"person": person})]
        if results:
            return [_answer(results[-1], len(results))]
        return [CAPABILITIES]


@attrs.frozen
class Cost:
    """What one run cost: model ``calls``, the input they were ``billed`` (by what it carried) and the
    ``completion_tokens`` written, and the run's ``answer``."""

    pattern: str
    hops: int
    calls: int
    billed: Billed
    completion_tokens: int
    answer: str

    @property
    def prompt_tokens(self) -> int:
        return self.billed.total


def make_agent(step: Step) -> ReWOO:
    """The ReWOO agent this example serves (``python -m session serve examples.rewoo_vs_react:make_agent``)."""
    return ReWOO(step)


def demo_provider() -> provider.Function:
    return provider.Function(Simulated())


async def compare(hops_list: tuple[int, ...] = (3, 5, 8)) -> list[Cost]:
    """Each pattern run once per hop count on a fresh simulated model, from the same system prompt, tools and
    question; what each run cost."""
    costs: list[Cost] = []
    for hops in hops_list:
        for name, make in (("ReAct", lambda step, hops=hops: ReAct(step, max_turns=hops + 2)), ("ReWOO", ReWOO)):
            model = Simulated()
            state = State().append(Role.SYSTEM, Text(SYSTEM)).append(Role.USER, Text(question(hops)))
            done = await make(Step(provider.Function(model), tools=TOOLS)).run(state)
            costs.append(Cost(name, hops, model.calls, model.billed, model.completion_tokens, done.answer or ""))
    return costs


def ratios(costs: list[Cost]) -> dict[int, float]:
    """For each hop count: ReAct's prompt tokens over ReWOO's."""
    by = {(c.pattern, c.hops): c for c in costs}
    return {hops: by["ReAct", hops].prompt_tokens / by["ReWOO", hops].prompt_tokens
            for hops in sorted({c.hops for c in costs})}


async def main() -> None:
    costs = await compare()
    print(f"Same system prompt ({approx_tokens(State().append(Role.SYSTEM, Text(SYSTEM)))} tokens), same "
          f"{len(TOOLS)} tools, same question. Prompt tokens = turns + tool specs offered + native output schema.\n")
    print(f"{'hops':>4}  {'pattern':<7} {'calls':>5} {'prompt tokens':>13} {'(turns':>7} {'tool specs':>10} "
          f"{'schema)':>7} {'completion':>10}")
    for c in costs:
        print(f"{c.hops:>4}  {c.pattern:<7} {c.calls:>5} {c.prompt_tokens:>13} {c.billed.turns:>7} "
              f"{c.billed.tools:>10} {c.billed.schema:>7} {c.completion_tokens:>10}")
    print()
    for hops, ratio in ratios(costs).items():
        react, rewoo = (next(c for c in costs if c.hops == hops and c.pattern == p) for p in ("ReAct", "ReWOO"))
        print(f"{hops} hops: ReAct uses {ratio:.1f}x the prompt tokens of ReWOO; both answer: {rewoo.answer!r}"
              + ("" if react.answer == rewoo.answer else f" / ReAct: {react.answer!r}"))


if __name__ == "__main__":
    anyio.run(main)
