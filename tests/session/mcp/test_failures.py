"""``MCPTools`` failing to open says why: the server's own words, a pattern that matches nothing, a refused token.

Servers run on this machine only: over stdio, or the fixture server on 127.0.0.1.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator

import pytest

from loop import UsageError
from session.mcp import MCPConnectionError, MCPHTTPServer, MCPStdioServer, MCPTools
from tests.session.mcp.helpers import HTTPFixture, stdio_fixture


@pytest.fixture(scope="module")
async def guarded() -> AsyncIterator[HTTPFixture]:
    """The fixture server 'delta' over HTTP, refusing requests without ``Bearer s3cret``."""
    async with HTTPFixture("delta", token="s3cret") as server:
        yield server


def python(*args: str) -> MCPStdioServer:
    return MCPStdioServer(sys.executable, list(args), name="broken")


async def test_a_missing_module_is_named_in_the_error() -> None:
    with pytest.raises(MCPConnectionError) as caught:
        async with MCPTools(python("-m", "no_such_mcp_server_xyz"), connect_timeout=20):
            pass
    assert type(caught.value) is MCPConnectionError  # not a group around it
    assert "could not start MCP server 'broken'" in str(caught.value)
    assert "No module named no_such_mcp_server_xyz" in str(caught.value)


async def test_the_tail_of_the_server_stderr_is_in_the_error() -> None:
    program = ("import sys\n"
               "for n in range(100): print(f'starting step {n}', file=sys.stderr)\n"
               "raise SystemExit('bad config: WEATHER_KEY is not set')\n")
    with pytest.raises(MCPConnectionError) as caught:
        async with MCPTools(python("-c", program), connect_timeout=20):
            pass
    message = str(caught.value)
    assert message.splitlines()[0].endswith("bad config: WEATHER_KEY is not set")
    assert "starting step 99" in message and "starting step 98" in message  # the tail ...
    assert "starting step 0\n" not in message  # ... not all of it


async def test_two_servers_that_fail_are_one_error_not_a_group() -> None:
    with pytest.raises(MCPConnectionError) as caught:
        async with MCPTools(MCPStdioServer(sys.executable, ["-m", "no_such_one"], name="one"),
                            MCPStdioServer(sys.executable, ["-m", "no_such_two"], name="two"), connect_timeout=20):
            pass
    assert type(caught.value) is MCPConnectionError  # the first to fail ends the opening (both, if at once)
    assert "No module named no_such_" in str(caught.value)


async def test_a_glob_include_that_matches_nothing_is_refused() -> None:
    with pytest.raises(UsageError, match=r"include matches no tool of 'alpha': zz\*; it has: .*echo") as caught:
        async with MCPTools(stdio_fixture("alpha", include=["echo", "zz*"])):
            pass
    assert type(caught.value) is UsageError


async def test_a_wrong_token_says_unauthorized(guarded: HTTPFixture) -> None:
    with pytest.raises(MCPConnectionError, match=r"unauthorized \(HTTP 401\): the token is missing or wrong"):
        async with MCPTools(MCPHTTPServer(guarded.url, token="wrong")):
            pass
    with pytest.raises(MCPConnectionError, match=r"unauthorized \(HTTP 401\)"):
        async with MCPTools(MCPHTTPServer(guarded.url)):
            pass
    async with MCPTools(MCPHTTPServer(guarded.url, token="s3cret", include=["echo"])) as tools:
        assert await tools["delta_echo"].call({"text": "ok"}) == "delta: ok"


async def test_a_task_of_the_tools_that_fails_comes_out_as_its_error() -> None:
    async def fail() -> None:
        raise MCPConnectionError("the connection broke")

    with pytest.raises(MCPConnectionError, match="the connection broke") as caught:
        async with MCPTools(stdio_fixture("alpha", include=["echo"])) as tools:
            assert tools._group is not None
            tools._group.start_soon(fail)  # as a connection's task failing would
    assert type(caught.value) is MCPConnectionError
