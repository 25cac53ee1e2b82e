"""Cancelling a turn: nothing is returned, resources are released, and the published history stays valid."""

import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest

from loop import (
    Request,
    Role,
    State,
    Step,
    Subscription,
    Text,
    TextDelta,
    ToolFinished,
    ToolStarted,
    Turn,
    TurnCompleted,
    TurnFailed,
    tool,
)
from loop.errors import StreamError
from provider import Function, Scripted, tool_call

START = State().append(Role.USER, Text("go"))


async def cancel_when(step: Step, state: State, ready: Callable[[Any], bool]) -> tuple[list[State], anyio.CancelScope]:
    """Run ``step.turn(state)`` and cancel it once an event satisfying ``ready`` is published."""
    returned: list[State] = []
    scope = anyio.CancelScope()

    async def run() -> None:
        with scope:
            returned.append(await step.turn(state))

    with step.events.subscribe(buffer=None) as watch, anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            async for event in watch:
                if ready(event):
                    break
            scope.cancel()
    return returned, scope


def paired(turns: list[Turn]) -> bool:
    """Whether every tool call in ``turns`` is answered by exactly one result."""
    calls = [c.id for t in turns for c in t.tool_calls]
    results = [r.call_id for t in turns for r in t.tool_results]
    return sorted(calls) == sorted(results)


async def test_cancel_mid_stream() -> None:
    closed: list[str] = []

    async def stalls(request: Request) -> AsyncIterator[Any]:
        try:
            yield TextDelta("partial ")
            await anyio.sleep_forever()
            yield TextDelta("never")
        finally:
            closed.append("finally ran")

    step = Step(Function(stalls))
    with step.events.subscribe(buffer=None) as sub:
        returned, scope = await cancel_when(step, START, lambda e: isinstance(e, TextDelta))
        events = sub.drain()
    assert returned == [] and scope.cancelled_caught
    assert closed == ["finally ran"]
    assert [type(e).__name__ for e in events] == ["TurnStarted", "TextDelta", "TurnFailed"]
    assert isinstance(events[-1].error, anyio.get_cancelled_exc_class())
    assert not any(isinstance(e, TurnCompleted) for e in events)
    # the caller's state is untouched and still usable
    assert len(START) == 1 and START.last is not None and START.last.text == "go"
    assert State.from_json(START.to_json()) == START
    after = await Step(Scripted(["fine"])).turn(START)
    assert after.answer == "fine" and len(after) == 2


async def test_a_stream_abandoned_on_error_is_closed() -> None:
    closed: list[bool] = []

    async def breaks(request: Request) -> AsyncIterator[Any]:
        try:
            yield "not a delta"
            yield TextDelta("never read")
        finally:
            closed.append(True)

    with pytest.raises(StreamError):
        await Step(Function(breaks)).turn(START)
    assert closed == [True]


def tool_history(sub: Subscription) -> tuple[list[Any], list[Turn]]:
    events = sub.drain()
    return events, [e.turn for e in events if isinstance(e, TurnCompleted)]


async def test_cancel_while_tools_run_answers_every_unfinished_call() -> None:
    stopped: list[str] = []

    @tool
    async def fast() -> str:
        return "fast result"

    @tool
    async def slow(n: int) -> str:
        try:
            await anyio.sleep_forever()
        finally:
            stopped.append(f"slow {n}")
        return "unreachable"

    calls = [tool_call("slow", {"n": 1}, id="s1"), tool_call("fast", id="f"), tool_call("slow", {"n": 2}, id="s2")]
    step = Step(Scripted([calls]), tools=[fast, slow])
    started: set[str] = set()

    def ready(event: Any) -> bool:
        # both slow calls are running and the fast one has finished
        if isinstance(event, (ToolStarted, ToolFinished)):
            started.add(f"{type(event).__name__} {event.call.id}")
        return {"ToolStarted s1", "ToolStarted s2", "ToolFinished f"} <= started

    with step.events.subscribe(buffer=None) as sub:
        returned, scope = await cancel_when(step, START, ready)
        events, turns = tool_history(sub)
    assert returned == [] and scope.cancelled_caught
    assert sorted(stopped) == ["slow 1", "slow 2"]  # the cancellation reached the tools
    assistant, tools = turns
    assert assistant.role is Role.ASSISTANT and tools.role is Role.TOOL
    s1, f, s2 = tools.tool_results
    assert (f.call_id, f.content, f.is_error) == ("f", "fast result", False)
    for result, call_id in ((s1, "s1"), (s2, "s2")):
        assert result.call_id == call_id and result.name == "slow" and result.is_error
        assert result.content.startswith("error: cancelled")
    assert paired(turns)
    # the answered TOOL turn is published, then the failure, and the cancellation went on to the caller
    assert events[-2:] == [TurnCompleted(tools), events[-1]]
    assert isinstance(events[-1], TurnFailed) and isinstance(events[-1].error, anyio.get_cancelled_exc_class())


async def test_cancel_a_single_running_tool() -> None:
    @tool
    async def wait() -> str:
        await anyio.sleep_forever()
        return "unreachable"

    step = Step(Scripted([[tool_call("wait", id="w")]]), tools=[wait])
    with step.events.subscribe(buffer=None) as sub:
        returned, _ = await cancel_when(step, START, lambda e: isinstance(e, ToolStarted))
        events, turns = tool_history(sub)
    assert returned == []
    assert turns[-1].role is Role.TOOL
    (result,) = turns[-1].tool_results
    assert result.call_id == "w" and result.is_error and "cancelled" in result.content
    assert paired(turns)
    assert isinstance(events[-1], TurnFailed)


async def test_cancel_does_not_wait_for_a_blocking_sync_tool() -> None:
    release = threading.Event()

    @tool
    def blocks() -> str:
        release.wait(5)
        return "late"

    step = Step(Scripted([[tool_call("blocks", id="b")]]), tools=[blocks])
    try:
        with step.events.subscribe(buffer=None) as sub:
            returned, _ = await cancel_when(step, START, lambda e: isinstance(e, ToolStarted))
            _, turns = tool_history(sub)
    finally:
        release.set()
    assert returned == []
    assert turns[-1].tool_results[0].content.startswith("error: cancelled")
