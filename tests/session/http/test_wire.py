"""The wire form of session events, and the event log that numbers and keeps them for resuming readers."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from loop import (
    BudgetReport,
    EventBus,
    EventsDropped,
    Finish,
    ReasoningDelta,
    Role,
    Spent,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolFinished,
    ToolResult,
    ToolStarted,
    Turn,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    Usage,
    UsageDelta,
    UsageError,
)
from session import (Interrupted, MessageFailed, MessageFinished, MessageQueued, MessageStarted, TurnStored,
                     TurnUpdated)
from session.http import EventLog, EventsLost, LoggedEvent, event_to_json
from session.http._eventlog import time_ids
from session.http._wire import dumps

CALL = ToolCall("c1", "add", '{"a": 1}')
RESULT = ToolResult("c1", "add", "2")
TURN = Turn(Role.ASSISTANT, [Text("hi"), CALL], {"finish_reason": "tool_calls"})

CASES: list[tuple[Any, dict[str, Any]]] = [
    (TextDelta("he"), {"type": "text_delta", "text": "he"}),
    (ReasoningDelta("hm", "sig"), {"type": "reasoning_delta", "text": "hm", "signature": "sig"}),
    (ToolCallDelta(0, "c1", "add", '{"a"'),
     {"type": "tool_call_delta", "index": 0, "id": "c1", "name": "add", "arguments_fragment": '{"a"'}),
    (UsageDelta(Usage(3, 4)), {"type": "usage_delta", "usage": {"type": "usage", "input_tokens": 3,
                                                                 "output_tokens": 4, "cache_read_tokens": 0,
                                                                 "cache_write_tokens": 0}}),
    (Finish("stop"), {"type": "finish", "reason": "stop"}),
    (TurnStarted(3), {"type": "turn_started", "index": 3}),
    (TurnCompleted(TURN), {"type": "turn_completed", "turn": TURN.to_dict()}),
    (ToolStarted(CALL), {"type": "tool_started", "call": {"type": "tool_call", "id": "c1", "name": "add",
                                                          "arguments": '{"a": 1}'}}),
    (ToolFinished(CALL, RESULT, 0.25),
     {"type": "tool_finished", "call": {"type": "tool_call", "id": "c1", "name": "add", "arguments": '{"a": 1}'},
      "result": {"type": "tool_result", "call_id": "c1", "name": "add", "content": "2", "is_error": False},
      "seconds": 0.25}),
    (EventsDropped(7), {"type": "events_dropped", "count": 7}),
    (MessageQueued("m1", 2), {"type": "message_queued", "message_id": "m1", "position": 2}),
    (MessageStarted("m1"), {"type": "message_started", "message_id": "m1"}),
    (MessageFinished("m1", "42"),
     {"type": "message_finished", "message_id": "m1", "answer": "42", "ok": True, "status": "ok",
      "degraded": False, "reason": ""}),
    (MessageFinished("m1", "partial", True, "max_turns=3"),
     {"type": "message_finished", "message_id": "m1", "answer": "partial", "ok": False,
      "status": "degraded", "degraded": True, "reason": "max_turns=3"}),
    (MessageFailed("m1", "disk full", "StoreError"),
     {"type": "message_failed", "message_id": "m1", "error": {"type": "StoreError", "message": "disk full"}}),
    (Interrupted(None, 2), {"type": "interrupted", "message_id": None, "dropped": 2}),
    (TurnStored(1, TURN), {"type": "turn_stored", "index": 1, "turn": TURN.to_dict()}),
    (TurnUpdated(1, TURN), {"type": "turn_updated", "index": 1, "turn": TURN.to_dict()}),
    (BudgetReport("b", Spent(turns=2, cost=0.5), {"ReAct": Spent(turns=2, cost=0.5)}, "max_turns=2 reached"),
     {"type": "budget_report", "budget": "b", "spent": {"turns": 2, "cost": 0.5},
      "by_path": {"ReAct": {"turns": 2, "cost": 0.5}}, "exhausted": "max_turns=2 reached"}),
]


@pytest.mark.parametrize(("event", "expected"), CASES, ids=[type(e).__name__ for e, _ in CASES])
def test_every_session_event_has_a_json_form(event: Any, expected: dict[str, Any]) -> None:
    encoded = event_to_json(event)
    assert encoded == expected
    assert json.loads(dumps(encoded)) == expected


def test_a_failed_turn_carries_the_error_by_name_never_the_object() -> None:
    encoded = event_to_json(TurnFailed(ValueError("bad value")))
    assert encoded == {"type": "turn_failed", "error": {"type": "ValueError", "message": "bad value"}}
    assert json.loads(dumps(encoded)) == encoded


def test_unknown_objects_encode_as_their_repr() -> None:
    class Odd:
        def __repr__(self) -> str:
            return "<odd>"

    assert event_to_json(Odd()) == {"type": "unknown", "repr": "<odd>"}
    assert event_to_json("plain")["type"] == "unknown"
    assert event_to_json(Turn(Role.USER, [Text("x")]))["type"] == "unknown"


def test_subclasses_of_an_event_encode_as_that_event() -> None:
    class Louder(TextDelta):
        pass

    assert event_to_json(Louder("hey")) == {"type": "text_delta", "text": "hey"}


def test_values_json_cannot_hold_are_sent_as_their_repr() -> None:
    turn = Turn(Role.USER, [Text("x")], {"when": {1, 2}})
    data = json.loads(dumps(event_to_json(TurnCompleted(turn))))
    assert data["turn"]["meta"]["when"] == "{1, 2}"


async def test_the_log_numbers_every_event_and_replays_after_an_id() -> None:
    bus = EventBus()
    log = EventLog(bus, size=100)
    async with anyio.create_task_group() as group:
        group.start_soon(log.run)
        for n in range(5):
            bus.publish(TextDelta(str(n)))
        with anyio.fail_after(5):
            while log.last_id < 5:
                await anyio.sleep(0)
        reader = log.reader(2)
        got = reader.pending()
        assert [(e.id, json.loads(e.data)["text"]) for e in got] == [(3, "2"), (4, "3"), (5, "4")]
        assert reader.pending() == [] and not reader.done
        bus.publish(Finish("stop"))
        with anyio.fail_after(5):
            await reader.wait()
        (finish,) = reader.pending()
        assert finish == LoggedEvent(6, "finish", '{"type": "finish", "reason": "stop"}')
        log.close()
    assert reader.done and not bus.has_subscribers


def test_a_reader_behind_the_kept_events_is_told_how_many_it_lost() -> None:
    log = EventLog(EventBus(), size=3)
    for n in range(10):
        log.record(TextDelta(str(n)))
    assert (log.first_id, log.last_id) == (8, 10)
    items = log.reader(4).pending()
    assert items[0] == EventsLost(3)
    assert [e.id for e in items[1:]] == [8, 9, 10]
    assert log.reader(0).pending()[0] == EventsLost(7)
    assert log.reader(7).pending()[0].id == 8
    assert [e.id for e in log.reader(99).pending()] == []  # an id from the future reads from the newest on
    with pytest.raises(UsageError):
        log.reader(-1)
    with pytest.raises(UsageError):
        log.entry(2)


def test_a_log_numbered_above_an_older_one_reads_older_ids_from_its_start() -> None:
    log = EventLog(EventBus(), size=3, first_id=100)
    assert (log.first_id, log.last_id) == (100, 99)
    for n in range(5):
        log.record(TextDelta(str(n)))
    assert (log.first_id, log.last_id) == (102, 104)
    assert log.reader(42).pending()[0] == EventsLost(2)  # an older log's id: from this one's start
    assert log.reader(100).pending()[0] == EventsLost(1)  # this log's own id, evicted since
    assert [e.id for e in log.reader(102).pending()] == [103, 104]
    assert time_ids() > 10**15  # microseconds since the epoch: above any count of events a log could reach
    with pytest.raises(UsageError, match="first id"):
        EventLog(EventBus(), first_id=0)


async def test_a_log_moved_to_a_new_bus_keeps_numbering_and_loses_nothing() -> None:
    first, second = EventBus(), EventBus()
    log = EventLog(first)
    async with anyio.create_task_group() as group:
        group.start_soon(log.run)
        first.publish(TextDelta("a"))
        log.attach(second)  # "a" is still in the old subscription's buffer: attach must record it
        first.publish(TextDelta("ignored"))
        second.publish(TextDelta("b"))
        reader = log.reader()
        got: list[Any] = []
        with anyio.fail_after(5):
            while len(got) < 2:
                await reader.wait()
                got += reader.pending()
        assert [json.loads(e.data)["text"] for e in got] == ["a", "b"]
        log.close()
    assert not first.has_subscribers and not second.has_subscribers


async def test_closing_the_log_ends_waiting_readers() -> None:
    log = EventLog(EventBus())
    reader = log.reader()
    async with anyio.create_task_group() as group:
        group.start_soon(log.run)
        group.start_soon(reader.wait)
        await anyio.sleep(0)
        log.close()
    assert reader.done
    with pytest.raises(UsageError, match="closed"):
        log.attach(EventBus())


def test_the_log_size_must_be_positive() -> None:
    with pytest.raises(UsageError, match="size"):
        EventLog(EventBus(), size=0)
