"""Events a step publishes, and the bus that never waits for a subscriber."""

from typing import Any

import anyio
import pytest

from loop import (
    EventBus,
    EventsDropped,
    Finish,
    Role,
    State,
    Step,
    Text,
    TextDelta,
    ToolCallDelta,
    ToolFinished,
    ToolResult,
    ToolStarted,
    Turn,
    TurnCompleted,
    TurnStarted,
    UsageError,
    tool,
)
from provider import Scripted, tool_call

START = State().append(Role.USER, Text("hi"))


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


def names(events: list[Any]) -> list[str]:
    return [type(e).__name__ for e in events]


async def test_events_of_a_turn_with_a_tool_call_in_order() -> None:
    reply = [Text("Adding."), tool_call("add", {"a": 1, "b": 2}, id="c1")]
    step = Step(Scripted([reply], chunk_size=4), tools=[add])
    with step.events.subscribe(buffer=None) as sub:
        state = await step.turn(START)
        events = sub.drain()
    assert names(events) == [
        "TurnStarted",
        "TextDelta", "TextDelta",
        "ToolCallDelta", "ToolCallDelta",
        "Finish",
        "TurnCompleted",
        "ToolStarted", "ToolFinished",
        "TurnCompleted",
    ]
    assert events[0] == TurnStarted(1)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Adding."
    assert events[3].index == 0 and isinstance(events[3], ToolCallDelta)
    assert events[5] == Finish("tool_calls")
    assert events[6] == TurnCompleted(state[1]) and events[6].turn.role is Role.ASSISTANT
    call = state[1].tool_calls[0]
    assert events[7] == ToolStarted(call)
    finished = events[8]
    assert isinstance(finished, ToolFinished)
    assert finished.call == call and finished.result == ToolResult("c1", "add", "3") and finished.seconds >= 0
    assert events[9] == TurnCompleted(state[2]) and events[9].turn.role is Role.TOOL


async def test_submit_appends_a_turn_and_publishes_it_with_its_meta() -> None:
    step = Step(Scripted([]))
    with step.events.subscribe() as sub:
        state = await step.submit(START, Role.SYSTEM, Text("report"), meta={"source": "verifier"})
        again = await step.submit(START, "user", Text("another branch"))
        events = sub.drain()
    assert len(START) == 1
    assert [t.text for t in state] == ["hi", "report"]
    assert state.last is not None and state.last.meta == {"source": "verifier"}
    assert [t.text for t in again] == ["hi", "another branch"]
    assert again.last is not None and again.last.role is Role.USER
    assert events == [TurnCompleted(state[1]), TurnCompleted(again[1])]
    assert events[0].turn.meta == {"source": "verifier"}


async def test_submit_rejects_bad_input() -> None:
    step = Step(Scripted([]))
    with pytest.raises(UsageError):
        await step.submit(START, "narrator", Text("x"))
    with pytest.raises(UsageError):
        await step.submit(START, Role.USER, "not a part")  # type: ignore[arg-type]


async def test_a_subscriber_that_never_reads_does_not_stall_a_turn() -> None:
    step = Step(Scripted(["a long answer streamed one character at a time"], chunk_size=1))
    with step.events.subscribe(buffer=2) as slow, step.events.subscribe(buffer=None) as everything:
        with anyio.fail_after(5):
            state = await step.turn(START)
        published = everything.drain()
        received = []
        slow.close()
        async for event in slow:
            received.append(event)
    assert state.answer == "a long answer streamed one character at a time"
    assert len(published) > 40
    assert received == [published[0], published[1], EventsDropped(len(published) - 2)]


async def test_dropped_events_are_marked_where_they_were_lost() -> None:
    bus = EventBus()
    sub = bus.subscribe(buffer=2)
    for i in range(5):
        bus.publish(i)
    assert sub.drain() == [0, 1, EventsDropped(3)]
    for i in range(5, 8):
        bus.publish(i)
    assert sub.drain() == [5, 6, EventsDropped(1)]
    bus.publish(8)
    bus.publish(9)
    bus.publish(10)
    assert await sub.__anext__() == 8
    assert await sub.__anext__() == 9
    bus.publish(11)
    assert sub.drain() == [EventsDropped(1), 11]


async def test_a_waiting_subscriber_wakes_on_publish() -> None:
    bus = EventBus()
    got: list[Any] = []
    with bus.subscribe() as sub, anyio.fail_after(5):
        async with anyio.create_task_group() as group:

            async def read() -> None:
                async for event in sub:
                    got.append(event)
                    if event == "last":
                        return

            group.start_soon(read)
            await anyio.wait_all_tasks_blocked()
            bus.publish("first")
            bus.publish("last")
    assert got == ["first", "last"]


async def test_a_closed_subscription_stops_receiving_and_ends_after_buffered_events() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    bus.publish("kept")
    sub.close()
    sub.close()  # closing twice is harmless
    bus.publish("missed")
    assert sub.closed and not bus.has_subscribers
    assert [event async for event in sub] == ["kept"]
    assert [event async for event in sub] == []


async def test_closing_wakes_a_waiting_iteration() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    got: list[Any] = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:

            async def read() -> None:
                got.extend([event async for event in sub])

            group.start_soon(read)
            await anyio.wait_all_tasks_blocked()
            bus.publish("one")
            sub.close()
    assert got == ["one"]


def test_context_manager_closes_the_subscription() -> None:
    bus = EventBus()
    with bus.subscribe() as sub:
        assert bus.has_subscribers
    assert sub.closed and not bus.has_subscribers


@pytest.mark.parametrize("buffer", [0, -1, 1.5, "10"])
def test_subscribe_validates_buffer(buffer: Any) -> None:
    with pytest.raises(UsageError, match="buffer must be a positive integer or None"):
        EventBus().subscribe(buffer=buffer)


def test_publish_without_subscribers_is_a_no_op() -> None:
    bus = EventBus()
    assert not bus.has_subscribers
    bus.publish("nobody listens")
    assert bus.subscribe().drain() == []


async def test_several_subscribers_each_get_every_event() -> None:
    bus = EventBus()
    step = Step(Scripted(["hello there"], chunk_size=2), events=bus)
    subs = [bus.subscribe(buffer=None) for _ in range(3)]
    state = await step.turn(START)
    seen = [s.drain() for s in subs]
    assert seen[0] == seen[1] == seen[2]
    assert seen[0][-1] == TurnCompleted(state.last)  # type: ignore[arg-type]
    assert len(seen[0]) == 1 + 6 + 1 + 1  # started, six text chunks, finish, completed


async def test_events_published_before_subscribing_are_not_seen() -> None:
    bus = EventBus()
    bus.publish("early")
    sub = bus.subscribe()
    bus.publish(Turn(Role.USER))
    assert sub.drain() == [Turn(Role.USER)]
