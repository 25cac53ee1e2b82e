"""The quickstart runs as a user would run it, and tells the story it promises."""

import subprocess
import sys

from loop import Role, State, Step, Text
from tests.examples import ROOT, load_example

quickstart = load_example("quickstart")


def test_runs_from_the_command_line_offline() -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "examples/quickstart.py"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Running on the offline demo model" in done.stdout
    assert "[verifier report]" in done.stdout
    assert "final answer: The train covers 200 km in 2 h, so its average speed is 100 km/h." in done.stdout
    tokens = [line for line in done.stdout.splitlines() if line.startswith("tokens: ")]
    assert tokens and tokens[0] != "tokens: 0 in, 0 out"


async def test_wrong_answer_is_sent_back_and_fixed() -> None:
    step = Step(quickstart.demo_provider(), tools=[quickstart.add, quickstart.divide])
    state = await quickstart.make_agent(step).run(State().append(Role.USER, Text(quickstart.QUESTION)))
    reports = [t for t in state if t.role is Role.SYSTEM]
    assert len(reports) == 1 and "grounded: FAIL" in reports[0].text and "160.0" in reports[0].text
    assert state.answer is not None and "100 km/h" in state.answer
    assert state.outcome.data["WithVerification"] == {"retries": 1, "results": {"grounded": "pass"}}
    assert not state.degraded


async def test_the_demo_model_serves_any_number_of_conversations_and_messages() -> None:
    step = Step(quickstart.demo_provider(), tools=quickstart.TOOLS)
    agent = quickstart.make_agent(step)
    chats = [State(), State()]
    asked = [("What is 2 + 3?", "2 + 3 = 5"), ("What is 10 divided by 4?", "10 / 4 = 2.5"),
             ("hello", "I am the offline demo model"), ("What is 7 plus 8?", "7 + 8 = 15")]
    for question, expected in asked * 2:  # the same model, message after message, in two conversations
        for index, chat in enumerate(chats):
            chats[index] = await agent.run(chat.append(Role.USER, Text(question)))
            assert chats[index].answer is not None and chats[index].answer.startswith(expected)
            assert chats[index].outcome is not None and chats[index].outcome.ok
    assert all(len([t for t in chat if t.role is Role.USER]) == 8 for chat in chats)
