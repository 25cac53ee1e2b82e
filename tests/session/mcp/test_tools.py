"""``MCPTools`` against the in-repo fixture server (tests/session/mcp/server_fixture.py) over stdio and HTTP."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp_types as types
import pytest

from cognitive import ReAct
from loop import Request, Role, State, Step, Text, ToolSpec, UsageError
from provider import Function, Scripted, tool_call
from session.mcp import MCPConnectionError, MCPHTTPServer, MCPStdioServer, MCPTool, MCPTools
from session.mcp._tools import render_result
from tests.session.mcp import server_fixture
from tests.session.mcp.helpers import ROOT, HTTPFixture, stdio_fixture

TRANSPORTS = ["stdio", "http"]


@pytest.fixture(scope="module")
async def beta() -> AsyncIterator[HTTPFixture]:
    """The fixture server 'beta' over HTTP, shared by the module's tests."""
    async with HTTPFixture("beta") as server:
        yield server


@pytest.fixture(scope="module")
async def shared(beta: HTTPFixture) -> AsyncIterator[MCPTools]:
    """'alpha' over stdio and 'beta' over HTTP: the same tools, under two namespaces."""
    async with MCPTools(stdio_fixture("alpha"), MCPHTTPServer(beta.url)) as tools:
        yield tools


def prefix(transport: str) -> str:
    return "alpha" if transport == "stdio" else "beta"


def user(text: str) -> State:
    return State().append(Role.USER, Text(text))


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_schemas_and_descriptions_arrive_intact(shared: MCPTools, transport: str) -> None:
    expected = {t.name: t for t in await server_fixture.build("x").list_tools()}
    got = {t.remote_name: t for t in shared if t.spec.name.startswith(prefix(transport) + "_")}
    assert set(got) == set(expected)
    for name, remote in expected.items():
        assert got[name].spec.parameters == remote.input_schema
        assert got[name].spec.description == remote.description
        assert got[name].spec.name == f"{prefix(transport)}_{name}"
    forecast = got["forecast"].spec.parameters
    assert forecast["properties"]["days"]["maximum"] == 7 and "$defs" in forecast  # nested models survive


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_step_validates_against_the_server_schema_and_calls_the_tool(shared: MCPTools, transport: str) -> None:
    name = f"{prefix(transport)}_forecast"
    model = Scripted([
        [tool_call(name, {"place": {"city": "Lyon"}, "days": 9}),  # breaks the schema: never reaches the server
         tool_call(name, {"place": {"city": "Lyon"}, "days": 2, "unit": "fahrenheit", "tags": ["x"]})],
        "done",
    ])
    state = await ReAct(Step(model, tools=shared)).run(user("weather?"))
    bad, good = state.turns[2].tool_results
    assert bad.is_error and "days" in bad.content
    assert not good.is_error and good.content == "Lyon/FR: 2 days in fahrenheit, tags=['x']"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_tool_errors_become_error_results_the_model_reads(shared: MCPTools, transport: str) -> None:
    p = prefix(transport)
    model = Scripted([[tool_call(f"{p}_fail", {"message": "m"}), tool_call(f"{p}_explode")], "understood"])
    state = await ReAct(Step(model, tools=shared)).run(user("go"))
    failed, exploded = state.turns[2].tool_results
    assert failed.is_error and "MCPToolError" in failed.content and "failed on purpose: m" in failed.content
    assert exploded.is_error and "Error executing tool explode" in exploded.content
    assert state.answer == "understood"
    # the model saw both errors
    assert [r.is_error for r in model.requests[1].turns[-1].tool_results] == [True, True]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_two_servers_with_the_same_tools_coexist_under_their_namespaces(
    shared: MCPTools, transport: str
) -> None:
    assert await shared["alpha_echo"].call({"text": "hi"}) == "alpha: hi"
    assert await shared["beta_echo"].call({"text": "hi"}) == "beta: hi"
    assert shared["alpha_echo"].server == "alpha" and shared["beta_echo"].server == "beta"
    step = Step(Scripted([[tool_call("alpha_echo", {"text": "a"}), tool_call("beta_echo", {"text": "b"})]]),
                tools=shared)
    state = await step.turn(user("both"))
    assert [r.content for r in state.last.tool_results] == ["alpha: a", "beta: b"]


async def test_the_same_namespace_twice_is_refused(beta: HTTPFixture) -> None:
    with pytest.raises(UsageError, match="different namespaces"):
        async with MCPTools(MCPHTTPServer(beta.url, name="x"), MCPHTTPServer(beta.url, name="x")):
            pass
    async with MCPTools(MCPHTTPServer(beta.url, name="x"), MCPHTTPServer(beta.url, name="x", namespace="y")) as tools:
        assert {"x_echo", "y_echo"} <= {t.spec.name for t in tools}


async def test_namespace_and_separator_are_configurable(beta: HTTPFixture) -> None:
    async with MCPTools(MCPHTTPServer(beta.url, namespace="", include=["echo"]),
                        MCPHTTPServer(beta.url, namespace="web", include=["echo"]), separator=".") as tools:
        assert [t.spec.name for t in tools] == ["echo", "web.echo"]
        assert await tools["web.echo"].call({"text": "x"}) == "beta: x"


async def test_include_and_exclude_filter_by_the_server_names(beta: HTTPFixture) -> None:
    async with MCPTools(MCPHTTPServer(beta.url, include=["echo", "fore*"]),
                        MCPHTTPServer(beta.url, namespace="rest", exclude=["crash", "h*"])) as tools:
        names = {t.spec.name for t in tools}
    assert {"beta_echo", "beta_forecast"} == {n for n in names if n.startswith("beta_")}
    assert {n for n in names if n.startswith("rest_")} == {"rest_echo", "rest_forecast", "rest_fail", "rest_explode",
                                                             "rest_pid"}
    with pytest.raises(UsageError, match="include matches no tool of .*: ech0; it has: echo"):
        async with MCPTools(MCPHTTPServer(beta.url, include=["ech0"])):
            pass


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_tool_that_hangs_past_its_timeout_is_an_error_and_the_loop_goes_on(
    beta: HTTPFixture, transport: str
) -> None:
    server = stdio_fixture("alpha") if transport == "stdio" else MCPHTTPServer(beta.url)
    p = prefix(transport)

    def model(request: Request) -> Any:
        last = request.turns[-1]
        if last.role is Role.USER:
            return tool_call(f"{p}_hang", {"seconds": 60})
        if last.tool_results[0].name.endswith("_hang"):
            return tool_call(f"{p}_echo", {"text": "still here"})
        return f"after the timeout: {last.tool_results[0].content}"

    async with MCPTools(server, timeout=0.5) as tools:
        state = await ReAct(Step(Function(model), tools=tools)).run(user("wait for it"))
    hang = state.turns[2].tool_results[0]
    assert hang.is_error and "timed out after 0.5 seconds" in hang.content
    assert state.answer == f"after the timeout: {p}: still here"


async def test_a_stdio_server_killed_mid_call_is_started_again_on_the_next_call() -> None:
    async with MCPTools(stdio_fixture("alpha")) as tools:
        first = await tools["alpha_pid"].call({})
        with pytest.raises(MCPConnectionError, match="went away before answering.*the next call starts it again"):
            await tools["alpha_crash"].call({})
        second = await tools["alpha_pid"].call({})
        assert second != first and int(second) > 0
        assert await tools["alpha_echo"].call({"text": "back"}) == "alpha: back"


async def test_a_stdio_server_that_died_while_idle_is_started_again_without_an_error() -> None:
    async with MCPTools(stdio_fixture("alpha", include=["pid"])) as tools:
        pid = await tools["alpha_pid"].call({})
        os.kill(int(pid), signal.SIGKILL)
        with anyio.fail_after(10):  # the client notices the server's stdout closing
            while not tools["alpha_pid"]._connection._live.gone:
                await anyio.sleep(0.01)
        pids: set[str] = set()

        async def call() -> None:
            pids.add(await tools["alpha_pid"].call({}))

        async with anyio.create_task_group() as group:  # calls while the server restarts: no error, one restart
            group.start_soon(call)
            for _ in range(4):
                await anyio.sleep(0.05)
                group.start_soon(call)
        assert len(pids) == 1 and pid not in pids


async def test_an_http_server_killed_mid_call_is_reconnected_on_the_next_call() -> None:
    async with HTTPFixture("gamma") as server:
        async with MCPTools(MCPHTTPServer(server.url)) as tools:
            step = Step(Scripted([tool_call("gamma_crash"), tool_call("gamma_pid"), tool_call("gamma_pid")]),
                        tools=tools)
            first = await tools["gamma_pid"].call({})
            state = await step.turn(user("crash"))
            crashed = state.last.tool_results[0]
            assert crashed.is_error and "went away before answering" in crashed.content
            assert "the next call connects again" in crashed.content
            assert await server.wait() == 3
            await server.kill()
            state = await step.turn(state)  # the server is down: the call says so, the loop goes on
            assert state.last.tool_results[0].is_error and "could not connect" in state.last.tool_results[0].content
            await server.start()  # on the same port
            state = await step.turn(state)
            result = state.last.tool_results[0]
            assert not result.is_error and result.content != first


async def test_a_bearer_token_is_sent() -> None:
    async with HTTPFixture("delta", token="s3cret") as server:
        with pytest.raises(MCPConnectionError, match="could not connect to MCP server"):
            async with MCPTools(MCPHTTPServer(server.url, token="wrong")):
                pass
        async with MCPTools(MCPHTTPServer(server.url, token="s3cret", include=["echo"])) as tools:
            assert await tools["delta_echo"].call({"text": "ok"}) == "delta: ok"
        headers = {"Authorization": "Bearer s3cret"}
        async with MCPTools(MCPHTTPServer(server.url, headers=headers, include=["echo"])) as tools:
            assert await tools["delta_echo"].call({"text": "ok"}) == "delta: ok"


async def test_a_server_that_cannot_start_or_be_reached_fails_the_block_clearly() -> None:
    with pytest.raises(MCPConnectionError, match="no-such-mcp-server"):
        async with MCPTools(MCPStdioServer("/nonexistent/no-such-mcp-server")):
            pass
    with pytest.raises(MCPConnectionError, match="could not connect to MCP server 'http://127.0.0.1:9/mcp'"):
        async with MCPTools(MCPHTTPServer("http://127.0.0.1:9/mcp"), connect_timeout=5):
            pass


async def test_tools_cannot_be_called_after_the_block(beta: HTTPFixture) -> None:
    async with MCPTools(MCPHTTPServer(beta.url, include=["echo"])) as tools:
        echo = tools["beta_echo"]
    assert len(tools) == 0 and "closed" in repr(tools)
    with pytest.raises(UsageError, match="outside 'async with MCPTools'"):
        await echo.call({"text": "late"})


async def test_a_tool_the_server_does_not_know_is_an_error_result(shared: MCPTools) -> None:
    echo = shared["beta_echo"]
    ghost = MCPTool(ToolSpec("ghost", "not there", {"type": "object"}), "ghost", echo._connection, 5.0)
    step = Step(Scripted([tool_call("ghost")]), tools=[ghost])
    result = (await step.turn(user("boo"))).last.tool_results[0]
    assert result.is_error and "Unknown tool: ghost" in result.content


async def test_concurrent_calls_share_one_connection(shared: MCPTools) -> None:
    texts: list[str] = []

    async def one(i: int) -> None:
        texts.append(await shared["alpha_echo"].call({"text": str(i)}))

    async with anyio.create_task_group() as group:
        for i in range(20):
            group.start_soon(one, i)
    assert sorted(texts) == sorted(f"alpha: {i}" for i in range(20))


def test_settings_are_checked() -> None:
    with pytest.raises(UsageError, match="command"):
        MCPStdioServer("")
    with pytest.raises(UsageError, match="sequence of strings"):
        MCPStdioServer("python", "-m x")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="http"):
        MCPHTTPServer("ftp://example")
    with pytest.raises(UsageError, match="namespace"):
        MCPHTTPServer("http://127.0.0.1/mcp", namespace="a.b")
    with pytest.raises(UsageError, match="timeout"):
        MCPHTTPServer("http://127.0.0.1/mcp", timeout=0)
    with pytest.raises(UsageError, match="token"):
        MCPHTTPServer("http://127.0.0.1/mcp", token="two words")
    with pytest.raises(UsageError, match="at least one"):
        MCPTools()
    with pytest.raises(UsageError, match="MCPStdioServer or MCPHTTPServer"):
        MCPTools("python -m server")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="connect_timeout"):
        MCPTools(MCPStdioServer("x"), connect_timeout=-1)
    with pytest.raises(UsageError, match="timeout must be a positive number of seconds, got None"):
        MCPTools(MCPStdioServer("x"), timeout=None)  # type: ignore[arg-type]
    assert "s3cret" not in repr(MCPHTTPServer("http://127.0.0.1/mcp", token="s3cret", headers={"X-Key": "s3cret"}))
    assert "s3cret" not in repr(MCPStdioServer("server", env={"API_KEY": "s3cret"}))
    assert MCPStdioServer("server", cwd=ROOT).cwd == str(ROOT)


def test_results_are_rendered_as_text() -> None:
    result = types.CallToolResult(content=[
        types.TextContent(type="text", text="hello"),
        types.ImageContent(type="image", data="AAAA", mime_type="image/png"),
        types.ResourceLink(type="resource_link", name="notes", uri="file:///notes.txt"),
        types.EmbeddedResource(type="resource", resource=types.TextResourceContents(uri="file:///a", text="inside")),
        types.EmbeddedResource(type="resource", resource=types.BlobResourceContents(uri="file:///b", blob="AAAA")),
    ])
    assert render_result(result).splitlines() == [
        "hello", "[image content (image/png, 3 bytes) not shown]", "[resource notes: file:///notes.txt]", "inside",
        "[binary resource file:///b (unknown type) not shown]",
    ]
    structured = types.CallToolResult(content=[], structured_content={"temperature": 21})
    assert json.loads(render_result(structured)) == {"temperature": 21}
