"""Stopping a server with requests in flight, as a user stops it: SIGINT to a real process. Each in-flight request
is answered in its protocol's own words, the runs stop with their open tool calls answered "cancelled", and the
process exits 0, without a traceback, within its grace period."""

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

from loop import Role
from session import SQLiteStore
from tests.session.test_cli import ENV, ROOT, read_until

GRACE = 3.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Server:
    url: str
    child: subprocess.Popen
    said: str
    stderr: str = ""
    code: int | None = None
    took: float = field(default=0.0)

    async def interrupt(self) -> None:
        """SIGINT, then wait for the exit, reading the rest of stderr."""
        start = time.monotonic()
        self.child.send_signal(signal.SIGINT)
        rest = await anyio.to_thread.run_sync(lambda: self.child.stderr.read().decode())
        self.code = await anyio.to_thread.run_sync(lambda: self.child.wait(timeout=30))
        self.took = time.monotonic() - start
        self.stderr = self.said + rest

    def check_clean_exit(self) -> None:
        assert self.code == 0, self.stderr
        assert "Traceback" not in self.stderr, self.stderr
        assert "StoreConflict" not in self.stderr and "would leave a gap" not in self.stderr, self.stderr
        assert self.took < GRACE + 2, (self.took, self.stderr)


@asynccontextmanager
async def server(*args: str, command: str = "serve", ready: str = "OpenAPI at /openapi.json",
                 store: str = "memory://") -> AsyncIterator[Server]:
    env = {k: v for k, v in ENV.items() if k != "SESSION_TOKEN"}
    child = subprocess.Popen([sys.executable, "-m", "session", command, "tests.session.agents:make_agent",
                              "--port", "0", "--store", store, "--shutdown-grace", str(GRACE), *args],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, env=env)
    try:
        said = await read_until(child.stderr, ready)
        found = re.search(r"(http://127\.0\.0\.1:\d+)", said)
        assert found, said
        yield Server(found.group(1), child, said)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stderr.close()


async def test_a_session_waiting_in_a_tool_is_cancelled_and_stored_so(tmp_path: Path) -> None:
    import httpx

    async with server(store=f"sqlite:///{tmp_path}/s.db") as running:
        async with httpx.AsyncClient(base_url=running.url) as http:
            session_id = (await http.post("/sessions")).json()["id"]
            posted = await http.post(f"/sessions/{session_id}/messages", json={"text": "wait 60"})
            assert posted.status_code == 202
            with anyio.fail_after(10):
                while not any(t.get("role") == "assistant"
                              for t in (await http.get(f"/sessions/{session_id}/turns")).json()["turns"]):
                    await anyio.sleep(0.05)
            await running.interrupt()
    running.check_clean_exit()
    store = SQLiteStore(tmp_path / "s.db")
    state = await store.load(f"anonymous:{session_id}")  # the session in the namespace of its token (none)
    await store.aclose()
    assert state is not None
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    (result,) = state[2].tool_results
    assert result.is_error and "cancelled" in result.content


async def test_a_completion_in_flight_gets_openais_error_shape_with_503() -> None:
    import httpx

    async with server() as running:
        async with httpx.AsyncClient(base_url=running.url, timeout=30) as http:
            async with anyio.create_task_group() as group:
                answers: list[httpx.Response] = []

                async def ask() -> None:
                    answers.append(await http.post("/v1/chat/completions", json={
                        "model": "agent", "messages": [{"role": "user", "content": "wait 60"}]}))

                group.start_soon(ask)
                await anyio.sleep(1.0)  # the run is in its tool
                await running.interrupt()
    running.check_clean_exit()
    (answer,) = answers
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "server_shutting_down" and "shutting down" in error["message"]


async def test_a_streaming_completion_in_flight_ends_with_an_error_event_and_done() -> None:
    import httpx

    async with server() as running:
        async with httpx.AsyncClient(base_url=running.url, timeout=30) as http:
            async with http.stream("POST", "/v1/chat/completions", json={
                    "model": "agent", "stream": True,
                    "messages": [{"role": "user", "content": "wait 60"}]}) as stream:
                assert stream.status_code == 200
                lines: list[str] = []
                async with anyio.create_task_group() as group:
                    async for line in stream.aiter_lines():
                        lines.append(line)
                        if "calling wait" in line:  # the run is in its tool
                            group.start_soon(running.interrupt)
    running.check_clean_exit()
    data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    assert data[-1] == "[DONE]", lines
    error = json.loads(data[-2])["error"]
    assert error["code"] == "server_shutting_down" and set(error) == {"message", "type", "param", "code"}


async def test_an_mcp_call_in_flight_gets_a_tool_error_saying_the_server_is_shutting_down() -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with server("--http", command="mcp", ready="serving the agent as MCP tool") as running:
        results = []
        async with httpx2.AsyncClient(timeout=30) as http:
            async with Client(streamable_http_client(f"{running.url}/mcp", http_client=http)) as client:
                calling = anyio.Event()

                async def progress(value: float, total: float | None, message: str | None) -> None:
                    if message and "calling wait" in message:
                        calling.set()

                async def call() -> None:
                    results.append(await client.call_tool("ask", {"message": "wait 60"}, progress_callback=progress))

                async with anyio.create_task_group() as group:
                    group.start_soon(call)
                    with anyio.fail_after(10):
                        await calling.wait()
                    await running.interrupt()
    running.check_clean_exit()
    (result,) = results
    assert result.is_error and "shutting down" in result.content[0].text
