"""examples/peoatr.py runs as a user runs it, offline, and its agent does what the example says: a plan that meets
a refusing tool, a replan, one round per warehouse, and an answer written from the work."""

import subprocess
import sys

import provider
from examples import peoatr
from loop import Request, Role, State, Step, Text
from tests.examples import ROOT


class Recorder:
    def __init__(self) -> None:
        self.requests: list[Request] = []

    def __call__(self, request: Request) -> provider.Reply:
        self.requests.append(request)
        return peoatr.demo_model(request)


def asked(question: str) -> State:
    return State().append(Role.USER, Text(question))


def test_runs_from_the_command_line_offline() -> None:
    done = subprocess.run([sys.executable, "examples/peoatr.py"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Running on the offline demo model") and not done.stderr
    lines = done.stdout.splitlines()
    assert ("answer: We have 23 blue kettles in all (14 in the north and 9 in the south); the north warehouse has "
            "more.") in lines
    assert "stages: plan -> act -> think -> reflect -> plan -> act -> think -> reflect -> act -> think -> reflect " \
           "-> answer" in lines
    assert any(line.startswith("round 1: replan -> plan (the tool said:") for line in lines)
    assert "conversation: user, work_notes, stage, assistant" in lines
    assert any(line.startswith("Deliberate: think -> plan -> act -> observe") for line in lines)


async def test_the_agent_replans_after_the_tool_refuses_and_answers_from_both_rounds() -> None:
    model = Recorder()
    step = Step(provider.Function(model), tools=peoatr.TOOLS)
    state = await peoatr.make_agent(step).run(asked(peoatr.QUESTION))
    assert state.answer == ("We have 23 blue kettles in all (14 in the north and 9 in the south); the north "
                            "warehouse has more.")
    assert state.outcome is not None and state.outcome.ok
    work = state.outcome.data["PEOATR"]
    assert work["plans"] == [["count the blue kettles"], ["count the blue kettles in the north warehouse",
                                                          "count the blue kettles in the south warehouse"]]
    assert [(d["decision"], d["then"]) for d in work["decisions"]] == [("replan", "plan"), ("continue", "act"),
                                                                        ("answer", "answer")]
    assert (work["rounds"], work["replans"]) == (3, 1)
    # plan, 3 rounds (a call and its report, think, reflect), the new plan, the answer
    assert len(model.requests) == 1 + 3 * 4 + 1 + 1
    assert [t.kind for t in state] == [None, "work_notes", "stage", None]
    assert "failed: error: the tool raised LookupError: name the warehouse" in state[1].text


async def test_a_question_with_nothing_to_look_up_is_answered_at_once() -> None:
    step = Step(peoatr.demo_provider(), tools=peoatr.TOOLS)
    state = await peoatr.make_agent(step).run(asked("Hello, what can you do?"))
    assert state.outcome.data["PEOATR"]["path"] == ["plan", "answer"]
    assert state.answer is not None and state.answer.startswith("I plan the work")

