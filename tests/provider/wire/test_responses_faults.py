"""``OpenAIResponses`` when things go wrong on the wire: error statuses mapped to typed errors, ``Retry`` around
it, streams cut short or broken, and ``response.failed`` and ``error`` events; on asyncio and trio. Every fault
ends in a typed ``ProviderError``, never a silently short answer."""

from __future__ import annotations

import json
import socket

import pytest

from loop import Finish, TextDelta, Usage, UsageDelta
from loop.errors import (AuthenticationError, BadRequestError, ProviderError, ProviderUnreachable, RateLimitError,
                         ServerError, StreamError)
from provider import Retry
from provider._responses import OpenAIResponses
from tests import both_backends
from tests.provider.wire.openai_client import collect, collect_until_error
from tests.provider.wire.responses_client import CLIENT_STREAMS, connect, events, response, text_events
from tests.provider.wire.server import WireServer, fixture

anyio_backend = both_backends.anyio_backend  # every test here runs on asyncio and on trio
pytestmark = CLIENT_STREAMS

ANSWERED = "gpt-4.1-mini-2025-04-14"
TEXT = ["Hello", "!", " How", " can", " I", " help", " you", " today", "?", " ☕", " Café"]


def error_body(message: str, kind: str = "invalid_request_error", code: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()


class FakeSleep:
    """Records the waits ``Retry`` asks for instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


# -- error statuses -----------------------------------------------------------------------------------------


async def test_400_is_a_bad_request_error_naming_what_the_server_said(wire: WireServer) -> None:
    said = "Unsupported parameter: 'temperature' is not supported with this model."
    wire.reply(error_body(said), status=400)
    async with connect(wire) as provider:
        with pytest.raises(BadRequestError, match="Unsupported parameter: 'temperature'") as caught:
            await collect(provider)
    assert (caught.value.status, caught.value.retryable) == (400, False)
    assert "HTTP 400" in str(caught.value)


async def test_401_is_an_authentication_error_that_retry_does_not_repeat(wire: WireServer) -> None:
    wire.reply(error_body("Incorrect API key provided: sk-test-****6789.", code="invalid_api_key"), status=401)
    sleep = FakeSleep()
    async with connect(wire) as provider:
        with pytest.raises(AuthenticationError, match="Incorrect API key provided") as caught:
            await collect(Retry(provider, sleep=sleep))
    assert (caught.value.status, caught.value.retryable) == (401, False)
    assert len(wire.requests) == 1 and sleep.waits == []


async def test_429_carries_retry_after_and_retry_waits_that_long_then_asks_again(wire: WireServer) -> None:
    wire.reply(error_body("Rate limit reached for gpt-4.1-mini", "requests", "rate_limit_exceeded"), status=429,
               headers={"retry-after": "7"})
    async with connect(wire) as provider:
        with pytest.raises(RateLimitError, match="Rate limit reached") as caught:
            await collect(provider)
    assert (caught.value.status, caught.value.retry_after, caught.value.retryable) == (429, 7.0, True)

    wire.reply(error_body("Rate limit reached for gpt-4.1-mini", "requests", "rate_limit_exceeded"), status=429,
               headers={"retry-after": "7"})
    wire.reply(fixture("responses/text.sse"))
    sleep = FakeSleep()
    async with connect(wire) as provider:
        deltas = await collect(Retry(provider, sleep=sleep))
    assert deltas[-1] == Finish("stop") and "".join(d.text for d in deltas if isinstance(d, TextDelta)) == "".join(TEXT)
    assert sleep.waits == [7.0] and len(wire.requests) == 3


async def test_500_is_retried_and_the_retry_answers(wire: WireServer) -> None:
    wire.reply(error_body("The server had an error while processing your request.", "server_error"), status=500)
    wire.reply(fixture("responses/text.sse"))
    sleep = FakeSleep()
    async with connect(wire) as provider:
        deltas = await collect(Retry(provider, sleep=sleep, base_delay=0.01))
    assert deltas == [*map(TextDelta, TEXT), UsageDelta(Usage(12, 11), ANSWERED), Finish("stop")]
    assert len(sleep.waits) == 1 and len(wire.requests) == 2
    assert wire.requests[0].body == wire.requests[1].body  # the same request, sent again


async def test_a_500_alone_is_a_retryable_server_error(wire: WireServer) -> None:
    wire.reply(error_body("The server had an error.", "server_error"), status=500)
    async with connect(wire) as provider:
        with pytest.raises(ServerError, match="HTTP 500") as caught:
            await collect(provider)
    assert caught.value.retryable


async def test_a_json_error_document_with_status_200_is_its_typed_error(wire: WireServer) -> None:
    wire.reply(error_body("You exceeded your current quota", "insufficient_quota", "insufficient_quota"), sse=False)
    async with connect(wire) as provider:
        with pytest.raises(RateLimitError, match="exceeded your current quota"):
            await collect(provider)


async def test_nothing_listening_is_a_retryable_unreachable_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with OpenAIResponses("m", base_url=f"http://127.0.0.1:{port}/v1", api_key="k") as provider:
        with pytest.raises(ProviderUnreachable) as caught:
            await collect(provider)
    assert caught.value.retryable


# -- broken streams -----------------------------------------------------------------------------------------


async def test_a_stream_cut_mid_way_is_a_stream_error_after_the_text_so_far(wire: WireServer) -> None:
    wire.reply(fixture("responses/text.sse"), cut_after=8)  # created, in_progress, item, part, 4 deltas
    async with connect(wire) as provider:
        seen, error = await collect_until_error(provider)
    assert seen == [TextDelta("Hello"), TextDelta("!"), TextDelta(" How"), TextDelta(" can")]
    assert isinstance(error, StreamError) and error.retryable


async def test_retry_does_not_repeat_a_stream_cut_after_text_was_passed_on(wire: WireServer) -> None:
    wire.reply(fixture("responses/text.sse"), cut_after=8)
    wire.reply(fixture("responses/text.sse"))
    sleep = FakeSleep()
    async with connect(wire) as provider:
        with pytest.raises(StreamError):
            await collect(Retry(provider, sleep=sleep))
    assert len(wire.requests) == 1 and sleep.waits == []


async def test_a_stream_that_ends_without_a_terminal_event_is_a_stream_error(wire: WireServer) -> None:
    whole = fixture("responses/text.sse")
    wire.reply(whole[:whole.index(b"event: response.completed")])  # the body ends cleanly, one event short
    async with connect(wire) as provider:
        seen, error = await collect_until_error(provider)
    assert seen == list(map(TextDelta, TEXT))
    assert isinstance(error, StreamError) and "without its final response.completed" in str(error)


async def test_invalid_json_in_an_event_is_a_stream_error_naming_the_line(wire: WireServer) -> None:
    wire.reply(b'event: response.output_text.delta\ndata: {"type": "response.output_text.delta", "delta": "a"\n\n')
    async with connect(wire) as provider:
        with pytest.raises(StreamError, match="invalid JSON on line 2"):
            await collect(provider)


async def test_an_event_of_an_unexpected_shape_is_a_stream_error(wire: WireServer) -> None:
    wire.reply(events({"type": "response.output_text.delta", "output_index": 0, "delta": "a"}) + b"data: [1, 2]\n\n")
    async with connect(wire) as provider:
        seen, error = await collect_until_error(provider)
    assert seen == [TextDelta("a")]
    assert isinstance(error, StreamError) and "not a JSON object" in str(error)


async def test_unknown_events_and_fields_are_ignored(wire: WireServer) -> None:
    wire.reply(b": keep-alive\n\n" + events(
        {"type": "response.queued", "response": response("queued")},
        {"type": "response.output_text.annotation.added", "output_index": 0, "annotation": {"type": "url"}},
        {"type": "response.output_text.delta", "output_index": 0, "delta": "ok", "future_field": [1]},
        {"type": "response.web_search_call.searching", "output_index": 1},
        {"type": "response.completed", "response": response(usage={"input_tokens": 3, "output_tokens": 1})},
    ))
    async with connect(wire) as provider:
        assert await collect(provider) == [TextDelta("ok"), UsageDelta(Usage(3, 1), "gpt-4.1-mini"), Finish("stop")]


# -- failures the stream reports ---------------------------------------------------------------------------


async def test_response_failed_is_a_retryable_server_error_with_the_servers_message(wire: WireServer) -> None:
    wire.reply(fixture("responses/failed.sse"))
    async with connect(wire) as provider:
        seen, error = await collect_until_error(provider)
    assert seen == [TextDelta("Partial")]
    assert isinstance(error, ServerError) and error.retryable
    assert "The model failed to generate a response." in str(error)


@pytest.mark.parametrize(("code", "error_type", "retryable"), [
    ("rate_limit_exceeded", RateLimitError, True),
    ("invalid_prompt", BadRequestError, False),
    ("image_too_large", BadRequestError, False),
    ("bio_policy", BadRequestError, False),
    ("something_new", ServerError, True),
])
async def test_response_failed_maps_its_code_to_a_typed_error(wire: WireServer, code: str,
                                                              error_type: type[ProviderError],
                                                              retryable: bool) -> None:
    wire.reply(events({"type": "response.created", "response": response("in_progress")},
                      {"type": "response.failed",
                       "response": response("failed", error={"code": code, "message": f"failed: {code}"})}))
    async with connect(wire) as provider:
        with pytest.raises(error_type, match=f"failed: {code}") as caught:
            await collect(provider)
    assert type(caught.value) is error_type and caught.value.retryable is retryable


async def test_response_failed_without_an_error_object_still_fails(wire: WireServer) -> None:
    wire.reply(events({"type": "response.failed", "response": response("failed")}))
    async with connect(wire) as provider:
        with pytest.raises(ServerError, match="failed without saying why"):
            await collect(provider)


async def test_an_error_event_is_its_typed_error(wire: WireServer) -> None:
    wire.reply(fixture("responses/error_event.sse"))
    async with connect(wire) as provider:
        with pytest.raises(BadRequestError, match="Invalid prompt: your prompt was flagged") as caught:
            await collect(provider)
    assert caught.value.status == 400 and not caught.value.retryable


async def test_a_failed_response_before_any_delta_is_retried(wire: WireServer) -> None:
    wire.reply(events({"type": "response.failed",
                       "response": response("failed", error={"code": "server_error", "message": "try again"})}))
    wire.reply(text_events("fine"))
    sleep = FakeSleep()
    async with connect(wire) as provider:
        deltas = await collect(Retry(provider, sleep=sleep, base_delay=0.01))
    assert deltas[0] == TextDelta("fine") and deltas[-1] == Finish("stop")
    assert len(wire.requests) == 2
