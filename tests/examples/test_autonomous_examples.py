"""The autonomous agent and the graph built from the stages run as a user runs them, offline, and show what they
promise."""

import json
import subprocess
import sys
from typing import Any

import pytest

import provider
from examples import autonomous, own_graph
from loop import Request, Role, State, Step, Text
from tests.examples import ROOT


def asked(question: str) -> State:
    return State().append(Role.USER, Text(question))


class Recorder:
    """The demo model of an example, noting every request it answers."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.requests: list[Request] = []

    def __call__(self, request: Request) -> Any:
        self.requests.append(request)
        return self.model(request)


def run(name: str) -> list[str]:
    done = subprocess.run([sys.executable, f"examples/{name}.py"], check=False, cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Running on the offline demo model") and not done.stderr
    return done.stdout.splitlines()


# -- an autonomous agent --------------------------------------------------------------------------------------


def test_autonomous_prints_its_choices_and_answers() -> None:
    assert run("autonomous")[-8:] == [
        "user: Which is warmer right now, Oslo or Lisbon, and by how much?",
        "  step 1: temperature -> reason (I need the temperature in Oslo and in Lisbon)",
        "  step 2: analyze (compare the two readings)",
        "  step 3: synthesize (the comparison answers the question)",
        "  answer: Lisbon is warmer than Oslo by 13 °C (23.4 °F). Right now Oslo: 4 °C; Lisbon: 17 °C.  (ok)",
        "user: Hello, what can you do?",
        "  step 1: synthesize (no tool is needed to answer this)",
        "  answer: I compare the weather of cities: ask me which of two cities is warmer right now.  (ok)",
    ]


async def test_the_autonomous_agent_keeps_its_choices_out_of_the_conversation() -> None:
    model = Recorder(autonomous.demo_model)
    agent = autonomous.make_agent(Step(provider.Function(model), tools=autonomous.TOOLS))
    state = await agent.run(asked(autonomous.QUESTIONS[0]))
    assert state.outcome is not None and state.outcome.ok
    assert state.outcome.data["Autonomous"]["steps"] == ["reason", "analyze", "synthesize"]
    assert [t.meta.get("kind") for t in state] == [None, "work_notes", "stage", None]
    assert 'temperature({"city": "Oslo"}) returned: 4.0' in state[1].text
    assert not any("Choose the next step" in t.text for t in state)
    assert [r.path for r in model.requests] == [
        "Autonomous/choose", "Autonomous/reason/ReAct", "Autonomous/reason/ReAct", "Autonomous/choose",
        "Autonomous/analyze", "Autonomous/choose", "Autonomous"]
    # The tool named as the choice ran the reason step, on the chooser's reason.
    assert "use the tool temperature" in model.requests[1].turns[-1].text


# -- a graph of your own ----------------------------------------------------------------------------------------


def test_own_graph_prints_the_path_and_the_answers() -> None:
    assert run("own_graph")[-5:] == [
        "user: How many people live in the capital of France?",
        "  path: plan -> act -> observe -> reflect (continue) -> act -> observe -> reflect (answer) -> answer",
        "  answer: About 2,100,000 people live in Paris, the capital of France.  (ok)",
        "  as a chain: plan -> work -> final",
        "  answer: About 2,100,000 people live in Paris, the capital of France.  (ok)",
    ]


async def test_the_own_graph_stores_only_the_notes_and_the_answer() -> None:
    model = Recorder(own_graph.demo_model)
    state = await own_graph.make_agent(Step(provider.Function(model), tools=own_graph.TOOLS)).run(
        asked(own_graph.QUESTION))
    assert [t.meta.get("kind") for t in state] == [None, "work_notes", "stage", None]
    notes = state[1].text
    assert '[act] capital({"country": "France"}) returned: Paris' in notes
    assert "[reflect]" in notes and "[observe] The lookups so far returned: Paris, 2100000." in notes
    assert {r.path for r in model.requests} == {"PlanActReflect/plan", "PlanActReflect/act/ReAct",
                                                "PlanActReflect/observe", "PlanActReflect/reflect", "PlanActReflect"}


@pytest.mark.parametrize("broken", ["plan", "reflect"])
async def test_the_own_graph_answers_degraded_when_a_stage_never_decides(broken: str) -> None:
    def model(request: Request) -> Any:
        properties = (request.options.output_schema or {}).get("properties", {})
        if ("steps" if broken == "plan" else "decision") in properties:
            return "no idea"
        return own_graph.demo_model(request)

    state = await own_graph.make_agent(Step(provider.Function(model), tools=own_graph.TOOLS)).run(
        asked(own_graph.QUESTION))
    assert state.answer and state.degraded and state.outcome is not None
    assert "a stage gave no valid answer" in state.outcome.reason


async def test_the_own_graph_stops_after_max_rounds() -> None:
    def model(request: Request) -> Any:
        if "steps" in (request.options.output_schema or {}).get("properties", {}):
            return json.dumps({"steps": ["find the capital of the country"] * 3})
        return own_graph.demo_model(request)

    agent = own_graph.PlanActReflect(Step(provider.Function(model), tools=own_graph.TOOLS), max_rounds=2)
    state = await agent.run(asked(own_graph.QUESTION))
    assert state.answer and state.degraded and state.outcome is not None
    assert "max_rounds=2 reached with subgoals left" in state.outcome.reason
    assert state.outcome.data["PlanActReflect"]["path"].count("act") == 2
