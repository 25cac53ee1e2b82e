"""A debate: a proposer answers with the tools, a critic challenges it, a judge rules, then the answer is written.

The question is which warehouse should ship an order. The proposer looks the distances up and picks the nearest
warehouse; the critic objects (severity 0.7, above ``Debate``'s 0.3) that nobody checked the stock, so the answer
goes back; the proposer checks the stock, finds the nearest warehouse short, and picks another one; the critic
has only a small point left, the judge passes it, and the answer stage writes the reply from the debate's notes.
The three speakers are named on their turns (``proposer``, ``critic``, ``judge``) so each sees who said what. The
program prints each round's critique and verdict, who ended the debate, and the answer.

Runs offline on a small demo model by default: a ``provider.Function`` that plays the three parts from what each
request shows it (tools offered: the proposer; a critique or verdict schema: the critic or the judge).

    python examples/debate.py
    python -m session serve examples.debate:make_agent

With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (model from ``OPENAI_MODEL``), or ``ANTHROPIC_API_KEY``, it runs
on that real model.
"""

from __future__ import annotations

import json
import re
from typing import Any

import anyio

import loop
import provider
from cognitive import Debate
from loop import Request, Role, State, Step, Text, tool

QUESTION = "Which warehouse should ship 40 blue kettles to Lyon?"
DISTANCE_KM = {("Dijon", "Lyon"): 190, ("Marseille", "Lyon"): 315}
STOCK = {("Dijon", "blue kettle"): 12, ("Marseille", "blue kettle"): 55}
WAREHOUSES = ("Dijon", "Marseille")


@tool
async def distance(warehouse: str, city: str) -> int:
    """The road distance in km from one of our warehouses (Dijon, Marseille) to a city."""
    if (warehouse, city) not in DISTANCE_KM:
        raise LookupError(f"no route from {warehouse!r} to {city!r} on file")
    return DISTANCE_KM[warehouse, city]


@tool
async def stock(warehouse: str, item: str) -> int:
    """How many of an item (e.g. "blue kettle") one of our warehouses (Dijon, Marseille) holds."""
    return STOCK.get((warehouse, item.strip().lower().removesuffix("s")), 0)


TOOLS = [distance, stock]  # what `python -m session serve examples.debate:make_agent` gives the step


def _results(request: Request, name: str) -> dict[str, str]:
    """The results of the calls to tool ``name`` in the request: warehouse -> result."""
    asked = {c.id: json.loads(c.arguments).get("warehouse", "") for t in request.turns for c in t.tool_calls
             if c.name == name}
    return {asked[r.call_id]: r.content for t in request.turns for r in t.tool_results if r.call_id in asked}


def _last(request: Request, speaker: str) -> str:
    return next((t.text for t in reversed(request.turns) if t.name == speaker), "")


def _propose(request: Request) -> Any:
    question = next(t.text for t in reversed(request.turns) if t.role is Role.USER)
    if "kettle" not in question.lower():
        return ("I settle questions by debate: I propose an answer with my tools (warehouse distances and stock), "
                "a critic challenges it and a judge rules. Ask me which warehouse should ship an order.")
    distances, stocks = _results(request, "distance"), _results(request, "stock")
    revising = "found these problems" in request.turns[-1].text
    if not distances:
        return [provider.tool_call("distance", {"warehouse": w, "city": "Lyon"}) for w in WAREHOUSES]
    if revising and not stocks:
        return [provider.tool_call("stock", {"warehouse": w, "item": "blue kettle"}) for w in WAREHOUSES]
    if not stocks:
        return f"Ship from Dijon: at {distances['Dijon']} km it is the nearest warehouse to Lyon."
    return (f"Ship from Marseille: Dijon is nearer ({distances['Dijon']} km) but holds only {stocks['Dijon']} blue "
            f"kettles, while Marseille holds {stocks['Marseille']}, enough for all 40, at {distances['Marseille']} km.")


def demo_model(request: Request) -> Any:
    """The proposer (offered tools), the critic and the judge (asked for a schema), and the answer stage."""
    properties = (request.options.output_schema or {}).get("properties", {})
    proposal = _last(request, "proposer")
    if "passed" in properties:  # the judge
        sound = "holds only" in proposal or "kettle" not in proposal
        return json.dumps({"passed": sound, "severity": 0.1 if sound else 0.6,
                           "issues": [] if sound else ["The stock was not checked."],
                           "summary": "The choice is backed by distance and stock." if sound else "Not yet."})
    if "severity" in properties:  # the critic
        if "Dijon" in proposal and "holds" not in proposal:
            return json.dumps({"severity": 0.7, "issues": ["Nobody checked that Dijon has 40 blue kettles in stock."]})
        return json.dumps({"severity": 0.1, "issues": ["It could say when the order would arrive."]})
    if request.tools:  # the proposer
        return _propose(request)
    notes = next((t.text for t in reversed(request.turns) if t.kind == "work_notes"), "")
    proposals = re.findall(r"^\[proposer\] (.+)$", notes, re.M)
    return proposals[-1] if proposals else "I could not settle it."


def demo_provider() -> provider.Function:
    return provider.Function(demo_model)


def configured_provider() -> loop.Provider:
    """A real model when the environment names one, else the offline demo model."""
    demo = demo_provider()
    chosen = provider.from_environment(demo)
    print("Running on the offline demo model (provider.Function; no model needed).\n" if chosen is demo
          else f"Running on {chosen!r}.\n")
    return chosen


def make_agent(step: Step) -> Debate:
    """At most three proposals; a critique above 0.3 sends the answer back."""
    return Debate(step, max_rounds=3, severity=0.3)


def report(state: State) -> list[str]:
    """What the debate did, round by round, then the answer."""
    outcome = state.outcome
    debate = outcome.data["Debate"] if outcome is not None else {}
    verdicts = {v["round"]: v for v in debate.get("verdicts", [])}
    lines = []
    for critique in debate.get("critiques", []):
        number = critique["round"]
        said = (f"critic {critique['severity']:g}: {'; '.join(critique['issues']) or 'no issue'}"
                if "error" not in critique else "critic: no valid critique")
        verdict = verdicts.get(number)
        if verdict is not None:
            said += (" | judge: no valid verdict" if "error" in verdict else
                     f" | judge: {'passed' if verdict['passed'] else 'failed'} ({verdict['summary']})")
        lines.append(f"  round {number}: {said}")
    lines.append(f"  ended by: {debate.get('ended_by')} after {debate.get('rounds')} round(s)"
                 + (f" (degraded: {outcome.reason})" if outcome is not None and not outcome.ok else ""))
    lines.append(f"  answer: {state.answer}")
    return lines


async def main() -> None:
    agent = make_agent(Step(configured_provider(), tools=TOOLS))
    state = await agent.run(State().append(Role.USER, Text(QUESTION)))
    print(f"user: {QUESTION}")
    print("\n".join(report(state)))


if __name__ == "__main__":
    anyio.run(main)
