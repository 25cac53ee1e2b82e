"""``python -m session serve`` serves MCP at ``/mcp`` beside its other routes, says so, and ``--no-mcp`` leaves it
out."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[3]
READY = "OpenAPI at /openapi.json"  # the end of the start-up line


@asynccontextmanager
async def serving(*args: str) -> AsyncIterator[tuple[str, str]]:
    """``python -m session serve tests.session.agents:make_agent`` on a free port, without a token, until the
    test is done: its URL, and its start-up line."""
    env = {k: v for k, v in os.environ.items() if k not in ("SESSION_TOKEN", "OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    command = [sys.executable, "-m", "session", "serve", "tests.session.agents:make_agent", "--port", "0",
               "--store", "memory://", *args]
    async with await anyio.open_process(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL) as process:
        assert process.stderr is not None
        said = ""
        try:
            with anyio.fail_after(30):
                while READY not in said:
                    said += (await process.stderr.receive()).decode()
            found = re.search(r"serving on (http://127\.0\.0\.1:\d+)", said)
            assert found, said
            yield found.group(1), said
        finally:
            process.kill()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the server is a child process: the test's own loop does not matter


async def test_serve_answers_mcp_at_slash_mcp_and_says_so() -> None:
    async with serving("--mcp-tool", "shout") as (base, said):
        with anyio.fail_after(20):
            async with httpx2.AsyncClient() as http, \
                    Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
                tools = (await client.list_tools()).tools
                answer = await client.call_tool("shout", {"message": "quiet please"})
            async with httpx2.AsyncClient() as http:  # the MCP client closed its own
                sessions = await http.get(f"{base}/sessions")
    assert "MCP at /mcp (tool 'shout')" in said
    assert [t.name for t in tools] == ["shout"]
    assert [b.text for b in answer.content if isinstance(b, types.TextContent)] == ["QUIET PLEASE"]
    assert sessions.status_code == 200 and len(sessions.json()["sessions"]) == 1  # the call's conversation


async def test_serve_no_mcp_leaves_slash_mcp_out() -> None:
    async with serving("--no-mcp") as (base, said):
        async with httpx2.AsyncClient(base_url=base) as http:
            mcp = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                  headers={"accept": "application/json, text/event-stream"})
            health = await http.get("/healthz")
    assert "/mcp" not in said and "OpenAPI at /openapi.json" in said
    assert mcp.status_code == 404 and health.status_code == 200
