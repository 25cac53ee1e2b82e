"""The debate and research examples run as a user runs them, offline, and show the rounds they promise."""

import subprocess
import sys

import pytest

from examples import debate, research
from loop import Role, State, Step, Text
from tests.examples import ROOT


def run_example(name: str) -> list[str]:
    done = subprocess.run([sys.executable, f"examples/{name}.py"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Running on the offline demo model") and not done.stderr
    return done.stdout.splitlines()


def asked(question: str) -> State:
    return State().append(Role.USER, Text(question))


def test_the_debate_example_prints_each_round_and_the_answer() -> None:
    lines = run_example("debate")
    assert lines[-5:] == [
        "user: Which warehouse should ship 40 blue kettles to Lyon?",
        "  round 1: critic 0.7: Nobody checked that Dijon has 40 blue kettles in stock.",
        ("  round 2: critic 0.1: It could say when the order would arrive. | judge: passed (The choice is backed by "
         "distance and stock.)"),
        "  ended by: judge after 2 round(s)",
        ("  answer: Ship from Marseille: Dijon is nearer (190 km) but holds only 12 blue kettles, while Marseille "
         "holds 55, enough for all 40, at 315 km."),
    ]


def test_the_research_example_prints_each_check_and_the_answer() -> None:
    lines = run_example("research")
    assert lines[-5:] == [
        "user: How many people live in the capital of Australia?",
        "  check 1: failed: The figure 460,000 is not backed by any tool result: look it up.",
        "  check 2: passed",
        "  searches: 2",
        "  answer: About 467,000 people live in Canberra, the capital of Australia (2021 census).",
    ]


async def test_the_debate_keeps_its_rounds_out_of_the_conversation() -> None:
    agent = debate.make_agent(Step(debate.demo_provider(), tools=debate.TOOLS))
    state = await agent.run(asked(debate.QUESTION))
    assert state.outcome is not None and state.outcome.ok
    assert [t.role for t in state] == [Role.USER, Role.SYSTEM, Role.SYSTEM, Role.ASSISTANT]
    assert "[critic]" in state[1].text and "stock" in state[1].text
    assert state.answer is not None and "Marseille" in state.answer


@pytest.mark.parametrize("example", [debate, research])
async def test_any_other_question_is_answered_cleanly(example: object) -> None:
    agent = example.make_agent(Step(example.demo_provider(), tools=example.TOOLS))  # type: ignore[attr-defined]
    state = await agent.run(asked("Hello, what can you do?"))
    assert state.outcome is not None and state.outcome.ok and state.answer
    assert "Try" in state.answer or "Ask me" in state.answer
