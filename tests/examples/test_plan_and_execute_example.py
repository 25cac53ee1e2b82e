"""examples/plan_and_execute.py runs as a user runs it, offline: the forecast says rain, the plan changes, and the
answer names the indoor sight and a restaurant near it; with --ledger the steps see only the ledger."""

import subprocess
import sys

import pytest

import provider
from examples import plan_and_execute as example
from loop import Request, Role, State, Step, Text
from tests.examples import ROOT

ANSWER = ("answer: Saturday in Lisbon: rain all day, 14 °C is forecast, so visit the Museu Nacional do Azulejo in "
          "Xabregas, and eat nearby at Taberna de Xabregas.")


def run(*flags: str) -> list[str]:
    done = subprocess.run([sys.executable, "examples/plan_and_execute.py", *flags], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert done.stdout.startswith("Running on the offline demo model")
    return done.stdout.splitlines()


@pytest.mark.parametrize("flags", [(), ("--ledger",)])
def test_it_prints_both_plans_each_step_and_review_and_the_answer(flags: tuple[str, ...]) -> None:
    lines = run(*flags)
    assert lines[-1] == ANSWER
    assert lines[-2] == f"re-plans: 1; outcome: ok{' (ledger)' if flags else ''}"
    shown = "\n".join(lines)
    assert "plan:\n  1. Check the weather in Lisbon on Saturday.\n  2. Find an outdoor sight in Lisbon." in shown
    assert "new plan:\n  1. Find an indoor sight in Lisbon." in shown
    assert "  review: replan (rain is forecast, so an outdoor sight no longer fits)" in shown
    assert "step 3 [ok]: Find a restaurant near the chosen sight.\n  -> Eat at Taberna de Xabregas." in shown


class Recorder:
    def __init__(self) -> None:
        self.requests: list[Request] = []

    def __call__(self, request: Request) -> provider.Reply:
        self.requests.append(request)
        return example.demo_model(request)


@pytest.mark.parametrize("ledger", [False, True])
async def test_the_restaurant_step_finds_the_district_from_the_transcript_or_the_ledger(ledger: bool) -> None:
    model = Recorder()
    step = Step(provider.Function(model), tools=example.TOOLS)
    state = await example.make_agent(step, ledger).run(State().append(Role.USER, Text(example.QUESTION)))
    assert state.answer == ANSWER.removeprefix("answer: ")
    third = next(r for r in model.requests if r.path.endswith("step 3/ReAct"))
    results = [r.content for t in third.turns for r in t.tool_results]
    assert results == ([] if ledger else ["rain all day, 14 °C", '["Museu Nacional do Azulejo (Xabregas)", '
                                                                 '"Gulbenkian Museum (Avenidas Novas)"]'])


async def test_a_question_that_needs_no_plan_is_answered_with_what_it_can_do() -> None:
    step = Step(example.demo_provider(), tools=example.TOOLS)
    state = await example.make_agent(step).run(State().append(Role.USER, Text("Hello, what can you do?")))
    assert state.answer is not None and state.answer.startswith("I plan days out")
    assert state.outcome is not None and state.outcome.data["PlanAndExecute"]["steps"] == []
