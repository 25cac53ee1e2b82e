"""MCP at ``/mcp`` on the HTTP conduit: one server, one port and one set of tokens for the session routes, the
OpenAI-compatible API and MCP (streamable HTTP), with the official ``mcp`` client, on asyncio (uvicorn) and trio
(Hypercorn)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from cognitive import new_turn_processor, react_factory
from loop import Request, Role, RunContext, UsageError, tool
from provider import Function, tool_call
from session import Manager, step_factory
from session.http import HTTPConduit, RateLimit
from session._bearer import owner_of
from session.mcp._auth import UNAUTHORIZED
from tests.session.http.helpers import OTHER, TOKEN, Served, in_process, on_socket, wait_turns

MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@tool
async def whoami(context: RunContext) -> str:
    """Who is asking."""
    caller = context.caller
    return "nobody" if caller is None else f"{caller.id} in {caller.namespace}"


def model(request: Request) -> Any:
    """``who``: calls whoami, then reports its result; anything else is echoed."""
    last = request.turns[-1]
    if last.role is Role.TOOL:
        return "result: " + last.tool_results[0].content
    if last.text.startswith("who"):
        return tool_call("whoami", {})
    return f"you said: {last.text}"


@asynccontextmanager
async def served(**options: Any) -> AsyncIterator[Served]:
    async with on_socket(Function(model), tools=[whoami], **options) as running:
        yield running


@asynccontextmanager
async def mcp_client(url: str, token: str | None = TOKEN, **options: Any) -> AsyncIterator[Client]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    with anyio.fail_after(10):
        async with httpx2.AsyncClient(headers=headers) as http:
            async with Client(streamable_http_client(f"{url}/mcp", http_client=http), **options) as client:
                yield client


def text(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


def initialize(request_id: int = 1) -> dict[str, Any]:
    """A 2025 ``initialize`` request (the handshake that opens an MCP session)."""
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "0"}}}


@pytest.mark.anyio
async def test_one_server_answers_mcp_the_session_routes_and_the_openai_api_on_one_port() -> None:
    async with served() as running:
        url = running.transport_or_url
        async with mcp_client(url) as client:
            tools = (await client.list_tools()).tools
            answer = await client.call_tool("ask", {"message": "hello"})
        http = running.client()
        session_id = (await http.post("/sessions")).json()["id"]
        posted = await http.post(f"/sessions/{session_id}/messages", json={"text": "hi there"})
        turns = await wait_turns(http, session_id, 2)
        completion = await http.post("/v1/chat/completions",
                                     json={"model": "agent", "messages": [{"role": "user", "content": "hey"}]})
    assert [t.name for t in tools] == ["ask"] and tools[0].input_schema["required"] == ["message"]
    assert not answer.is_error and text(answer) == "you said: hello"
    assert posted.status_code == 202 and turns[-1]["parts"][0]["text"] == "you said: hi there"
    assert completion.status_code == 200
    assert completion.json()["choices"][0]["message"]["content"] == "you said: hey"


@pytest.mark.anyio
async def test_a_wrong_or_missing_token_gets_the_mcp_challenge_and_a_json_rpc_error() -> None:
    async with served() as running:
        url = running.transport_or_url
        async with httpx2.AsyncClient(base_url=url, headers=MCP_HEADERS) as http:
            wrong = await http.post("/mcp", json=initialize(), headers={"authorization": "Bearer wrong"})
            missing = await http.post("/mcp", json=initialize())
            metadata = await http.get("/.well-known/oauth-protected-resource/mcp")
            sessions = await http.get("/sessions", headers={"authorization": "Bearer wrong"})
        unauthorized = pytest.RaisesExc(MCPError, match=r"Unauthorized \(HTTP 401\): the bearer token is not valid",
                                        check=lambda e: e.error.code == UNAUTHORIZED)
        with pytest.RaisesGroup(unauthorized, flatten_subgroups=True):
            async with mcp_client(url, token="wrong") as client:
                await client.list_tools()
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == (
        'Bearer realm="mcp", error="invalid_token", error_description="The bearer token is not valid", '
        f'resource_metadata="{url}/.well-known/oauth-protected-resource/mcp"')
    body = wrong.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None and body["error"]["code"] == UNAUTHORIZED
    assert missing.status_code == 401 and "error=" not in missing.headers["www-authenticate"]
    assert "needs an 'Authorization: Bearer <token>' header" in missing.json()["error"]["message"]
    # The metadata the challenge points at is served without a token; the other routes keep their own answers.
    assert metadata.status_code == 200 and metadata.json() == {
        "resource": f"{url}/mcp", "resource_name": "agent", "bearer_methods_supported": ["header"]}
    assert sessions.status_code == 401 and sessions.headers["www-authenticate"] == 'Bearer realm="session"'
    assert sessions.json()["error"]["type"] == "unauthorized"


@pytest.mark.anyio
async def test_each_token_calls_as_itself_and_sees_only_its_own_conversations() -> None:
    async with served() as running:
        url = running.transport_or_url
        async with mcp_client(url, TOKEN) as alpha, mcp_client(url, OTHER) as beta:
            mine = await alpha.call_tool("ask", {"message": "who am I?"})
            theirs = await beta.call_tool("ask", {"message": "who are you?"})
        listed = {token: (await running.client(token).get("/sessions")).json()["sessions"] for token in (TOKEN, OTHER)}
        first_id = listed[TOKEN][0]["id"]
        turns = (await running.client(TOKEN).get(f"/sessions/{first_id}/turns")).json()["turns"]
        hidden = await running.client(OTHER).get(f"/sessions/{first_id}/turns")
    alpha_owner, beta_owner = owner_of(TOKEN), owner_of(OTHER)
    assert text(mine) == f"result: {alpha_owner} in {alpha_owner}"
    assert text(theirs) == f"result: {beta_owner} in {beta_owner}"
    # The conversation a token's MCP call held is one of that token's sessions, and no other token's.
    assert len(listed[TOKEN]) == 1 and len(listed[OTHER]) == 1 and listed[TOKEN] != listed[OTHER]
    assert turns[0]["parts"][0]["text"] == "who am I?" and turns[-1]["parts"][0]["text"] == text(mine)
    assert hidden.status_code == 404


@pytest.mark.anyio
async def test_an_mcp_session_belongs_to_the_token_that_opened_it() -> None:
    async with served() as running:
        async with httpx2.AsyncClient(base_url=running.transport_or_url, headers=MCP_HEADERS) as http:
            opened = await http.post("/mcp", json=initialize(), headers={"authorization": f"Bearer {TOKEN}"})
            session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
            other = await http.post("/mcp", json=listing, headers={**session, "authorization": f"Bearer {OTHER}"})
            own = await http.post("/mcp", json=listing, headers={**session, "authorization": f"Bearer {TOKEN}"})
    assert opened.status_code == 200
    assert other.status_code == 404  # as if there were no such session
    assert own.status_code == 200 and '"name":"ask"' in own.text.replace(" ", "")


@pytest.mark.anyio
async def test_mcp_calls_count_towards_the_tokens_sessions() -> None:
    async with served(max_sessions_per_token=1) as running:
        url = running.transport_or_url
        held = await running.client(TOKEN).post("/sessions")  # the one session this token may hold
        async with mcp_client(url, TOKEN) as alpha, mcp_client(url, OTHER) as beta:
            refused = await alpha.call_tool("ask", {"message": "hello"})
            answered = await beta.call_tool("ask", {"message": "hello"})
    assert held.status_code == 201
    assert refused.is_error and "already holds 1 open sessions" in text(refused)
    assert not answered.is_error and text(answered) == "you said: hello"


@pytest.mark.anyio
async def test_the_rate_limit_and_body_size_guard_mcp_too_and_its_streams_still_flow() -> None:
    said: list[str | None] = []

    async def heard(progress: float, total: float | None, message: str | None) -> None:
        said.append(message)

    async with served(rate_limit=RateLimit(per_second=0.1, burst=8), max_body_bytes=4000) as running:
        url = running.transport_or_url
        async with mcp_client(url, OTHER) as client:  # progress comes on the call's event stream, as it happens
            answer = await client.call_tool("ask", {"message": "who"}, progress_callback=heard)
        headers = {**MCP_HEADERS, "authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient(base_url=url, headers=headers) as http:
            large = await http.post("/mcp", content=json.dumps({**initialize(), "pad": "x" * 5000}))
            statuses = [(await http.post("/mcp", json=initialize(i))).status_code for i in range(9)]
            limited = await http.post("/mcp", json=initialize())
    assert text(answer) == f"result: {owner_of(OTHER)} in {owner_of(OTHER)}"
    assert said == ["turn 1: calling whoami", "whoami done", "turn 2: answered"]
    assert large.status_code == 413 and "larger than 4000 bytes" in large.text
    assert 429 in statuses and limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1


@pytest.mark.anyio
async def test_without_mcp_there_is_no_mcp_route() -> None:
    async with served(mcp=False) as running:
        http = running.client()
        answers = [await http.post("/mcp", json=initialize(), headers=MCP_HEADERS),
                   await http.get("/.well-known/oauth-protected-resource/mcp")]
        healthy = await http.get("/healthz")
    assert [a.status_code for a in answers] == [404, 404] and healthy.status_code == 200


@pytest.mark.anyio
async def test_the_app_serves_mcp_in_process() -> None:
    async with in_process(Function(model), tools=[whoami], mcp_tool="shout",
                          mcp_description="Shout at the agent.") as running:
        transport = httpx2.ASGITransport(app=running.transport_or_url.app)
        async with httpx2.AsyncClient(transport=transport, headers={"authorization": f"Bearer {TOKEN}"}) as http:
            with anyio.fail_after(10):
                async with Client(streamable_http_client("http://127.0.0.1/mcp", http_client=http)) as client:
                    tools = (await client.list_tools()).tools
                    answer = await client.call_tool("shout", {"message": "hello"})
    assert [(t.name, t.description) for t in tools] == [("shout", "Shout at the agent.")]
    assert text(answer) == "you said: hello"


# On asyncio only: under Hypercorn (trio) a connection that carried an MCP POST keeps the server for its whole
# grace period, mounted or not (the stand-alone MCPConduit does the same).
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_shutting_down_does_not_wait_for_open_mcp_streams() -> None:
    connected = anyio.Event()

    async def stay_connected(url: str) -> None:
        async with mcp_client(url, mode="legacy") as client:  # a 2025 client holds a GET stream open
            assert text(await client.call_tool("ask", {"message": "hello"})) == "you said: hello"
            connected.set()
            await anyio.sleep_forever()

    manager = Manager(new_turn_processor(react_factory), provider=Function(model), make_step=step_factory([whoami]))
    async with manager, anyio.create_task_group() as clients:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as server:
                url = await server.start(HTTPConduit(port=0, token=TOKEN, shutdown_timeout=5).serve, manager)
                clients.start_soon(stay_connected, url)
                await connected.wait()
                started = time.monotonic()
                server.cancel_scope.cancel()
        took = time.monotonic() - started
        clients.cancel_scope.cancel()
    assert took < 2.5, "the server waited for the MCP client's stream to end"


@pytest.mark.parametrize(("options", "message"), [
    ({"mcp": "yes"}, "mcp must be true or false"),
    ({"mcp_tool": "two words"}, "mcp_tool must be letters, digits"),
    ({"mcp_description": " "}, "mcp_description must be a non-empty string"),
    ({"mcp_description": 3}, "mcp_description must be a string or None"),
])
def test_bad_mcp_settings_are_refused_by_name(options: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        HTTPConduit(token=TOKEN, **options)
