"""Plan and execute: plan a day out, carry the plan out one subgoal at a time, and change it when a result says so.

``PlanAndExecute`` asks for a typed plan (check the weather, find an outdoor sight, find a restaurant near it),
runs each subgoal with ``ReAct`` and the tools in a branch of its own, and reviews the rest of the plan after
each one. Here the forecast says rain, so the review asks for a new plan and the outdoor sight becomes a museum.
The conversation keeps only the work notes and the answer; the outcome data holds the plans, each step's result
and each review's decision, which this program prints.

With ``--ledger`` each step sees only the request, the plan and one line per finished step instead of the
whole transcript: the plan-and-act way for long tasks.

Runs offline on a deterministic demo model (``provider.Function``) by default:

    python examples/plan_and_execute.py [--ledger]

With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (model from ``OPENAI_MODEL``), or ``ANTHROPIC_API_KEY``, it
runs on that real model. Serve it with ``python -m session serve examples.plan_and_execute:make_agent``.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import anyio

import loop
import provider
from cognitive import PlanAndExecute
from loop import Request, Role, State, Step, Text, tool

QUESTION = "Plan a Saturday in Lisbon for me: something to see, and somewhere to eat nearby."
SIGHTS = {
    "outdoor": {"Jardim da Estrela": "Estrela", "Miradouro da Graça": "Graça"},
    "indoor": {"Museu Nacional do Azulejo": "Xabregas", "Gulbenkian Museum": "Avenidas Novas"},
}
RESTAURANTS = {"Estrela": "Tasca da Estrela", "Graça": "O Pitéu da Graça", "Xabregas": "Taberna de Xabregas",
               "Avenidas Novas": "Galeto"}


@tool
async def forecast(city: str, day: str) -> str:
    """The weather forecast for a city on a day of the week."""
    if city.strip().lower() != "lisbon":
        raise LookupError(f"no forecast for {city!r}; this demo knows Lisbon")
    return "rain all day, 14 °C" if day.strip().lower() == "saturday" else "sunny, 22 °C"


@tool
async def sights(city: str, setting: str) -> list[str]:
    """Sights worth a visit in a city, "indoor" or "outdoor", best first, each as "name (district)"."""
    if setting not in SIGHTS:
        raise ValueError('setting is "indoor" or "outdoor"')
    return [f"{name} ({district})" for name, district in SIGHTS[setting].items()]


@tool
async def restaurant(district: str) -> str:
    """A good restaurant in a district of Lisbon."""
    if district not in RESTAURANTS:
        raise LookupError(f"no restaurant known in {district!r}; districts: {', '.join(RESTAURANTS)}")
    return RESTAURANTS[district]


TOOLS = [forecast, sights, restaurant]  # what `python -m session serve examples.plan_and_execute:make_agent` uses

FIRST_PLAN = ["Check the weather in Lisbon on Saturday.", "Find an outdoor sight in Lisbon.",
              "Find a restaurant near the chosen sight."]
NEW_PLAN = ["Find an indoor sight in Lisbon.", "Find a restaurant near the chosen sight."]
SUBGOAL = re.compile(r"(?:with the tools|Your step now): (.+)")


def demo_model(request: Request) -> Any:
    """A stand-in model: plans and re-plans the day, reviews each step, calls the tool a step needs, answers."""
    properties = (request.options.output_schema or {}).get("properties", {})
    shown = "\n".join(t.text for t in request.turns) + "\n" + "\n".join(
        r.content for t in request.turns for r in t.tool_results)
    if "steps" in properties:
        asked = next((t.text for t in reversed(request.turns) if t.role is Role.USER), "")
        if "/replan" in request.path:
            return json.dumps({"steps": NEW_PLAN})
        return json.dumps({"steps": FIRST_PLAN if "lisbon" in asked.lower() else []})
    if "decision" in properties:
        review = request.turns[-2].text  # the review's instructions, then the format turn
        todo = review.split("Still to do:", 1)[-1]
        if "rain" in review and "outdoor" in todo:
            return json.dumps({"decision": "replan", "reason": "rain is forecast, so an outdoor sight no longer fits"})
        if "(nothing)" in todo:
            return json.dumps({"decision": "answer", "reason": "the day is planned"})
        return json.dumps({"decision": "continue", "reason": "the plan still fits"})
    if "/step " in request.path:
        last = request.turns[-1]
        if last.role is Role.TOOL:
            return _report(last.tool_results[0].name, last.tool_results[0].content)
        instructions = next(t.text for t in reversed(request.turns) if t.role is Role.SYSTEM)
        found = SUBGOAL.search(instructions)
        subgoal = found[1].lower() if found else ""
        if "weather" in subgoal:
            return provider.tool_call("forecast", {"city": "Lisbon", "day": "Saturday"})
        if "restaurant" in subgoal:  # near the sight an earlier step chose (in its transcript or the ledger)
            chosen = re.findall(r"Visit (.+?) in (.+?)\.", shown)
            return provider.tool_call("restaurant", {"district": chosen[-1][1] if chosen else "Estrela"})
        if "sight" in subgoal:
            return provider.tool_call("sights", {"city": "Lisbon", "setting": "indoor" if "indoor" in subgoal
                                                 else "outdoor"})
        return "There is nothing to look up for this step."
    return _answer(request)


def _report(tool_name: str, result: str) -> str:
    if tool_name == "forecast":
        return f"Saturday's forecast for Lisbon: {result}."
    if tool_name == "sights":
        first = re.match(r'\["(.+?) \((.+?)\)"', result)
        return f"Visit {first[1]} in {first[2]}." if first else f"No sight found: {result}"
    return f"Eat at {result}." if not result.startswith("error") else f"No restaurant found: {result}"


def _answer(request: Request) -> str:
    notes = next((t.text for t in request.turns if t.kind == "work_notes"), "")
    weather = re.findall(r"forecast for Lisbon: (.+?)\.", notes)
    sight = re.findall(r"Visit (.+?) in (.+?)\.", notes)
    food = re.findall(r"Eat at (.+?)\.", notes)
    if not (weather or sight or food):
        return ("I plan days out: ask me, for example, to plan a Saturday in Lisbon, and I will check the weather, "
                "pick a sight that suits it and find somewhere to eat nearby.")
    parts = [f"Saturday in Lisbon: {weather[-1]} is forecast" if weather else "I could not get the forecast"]
    if sight:
        parts.append(f"so visit the {sight[-1][0]} in {sight[-1][1]}")
    if food:
        parts.append(f"and eat nearby at {food[-1]}")
    return ", ".join(parts) + "."


def demo_provider() -> provider.Function:
    return provider.Function(demo_model)


def configured_provider() -> loop.Provider:
    """A real model when the environment names one, else the offline demo model."""
    demo = demo_provider()
    chosen = provider.from_environment(demo)
    print("Running on the offline demo model (provider.Function; no model needed).\n" if chosen is demo
          else f"Running on {chosen!r}.\n")
    return chosen


def make_agent(step: Step, ledger: bool = False) -> PlanAndExecute:
    """Plan the request, run each subgoal with ReAct and the tools, re-plan when a result calls for it."""
    return PlanAndExecute(step, max_steps=6, ledger=ledger)


async def main(ledger: bool = False) -> None:
    step = Step(configured_provider(), tools=TOOLS)
    state = await make_agent(step, ledger).run(State().append(Role.USER, Text(QUESTION)))
    assert state.outcome is not None
    work = state.outcome.data["PlanAndExecute"]
    print(f"user: {QUESTION}")
    for number, plan in enumerate(work["plans"]):
        print(f"{'plan' if number == 0 else 'new plan'}:")
        for index, subgoal in enumerate(plan, 1):
            print(f"  {index}. {subgoal}")
    decisions = {d["after"]: d for d in work["decisions"]}
    for number, done in enumerate(work["steps"], 1):
        print(f"step {number} [{done['status']}]: {done['subgoal']}\n  -> {done['result']}")
        if number in decisions:
            print(f"  review: {decisions[number]['decision']} ({decisions[number]['reason']})")
    print(f"re-plans: {work['replans']}; outcome: {state.outcome.status}{' (ledger)' if work['ledger'] else ''}")
    print(f"answer: {state.answer}")


if __name__ == "__main__":
    anyio.run(main, "--ledger" in sys.argv[1:])
