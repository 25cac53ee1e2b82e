"""PEOATR: plan, act, think, reflect, answer — and a replan when the first plan meets the facts.

A stock agent answers "How many blue kettles do we have in all, and which warehouse has more?" with one tool,
``stock(item, warehouse)``. ``PEOATR`` first plans (a typed list of subgoals), then works one subgoal per round:
it acts with the tools, thinks about what came back, and reflects (a typed decision: continue, replan or
answer). Here the first plan asks for the kettles without naming a warehouse; the tool refuses and names the
two there are, so the reflection asks for a new plan, one subgoal per warehouse, and the answer is written from
what the rounds found. The working stages run in branches: the conversation keeps only the question, one turn
of notes on the work, and the answer. The program prints the answer and what the run did (the stage path, each
plan, each decision and why), then the path ``Deliberate`` takes on the same question (it thinks before it
plans, and observes after each act).

Runs offline on a small deterministic demo model (a ``provider.Function`` that plays every stage):

    python examples/peoatr.py
    python -m session serve examples.peoatr:make_agent     # the same agent, served

With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (model from ``OPENAI_MODEL``, default gpt-4o-mini), or
``ANTHROPIC_API_KEY`` (model from ``ANTHROPIC_MODEL``), it runs on that real model.
"""

from __future__ import annotations

import json
import re
from typing import Any

import anyio

import loop
import provider
from cognitive import PEOATR, Deliberate
from loop import Request, Role, State, Step, Text, TurnRunner, tool, tracing

QUESTION = "How many blue kettles do we have in all, and which warehouse has more?"
STOCK = {"north": {"blue kettle": 14, "red kettle": 3}, "south": {"blue kettle": 9, "toaster": 5}}


@tool
async def stock(item: str, warehouse: str = "") -> int:
    """How many of item (e.g. "blue kettle") one warehouse holds."""
    if warehouse.strip().lower() not in STOCK:
        raise LookupError(f"name the warehouse: we have {' and '.join(STOCK)}")
    return STOCK[warehouse.strip().lower()].get(item.strip().lower().removesuffix("s"), 0)


TOOLS = [stock]  # what `python -m session serve examples.peoatr:make_agent` gives the step


def _stage(request: Request) -> tuple[str | None, int]:
    """The stage a request is made for (the latest stage turn's name) and where that turn is."""
    for index in range(len(request.turns) - 1, -1, -1):
        if request.turns[index].kind == "stage":
            return str(request.turns[index].meta["stage"]), index
    return None, len(request.turns)


def demo_model(request: Request) -> Any:
    """A stand-in model for every stage, reading what the stages ask and what the tools returned."""
    question = next((t.text for t in reversed(request.turns) if t.role is Role.USER), "")
    stage, at = _stage(request)
    results = [r for t in request.turns for r in t.tool_results]
    properties = (request.options.output_schema or {}).get("properties", {})
    if "steps" in properties:  # plan
        if any(r.is_error and "name the warehouse" in r.content for r in results):
            return json.dumps({"steps": [f"count the blue kettles in the {w} warehouse" for w in STOCK]})
        return json.dumps({"steps": ["count the blue kettles"] if "kettle" in question else []})
    if "decision" in properties:  # reflect
        if results and results[-1].is_error:
            return json.dumps({"decision": "replan", "reason": f"the tool said: {results[-1].content}"})
        if "The next one:" in request.turns[-2].text:
            return json.dumps({"decision": "continue", "reason": "the next warehouse is still to count"})
        return json.dumps({"decision": "answer", "reason": "both warehouses are counted"})
    if stage == "act":
        subgoal = request.turns[at].text
        done = [r for t in request.turns[at:] for r in t.tool_results]
        if done:
            return f"{'The tool refused' if done[-1].is_error else 'Counted'}: {done[-1].content}."
        where = re.search(r"the (\w+) warehouse", subgoal)
        return [provider.tool_call("stock", {"item": "blue kettle", **({"warehouse": where[1]} if where else {})})]
    if stage in ("think", "observe"):
        return ("The last count stands; the other warehouse may still be missing." if results
                else "I need the stock of each warehouse, so I must look them up.")
    counts = {w: int(n) for w, n in re.findall(r'"warehouse": "(\w+)"\}\) returned: (\d+)', _notes(request))}
    if len(counts) == len(STOCK):
        most = max(counts, key=counts.__getitem__)
        each = " and ".join(f"{n} in the {w}" for w, n in counts.items())
        return f"We have {sum(counts.values())} blue kettles in all ({each}); the {most} warehouse has more."
    return ("I plan the work, look our stock up warehouse by warehouse, think over what I find and answer. Ask me "
            "how many of an item we have.")


def _notes(request: Request) -> str:
    return "".join(t.text for t in request.turns if t.kind == "work_notes")


def demo_provider() -> provider.Function:
    return provider.Function(demo_model)


def configured_provider() -> loop.Provider:
    """A real model when the environment names one, else the offline demo model."""
    demo = demo_provider()
    chosen = provider.from_environment(demo)
    print("Running on the offline demo model (provider.Function; no model needed).\n" if chosen is demo
          else f"Running on {chosen!r}.\n")
    return chosen


def make_agent(step: TurnRunner) -> PEOATR:
    """Plan, act, think, reflect, answer: at most 4 rounds of acting, at most 2 new plans."""
    return PEOATR(step, max_rounds=4, max_replans=2)


async def main() -> None:
    tracing.configure_logging(level="error")  # on stderr; the tool's refusal is part of the story, not a warning
    step = Step(configured_provider(), tools=TOOLS)
    asked = State().append(Role.USER, Text(QUESTION))
    state = await make_agent(step).run(asked)
    work = state.outcome.data["PEOATR"]
    print(f"user: {QUESTION}")
    print(f"answer: {state.answer}")
    print(f"outcome: {state.outcome.status}; {work['rounds']} rounds, {work['replans']} replan(s)")
    print(f"stages: {' -> '.join(work['path'])}")
    for number, plan in enumerate(work["plans"], 1):
        print(f"plan {number}: {'; '.join(plan) or '(nothing to do)'}")
    for decision in work["decisions"]:
        print(f"round {decision['round']}: {decision['decision']} -> {decision['then']} ({decision['reason']})")
    print(f"conversation: {', '.join(t.kind or t.role.value for t in state)}")
    deliberate = await Deliberate(step).run(asked)
    print(f"\nDeliberate: {' -> '.join(deliberate.outcome.data['Deliberate']['path'])}")
    print(f"answer: {deliberate.answer}")


if __name__ == "__main__":
    anyio.run(main)
