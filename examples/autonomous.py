"""An autonomous agent: the model picks each next step of its work from a pool, then writes the answer.

``Autonomous`` asks the model, before every step, which step comes next: ``reason`` (a tool loop with the
agent's tools), ``analyze`` (thinking without tools) or ``synthesize`` (write the answer and finish). The
model may also name a tool, which runs the step that has it. The menu and the model's choices never enter
the conversation; they are kept in the answer's outcome, which this program prints with the answer.

Runs offline on a small demo model by default: a ``provider.Function`` that chooses the temperature tool,
then the analysis, then the answer, and looks temperatures up with the tool.

    python examples/autonomous.py

With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (model from ``OPENAI_MODEL``, default gpt-4o-mini), or
``ANTHROPIC_API_KEY`` (model from ``ANTHROPIC_MODEL``), it runs on that real model. Serve it with
``python -m session serve examples.autonomous:make_agent``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import anyio

import loop
import provider
from cognitive import Autonomous
from loop import Request, Role, State, Step, Text, tool

QUESTIONS = ["Which is warmer right now, Oslo or Lisbon, and by how much?", "Hello, what can you do?"]
READINGS = {"Oslo": 4.0, "Lisbon": 17.0, "Cairo": 29.0}


@tool
async def temperature(city: str) -> float:
    """The temperature in a city right now, in degrees Celsius."""
    if city not in READINGS:
        raise LookupError(f"no weather station in {city!r}; there are stations in: {', '.join(READINGS)}")
    return READINGS[city]


def demo_model(request: Request) -> Any:
    """A stand-in model: it chooses the next step, looks temperatures up, compares them and answers."""
    question = next(t.text for t in reversed(request.turns) if t.role is Role.USER)
    cities = [city for city in READINGS if city in question]
    asked = {c.id: json.loads(c.arguments)["city"] for t in request.turns for c in t.tool_calls}
    readings = sorted((float(r.content), asked[r.call_id]) for t in request.turns for r in t.tool_results)
    properties = (request.options.output_schema or {}).get("properties", {})
    if "next" in properties:  # the choice of the next step
        done = {t.meta.get("stage") for t in request.turns if t.meta.get("kind") == "stage"}
        if not cities:
            choice = ("synthesize", "no tool is needed to answer this")
        elif not readings:
            choice = ("temperature", f"I need the temperature in {' and in '.join(cities)}")
        elif "analyze" not in done:
            choice = ("analyze", "compare the two readings")
        else:
            choice = ("synthesize", "the comparison answers the question")
        return json.dumps({"next": choice[0], "reason": choice[1]})
    if request.path.endswith("/reason/ReAct"):  # the tool loop
        if not readings:
            return [provider.tool_call("temperature", {"city": city}) for city in cities]
        return "; ".join(f"{city}: {degrees:g} °C" for degrees, city in readings) + "."
    if request.path.endswith("/analyze"):
        (low, cold), (high, warm) = readings[0], readings[-1]
        return f"{warm} is warmer than {cold} by {high - low:g} °C ({(high - low) * 9 / 5:g} °F)."
    notes = next((t.text for t in request.turns if t.meta.get("kind") == "work_notes"), "")
    compared, measured = re.search(r"\[analyze\] (.+)", notes), re.search(r"\[reason\] (\w+: .+)", notes)
    if compared and measured:  # the answer, written from the notes of the work
        return f"{compared[1]} Right now {measured[1]}"
    return "I compare the weather of cities: ask me which of two cities is warmer right now."


TOOLS = [temperature]  # what `python -m session serve examples.autonomous:make_agent` gives the step


def demo_provider() -> provider.Function:
    return provider.Function(demo_model)


def configured_provider() -> loop.Provider:
    """A real model when the environment names one, else the offline demo model."""
    demo = demo_provider()
    chosen = provider.from_environment(demo)
    print("Running on the offline demo model (provider.Function; no model needed).\n" if chosen is demo
          else f"Running on {chosen!r}.\n")
    return chosen


def make_agent(step: Step) -> Autonomous:
    """The default pool (reason, analyze, synthesize), at most six steps."""
    return Autonomous(step, max_steps=6)


async def main() -> None:
    agent = make_agent(Step(configured_provider(), tools=TOOLS))
    for question in QUESTIONS:
        state = await agent.run(State().append(Role.USER, Text(question)))
        assert state.outcome is not None
        print(f"user: {question}")
        for number, choice in enumerate(state.outcome.data["Autonomous"]["choices"], 1):
            runs = "" if choice["next"] == choice["step"] else f" -> {choice['step']}"
            print(f"  step {number}: {choice['next']}{runs} ({choice['reason']})")
        print(f"  answer: {state.answer}  ({state.outcome.status})")


if __name__ == "__main__":
    anyio.run(main)
