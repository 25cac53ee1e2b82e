"""``OpenAICompatible`` when things go wrong on the wire: error statuses, broken and malformed streams, and the
``Retry`` wrapper around it. Every fault ends in a typed ``ProviderError`` (never a silently short answer).
Connection-level faults (refused, timeouts, cancellation) are in ``test_openai_transport.py``; the stream of
unknown fields and events, which must be ignored, is checked with the other fixtures in ``test_openai.py``.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

import provider._retry
from cognitive import ReAct
from loop import Finish, Role, Step, TextDelta, ToolCall, ToolCallDelta, Usage, UsageDelta, tool
from loop.errors import (
    AuthenticationError,
    BadRequestError,
    OverloadedError,
    ProviderError,
    RateLimitError,
    ServerError,
    StreamError,
)
from provider import Retry
from tests.provider.wire.openai_client import (
    ask,
    chunk,
    collect,
    collect_until_error,
    connect,
    sse,
    text_reply,
    tool_reply,
)
from tests.provider.wire.server import WireServer, fixture

TEXT_DELTAS = [TextDelta(t) for t in ["Hello", "!", " How", " can", " I", " help", " you", " today", "?", " ☕",
                                      " Café"]]


def error_body(message: str, kind: str = "invalid_request_error", code: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()


class FakeSleep:
    """Records the waits ``Retry`` asks for instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def fake_sleep() -> FakeSleep:
    return FakeSleep()


# -- error statuses -----------------------------------------------------------------------------------------


async def test_429_is_a_retryable_rate_limit_error_carrying_retry_after(wire: WireServer) -> None:
    wire.reply(error_body("Rate limit reached for gpt-4o-mini", "requests", "rate_limit_exceeded"), status=429,
               headers={"retry-after": "7"})
    async with connect(wire) as p:
        with pytest.raises(RateLimitError, match="Rate limit reached for gpt-4o-mini") as caught:
            await collect(p)
    err = caught.value
    assert (err.status, err.retry_after, err.retryable) == (429, 7.0, True)
    assert len(wire.requests) == 1


async def test_429_for_an_exhausted_quota_is_not_worth_retrying(wire: WireServer, fake_sleep: FakeSleep) -> None:
    wire.reply(error_body("You exceeded your current quota", "insufficient_quota", "insufficient_quota"),
               status=429)
    async with connect(wire) as p:
        with pytest.raises(RateLimitError, match="exceeded your current quota") as caught:
            await collect(Retry(p, sleep=fake_sleep))
    assert caught.value.retryable is False
    assert len(wire.requests) == 1 and fake_sleep.waits == []


async def test_401_is_an_authentication_error_that_retry_does_not_repeat(wire: WireServer,
                                                                        fake_sleep: FakeSleep) -> None:
    wire.reply(error_body("Incorrect API key provided: sk-test-****6789.", code="invalid_api_key"), status=401)
    async with connect(wire) as p:
        with pytest.raises(AuthenticationError, match="Incorrect API key provided") as caught:
            await collect(Retry(p, sleep=fake_sleep))
    assert (caught.value.status, caught.value.retryable) == (401, False)
    assert len(wire.requests) == 1 and fake_sleep.waits == []


async def test_400_is_a_bad_request_error_with_an_excerpt_of_the_body(wire: WireServer) -> None:
    said = "Invalid parameter: 'tool_choice' is only allowed when 'tools' are specified."
    body = error_body(said) + b" " * 5000  # a padded body: only an excerpt is kept
    wire.reply(body, status=400)
    async with connect(wire) as p:
        with pytest.raises(BadRequestError) as caught:
            await collect(p)
    err = caught.value
    assert said in str(err) and "HTTP 400" in str(err)
    assert (err.status, err.retryable) == (400, False)
    assert err.body == body[:2000].decode() + f"... [{len(body) - 2000:,} more characters]"


async def test_a_redirect_is_reported_not_read_as_a_stream(wire: WireServer) -> None:
    wire.reply(b"", status=307, headers={"location": "http://127.0.0.1:9/v2/chat/completions"})
    async with connect(wire) as p:
        with pytest.raises(BadRequestError, match="redirected the request .* to http://127.0.0.1:9/v2"):
            await collect(p)
    assert len(wire.requests) == 1  # not followed


@pytest.mark.parametrize(("body", "error", "match"), [
    (error_body("The model `gpt-5o` does not exist", code="model_not_found"), BadRequestError, "does not exist"),
    (json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "choices": []}).encode(), StreamError,
     "instead of an event stream"),
])
async def test_a_json_document_with_status_200_is_a_typed_error(wire: WireServer, body: bytes,
                                                                error: type[Exception], match: str) -> None:
    wire.reply(body, status=200, sse=False)
    async with connect(wire) as p:
        with pytest.raises(error, match=match):
            await collect(p)


# -- Retry around the provider ------------------------------------------------------------------------------


async def test_a_500_then_success_through_retry_waits_the_computed_delay(
    wire: WireServer, fake_sleep: FakeSleep, monkeypatch: pytest.MonkeyPatch
) -> None:
    picked: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        picked.append((low, high))
        return high * 0.5

    monkeypatch.setattr(provider._retry.random, "uniform", uniform)
    wire.reply(error_body("The server had an error while processing your request.", "server_error"), status=500)
    wire.reply(fixture("openai/text.sse"))
    async with connect(wire) as p:
        deltas = await collect(Retry(p, sleep=fake_sleep, base_delay=0.5))
    assert deltas == [*TEXT_DELTAS, Finish("stop")]
    assert len(wire.requests) == 2
    assert picked == [(0, 0.5)] and fake_sleep.waits == [0.25]  # full jitter over base_delay * 2**0


async def test_retry_honours_retry_after(wire: WireServer, fake_sleep: FakeSleep) -> None:
    wire.reply(error_body("Overloaded", "server_error"), status=503, headers={"retry-after": "3"})
    wire.reply(error_body("Slow down", "requests", "rate_limit_exceeded"), status=429,
               headers={"retry-after-ms": "1500"})
    wire.reply(fixture("openai/usage.sse"))
    async with connect(wire) as p:
        deltas = await collect(Retry(p, sleep=fake_sleep))
    usage = UsageDelta(Usage(2006, 300, cache_read_tokens=1920), "gpt-4o-mini-2024-07-18")
    assert deltas[-2:] == [usage, Finish("stop")]
    assert fake_sleep.waits == [3.0, 1.5] and len(wire.requests) == 3


async def test_retry_gives_up_after_its_attempts_with_the_last_error(wire: WireServer, fake_sleep: FakeSleep) -> None:
    for _ in range(2):
        wire.reply(error_body("Overloaded", "server_error"), status=503, headers={"retry-after": "1"})
    async with connect(wire) as p:
        with pytest.raises(OverloadedError, match="overloaded"):
            await collect(Retry(p, sleep=fake_sleep, attempts=2))
    assert fake_sleep.waits == [1.0] and len(wire.requests) == 2


async def test_retry_never_repeats_a_stream_that_already_passed_text_on(wire: WireServer,
                                                                       fake_sleep: FakeSleep) -> None:
    wire.reply(fixture("openai/text.sse"), cut_after=3)  # the role chunk, "Hello", "!", then the cut
    wire.reply(fixture("openai/text.sse"))  # must stay unused
    async with connect(wire) as p:
        seen, err = await collect_until_error(Retry(p, sleep=fake_sleep))
    assert seen == [TextDelta("Hello"), TextDelta("!")]
    assert isinstance(err, StreamError) and err.retryable  # retryable in itself, but text was passed on
    assert isinstance(err.__cause__, httpx.RemoteProtocolError)
    assert len(wire.requests) == 1 and fake_sleep.waits == []


async def test_retry_repeats_a_stream_cut_before_anything_was_passed_on(wire: WireServer,
                                                                       fake_sleep: FakeSleep) -> None:
    wire.reply(fixture("openai/text.sse"), cut_after=1)  # only the role chunk, which carries no delta
    wire.reply(fixture("openai/text.sse"))
    async with connect(wire) as p:
        assert await collect(Retry(p, sleep=fake_sleep)) == [*TEXT_DELTAS, Finish("stop")]
    assert len(wire.requests) == 2 and len(fake_sleep.waits) == 1


# -- broken and malformed streams ---------------------------------------------------------------------------


def dropped_after_the_last_event(data: bytes) -> tuple[list[bytes], int]:
    """The events of ``data`` as separate writes, and the ``cut_after`` that drops the connection after the last
    of them (the server cuts only before a write, so one more write is queued that is never sent)."""
    events = [e + b"\n\n" for e in data.split(b"\n\n") if e.strip()]
    return [*events, b"data: never sent\n\n"], len(events)


async def test_a_stream_cut_mid_tool_call_is_a_stream_error_not_a_short_answer(wire: WireServer) -> None:
    events, cut = dropped_after_the_last_event(fixture("openai/fault_cut_tool_call.sse"))
    wire.reply(events, cut_after=cut)
    async with connect(wire) as p:
        seen, err = await collect_until_error(p)
    assert seen == [ToolCallDelta(0, "call_DdmO9pD3xa9XTPNJ32zg2hcA", "get_weather", ""),
                    *(ToolCallDelta(0, None, None, a) for a in ['{"', "location", '":"', "Paris", ","])]
    assert isinstance(err, StreamError) and "broke mid-response" in str(err) and err.retryable
    assert isinstance(err.__cause__, httpx.RemoteProtocolError) and wire.disconnects == 1


async def test_a_step_on_a_cut_stream_raises_and_runs_no_tool(wire: WireServer) -> None:
    ran: list[str] = []

    async def get_weather(location: str) -> str:
        ran.append(location)
        return "sunny"

    events, cut = dropped_after_the_last_event(fixture("openai/fault_cut_tool_call.sse"))
    wire.reply(events, cut_after=cut)
    async with connect(wire) as p:
        with pytest.raises(StreamError):
            await Step(p, tools=[tool(get_weather)]).turn(ask())
    assert ran == []


async def test_a_body_that_ends_mid_tool_call_without_done_is_a_stream_error(wire: WireServer) -> None:
    wire.reply(fixture("openai/fault_cut_tool_call.sse"))  # the body ends cleanly, the answer does not
    async with connect(wire) as p:
        seen, err = await collect_until_error(p)
    assert len(seen) == 6 and not any(isinstance(d, Finish) for d in seen)
    assert isinstance(err, StreamError) and "[DONE]" in str(err)


async def test_a_missing_done_is_a_stream_error(wire: WireServer) -> None:
    wire.reply(fixture("openai/fault_no_done.sse"))
    async with connect(wire) as p:
        seen, err = await collect_until_error(p)
    assert seen == [TextDelta("All"), TextDelta(" done")]  # no usage, no Finish: the answer is not complete
    assert isinstance(err, StreamError) and err.retryable
    assert str(err) == ("OpenAI-compatible server at 127.0.0.1 ended the stream without its final "
                        "'data: [DONE]' event; the response may be incomplete")


async def test_invalid_json_in_a_chunk_is_a_stream_error_naming_the_line(wire: WireServer) -> None:
    wire.reply(fixture("openai/fault_invalid_json.sse"))
    async with connect(wire) as p:
        seen, err = await collect_until_error(p)
    assert seen == [TextDelta("Partial")]
    assert isinstance(err, StreamError)
    assert "invalid JSON on line 5 of the stream" in str(err)
    assert '\'{"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT"' in str(err)  # and an excerpt of it


async def test_an_error_chunk_mid_stream_is_a_server_error_after_the_text_so_far(wire: WireServer,
                                                                                 fake_sleep: FakeSleep) -> None:
    wire.reply(fixture("openai/fault_error_chunk.sse"))
    async with connect(wire) as p:
        seen, err = await collect_until_error(Retry(p, sleep=fake_sleep))
    assert seen == [TextDelta("The answer"), TextDelta(" is")]
    assert type(err) is ServerError and err.status == 500
    assert "The server had an error while processing your request" in str(err)
    assert len(wire.requests) == 1 and fake_sleep.waits == []


@pytest.mark.parametrize(("error", "expected", "status"), [
    ({"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}, RateLimitError, 429),
    ({"message": "This model's maximum context length is 128000 tokens", "type": "BadRequestError", "param": None,
      "code": 400}, BadRequestError, 400),  # vLLM's shape: the status as the code
    ({"message": "overloaded", "type": "overloaded_error"}, OverloadedError, 503),
    ("plain words", ServerError, 500),
])
async def test_an_error_chunk_maps_its_code_or_type_to_a_typed_error(wire: WireServer, error: Any,
                                                                    expected: type[ProviderError],
                                                                    status: int) -> None:
    wire.reply(sse({"error": error}, done=False))
    async with connect(wire) as p:
        with pytest.raises(expected) as caught:
            await collect(p)
    assert type(caught.value) is expected and caught.value.status == status


async def test_a_chunk_of_the_wrong_shape_is_a_stream_error_naming_the_line(wire: WireServer) -> None:
    wire.reply(sse(chunk({"content": "fine"}), {"choices": [{"index": 0, "delta": ["not", "an", "object"]}]}))
    async with connect(wire) as p:
        seen, err = await collect_until_error(p)
    assert seen == [TextDelta("fine")]
    assert isinstance(err, StreamError) and "unexpected shape in the event on line 3" in str(err)


async def test_malformed_tool_arguments_become_an_error_result_and_react_goes_on(wire: WireServer) -> None:
    async def get_weather(location: str) -> str:
        return f"sunny in {location}"

    wire.reply(tool_reply("call_bad", "get_weather", '{"location": ', '"Paris'))  # the JSON never closes
    wire.reply(text_reply("Sorry, let me answer directly: ", "it is sunny in Paris."))
    async with connect(wire) as p:
        state = await ReAct(Step(p, tools=[tool(get_weather)])).run(ask())
    assert state.answer == "Sorry, let me answer directly: it is sunny in Paris."
    assert state[1].tool_calls == (ToolCall("call_bad", "get_weather", '{"location": "Paris'),)
    (result,) = state[2].tool_results
    assert result.is_error and result.content.startswith("error: the arguments are not valid JSON")
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    sent = wire.requests[1].json()["messages"]
    assert sent[1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": "{}"}
    assert sent[2] == {"role": "tool", "tool_call_id": "call_bad", "content": result.content}
