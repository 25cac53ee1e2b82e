"""A router: a cheap model decides which pattern answers each question.

``Router`` asks a model for a typed choice of route (``{"route": ..., "reason": ...}``, in a branch that never
enters the conversation), then runs that route's pattern: arithmetic goes to ``Verify`` (plan, solve, check
another way, answer, in one turn) and stock questions to ``ReAct`` with a stock lookup tool. The choice is made
on ``step.derive(options=Options(model=...))``: the same step, asking a smaller model. The answer's outcome
records the route taken and why.

Runs offline on a small demo model by default: a ``provider.Function`` that routes when asked by the ``small``
model, works sums out under Verify's headings, and looks stock up with the tool.

    python examples/router.py

With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (model from ``OPENAI_MODEL``, default gpt-4o-mini; routing
model from ``OPENAI_SMALL_MODEL``, default gpt-4o-mini), or ``ANTHROPIC_API_KEY`` (models from
``ANTHROPIC_MODEL`` and ``ANTHROPIC_SMALL_MODEL``, default claude-3-5-haiku-latest), it runs on that real model.
"""

from __future__ import annotations

import json
import os
import re

import anyio

import loop
import provider
from cognitive import ReAct, Router, Verify
from loop import Options, Request, Role, State, Step, Text, tool

QUESTIONS = ["What is 48 × 17?", "How many blue kettles are in stock?"]
STOCK = {"blue kettle": 14, "red kettle": 3, "toaster": 0}


@tool
async def stock(item: str) -> int:
    """How many of item (e.g. "red kettle") are in stock."""
    key = item.strip().lower().removesuffix("s")
    if key not in STOCK:
        raise LookupError(f"we do not sell {item!r}; we sell: {', '.join(STOCK)}")
    return STOCK[key]


def demo_model(request: Request) -> str | list:
    """A stand-in for both models: the small one routes, the main one verifies sums or looks stock up."""
    question = next(t.text for t in reversed(request.turns) if t.role is Role.USER)
    numbers = [int(n) for n in re.findall(r"\d+", question)]
    if request.options.model == "small":  # the routing question: answer the schema's JSON
        if len(numbers) >= 2:
            return json.dumps({"route": "arithmetic", "reason": "a calculation with two numbers"})
        return json.dumps({"route": "lookup", "reason": "needs the stock database"})
    if request.options.tool_choice == "none" and len(numbers) >= 2:  # Verify's working turn
        a, b = numbers[:2]
        return (f"PLAN: multiply {a} by {b} in two parts.\nSOLVE: {a} × {b - b % 10} = {a * (b - b % 10)}, "
                f"{a} × {b % 10} = {a * (b % 10)}, total {a * b}.\nCHECK: {a * b} ÷ {b} = {a}.\nFIX: none.\n"
                f"ANSWER: {a} × {b} = {a * b}")
    item = re.search(r"many (.+?) are", question)
    found = [r.content for t in request.turns for r in t.tool_results]
    if found:
        return f"There are {found[-1]} {item[1] if item else 'of those'} in stock."
    return [provider.tool_call("stock", {"item": item[1] if item else question})]


TOOLS = [stock]  # what `python -m session serve examples.router:make_agent` gives the step


def demo_provider() -> provider.Function:
    return provider.Function(demo_model)


def configured_provider() -> loop.Provider:
    """A real model when the environment names one, else the offline demo model."""
    demo = demo_provider()
    chosen = provider.from_environment(demo)
    print("Running on the offline demo model (provider.Function; no model needed).\n" if chosen is demo
          else f"Running on {chosen!r}.\n")
    return chosen


def small_model() -> str:
    """The model that routes: a smaller one of the same provider."""
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        return os.environ.get("OPENAI_SMALL_MODEL", "gpt-4o-mini")
    if os.environ.get("ANTHROPIC_API_KEY"):
        return os.environ.get("ANTHROPIC_SMALL_MODEL", "claude-3-5-haiku-latest")
    return "small"


def make_agent(step: Step) -> Router:
    """Sums to Verify, stock questions to ReAct; the choice made by the small model."""
    return Router({"arithmetic": Verify(step), "lookup": ReAct(step)},
                  step.derive(options=Options(model=small_model())),
                  descriptions={"arithmetic": "a calculation to work out", "lookup": "a question about our stock"})


async def main() -> None:
    step = Step(configured_provider(), tools=TOOLS)
    agent = make_agent(step)
    for question in QUESTIONS:
        state = await agent.run(State().append(Role.USER, Text(question)))
        chosen = state.outcome.data["Router"]
        print(f"user: {question}")
        print(f"  route: {chosen['route']} ({chosen['reason']})")
        print(f"  answer: {state.answer}")


if __name__ == "__main__":
    anyio.run(main)
