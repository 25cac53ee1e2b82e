"""Verify: plan, solve, check and answer in one turn; the answer kept apart from the working."""

import pytest

from cognitive import PatternKind
from cognitive.everyday._verify import PROMPT, Verify
from loop import Role, State, Step, Text, UsageError
from provider import Scripted

WORKED = """PLAN: add the two numbers.
SOLVE: 17 + 25 = 42.
CHECK: 42 - 25 = 17, which matches.
FIX: none
ANSWER: 42"""


def ask(text: str = "What is 17 + 25?") -> State:
    return State().append(Role.USER, Text(text))


async def test_one_turn_writes_only_the_final_answer_and_keeps_the_working() -> None:
    script = Scripted([WORKED])
    state = await Verify(Step(script)).run(ask())
    assert len(script.requests) == 1
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT]
    assert state.answer == "42"
    assert state.last is not None and state.last.kind == PatternKind.VERIFY_ANSWER
    assert state.last.meta["working"] == WORKED
    assert state.outcome is not None and state.outcome.ok
    assert state.outcome.data["Verify"] == {"separated": True, "checked": True}


async def test_the_model_is_asked_with_the_instructions_and_tools_off_in_a_branch() -> None:
    script = Scripted([WORKED])
    await Verify(Step(script)).run(ask())
    (request,) = script.requests
    assert request.turns[-1].role is Role.SYSTEM and request.turns[-1].text == PROMPT
    assert request.options.tool_choice == "none"
    assert request.path == "Verify/working"


async def test_the_last_answer_heading_wins_and_markdown_headings_are_read() -> None:
    reply = "PLAN: x\nSOLVE: the answer: 3?\nCHECK: no, 4\nFIX: it is 4\n## Final Answer: 4"
    state = await Verify(Step(Scripted([reply]))).run(ask())
    assert state.answer == "4"


async def test_a_reply_without_an_answer_heading_is_given_whole_and_degraded() -> None:
    state = await Verify(Step(Scripted(["It is 42, I think."]))).run(ask())
    assert state.answer == "It is 42, I think."
    assert state.degraded and "ANSWER" in state.outcome.reason


async def test_custom_instructions_are_used() -> None:
    script = Scripted(["ANSWER: yes"])
    await Verify(Step(script), instructions="Think, then write ANSWER: and the answer.").run(ask())
    assert script.requests[0].turns[-1].text == "Think, then write ANSWER: and the answer."


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(UsageError, match="TurnExecutor"):
        Verify(object())  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="instructions"):
        Verify(Step(Scripted([])), instructions="  ")
