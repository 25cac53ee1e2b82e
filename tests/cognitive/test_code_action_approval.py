"""A code-action program's bridged calls go through the approval gate: a person (the run's approver, or a
session) decides them while the program waits, and a denial is an error inside the program."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from cognitive import CodeAction, new_turn_processor
from loop import Decision, Role, State, Step, Text, ToolCall, approving, tool
from provider import Scripted
from sandbox import UnsafeLocalSandbox
from session import ApprovalAnswered, ApprovalRequested, Manager, MessageFinished

QUESTION = State().append(Role.USER, Text("Delete the old report."))
deleted: list[str] = []
PROGRAM = ("Here is the program.\n```python\nfrom tools import delete, ToolError\ntry:\n"
           "    print('FINAL:', delete(path='old.txt'))\nexcept ToolError as e:\n    print('FINAL: refused:', e)\n```")


@tool(needs_approval=True)
async def delete(path: str) -> str:
    """Delete a file."""
    deleted.append(path)
    return f"deleted {path}"


@pytest.fixture(autouse=True)
def fresh() -> None:
    deleted.clear()


def agent() -> CodeAction:
    return CodeAction(Step(Scripted([PROGRAM])), UnsafeLocalSandbox(), tools=[delete])


async def test_an_approved_bridged_call_runs_and_the_program_gets_its_value() -> None:
    asked: list[str] = []

    async def person(calls: tuple[ToolCall, ...]) -> list[Decision]:
        asked.extend(c.name for c in calls)
        return [Decision.approve(c.id) for c in calls]

    with approving(person):
        state = await agent().run(QUESTION)
    assert asked == ["delete"] and deleted == ["old.txt"] and state.answer == "deleted old.txt"


async def test_a_denied_bridged_call_fails_in_the_program() -> None:
    async def person(calls: tuple[ToolCall, ...]) -> list[Decision]:
        return [Decision.deny(c.id, "keep it") for c in calls]

    with approving(person):
        state = await agent().run(QUESTION)
    assert deleted == [] and state.answer is not None
    assert "refused:" in state.answer and "the user denied this call: keep it" in state.answer


async def test_with_nobody_to_ask_a_bridged_call_is_denied() -> None:
    state = await agent().run(QUESTION)
    assert deleted == [] and state.answer is not None and "nobody can be asked here" in state.answer


async def test_in_a_session_the_program_waits_for_the_person_live() -> None:
    async with Manager(new_turn_processor(lambda step: CodeAction(step, UnsafeLocalSandbox(), tools=[delete])),
                       provider=Scripted([PROGRAM])) as manager:
        session = await manager.open("s1")
        with session.events.subscribe() as events:
            session.send("Delete the old report.")
            seen: list[Any] = []
            with anyio.fail_after(20):
                async for event in events:
                    seen.append(event)
                    if isinstance(event, ApprovalRequested):
                        assert event.live and [c.name for c in event.calls] == ["delete"]
                        assert session.approve([Decision.approve(c.id) for c in event.calls]) is None
                    if isinstance(event, MessageFinished):
                        break
    assert deleted == ["old.txt"] and session.state.answer == "deleted old.txt"
    assert [e.approved for e in seen if isinstance(e, ApprovalAnswered)] == [True]
