"""A tripped guardrail, as each conduit shows it: which check, at which stage and why, never the text that
tripped, and (with the answer held back) none of the answer's streamed text either.

The HTTP event stream and the OpenAI-compatible endpoint are served on 127.0.0.1 (uvicorn on asyncio, Hypercorn
on trio), as in ``tests/session/http``; the terminal and the MCP server run in process.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import mcp_types as types
import openai
from mcp import Client

from cognitive import SingleShot, WithGuardrails, new_turn_processor
from loop import Delta, Finish, Request, TextDelta, TurnExecutor
from provider import Function
from session import Manager
from session._stdio import StdioConduit
from session.mcp import MCPConduit
from tests.session.http.backends import CLIENT_STREAMS
from tests.session.http.helpers import SSE, TOKEN, Frame, Served, on_socket
from verifier import NoSecrets

pytestmark = CLIENT_STREAMS

KEY = "AKIA" + "IOSFODNN7" + "EXAMPLE"  # AWS's documented example key, in pieces
LEAKED = ["Your key ", KEY, " still works."]
CLEAN = ["The museum ", "opens at ", "nine."]
REASON = "an AWS access key ID (AKIA…, 20 characters)"  # what the check reports, masked


async def model(request: Request) -> AsyncIterator[Delta]:
    """Streams an answer holding a key when asked to "leak", else a clean one, a chunk at a time."""
    for chunk in LEAKED if request.turns[-1].text == "leak" else CLEAN:
        yield TextDelta(chunk)
    yield Finish("stop")


def guarded(step: TurnExecutor) -> WithGuardrails:
    return WithGuardrails(SingleShot(step), step, input=[NoSecrets()], output=[NoSecrets()])


def manager() -> Manager:
    return Manager(new_turn_processor(guarded), provider=Function(model))


def serving() -> Any:
    return on_socket(Function(model), processor=new_turn_processor(guarded))


def shown_nothing_of_the_answer(text: str) -> bool:
    return KEY not in text and "Your key" not in text and "still works" not in text


# -- the OpenAI-compatible endpoint ---------------------------------------------------------------------------


def openai_client(served: Served) -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(timeout=10)
    served.stack.append(http)
    return openai.AsyncOpenAI(base_url=f"{served.transport_or_url}/v1", api_key=TOKEN, max_retries=0,
                              http_client=http)  # type: ignore[arg-type]  # the client library's own httpx


async def streamed(served: Served, text: str) -> list[dict[str, Any]]:
    """The chunks of a streamed completion, as JSON, read raw (so nothing the client library drops is missed)."""
    chunks = []
    async with served.client().stream("POST", "/v1/chat/completions", json={
            "model": "agent", "stream": True, "messages": [{"role": "user", "content": text}]}) as response:
        assert response.status_code == 200
        body = "".join([line + "\n" async for line in response.aiter_lines()])
    assert shown_nothing_of_the_answer(body)
    for line in body.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            chunks.append(json.loads(line[len("data: "):]))
    assert body.rstrip().endswith("data: [DONE]")
    return chunks


async def test_openai_answers_an_output_trip_as_its_content_filter_does_streamed_or_not() -> None:
    async with serving() as served:
        reply = await openai_client(served).chat.completions.create(
            model="agent", messages=[{"role": "user", "content": "leak"}])
        chunks = await streamed(served, "leak")
        clean = await openai_client(served).chat.completions.create(
            model="agent", messages=[{"role": "user", "content": "hello"}])
    (choice,) = reply.choices
    assert choice.finish_reason == "content_filter"
    assert choice.message.content is None
    refusal = choice.message.refusal
    assert refusal is not None and refusal.startswith("blocked by guardrail no-secrets (output): ")
    assert REASON in refusal and shown_nothing_of_the_answer(reply.model_dump_json())
    # The stream agrees: no content, the same refusal, the same finish reason.
    deltas = [c["choices"][0] for c in chunks if c["choices"]]
    assert "".join(d["delta"].get("content") or "" for d in deltas) == ""
    assert "".join(d["delta"].get("refusal") or "" for d in deltas) == refusal
    assert [d["finish_reason"] for d in deltas if d["finish_reason"]] == ["content_filter"]
    assert clean.choices[0].message.content == "".join(CLEAN) and clean.choices[0].finish_reason == "stop"


async def test_openai_answers_an_input_trip_the_same_way_before_any_model_call() -> None:
    async with serving() as served:
        reply = await openai_client(served).chat.completions.create(
            model="agent", messages=[{"role": "user", "content": f"is {KEY} valid?"}])
        chunks = await streamed(served, f"is {KEY} valid?")
    (choice,) = reply.choices
    assert choice.finish_reason == "content_filter" and choice.message.content is None
    assert (choice.message.refusal or "").startswith("blocked by guardrail no-secrets (input): ")
    assert reply.usage is not None and reply.usage.completion_tokens == 0
    deltas = [c["choices"][0] for c in chunks if c["choices"]]
    assert "".join(d["delta"].get("refusal") or "" for d in deltas) == choice.message.refusal
    assert [d["finish_reason"] for d in deltas if d["finish_reason"]] == ["content_filter"]


# -- HTTP: the event stream and the stored outcome ------------------------------------------------------------


async def trip_over_http(served: Served, text: str) -> tuple[list[Frame], list[dict[str, Any]]]:
    """The frames a client streaming a session sees for a message ``text``, up to its ``message_failed``, and
    the conversation stored after it."""
    client = served.client()
    session_id = (await client.post("/sessions")).json()["id"]
    async with client.stream("GET", f"/sessions/{session_id}/events") as response:
        sse = SSE(response)
        await client.post(f"/sessions/{session_id}/messages", json={"text": text})
        frames = await sse.until("message_failed")
    turns = (await client.get(f"/sessions/{session_id}/turns")).json()["turns"]
    return frames, turns


async def test_http_streams_no_text_of_a_tripped_answer_and_says_which_check_tripped() -> None:
    async with serving() as served:
        frames, turns = await trip_over_http(served, "leak")
    assert not any(f.event == "text_delta" for f in frames)
    for frame in frames:
        if frame.event in ("turn_completed", "turn_stored"):
            assert shown_nothing_of_the_answer(json.dumps(frame.data))
    failed = frames[-1].data
    assert failed["error"]["type"] == "GuardrailTripped"
    message = failed["error"]["message"]
    assert "'no-secrets'" in message and "output" in message and REASON in message
    # The message's stored outcome says so too.
    outcome = turns[-1]["meta"]["outcome"]
    assert outcome["status"] == "failed" and "no-secrets" in outcome["reason"] and REASON in outcome["reason"]


async def test_http_message_failed_carries_the_check_the_stage_and_the_reason() -> None:
    """Passes once ``MessageFailed`` carries ``guardrail`` and the wire sends it (see the guardrails page)."""
    async with serving() as served:
        frames, _ = await trip_over_http(served, "leak")
        input_frames, _ = await trip_over_http(served, f"is {KEY} valid?")
    tripped = frames[-1].data["guardrail"]
    assert tripped["check"] == "no-secrets" and tripped["stage"] == "output" and REASON in tripped["reason"]
    assert input_frames[-1].data["guardrail"]["stage"] == "input"


async def test_http_never_shows_the_tripped_answer_on_the_stream_or_in_the_stored_turns() -> None:
    """Passes once a session stores a notice in place of an answer an output guardrail stopped."""
    async with serving() as served:
        frames, turns = await trip_over_http(served, "leak")
    assert all(shown_nothing_of_the_answer(json.dumps(f.data)) for f in frames)
    assert shown_nothing_of_the_answer(json.dumps(turns))


# -- the terminal ---------------------------------------------------------------------------------------------


async def test_the_terminal_shows_which_guardrail_blocked_and_why_and_goes_on() -> None:
    shown: list[str] = []
    conduit = StdioConduit(input=io.StringIO(f"leak\nis {KEY} valid?\nhello\n"), output=shown.append,
                           handle_signals=False)
    async with manager() as served:
        await conduit.serve(served)
    out = "".join(shown)
    blocked = [line for line in out.splitlines() if "guardrail" in line and "no-secrets" in line]
    assert len(blocked) == 2 and all(REASON in line for line in blocked)
    assert "output" in blocked[0] and "input" in blocked[1]
    assert shown_nothing_of_the_answer(out)  # not a chunk of it was printed
    assert "".join(CLEAN) in out and out.rstrip().endswith("you>")


# -- MCP ------------------------------------------------------------------------------------------------------


def text_of(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def test_the_mcp_tool_answers_a_trip_with_an_error_carrying_the_reason() -> None:
    async with manager() as served:
        async with Client(MCPConduit().server(served)) as client:
            tripped = await client.call_tool("ask", {"message": "leak"})
            clean = await client.call_tool("ask", {"message": "hello"})
    assert tripped.is_error
    text = text_of(tripped)
    assert "GuardrailTripped" in text and "'no-secrets'" in text and "output" in text and REASON in text
    assert shown_nothing_of_the_answer(text)
    assert not clean.is_error and text_of(clean) == "".join(CLEAN)
