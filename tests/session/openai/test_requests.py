"""The OpenAI-compatible endpoint refuses bad requests the way OpenAI does, before any session or model is used."""

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import openai
import pytest

from cognitive import new_turn_processor, react_factory
from loop import Request, TextDelta, UsageError
from provider import Function
from session import Manager, MemoryStore, MessageQueued
from session.openai import openai_app, openai_routes
from session.openai._request import parse_chat_request

USER = {"role": "user", "content": "hi"}
CALL = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
FN = {"type": "function", "function": {"name": "f"}}


@asynccontextmanager
async def serving(**settings: Any) -> AsyncIterator[tuple[httpx.AsyncClient, Manager, list]]:
    calls: list = []

    def model(request: Request) -> str:
        calls.append(request)
        return "ok"

    manager = Manager(new_turn_processor(react_factory), provider=Function(model), store=MemoryStore())
    app = openai_app(manager, enter_manager=False, **settings)
    async with manager, httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as http:
        yield http, manager, calls


def body(**fields: Any) -> bytes:
    return json.dumps({"model": "agent", "messages": [USER], **fields}).encode()


CASES = [
    # (raw body, status, param, code, words in the message)
    (b'{"model": "agent", "messages": [', 400, None, None, "could not parse the JSON body"),
    (b"[1, 2]", 400, None, None, "must be a JSON object"),
    (json.dumps({"messages": [USER]}).encode(), 400, "model", "missing_required_parameter", "model parameter"),
    (body(model="gpt-4o"), 404, "model", "model_not_found", "`gpt-4o` does not exist"),
    (json.dumps({"model": "agent"}).encode(), 400, "messages", "missing_required_parameter", "'messages'"),
    (body(messages="hi"), 400, "messages", "invalid_type", "expected an array, but got a string"),
    (body(messages=[]), 400, "messages", "empty_array", "empty array"),
    (body(messages=[USER, {"role": "assistant", "content": "hello"}]), 400, "messages[1].role", "invalid_value",
     "last message must be from the user"),
    (body(messages=[{"role": "robot", "content": "beep"}, USER]), 400, "messages[0].role", "invalid_value",
     "Invalid value: 'robot'"),
    (body(messages=[{"content": "who?"}, USER]), 400, "messages[0].role", "missing_required_parameter", "role"),
    (body(messages=[{"role": "function", "name": "f", "content": "1"}, USER]), 400, "messages[0].role",
     "unsupported_value", "deprecated"),
    (body(messages=[{"role": "user"}]), 400, "messages[0].content", "missing_required_parameter", "content"),
    (body(messages=[{"role": "user", "content": "  "}]), 400, "messages[0].content", "invalid_value", "empty"),
    (body(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]), 400,
     "messages[0].content[0].image_url.url", "invalid_value", "must be an http(s) URL or a data: URL"),
    (body(messages=[{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]), 400,
     "messages[0].content[0].type", "unsupported_value", "reads text, image_url and file parts"),
    (body(messages=[{"role": "tool", "tool_call_id": "c9", "content": "4"}, USER]), 400,
     "messages[0].tool_call_id", "invalid_value", "must be a response to a preceding message"),
    (body(messages=[USER, {"role": "assistant", "tool_calls": [CALL]}, USER]), 400, "messages[2]",
     "invalid_value", "did not have response messages: c1"),
    (body(messages=[{"role": "assistant", "tool_calls": [{"id": "c1", "function": "add"}]}, USER]), 400,
     "messages[0].tool_calls[0].function", "invalid_type", "expected an object"),
    (body(n=2), 400, "n", "unsupported_value", "n must be 1"),
    (body(n="2"), 400, "n", "invalid_type", "expected an integer"),
    (body(stream="yes"), 400, "stream", "invalid_type", "expected a boolean"),
    (body(stream_options={"include_usage": True}), 400, "stream_options", "invalid_value",
     "only allowed when 'stream' is enabled"),
    (body(functions=[{"name": "f"}]), 400, "functions", "unsupported_value", "send 'tools'"),
    (body(tools={"f": {}}), 400, "tools", "invalid_type", "expected an array"),
    (body(tools=[{"type": "retrieval"}]), 400, "tools[0].type", "unsupported_value", "function tools"),
    (body(tools=[{"type": "function", "function": {"name": "look up"}}]), 400, "tools[0].function.name",
     "invalid_value", "letters, digits"),
    (body(tools=[FN, FN]), 400, "tools[1].function.name", "duplicate_tool_name", "given twice"),
    (body(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]), 400,
     "tools[0].function.parameters", "invalid_value", "of type 'object'"),
    (body(tools=[FN], tool_choice={"type": "function", "function": {"name": "g"}}), 400,
     "tool_choice.function.name", "invalid_value", "no tool named 'g'"),
    (body(tool_choice="sometimes"), 400, "tool_choice", "invalid_value", "'required'"),
    (body(parallel_tool_calls="yes"), 400, "parallel_tool_calls", "invalid_type", "expected a boolean"),
    (body(response_format="json"), 400, "response_format", "invalid_type", "expected an object"),
    (body(response_format={"type": "xml"}), 400, "response_format.type", "invalid_value", "'json_schema'"),
    (body(response_format={"type": "json_schema", "json_schema": {"schema": {}}}), 400,
     "response_format.json_schema.name", "invalid_value", "1 to 64"),
    (body(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}}),
     400, "response_format.json_schema.schema", "invalid_schema", "not a valid JSON schema"),
    (body(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#"}}}), 400,
     "response_format.json_schema.schema", "invalid_schema", "without end"),
    (body(response_format={"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"$ref": "https://example.com/schema.json"}}}), 400,
     "response_format.json_schema.schema", "unsupported_value", "points outside the schema"),
    (body(messages=[USER, {"role": "assistant", "tool_calls": [CALL, {**CALL, "id": "c2"}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "1"}]), 400, "messages[2]", "invalid_value",
     "did not have response messages: c2"),
]


@pytest.mark.parametrize(("raw", "status", "param", "code", "words"), CASES)
async def test_a_bad_request_is_refused_in_openai_format(raw: bytes, status: int, param: str | None,
                                                        code: str | None, words: str) -> None:
    async with serving() as (http, manager, calls):
        response = await http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
        assert manager.open_sessions == 0
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code)
    assert words in error["message"]
    assert calls == []


async def test_the_openai_client_raises_a_bad_request_error_naming_the_parameter() -> None:
    async with serving() as (http, _, calls):
        client = openai.AsyncOpenAI(base_url="http://test/v1", api_key="k", http_client=http)
        with pytest.raises(openai.BadRequestError) as raised:
            await client.chat.completions.create(model="agent", messages=[USER], n=3)
    assert raised.value.param == "n" and raised.value.code == "unsupported_value" and calls == []


async def test_a_body_over_the_limit_is_refused_before_it_is_read() -> None:
    async with serving(max_body_bytes=200) as (http, _, calls):
        big = body(messages=[{"role": "user", "content": "x" * 500}])
        declared = await http.post("/v1/chat/completions", content=big)

        async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
            yield big[:150]
            yield big[150:]

        streamed = await http.post("/v1/chat/completions", content=chunked())
        small = await http.post("/v1/chat/completions", content=body())
    assert declared.status_code == streamed.status_code == 413
    assert declared.json()["error"]["code"] == streamed.json()["error"]["code"] == "request_too_large"
    assert small.status_code == 200 and len(calls) == 1


async def test_unknown_routes_and_methods_answer_in_openai_format() -> None:
    async with serving() as (http, _, _calls):
        missing = await http.post("/v1/completions", content=body())
        wrong = await http.get("/v1/chat/completions")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_url"
    assert "POST /v1/completions" in missing.json()["error"]["message"]
    assert wrong.status_code == 405 and "POST" in wrong.headers["allow"]
    assert wrong.json()["error"]["type"] == "invalid_request_error"


async def test_a_session_header_is_checked_and_may_be_refused() -> None:
    async def only_mine(request: Any, session_id: str) -> bool:
        return session_id.startswith("mine-")

    async with serving(session_access=only_mine) as (http, manager, calls):
        too_long = await http.post("/v1/chat/completions", content=body(), headers={"x-session-id": "x" * 201})
        refused = await http.post("/v1/chat/completions", content=body(), headers={"x-session-id": "theirs-1"})
        allowed = await http.post("/v1/chat/completions", content=body(), headers={"x-session-id": "mine-1"})
        assert manager.get("theirs-1") is None and manager.get("mine-1") is not None
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "invalid_session_id"
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "session_not_found"
    assert allowed.status_code == 200 and allowed.headers["x-session-id"] == "mine-1" and len(calls) == 1


async def test_a_manager_that_is_not_running_is_a_server_error() -> None:
    manager = Manager(new_turn_processor(react_factory), provider=Function(lambda r: "ok"))
    app = openai_app(manager, enter_manager=False)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as http:
        response = await http.post("/v1/chat/completions", content=body())
    assert response.status_code == 500 and response.json()["error"]["code"] == "session_unavailable"


def test_settings_are_checked_when_the_routes_are_made() -> None:
    manager = Manager(new_turn_processor(react_factory), provider=Function(lambda r: "ok"))
    for bad in ({"model_name": ""}, {"max_body_bytes": 0}, {"session_access": "yes"}, {"keepalive": 0}):
        with pytest.raises(UsageError, match="must be"):
            openai_routes(manager, **bad)
    with pytest.raises(UsageError, match="Manager"):
        openai_routes(object())  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="token"):
        openai_app(manager, token="")


def test_sampling_parameters_are_accepted_and_the_history_split_from_the_message() -> None:
    chat = parse_chat_request(body(temperature=0.2, max_tokens=5, user="u1", messages=[
        {"role": "system", "content": "s"}, USER, {"role": "assistant", "content": "a"},
        {"role": "user", "content": [{"type": "text", "text": "line 1"}, {"type": "text", "text": "line 2"}]}]),
        model_name="agent")
    assert [t.text for t in chat.history] == ["s", "hi", "a"]
    assert chat.message == "line 1\nline 2" and not chat.stream and not chat.include_usage


async def test_a_full_session_queue_is_a_429_the_client_may_retry() -> None:
    entered, release = anyio.Event(), anyio.Event()

    async def slow(request: Request) -> AsyncIterator[Any]:
        entered.set()
        await release.wait()
        yield TextDelta("done")

    manager = Manager(new_turn_processor(react_factory), provider=Function(slow), queue_size=1)
    app = openai_app(manager, enter_manager=False)
    headers = {"x-session-id": "busy"}
    answers = []
    async with manager, httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as http:
        async def post(**fields: Any) -> httpx.Response:
            return await http.post("/v1/chat/completions", content=body(**fields), headers=headers)

        async def post_in_background() -> None:
            answers.append(await post())

        async with anyio.create_task_group() as group:
            group.start_soon(post_in_background)
            with anyio.fail_after(5):
                await entered.wait()
            session = manager.get("busy")
            assert session is not None
            with session.events.subscribe() as events:
                group.start_soon(post_in_background)
                with anyio.fail_after(5):
                    async for event in events:
                        if isinstance(event, MessageQueued):
                            break
            refused = await post()
            refused_stream = await post(stream=True)
            release.set()
    for response in (refused, refused_stream):
        assert response.status_code == 429 and response.json()["error"]["code"] == "session_busy"
        assert "x-should-retry" not in response.headers
    assert [r.status_code for r in answers] == [200, 200]
