"""A turn asked not to run tools stops with the model's calls pending, its outcome ``pending``."""

from __future__ import annotations

import pytest

from loop import Options, Role, State, Step, Text, UsageError, tool
from provider import Scripted, tool_call

START = State().append(Role.USER, Text("delete the file"))
ran: list[str] = []


@tool
async def delete(path: str) -> str:
    """Delete a file."""
    ran.append(path)
    return "deleted"


async def test_the_calls_stay_pending_and_nothing_runs() -> None:
    ran.clear()
    step = Step(Scripted([[Text("I will delete it."), tool_call("delete", {"path": "a.txt"}, id="c1")]]),
                tools=[delete])
    state = await step.turn(START, Options(run_tools=False))
    assert ran == []
    assert [c.id for c in state.pending_calls] == ["c1"] and state.last is not None
    assert state.last.role is Role.ASSISTANT
    assert state.outcome is not None and state.outcome.status == "pending"
    assert "1 tool call left pending" in state.outcome.reason


async def test_a_turn_without_calls_is_unaffected() -> None:
    state = await Step(Scripted(["nothing to do"])).turn(START, Options(run_tools=False))
    assert state.answer == "nothing to do" and state.outcome is None


def test_run_tools_must_be_a_bool() -> None:
    with pytest.raises(UsageError, match="run_tools must be True, False or None"):
        Options(run_tools="no")  # type: ignore[arg-type]
