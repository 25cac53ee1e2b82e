"""The MCP examples run as a user would run them: one uses a real MCP server, the other is one."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

from cognitive import ReAct
from loop import Request, Role, State, Step, Text, ToolSpec
from provider import Function, tool_call
from session.mcp import MCPStdioServer, MCPTools
from tests.examples import ROOT, load_example

mcp_tools = load_example("mcp_tools")
mcp_serve = load_example("mcp_serve")
SERVE = ["examples/mcp_serve.py"]
ENV = {"PYTHONPATH": str(ROOT)}


def test_mcp_tools_runs_from_the_command_line_offline() -> None:
    pytest.importorskip("mcp_server_time")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "examples/mcp_tools.py"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Running on provider.Function" in done.stdout
    assert "tools from the MCP server: time_get_current_time, time_convert_time" in done.stdout
    assert '[tool] time_get_current_time({"timezone": "Asia/Tokyo"})' in done.stdout
    assert "agent: It is " in done.stdout and " in Tokyo." in done.stdout


def test_the_demo_model_picks_the_clock_by_its_schema_not_its_name() -> None:
    specs = (
        ToolSpec("x_convert", "", {"type": "object", "required": ["source_timezone", "time", "target_timezone"]}),
        ToolSpec("x_clock", "", {"type": "object", "required": ["timezone"]}),
    )
    call = mcp_tools.demo_model(Request((State().append(Role.USER, Text("time?")).turns[0],), specs))
    assert call.name == "x_clock" and '"Asia/Tokyo"' in call.arguments


async def test_mcp_serve_answers_an_official_client_with_progress() -> None:
    progress: list[str | None] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    params = StdioServerParameters(command=sys.executable, args=SERVE, cwd=str(ROOT), env=ENV)
    async with Client(params) as client:
        (tool,) = (await client.list_tools()).tools
        assert tool.name == "calculate" and client.server_info is not None
        assert client.server_info.name == "calculator"
        result = await client.call_tool("calculate", {"message": "What is 6 times 7?"}, progress_callback=on_progress)
    assert not result.is_error
    assert [b.text for b in result.content if isinstance(b, types.TextContent)] == ["The answer is 42."]
    assert progress == ["turn 1: calling multiply", "multiply done", "turn 2: answered"]


async def test_mcp_serve_is_a_tool_for_another_agent() -> None:
    def outer(request: Request) -> Any:
        last = request.turns[-1]
        if last.role is Role.USER:
            return tool_call(request.tools[0].name, {"message": "what is 2.5 plus 4?"})
        return f"My colleague says: {last.tool_results[0].content}"

    server = MCPStdioServer(sys.executable, SERVE, cwd=str(ROOT), env=ENV, name="calculator")
    async with MCPTools(server) as tools:
        state = await ReAct(Step(Function(outer), tools=tools)).run(State().append(Role.USER, Text("sum?")))
    assert state.turns[1].tool_calls[0].name == "calculator_calculate"
    assert state.answer == "My colleague says: The answer is 6.5."
