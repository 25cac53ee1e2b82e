"""``MCPConduit`` driven by the official ``mcp`` client over stdio (a child process) and streamable HTTP."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from cognitive import ReAct
from loop import Request, Role, State, Step, Text, UsageError
from provider import Function, tool_call
from session import Manager
from session.mcp import MCPConduit, MCPHTTPServer, MCPTools
from session.mcp._conduit import DESCRIPTION
from tests.session.mcp.agent_fixture import make_manager
from tests.session.mcp.helpers import ROOT

TOKEN = "t0ken"


@pytest.fixture(scope="module")
async def served() -> AsyncIterator[tuple[Manager, str]]:
    """The fixture agent served over HTTP in this process: its manager and the endpoint's URL."""
    async with make_manager() as manager, anyio.create_task_group() as group:
        url = await group.start(MCPConduit(transport="http", port=0, token=TOKEN).serve, manager)
        yield manager, url
        group.cancel_scope.cancel()


@pytest.fixture(scope="module", params=["stdio", "http", "stdio-legacy", "http-legacy"])
async def client(request: pytest.FixtureRequest, served: tuple[Manager, str]) -> AsyncIterator[Client]:
    """An official MCP client connected to the fixture agent over each transport, in each protocol era: the
    2026 sessionless one the client picks by default, and the 2025 initialize handshake older clients use."""
    transport, _, era = request.param.partition("-")
    mode = era or "auto"
    if transport == "stdio":
        params = StdioServerParameters(command=sys.executable, args=["-m", "tests.session.mcp.agent_fixture"],
                                       cwd=str(ROOT))
        async with Client(params, mode=mode) as connected:
            yield connected
        return
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        async with Client(streamable_http_client(served[1], http_client=http), mode=mode) as connected:
            assert connected.protocol_version.startswith("2025" if era else "2026")
            yield connected


def text(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def test_the_server_lists_one_tool_taking_a_message(client: Client) -> None:
    (tool,) = (await client.list_tools()).tools
    assert tool.name == "ask" and tool.description == DESCRIPTION
    assert tool.input_schema["required"] == ["message"]
    assert client.server_info is not None and client.server_info.name == "agent"


async def test_a_call_returns_the_agents_answer(client: Client) -> None:
    result = await client.call_tool("ask", {"message": "hello there"})
    assert not result.is_error and text(result) == "you said: hello there"


async def test_progress_comes_per_turn_and_per_tool_call(client: Client) -> None:
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    result = await client.call_tool("ask", {"message": "define cat"}, progress_callback=on_progress)
    assert not result.is_error and text(result) == "found cat: a word"  # lookup printed to stdout: no harm
    assert progress == [(1, "turn 1: calling lookup"), (2, "lookup done"), (3, "turn 2: answered")]


async def test_an_agent_failure_is_a_tool_error(client: Client) -> None:
    result = await client.call_tool("ask", {"message": "fail now"})
    assert result.is_error and text(result) == "the agent failed: RuntimeError: the model is down"


async def test_a_degraded_run_is_not_reported_as_a_success(client: Client) -> None:
    result = await client.call_tool("ask", {"message": "loop forever"})
    assert result.is_error and text(result).startswith("I gave up.") and "max_turns=2" in text(result)


async def test_bad_arguments_are_a_tool_error_and_an_unknown_tool_a_protocol_error(client: Client) -> None:
    for arguments in ({}, {"message": "  "}, {"message": "hi", "extra": 1}):
        result = await client.call_tool("ask", arguments)
        assert result.is_error and "'message'" in text(result)
    with pytest.raises(MCPError, match="Unknown tool: tell") as caught:
        await client.call_tool("tell", {"message": "hi"})
    assert caught.value.code == types.INVALID_PARAMS


async def test_each_call_is_a_new_conversation_closed_afterwards(served: tuple[Manager, str]) -> None:
    manager, url = served
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        async with Client(streamable_http_client(url, http_client=http)) as connected:
            first = await connected.call_tool("ask", {"message": "one"})
            second = await connected.call_tool("ask", {"message": "two"})
    assert (text(first), text(second)) == ("you said: one", "you said: two")  # "one" was not seen by "two"
    assert manager.open_sessions == 0


async def test_http_needs_the_bearer_token(served: tuple[Manager, str]) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}):  # the details: test_auth.py
        async with httpx2.AsyncClient(headers=headers) as http:
            response = await http.post(served[1], json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            assert response.status_code == 401
            assert response.headers["www-authenticate"].startswith('Bearer realm="mcp"')
            assert response.json()["error"]["message"].startswith("Unauthorized (HTTP 401)")


async def test_a_cancelled_call_interrupts_the_agent(served: tuple[Manager, str]) -> None:
    manager, url = served
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        async with Client(streamable_http_client(url, http_client=http)) as connected:
            with anyio.move_on_after(0.5) as scope:
                await connected.call_tool("ask", {"message": "nap 60"})
            assert scope.cancelled_caught
            with anyio.fail_after(10):
                while manager.open_sessions:
                    await anyio.sleep(0.02)
            assert text(await connected.call_tool("ask", {"message": "still up?"})) == "you said: still up?"


async def test_an_agent_served_over_mcp_is_a_tool_for_another_agent(served: tuple[Manager, str]) -> None:
    def outer_model(request: Request) -> Any:
        last = request.turns[-1]
        if last.role is Role.USER:
            (ask,) = request.tools
            return tool_call(ask.name, {"message": "define otter"})
        return f"the other agent says: {last.tool_results[0].content}"

    async with MCPTools(MCPHTTPServer(served[1], token=TOKEN)) as tools:
        assert [t.spec.name for t in tools] == ["agent_ask"]
        state = await ReAct(Step(Function(outer_model), tools=tools)).run(State().append(Role.USER, Text("otter?")))
    assert state.answer == "the other agent says: found otter: a word"


def test_settings_are_checked() -> None:
    with pytest.raises(UsageError, match="transport"):
        MCPConduit(transport="carrier-pigeon")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="tool"):
        MCPConduit(tool="ask me")
    with pytest.raises(UsageError, match="needs a bearer token"):
        MCPConduit(transport="http")
    with pytest.raises(UsageError, match="refusing to serve"):
        MCPConduit(transport="http", host="0.0.0.0", allow_no_token=True)
    with pytest.raises(UsageError, match="path"):
        MCPConduit(transport="http", token="t", path="mcp")
    with pytest.raises(UsageError, match="max_body_bytes"):
        MCPConduit(transport="http", token="t", max_body_bytes=0)
    with pytest.raises(UsageError, match="header_timeout"):
        MCPConduit(transport="http", token="t", header_timeout=-1)
    with pytest.raises(UsageError, match="Manager"):
        MCPConduit().server(object())  # type: ignore[arg-type]
    MCPConduit(transport="http", allow_no_token=True)  # loopback without a token: allowed on request
