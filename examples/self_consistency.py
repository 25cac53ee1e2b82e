"""Self-consistency: ask a tool-using agent the same question five times, hot, and keep the answer most agree on.

``SelfConsistency(ReAct(step), n=5)`` runs five ReAct samples at once, each at temperature 0.7, votes on their
normalised answers, and returns the conversation of one sample that gave the winning answer. The outcome data
holds the votes and the winner's share of them (its confidence).

Runs offline on a small demo model by default: a ``provider.Function`` that works the sum out with the tools,
except that samples 2 and 4 (it reads ``request.path``, e.g. ``SelfConsistency/sample 2/ReAct``) misread the
question, as a sampled model sometimes does, so the vote has something to decide.

    python examples/self_consistency.py

With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (model from ``OPENAI_MODEL``, default gpt-4o-mini), or
``ANTHROPIC_API_KEY`` (model from ``ANTHROPIC_MODEL``), the same agent runs on that real model instead.
"""

from __future__ import annotations

import re

import anyio

import loop
import provider
from cognitive import ReAct, SelfConsistency
from loop import Request, Role, State, Step, Text, tool

QUESTION = "A shop sells pens at 3 for $2. How much do 12 pens cost?"


@tool
async def multiply(a: float, b: float) -> float:
    """Multiply a by b."""
    return a * b


@tool
async def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


# How each demo sample reads the question: the tool calls it makes, in order; it answers with the last result.
READINGS = {
    "right": [("divide", 12, 3), ("multiply", 4, 2)],  # 4 packs of 3, at $2 a pack
    "each": [("multiply", 12, 2)],  # takes $2 as the price of one pen
    "inverted": [("multiply", 12, 3), ("divide", 36, 2)],  # reads "3 dollars for 2 pens"
}
MISREAD = {2: "each", 4: "inverted"}  # sample number -> how that sample misreads


def demo_model(request: Request) -> list:
    """A stand-in for a sampled model: it makes the next tool call of its reading of the question, then answers."""
    if QUESTION not in (request.turns[0].text if request.turns else ""):
        return ["I am the offline demo model: I only know the pens question of this example."]
    sample = re.search(r"sample (\d+)", request.path)
    reading = READINGS[MISREAD.get(int(sample[1]), "right") if sample else "right"]
    results = [float(r.content) for t in request.turns for r in t.tool_results]
    usage = loop.Usage(loop.approx_tokens(request.turns), 15)
    if len(results) < len(reading):
        name, a, b = reading[len(results)]
        return [provider.tool_call(name, {"a": a, "b": b}), usage]
    return [f"12 pens cost ${results[-1]:g}.", usage]


TOOLS = [multiply, divide]  # what `python -m session serve examples.self_consistency:make_agent` gives the step


def demo_provider() -> provider.Function:
    return provider.Function(demo_model)


def configured_provider() -> loop.Provider:
    """A real model when the environment names one, else the offline demo model."""
    demo = demo_provider()
    chosen = provider.from_environment(demo)
    print("Running on the offline demo model (provider.Function; no model needed).\n" if chosen is demo
          else f"Running on {chosen!r}.\n")
    return chosen


def make_agent(step: Step) -> SelfConsistency:
    """Five ReAct samples, voted on."""
    return SelfConsistency(ReAct(step), n=5)


async def main() -> None:
    step = Step(configured_provider(), tools=TOOLS)
    print(f"user: {QUESTION}")
    state = await make_agent(step).run(State().append(Role.USER, Text(QUESTION)))
    vote = state.outcome.data["SelfConsistency"]
    print(f"answer: {state.answer}")
    print(f"votes: {vote['votes']}")
    print(f"confidence: {vote['confidence']:.0%} of {vote['n']} samples (kept sample {vote['sample']})")


if __name__ == "__main__":
    anyio.run(main)
