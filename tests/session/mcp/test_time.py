"""``MCPTools`` against a real third-party MCP server from PyPI: ``mcp-server-time`` over stdio.

The model is a ``provider.Function`` that decides what to call from the tool specs it is sent, as a real model
would: it looks for a tool taking a ``timezone`` and knows nothing of the server's names in advance.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from cognitive import ReAct
from loop import Request, Role, State, Step, Text, ToolSpec
from provider import Function, tool_call
from session.mcp import MCPStdioServer, MCPTool, MCPToolError, MCPTools

pytest.importorskip("mcp_server_time")
TIME_SERVER = MCPStdioServer(sys.executable, ["-m", "mcp_server_time", "--local-timezone", "UTC"])


@pytest.fixture(scope="module")
async def time_tools() -> AsyncIterator[MCPTools]:
    async with MCPTools(TIME_SERVER, timeout=30) as tools:
        yield tools


def clock_tool(tools: tuple[ToolSpec, ...]) -> ToolSpec:
    """The tool a model would pick to read a clock: one that takes a timezone and nothing else required."""
    return next(t for t in tools if set(t.parameters.get("required", ())) == {"timezone"})


def model(request: Request) -> Any:
    last = request.turns[-1]
    if last.role is Role.USER:
        city, zone = ("Atlantis", "Atlantis/Capital") if "Atlantis" in last.text else ("Tokyo", "Asia/Tokyo")
        return tool_call(clock_tool(request.tools).name, {"timezone": zone})
    result = last.tool_results[0]
    if result.is_error:
        return f"I could not read that clock: {result.content}"
    now = json.loads(result.content)
    return f"It is {now['datetime'][11:16]} on {now['day_of_week']} in {now['timezone']}."


async def test_a_react_agent_reads_the_time_through_the_real_server(time_tools: MCPTools) -> None:
    names = {t.spec.name for t in time_tools}
    assert names == {"mcp-time_get_current_time", "mcp-time_convert_time"}  # namespace: the server's own name
    spec = time_tools["mcp-time_get_current_time"].spec
    assert spec.parameters["required"] == ["timezone"] and "UTC" in spec.parameters["properties"]["timezone"][
        "description"]

    state = await ReAct(Step(Function(model), tools=time_tools)).run(
        State().append(Role.USER, Text("What time is it in Tokyo?")))
    call = state.turns[1].tool_calls[0]
    result = state.turns[2].tool_results[0]
    assert call.name == "mcp-time_get_current_time" and json.loads(call.arguments) == {"timezone": "Asia/Tokyo"}
    assert not result.is_error and json.loads(result.content)["timezone"] == "Asia/Tokyo"
    assert state.answer is not None and state.answer.endswith("in Asia/Tokyo.") and not state.degraded


async def test_the_servers_own_error_reaches_the_model(time_tools: MCPTools) -> None:
    state = await ReAct(Step(Function(model), tools=time_tools)).run(
        State().append(Role.USER, Text("What time is it in Atlantis?")))
    result = state.turns[2].tool_results[0]
    assert result.is_error and "Invalid timezone" in result.content
    assert state.answer is not None and state.answer.startswith("I could not read that clock")


async def test_a_call_the_server_refuses_is_a_protocol_error(time_tools: MCPTools) -> None:
    known = time_tools["mcp-time_get_current_time"]
    ghost = MCPTool(ToolSpec("ghost", "no such tool", {"type": "object"}), "ghost", known._connection, 30)
    with pytest.raises(MCPToolError, match=r"refused the call: Unknown tool: ghost \(JSON-RPC error -32602\)"):
        await ghost.call({})
    assert "Etc/UTC" in await known.call({"timezone": "Etc/UTC"})  # the connection is still good


async def test_convert_time_takes_the_schema_the_server_declared(time_tools: MCPTools) -> None:
    convert = time_tools["mcp-time_convert_time"]
    out = json.loads(await convert.call({"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}))
    assert out["target"]["datetime"][11:16] == "21:00" and out["time_difference"] == "+9.0h"
