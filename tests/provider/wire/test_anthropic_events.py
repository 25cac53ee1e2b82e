"""``MessageEvents`` on its own: one Messages API event at a time into deltas, and what it keeps across events."""

from __future__ import annotations

import json
from typing import Any

import pytest

from loop import Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage, UsageDelta
from loop.errors import OverloadedError, ServerError
from provider._anthropic_events import REDACTED, MessageEvents
from provider._http import SSEEvent

WHO = "Anthropic"


def event(data: Any) -> SSEEvent:
    return SSEEvent("message", json.dumps(data), 1)


def read(events: MessageEvents, *data: Any) -> list[Any]:
    return [delta for item in data for delta in events.deltas(event(item))]


def start(model: str = "claude-sonnet-4-5", **usage: int) -> dict[str, Any]:
    return {"type": "message_start", "message": {"model": model, "usage": usage}}


def tool_use(index: int, name: str | None, arguments: Any = None) -> dict[str, Any]:
    block = {"type": "tool_use", "id": f"toolu_{index}", "name": name, "input": arguments or {}}
    return {"type": "content_block_start", "index": index, "content_block": block}


def json_delta(index: int, fragment: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta",
                                                                   "partial_json": fragment}}


STOP_FOR_TOOLS = {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}


def test_a_text_answer_keeps_the_model_the_usage_and_the_finish_across_events() -> None:
    events = MessageEvents(WHO)
    deltas = read(
        events,
        start(input_tokens=10, output_tokens=1, cache_read_input_tokens=4),
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 7}},
    )
    assert deltas == [TextDelta("Hi")]
    assert not events.done
    assert read(events, {"type": "message_stop"}) == []
    assert events.done
    assert events.usage() == UsageDelta(Usage(14, 7, 4, 0), "claude-sonnet-4-5")
    assert events.finish() == Finish("length")


def test_thinking_blocks_become_reasoning_with_their_signatures() -> None:
    events = MessageEvents(WHO)
    assert read(
        events,
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "thinking", "thinking": "Hmm.", "signature": "sig0"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": " More."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig1"}},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": "xyz"}},
    ) == [ReasoningDelta("Hmm."), ReasoningDelta("", "sig0"), ReasoningDelta(" More."), ReasoningDelta("", "sig1"),
          ReasoningDelta("", REDACTED + "xyz")]


def test_tool_calls_stream_by_index_and_an_input_no_delta_carried_arrives_at_the_block_stop() -> None:
    events = MessageEvents(WHO)
    deltas = read(events, tool_use(1, "get_weather"), json_delta(1, '{"location"'), json_delta(1, ': "Paris"}'),
                  tool_use(2, "get_time", {"timezone": "UTC"}), {"type": "content_block_stop", "index": 1},
                  {"type": "content_block_stop", "index": 2}, STOP_FOR_TOOLS)
    assert deltas == [
        ToolCallDelta(1, "toolu_1", "get_weather", ""),
        ToolCallDelta(1, arguments_fragment='{"location"'),
        ToolCallDelta(1, arguments_fragment=': "Paris"}'),
        ToolCallDelta(2, "toolu_2", "get_time", ""),
        ToolCallDelta(2, arguments_fragment='{"timezone": "UTC"}'),
    ]
    assert events.finish() == Finish("tool_calls")


def test_message_stop_closes_the_blocks_the_server_left_open() -> None:
    events = MessageEvents(WHO)
    read(events, tool_use(0, "ping_tool"))
    assert read(events, {"type": "message_stop"}) == [ToolCallDelta(0, arguments_fragment="{}")]


def test_the_output_tool_is_read_as_text_and_its_call_finishes_with_stop() -> None:
    events = MessageEvents(WHO, "structured_output")
    deltas = read(events, tool_use(0, "structured_output"), json_delta(0, '{"city": '), json_delta(0, '"Paris"}'),
                  {"type": "content_block_stop", "index": 0}, STOP_FOR_TOOLS)
    assert deltas == [TextDelta('{"city": '), TextDelta('"Paris"}')]
    assert events.finish() == Finish("stop")


def test_without_an_output_tool_a_call_of_that_name_or_of_no_name_is_a_tool_call() -> None:
    events = MessageEvents(WHO)
    assert read(events, tool_use(0, "structured_output"), tool_use(1, None)) == [
        ToolCallDelta(0, "toolu_0", "structured_output", ""), ToolCallDelta(1, "toolu_1", None, "")]
    read(events, STOP_FOR_TOOLS)
    assert events.finish() == Finish("tool_calls")


@pytest.mark.parametrize("data", [{"type": "ping"}, {"type": "message_later"}, {"type": ["content_block_delta"]},
                                  {"type": {"a": 1}}, [], "text", 3, None,
                                  {"type": "content_block_delta", "delta": "not an object"},
                                  {"type": "content_block_start", "content_block": {"type": "image"}}])
def test_events_of_other_types_or_shapes_give_nothing_and_change_nothing(data: Any) -> None:
    events = MessageEvents(WHO)
    assert read(events, data) == []
    assert (events.done, events.model, events.usage(), events.finish()) == (
        False, None, UsageDelta(Usage(0, 0), None), Finish("stop"))


@pytest.mark.parametrize(("kind", "error"), [("overloaded_error", OverloadedError), ("api_error", ServerError),
                                             (["overloaded_error"], ServerError), (None, ServerError)])
def test_an_error_event_raises_the_typed_error_for_its_type(kind: Any, error: type[Exception]) -> None:
    with pytest.raises(ServerError) as caught:
        read(MessageEvents(WHO), {"type": "error", "error": {"type": kind, "message": "busy"}})
    assert type(caught.value) is error
