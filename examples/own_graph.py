"""Build your own graph from the stages: plan, then act, observe and reflect on each subgoal, then answer.

The planning patterns are made of stages that are values of their own: ``Plan`` (a typed list of subgoals),
``Act`` (a tool loop on one subgoal), ``Think`` (reasoning without tools), ``Reflect`` (a typed decision:
continue, replan or answer) and ``Synthesize`` (the answer). ``PlanActReflect`` below wires them into a graph
with a plain Python loop, routing on the typed decisions:

    plan ──→ act ──→ observe ──→ reflect ──→ answer
     ↑        ↑                     │
     │        └─────────────────────┤ (continue: the next subgoal)
     └──────────────────────────────┘ (replan)

It keeps the habits of the built-in patterns: the work runs in branches (``loop.branch``), so only the notes of
what it found (``write_notes``) and the answer reach the conversation; every loop has a cap; a stage that never
gives a valid typed answer ends the work instead of the run. The same stages in a fixed order need no loop at
all: ``make_chain`` builds them into a ``Chain``.

Runs offline on a deterministic demo model (``provider.Function``) and prints the path each agent took and
its answer:

    python examples/own_graph.py

With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (model from ``OPENAI_MODEL``, default gpt-4o-mini), or
``ANTHROPIC_API_KEY`` (model from ``ANTHROPIC_MODEL``), it runs on that real model. Serve it with
``python -m session serve examples.own_graph:make_agent``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import anyio

import loop
import provider
from cognitive import Act, Chain, Plan, Reflect, Stage, Synthesize, Think, write_notes
from loop import Request, Role, State, Step, Text, tool
from loop.errors import VerificationFailed

QUESTION = "How many people live in the capital of France?"
CAPITALS = {"France": "Paris", "Japan": "Tokyo"}
PEOPLE = {"Paris": 2_100_000, "Tokyo": 14_000_000}


@tool
async def capital(country: str) -> str:
    """The capital city of a country."""
    return CAPITALS[country]


@tool
async def population(city: str) -> int:
    """How many people live in a city."""
    return PEOPLE[city]


TOOLS = [capital, population]  # what `python -m session serve examples.own_graph:make_agent` gives the step


class PlanActReflect:
    """Plan, then for each subgoal act, observe and reflect; replan when reflection says so; then answer.

    At most ``max_rounds`` subgoals are worked on, so the run always ends in an answer; it is ``degraded`` when
    subgoals were left or a stage never gave a valid typed answer. The answer's outcome keeps the ``path``."""

    def __init__(self, step: Step, *, max_rounds: int = 4) -> None:
        self.step = step
        self.max_rounds = max_rounds
        self.plan = Plan(step, max_steps=3)
        self.act = Act(step)
        self.observe = Think(step, name="observe", prompt="Say in one sentence what the last step found.")
        self.reflect = Reflect(step)
        self.answer = Synthesize(step)

    async def run(self, state: State) -> State:
        start = working = state
        path: list[str] = []
        problem = ""
        with loop.scope("PlanActReflect"):
            try:
                with loop.branch("plan"):
                    planned = await self.plan.decide(working)
                working, todo = planned.state, list(planned.value.steps)
                path.append("plan")
                for _ in range(self.max_rounds):
                    if not todo:
                        break
                    with loop.branch("act"):
                        working = await self.act.act(working, todo.pop(0))
                    with loop.branch("observe"):
                        working = await self.observe.run(working)
                    with loop.branch("reflect"):
                        decided = await self.reflect.decide(working)
                    working = decided.state
                    path += ["act", "observe", f"reflect ({decided.value.decision})"]
                    if decided.value.decision == "answer":
                        todo = []
                    elif decided.value.decision == "replan":
                        with loop.branch("plan"):
                            planned = await self.plan.decide(working)
                        working, todo = planned.state, list(planned.value.steps)
                        path.append("plan")
                if todo:
                    problem = f"max_rounds={self.max_rounds} reached with subgoals left"
            except VerificationFailed as exc:  # a stage never gave a valid typed answer
                problem = f"a stage gave no valid answer: {exc}"
            # Only the notes of the work and the answer join the conversation.
            state = await write_notes(self.step, start, working)
            state = await self.answer.run(state)
            path.append("answer")
            if problem:
                return state.with_outcome("degraded", f"{problem}; answered from the work so far", data={"path": path})
            return state.with_outcome(data={"path": path})


def make_agent(step: Step) -> PlanActReflect:
    return PlanActReflect(step)


def make_chain(step: Step) -> Chain:
    """The same stages in a fixed order: plan, act on the whole plan, answer."""
    return Chain(Stage("plan", "Plan how to answer.", Plan(step)),
                 Stage("work", "Carry out this plan: {plan}", Act(step)),
                 Stage("final", "Answer from what was found: {work}", Synthesize(step)))


def demo_model(request: Request) -> Any:
    """A stand-in model: it plans two lookups, makes them with the tools, and answers from what was found."""
    properties = (request.options.output_schema or {}).get("properties", {})
    question = next(t.text for t in reversed(request.turns) if t.role is Role.USER)
    country = next((c for c in CAPITALS if c in question), None)
    found = {r.name: r.content for t in request.turns for r in t.tool_results}
    if "steps" in properties:  # Plan
        steps = ["find the capital of the country", "find how many people live there"] if country else []
        return json.dumps({"steps": steps})
    if "decision" in properties:  # Reflect
        done = "population" in found
        return json.dumps({"decision": "answer" if done else "continue",
                           "reason": "both lookups are done" if done else "the population is still missing"})
    stage = next((t for t in reversed(request.turns) if t.meta.get("kind") == "stage"), request.turns[-1])
    if stage.meta.get("stage") == "act" and country:  # Act: one lookup a turn until its subgoal is done
        whole_plan = any(t.meta.get("stage") == "work" for t in request.turns)  # the chain acts on the whole plan
        if (whole_plan or "capital" in stage.text) and "capital" not in found:
            return [provider.tool_call("capital", {"country": country})]
        if (whole_plan or "people" in stage.text) and "population" not in found:
            return [provider.tool_call("population", {"city": found["capital"]})]
        said = f"the capital is {found['capital']}"
        if "population" in found:
            said += f" and {found['population']} people live there"
        return f"Found: {said}."
    if stage.meta.get("stage") == "observe":
        return f"The lookups so far returned: {', '.join(found.values()) or 'nothing'}."
    said = "\n".join(t.text for t in request.turns if t.role is not Role.USER)  # Synthesize: from the notes
    city, people = re.search(r"capital is (\w+)", said), re.search(r"(\d+) people live", said)
    if city and people:
        return f"About {int(people[1]):,} people live in {city[1]}, the capital of {country}."
    return "I look up capitals and how many people live in them: ask me about a country."


def demo_provider() -> provider.Function:
    return provider.Function(demo_model)


def configured_provider() -> loop.Provider:
    """A real model when the environment names one, else the offline demo model."""
    demo = demo_provider()
    chosen = provider.from_environment(demo)
    print("Running on the offline demo model (provider.Function; no model needed).\n" if chosen is demo
          else f"Running on {chosen!r}.\n")
    return chosen


async def main() -> None:
    step = Step(configured_provider(), tools=TOOLS)
    asked = State().append(Role.USER, Text(QUESTION))
    print(f"user: {QUESTION}")
    state = await make_agent(step).run(asked)
    assert state.outcome is not None
    print(f"  path: {' -> '.join(state.outcome.data['PlanActReflect']['path'])}")
    print(f"  answer: {state.answer}  ({state.outcome.status})")
    chained = await make_chain(step).run(asked)
    assert chained.outcome is not None
    print(f"  as a chain: {' -> '.join(chained.outcome.data['Chain']['outputs'])}")
    print(f"  answer: {chained.answer}  ({chained.outcome.status})")


if __name__ == "__main__":
    anyio.run(main)
