"""Quickstart: a ReAct agent with two tools and a verifier that sends a wrong answer back to the model.

Runs offline on a scripted model by default. The script plays a model that first answers from memory; the
verifier ("every number in the answer must come from the question or a tool") fails it, the report goes back
to the model as a system turn, and the model computes the figure with a tool and fixes its answer.

    python examples/quickstart.py

With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (model from ``OPENAI_MODEL``, default gpt-4o-mini), or
``ANTHROPIC_API_KEY`` (model from ``ANTHROPIC_MODEL``), the same agent runs on that real model instead.
"""

from __future__ import annotations

import os
import re

import anyio

import loop
import provider
from cognitive import ReAct, WithVerification
from loop import (
    Role, State, Step, Subscription, Text, TextDelta, ToolFinished, TurnCompleted, TurnExecutor, tool,
)
from verifier import FunctionVerifier, failed, passed

QUESTION = "A train covers 120 km in 1.5 h, then 80 km in 0.5 h. What is its average speed in km/h?"


@tool
async def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@tool
async def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


TOOLS = [add, divide]  # what `python -m session chat examples.quickstart:make_agent` gives the step


def numbers(text: str) -> set[float]:
    return {float(n) for n in re.findall(r"\d+(?:\.\d+)?", text)}


def grounded(state: State):
    """Every number in the answer must appear in the question or in a tool result."""
    known = set().union(*(numbers(p.content) for t in state for p in t.tool_results), numbers(QUESTION))
    made_up = sorted(numbers(state.answer or "") - known)
    if made_up:
        return failed(f"The answer states {made_up}, which no tool computed. Compute every figure with a tool.")
    return passed()


def make_agent(step: TurnExecutor) -> WithVerification:
    """The agent: ReAct over the step, checked by the grounding verifier, with up to 3 retries."""
    return WithVerification(ReAct(step), step, verifiers=[FunctionVerifier(grounded)], max_retries=3)


def demo_provider() -> provider.Scripted:
    """A scripted model that makes the mistake the verifier is there to catch."""
    return provider.Scripted([
        [provider.tool_call("add", {"a": 120, "b": 80}), provider.tool_call("add", {"a": 1.5, "b": 0.5})],
        "The average speed is (80 + 160) / 2 = 120 km/h.",  # averages the two speeds: wrong
        provider.tool_call("divide", {"a": 200, "b": 2}),
        "The train covers 200 km in 2 h, so its average speed is 100 km/h.",
    ])


async def show(events: Subscription) -> None:
    """Print the run as it happens: streamed text, tool calls and verifier reports."""
    async for event in events:
        if isinstance(event, TextDelta):
            print(event.text, end="", flush=True)
        elif isinstance(event, ToolFinished):
            print(f"  [tool] {event.call.name}({event.call.arguments}) -> {event.result.content}")
        elif isinstance(event, TurnCompleted) and event.turn.role is Role.ASSISTANT and event.turn.text:
            print()
        elif isinstance(event, TurnCompleted) and event.turn.role is Role.SYSTEM:
            print(f"  [verifier report]\n{event.turn.text}")


def configured_provider() -> loop.Provider:
    """A real model when the environment names one, else the scripted demo model."""
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        model = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
        where = {"base_url": os.environ["OPENAI_BASE_URL"]} if os.environ.get("OPENAI_BASE_URL") else {}
        print(f"Running on {model} at {where.get('base_url', 'OpenAI')}.\n")
        return provider.Retry(provider.OpenAICompatible(model, **where))
    if os.environ.get("ANTHROPIC_API_KEY"):
        model = os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-4-5")
        print(f"Running on Anthropic {model}.\n")
        return provider.Retry(provider.Anthropic(model))
    print("Running on provider.Scripted (offline, no model needed).\n")
    return demo_provider()


async def main() -> None:
    model = configured_provider()
    print(f"user: {QUESTION}")
    step = Step(model, tools=TOOLS)
    failure = ""
    async with anyio.create_task_group() as group:
        with step.events.subscribe() as events:
            group.start_soon(show, events)
            try:
                state = await make_agent(step).run(State().append(Role.USER, Text(QUESTION)))
            except loop.LoopError as exc:  # a provider failure, or verification that never passed
                failure = f"{type(exc).__name__}: {exc}"
        # leaving the block closed the subscription: the printer finishes what is buffered, then stops
    if failure:
        raise SystemExit(f"\nthe run failed: {failure}")
    print(f"\nfinal answer: {state.answer}")
    print(f"verification: {state.outcome.data['WithVerification']}")
    print(f"tokens: {state.usage.input_tokens} in, {state.usage.output_tokens} out")


if __name__ == "__main__":
    anyio.run(main)
