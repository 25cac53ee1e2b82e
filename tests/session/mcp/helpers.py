"""Helpers for the MCP tests: the fixture server over stdio, or over HTTP in a child process a test can kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import anyio.abc

from session.mcp import MCPStdioServer

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = "tests.session.mcp.server_fixture"


def stdio_fixture(name: str, **settings: Any) -> MCPStdioServer:
    """The fixture server named ``name``, started over stdio by the client."""
    return MCPStdioServer(sys.executable, ["-m", FIXTURE, "--name", name], cwd=str(ROOT), **settings)


class HTTPFixture:
    """The fixture server named ``name`` over streamable HTTP in a child process, for ``async with``.

    ``url`` is its endpoint; ``kill`` stops it at once and ``start`` starts it again on the same port.
    """

    def __init__(self, name: str, *, token: str | None = None) -> None:
        self.name = name
        self.token = token
        self.port = 0
        self._process: anyio.abc.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def start(self) -> None:
        command = [sys.executable, "-m", FIXTURE, "--name", self.name, "--http", str(self.port)]
        if self.token:
            command += ["--token", self.token]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        process = await anyio.open_process(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL)
        self._process = process
        assert process.stdout is not None
        line = b""
        try:
            with anyio.fail_after(30):
                while not line.endswith(b"\n"):
                    line += await process.stdout.receive(1)
        except BaseException:
            await self.kill()
            raise
        assert line.startswith(b"listening on "), line
        self.port = int(line.split()[-1])

    async def wait(self) -> int:
        """Wait for the process to end (a tool crashed it); its exit code."""
        assert self._process is not None
        with anyio.fail_after(30):
            return await self._process.wait()

    async def kill(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            if process.returncode is None:
                process.send_signal(signal.SIGKILL)
            with anyio.CancelScope(shield=True):
                await process.wait()
                await process.aclose()

    async def __aenter__(self) -> HTTPFixture:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.kill()
