"""Escalation: quick answers until two of them agree, a tree-of-thoughts search only when they never do.

``cognitive.build("escalation", step)`` runs the cheapest pattern (``react``) and trusts its answer once two runs
gave the same one: one more run, hot, at a time, at most 32, so an easy request costs two short calls and a hard
one a handful. Only when 32 quick answers never agree does it climb to ``tree-of-thoughts``. A request that
needs the step's tools goes to ``react`` with them after one typed question. Each answer's outcome says which
rung gave it and how many runs agreed.

Runs offline on the benchmark's simulated model (``cognitive.bench``: a noisy solver that never sees the answers;
a plain attempt at a Game of 24 puzzle is right about one time in four) over the quick built-in task set, and
prints for each task the rung that answered, the evidence, and whether the answer is right.

    python examples/escalation.py
    python -m session chat examples.escalation:make_agent     # ask it yourself: "Make 24 from 4 7 8 8"
"""

from __future__ import annotations

from typing import Any

import anyio

import cognitive
from cognitive import Pattern
from cognitive.bench import builtin_tasks, simulated_provider
from loop import Budget, Spend, Step, TurnExecutor, charging
from provider import Function


TOOLS = next(task.tools for task in builtin_tasks(quick=True) if task.tools)  # the lookup tasks' tool


def make_agent(step: TurnExecutor) -> Pattern:
    """The registry's escalation ladder, as ``python -m session chat/serve`` serve it."""
    return cognitive.build("escalation", step)


def demo_provider() -> Function:
    """The benchmark's simulated model: it never sees an answer key."""
    return simulated_provider(seed=0)


def evidence(choice: dict[str, Any]) -> str:
    if choice.get("source") == "agreement":
        return f"{choice['votes']} of {choice['runs']} runs agreed"
    if "confidence" in choice:
        return f"confidence {choice['confidence']:.2f}"
    return str(choice.get("reason", ""))


async def main() -> None:
    model = demo_provider()
    for task in builtin_tasks(quick=True):
        agent = make_agent(Step(model, tools=task.tools))
        spent = Spend(Budget(name="tally"))
        with charging(spent):
            state = await agent.run(task.question)
        choice = state.outcome.data["Escalation"]["choices"][-1] if state.outcome is not None else {}
        verdict = "right" if task.check(state.answer or "") else "wrong"
        print(f"{task.id:13} {choice.get('rung', '-'):17} {evidence(choice):25} {spent.spent.turns:3} calls  {verdict}")


if __name__ == "__main__":
    anyio.run(main)
