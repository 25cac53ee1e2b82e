"""A typed answer: the agent's answer as a value of your own attrs class, validated, never merely asked for.

``WithOutput(ReAct(step), step, Drive)`` runs the ReAct agent once; its answer is prose, so one tool-free
formatting turn asks for JSON following ``Drive``'s schema (as structured output, ``Options.output_schema``),
validates it, and keeps it in the outcome. ``answer_value(state, Drive)`` reads it back as a ``Drive``. Only
the formatting turn is retried on a format error: the tools never run again for one.

Runs offline on a small demo model by default: a ``provider.Function`` that looks the distance up with the
tool, answers in a sentence as models do, then gives the JSON when asked for it.

    python examples/typed_answer.py

With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (model from ``OPENAI_MODEL``, default gpt-4o-mini), or
``ANTHROPIC_API_KEY`` (model from ``ANTHROPIC_MODEL``), the same agent runs on that real model instead.
"""

from __future__ import annotations

import json

import anyio
import attrs

import loop
import provider
from cognitive import ReAct, WithOutput, answer_value
from loop import Request, Role, State, Step, Text, tool

QUESTION = "How long is the drive from Leeds to Lyon at an average of 90 km/h?"
ROADS = {("Leeds", "Lyon"): 1080, ("Leeds", "Lisbon"): 2450, ("Lisbon", "Lyon"): 1720}


@attrs.frozen
class Drive:
    origin: str
    destination: str
    distance_km: float
    hours: float


@tool
async def road_distance(origin: str, destination: str) -> float:
    """The distance by road between two cities, in km."""
    key = (origin, destination) if (origin, destination) in ROADS else (destination, origin)
    if key not in ROADS:
        raise LookupError(f"no road distance from {origin} to {destination}")
    return ROADS[key]


def demo_model(request: Request) -> str | list:
    """A stand-in for a model: it looks the distance up, answers in prose, and writes JSON when a schema is asked."""
    results = [float(r.content) for t in request.turns for r in t.tool_results if not r.is_error]
    if not results:
        return [provider.tool_call("road_distance", {"origin": "Leeds", "destination": "Lyon"})]
    km = results[-1]
    if request.options.output_schema is not None:  # the formatting turn
        return json.dumps({"origin": "Leeds", "destination": "Lyon", "distance_km": km, "hours": km / 90})
    return f"It is {km:g} km by road from Leeds to Lyon, so about {km / 90:g} hours of driving at 90 km/h."


TOOLS = [road_distance]  # what `python -m session serve examples.typed_answer:make_agent` gives the step


def demo_provider() -> provider.Function:
    return provider.Function(demo_model)


def configured_provider() -> loop.Provider:
    """A real model when the environment names one, else the offline demo model."""
    demo = demo_provider()
    chosen = provider.from_environment(demo)
    print("Running on the offline demo model (provider.Function; no model needed).\n" if chosen is demo
          else f"Running on {chosen!r}.\n")
    return chosen


def make_agent(step: Step) -> WithOutput[Drive]:
    """ReAct with the distance tool, its answer made a ``Drive``."""
    return WithOutput(ReAct(step), step, Drive)


async def main() -> None:
    step = Step(configured_provider(), tools=TOOLS)
    print(f"user: {QUESTION}")
    state = await make_agent(step).run(State().append(Role.USER, Text(QUESTION)))
    prose = [t.text for t in state if t.role is Role.ASSISTANT and t.text]
    if len(prose) > 1:  # the agent answered in prose first, and a formatting turn followed
        print(f"first answer: {prose[0]}")
    drive = answer_value(state, Drive)
    print(f"typed answer: {drive!r}")
    print(f"kept in the outcome as: {state.outcome.data['WithOutput']}")


if __name__ == "__main__":
    anyio.run(main)
