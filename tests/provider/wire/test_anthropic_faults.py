"""``Anthropic`` when things go wrong on the wire: HTTP error statuses, error events, streams cut short or
malformed, a server that stops talking, a cancelled consumer, and a tool call whose JSON is broken."""

import asyncio
import json
from typing import Any

import anyio
import httpx
import pytest

from cognitive import ReAct
from loop import (
    Finish,
    Role,
    Step,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolStarted,
    Turn,
    TurnCompleted,
    TurnFailed,
    Usage,
    UsageDelta,
)
from loop.errors import (
    AuthenticationError,
    BadRequestError,
    OverloadedError,
    ProviderError,
    ProviderTimeout,
    RateLimitError,
    ServerError,
    StreamError,
)
from tests.provider.wire.anthropic_setup import (
    MODEL,
    REQUEST,
    START,
    anthropic,
    collect,
    cut_where_it_ends,
    get_weather,
    stream,
)
from tests.provider.wire.server import WireServer


def error_body(kind: str, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


def sse(*events: dict[str, Any]) -> bytes:
    """A stream of ``events``, each named after its type as the API names them."""
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


START_EVENT = {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
               "content": [], "usage": {"input_tokens": 10, "output_tokens": 1}}}
END_EVENTS = ({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 5}},
              {"type": "message_stop"})


# -- HTTP error statuses ------------------------------------------------------------------------------------


async def test_429_is_a_rate_limit_error_carrying_the_wait_the_server_asked_for(wire: WireServer) -> None:
    message = "Number of request tokens has exceeded your per-minute rate limit"
    wire.reply(error_body("rate_limit_error", message), status=429, headers={"retry-after": "7"})
    async with anthropic(wire) as provider:
        with pytest.raises(RateLimitError) as caught:
            await collect(provider)
    assert caught.value.retry_after == 7.0
    assert caught.value.status == 429 and caught.value.retryable
    assert message in str(caught.value)


@pytest.mark.parametrize(("status", "kind", "message", "error", "retryable"), [
    (529, "overloaded_error", "Overloaded", OverloadedError, True),
    (500, "api_error", "Internal server error", ServerError, True),
    (401, "authentication_error", "invalid x-api-key", AuthenticationError, False),
    (403, "permission_error", "Your API key does not have permission to use the specified resource.",
     AuthenticationError, False),
    (400, "invalid_request_error", "messages: text content blocks must be non-empty", BadRequestError, False),
    (404, "not_found_error", "model: claude-sonnet-4-5-nope", BadRequestError, False),
])
async def test_error_statuses_become_typed_errors_with_the_servers_message(
    wire: WireServer, status: int, kind: str, message: str, error: type[ProviderError], retryable: bool
) -> None:
    wire.reply(error_body(kind, message), status=status)
    async with anthropic(wire) as provider:
        with pytest.raises(error) as caught:
            await collect(provider)
    assert type(caught.value) is error
    assert caught.value.status == status
    assert caught.value.retryable is retryable
    assert message in str(caught.value)
    assert json.loads(caught.value.body)["error"]["type"] == kind


# -- error events and broken streams --------------------------------------------------------------------------


async def test_an_overloaded_error_event_mid_stream_fails_the_turn_without_a_partial_answer(
    wire: WireServer,
) -> None:
    wire.reply(stream("error_mid_stream"))
    async with anthropic(wire) as provider:
        step = Step(provider)
        with step.events.subscribe(buffer=None) as events:
            with pytest.raises(OverloadedError) as caught:
                await step.turn(START)
            seen = events.drain()
    assert caught.value.status == 529 and caught.value.retryable
    assert "Overloaded" in str(caught.value)
    assert TextDelta("Hello") in seen  # it had streamed some text ...
    assert [type(e) for e in seen if isinstance(e, (TurnCompleted, TurnFailed))] == [TurnFailed]  # ... no turn


@pytest.mark.parametrize(("kind", "error"), [
    ("rate_limit_error", RateLimitError), ("api_error", ServerError), ("timeout_error", ServerError),
    ("invalid_request_error", BadRequestError), ("an_error_from_the_future", ServerError),
])
async def test_other_error_events_map_like_their_statuses(
    wire: WireServer, kind: str, error: type[ProviderError]
) -> None:
    wire.reply(stream("error_mid_stream").replace(b'"overloaded_error"', f'"{kind}"'.encode()))
    async with anthropic(wire) as provider:
        with pytest.raises(error) as caught:
            await collect(provider)
    assert type(caught.value) is error


async def test_a_stream_cut_mid_tool_use_is_a_stream_error_and_no_tool_runs(wire: WireServer) -> None:
    wire.reply(**cut_where_it_ends(stream("cut_mid_tool_use")))
    async with anthropic(wire) as provider:
        step = Step(provider, tools=[get_weather])
        with step.events.subscribe(buffer=None) as events:
            with pytest.raises(StreamError) as caught:
                await step.turn(START)
            seen = events.drain()
    assert wire.disconnects == 1
    assert caught.value.retryable
    assert isinstance(caught.value.__cause__, httpx.RemoteProtocolError)
    assert ToolCallDelta(1, arguments_fragment=' "San') in seen
    assert not [e for e in seen if isinstance(e, (ToolStarted, TurnCompleted))]


@pytest.mark.parametrize("events", [9, 18])  # inside the tool_use block; after message_delta
async def test_a_connection_dropped_between_events_is_a_stream_error(wire: WireServer, events: int) -> None:
    wire.reply(stream("tool_use"), cut_after=events)
    async with anthropic(wire) as provider:
        with pytest.raises(StreamError, match="broke mid-response"):
            await collect(provider)
    assert wire.disconnects == 1


async def test_a_stream_that_ends_without_message_stop_is_a_stream_error(wire: WireServer) -> None:
    wire.reply(stream("missing_message_stop"))
    async with anthropic(wire) as provider:
        deltas: list[Any] = []
        with pytest.raises(StreamError, match="message_stop") as caught:
            async for delta in provider.stream(REQUEST):
                deltas.append(delta)
    assert caught.value.retryable
    assert deltas == [TextDelta("Hello")]  # no usage and no Finish: nothing looks complete


async def test_a_tool_use_stream_that_ends_cleanly_mid_call_is_a_stream_error(wire: WireServer) -> None:
    data = stream("tool_use")
    wire.reply(data[:data.index(b"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}")])
    async with anthropic(wire) as provider:
        with pytest.raises(StreamError, match="message_stop"):
            await collect(provider)


async def test_invalid_json_is_a_stream_error_naming_where_it_is(wire: WireServer) -> None:
    data = stream("invalid_json")
    bad = data.split(b"\n").index(
        b'data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "! How') + 1
    wire.reply(data)
    async with anthropic(wire) as provider:
        with pytest.raises(StreamError) as caught:
            await collect(provider)
    assert f"line {bad} " in str(caught.value)
    assert "! How" in str(caught.value)


async def test_an_unknown_event_type_is_ignored(wire: WireServer) -> None:
    wire.reply(stream("unknown_event"))
    async with anthropic(wire) as provider:
        assert await collect(provider) == [TextDelta("Hello"), TextDelta("!"), UsageDelta(Usage(25, 15), MODEL),
                                           Finish("stop")]
        wire.reply(stream("unknown_event"))
        state = await Step(provider).turn(START)
    assert state.turns[1:] == (Turn(Role.ASSISTANT, (Text("Hello!"), Usage(25, 15))),)


async def test_shapes_the_reference_never_shows_are_skipped_not_crashed_on(wire: WireServer) -> None:
    wire.reply(sse(
        START_EVENT,
        {"type": "content_block_start", "index": 0, "content_block": None},
        {"type": "content_block_delta", "index": 0, "delta": "text"},
        {"type": "content_block_delta", "index": "0", "delta": {"type": "text_delta", "text": 5}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": {}}},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "server_tool_use", "id": "srv_1"}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "kept"}},
        {"type": "message_delta", "delta": None, "usage": {"output_tokens": "many"}},
        {"type": "message_stop"},
    ))
    async with anthropic(wire) as provider:
        assert await collect(provider) == [TextDelta("kept"), UsageDelta(Usage(10, 1)), Finish("stop")]


async def test_a_call_with_no_input_deltas_gets_its_input_from_the_block_start(wire: WireServer) -> None:
    wire.reply(sse(
        START_EVENT,
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1,
         "content_block": {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"location": "Rome"}}},
        {"type": "content_block_stop", "index": 1},
        *END_EVENTS,
    ))
    async with anthropic(wire) as provider:
        deltas = await collect(provider)
    assert deltas[:4] == [ToolCallDelta(0, "toolu_1", "get_time", ""), ToolCallDelta(0, arguments_fragment="{}"),
                          ToolCallDelta(1, "toolu_2", "get_weather", ""),
                          ToolCallDelta(1, arguments_fragment='{"location": "Rome"}')]


# -- a broken tool call is answered, and the run goes on ------------------------------------------------------


async def test_malformed_tool_json_becomes_an_error_result_and_react_goes_on(wire: WireServer) -> None:
    wire.reply(stream("malformed_tool_json"))
    wire.reply(stream("text"))
    async with anthropic(wire) as provider:
        state = await ReAct(Step(provider, tools=[get_weather])).run(START)
    call = ToolCall("toolu_01Mv5gT2sH8pK4dN6wQ9rZ3x", "get_weather", '{"location": "Paris", "unit": ')
    assert state.turns[1].tool_calls == (call,)
    (result,) = state.turns[2].tool_results
    assert result.is_error and result.call_id == call.id
    assert result.content.startswith("error: the arguments are not valid JSON")
    assert state.answer == "Hello! ¿Qué tal? ☀"
    second = wire.requests[1].json()
    assert second["messages"][1]["content"] == [{"type": "tool_use", "id": call.id, "name": "get_weather",
                                                 "input": {}}]
    assert second["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": call.id,
                                                 "content": result.content, "is_error": True}]


# -- a server that stops talking, and a consumer that stops listening ---------------------------------------


async def test_a_read_timeout_mid_stream_is_a_provider_timeout(wire: WireServer) -> None:
    wire.reply(stream("text"), hang_after=4)  # message_start, block start, ping, "Hello"; then silence
    async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=0.2)) as client:
        async with anthropic(wire, client=client) as provider:
            deltas: list[Any] = []
            with pytest.raises(ProviderTimeout) as caught:
                async for delta in provider.stream(REQUEST):
                    deltas.append(delta)
    assert deltas == [TextDelta("Hello")]
    assert caught.value.retryable
    assert isinstance(caught.value.__cause__, httpx.ReadTimeout)


def running_tasks() -> set[asyncio.Task[Any]]:
    return {task for task in asyncio.all_tasks() if not task.done()}


async def test_cancelling_a_turn_mid_stream_closes_the_connection_and_leaks_no_task(wire: WireServer) -> None:
    wire.reply(stream("text"), hang_after=4)
    responses: list[httpx.Response] = []

    async def keep(response: httpx.Response) -> None:
        responses.append(response)

    # One connection only: if the cancelled stream held on to it, the next request could not get one.
    limits = httpx.Limits(max_connections=1)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(10.0, pool=2.0),
                                 event_hooks={"response": [keep]}) as client:
        async with anthropic(wire, client=client) as provider:
            step = Step(provider)
            before = running_tasks()
            with step.events.subscribe(buffer=None) as events:
                async with anyio.create_task_group() as group:
                    group.start_soon(step.turn, START)
                    async for event in events:
                        if isinstance(event, TextDelta):
                            group.cancel_scope.cancel()
                            break
                seen = events.drain()
            assert responses[0].is_closed
            assert running_tasks() == before
            assert [e for e in seen if isinstance(e, TurnFailed)]
            wire.reply(stream("text"))
            assert (await collect(provider))[0] == TextDelta("Hello")


async def test_closing_a_stream_early_closes_its_response(wire: WireServer) -> None:
    wire.reply(stream("tool_use"))
    responses: list[httpx.Response] = []

    async def keep(response: httpx.Response) -> None:
        responses.append(response)

    async with httpx.AsyncClient(event_hooks={"response": [keep]}) as client:
        async with anthropic(wire, client=client) as provider:
            deltas = provider.stream(REQUEST)
            assert await deltas.__anext__() == TextDelta("Okay")
            assert not responses[0].is_closed
            await deltas.aclose()
            assert responses[0].is_closed
