"""Quickstart: a ReAct agent with two tools and a verifier that sends a wrong answer back to the model.

Runs offline on a small demo model by default: a ``provider.Function`` that does arithmetic with the tools, for
any number of conversations and messages (``python -m session chat/serve examples.quickstart:make_agent`` use it).
On this question it plays a model that first answers from memory; the verifier ("every number in the answer
must come from the question or a tool") fails it, the report goes back to the model as a system turn, and the
model computes the figure with a tool and fixes its answer.

    python examples/quickstart.py

With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (model from ``OPENAI_MODEL``, default gpt-4o-mini), or
``ANTHROPIC_API_KEY`` (model from ``ANTHROPIC_MODEL``), the same agent runs on that real model instead.
"""

from __future__ import annotations

import re

import anyio

import loop
import provider
from cognitive import ReAct, WithVerification
from loop import (
    Request, Role, State, Step, Subscription, Text, TextDelta, ToolFinished, TurnCompleted, TurnExecutor, tool,
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


def numbers(text: str) -> list[float]:
    return [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", text)]


def asked(state: State) -> str:
    """The last user message: the question this run answers."""
    return next((t.text for t in state.reversed() if t.role is Role.USER), "")


def grounded(state: State):
    """Every number in the answer must appear in the question or in a tool result."""
    known = set(numbers(asked(state))).union(*(numbers(p.content) for t in state for p in t.tool_results))
    made_up = sorted(set(numbers(state.answer or "")) - known)
    if made_up:
        return failed(f"The answer states {made_up}, which no tool computed. Compute every figure with a tool.")
    return passed()


def make_agent(step: TurnExecutor) -> WithVerification:
    """The agent: ReAct over the step, checked by the grounding verifier, with up to 3 retries."""
    return WithVerification(ReAct(step), step, verifiers=[FunctionVerifier(grounded)], max_retries=3)


def _figure(value: float) -> str:
    return f"{value:g}"


def demo_model(request: Request) -> list:
    """A stand-in for a model that can add and divide with the tools, for any conversation.

    It reads what this run has done so far (the turns after the last user message) and does the next thing:
    call a tool, or answer from the tools' results. On the train question it first makes the mistake the
    verifier is there to catch. Usage is estimated, as a real model would report it.
    """
    turns = request.turns
    start = max((i for i, t in enumerate(turns) if t.role is Role.USER), default=-1)
    question = turns[start].text if start >= 0 else ""
    done = turns[start + 1:]
    results = {r.call_id: r for t in done for r in t.tool_results}
    calls = {c.id: c for t in done for c in t.tool_calls}
    reported = any(t.role is Role.SYSTEM for t in done)
    usage = loop.Usage(loop.approx_tokens(turns), 20)

    def result_of(name: str) -> list[float]:
        return [float(r.content) for i, r in results.items() if calls[i].name == name and not r.is_error]

    if question == QUESTION:  # the quickstart's story: a wrong answer, a report, a fix
        if not results:
            return [provider.tool_call("add", {"a": 120, "b": 80}), provider.tool_call("add", {"a": 1.5, "b": 0.5}),
                    usage]
        if not reported:
            return ["The average speed is (80 + 160) / 2 = 120 km/h.", usage]  # averages the two speeds: wrong
        if not result_of("divide"):
            return [provider.tool_call("divide", {"a": 200, "b": 2}), usage]
        return [f"The train covers 200 km in 2 h, so its average speed is {_figure(result_of('divide')[0])} km/h.",
                usage]
    found = numbers(question)
    dividing = any(w in question.lower() for w in ("/", "divide", "divided", "over", "per"))
    tool = "divide" if dividing else "add"
    if len(found) >= 2 and not results:
        a, b = found[0], found[1]
        return [f"Let me work that out with the {tool} tool.", provider.tool_call(tool, {"a": a, "b": b}), usage]
    if results:
        answered = result_of(tool) or result_of("add") or result_of("divide")
        if not answered:
            return ["The tool could not compute that: " + next(iter(results.values())).content, usage]
        a, b = found[0], found[1]
        sign = "/" if tool == "divide" else "+"
        return [f"{_figure(a)} {sign} {_figure(b)} = {_figure(answered[-1])}", usage]
    return ["I am the offline demo model: I can add or divide two numbers with my tools. Ask me to add two "
            "numbers, or to divide one by another.", usage]


def demo_provider() -> provider.Function:
    """The offline demo model as a provider: it serves any number of conversations at once."""
    return provider.Function(demo_model)


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
    demo = demo_provider()
    chosen = provider.from_environment(demo)
    print("Running on the offline demo model (provider.Function; no model needed).\n" if chosen is demo
          else f"Running on {chosen!r}.\n")
    return chosen


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
