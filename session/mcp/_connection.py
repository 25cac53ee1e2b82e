"""One MCP server's connection, for ``MCPTools``: started on first use and again after the server died, run in
a task of the tools' task group; and the errors its calls raise.

A stdio server's stderr goes to a temporary file while it runs, so that an error about a server that would not
start can quote its last words; an HTTP server's refusal of the token is noted from the response status.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import IO, Any, cast

import anyio
import anyio.abc
import attrs
import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError as _ProtocolError

from loop import LoopError, UsageError, tracing
from session.mcp._servers import MCPHTTPServer, MCPServer, MCPStdioServer

_log = tracing.logger("session.mcp")
_CLIENT = types.Implementation(name="cognitive-loop", version="0.1.0")
_MAX_PAGES = 100
_TAIL_LINES = 20  # how much of a failed server's stderr its error quotes
_TAIL_BYTES = 8192
_REFUSED = {401: "unauthorized (HTTP 401): the token is missing or wrong",
            403: "forbidden (HTTP 403): the token may not use this server"}


class MCPToolError(LoopError):
    """Raised by an MCP tool's ``call`` when the server reports the call failed, refuses it, or is too slow."""


class MCPConnectionError(LoopError):
    """Raised when an MCP server cannot be started or reached, or went away while a call was running."""


def _first(exc: BaseException) -> BaseException:
    """The first error (not a cancellation) inside nested exception groups; ``exc`` itself if none is."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first(inner)
            if isinstance(found, Exception) and not isinstance(found, BaseExceptionGroup):
                return found
    return exc


@attrs.define(eq=False)
class _ConnectionRun:
    """One run of a connection. ``stop`` asks it to end (or says the server hung up); ``ended`` says it has.

    A stdio server's stderr goes to ``errlog``, a temporary file, so that an error can quote its end; an HTTP
    server's refusal of the token is noted in ``refused`` (the SDK reports it only as "an error response").
    """

    client: Client | None = None
    stop: anyio.Event = attrs.Factory(anyio.Event)
    ended: anyio.Event = attrs.Factory(anyio.Event)
    errlog: IO[bytes] | None = None
    refused: int | None = None
    _tail: list[str] = attrs.Factory(list)

    @property
    def gone(self) -> bool:
        return self.stop.is_set() or self.ended.is_set()

    def stderr_tail(self) -> list[str]:
        """The last lines the server wrote to its stderr (kept when the run ends and the file is closed)."""
        if self.errlog is None or self.errlog.closed:
            return self._tail
        fd = self.errlog.fileno()
        size = os.fstat(fd).st_size
        start = max(0, size - _TAIL_BYTES)
        # pread: the server shares this file's offset, so seeking would move where it writes.
        text = os.pread(fd, size - start, start).decode("utf-8", "replace")
        lines = [line.rstrip() for line in text.splitlines()[1 if start else 0:] if line.strip()]
        return lines[-_TAIL_LINES:]

    def close_errlog(self) -> None:
        if self.errlog is not None and not self.errlog.closed:
            self._tail = self.stderr_tail()
            self.errlog.close()


class Connection:
    """One server's connection, run by a task of ``group`` and started again by the first call after it died."""

    def __init__(self, server: MCPServer, group: anyio.abc.TaskGroup, connect_timeout: float) -> None:
        self.server = server
        self.label = server.label
        self._group = group
        self._connect_timeout = connect_timeout
        self._live: _ConnectionRun | None = None
        self._lock = anyio.Lock()
        self._closed = False

    async def connect(self) -> list[types.Tool]:
        """Connect and list the server's tools; the server's own name becomes the label if none was given."""
        client = (await self._open()).client
        assert client is not None
        if self.server.name is None and client.server_info is not None and client.server_info.name:
            self.label = client.server_info.name
        tools: list[types.Tool] = []
        cursor: str | None = None
        try:
            with anyio.fail_after(self._connect_timeout):
                for _ in range(_MAX_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    tools += page.tools
                    cursor = page.next_cursor
                    if cursor is None:
                        break
        except Exception as exc:  # TimeoutError included
            raise MCPConnectionError(f"could not list the tools of MCP server {self.label!r}: "
                                     f"{_describe(exc)}") from exc
        return tools

    async def call(self, name: str, arguments: dict[str, Any], timeout: float) -> str:
        live = await self._open()
        assert live.client is not None  # set before the connection reported it started
        try:
            result = await live.client.call_tool(name, arguments, read_timeout_seconds=timeout)
        except _ProtocolError as exc:
            # A stateful HTTP server that restarted no longer knows our session: a connection problem too.
            if exc.code == types.CONNECTION_CLOSED or exc.message == "Session terminated":
                live.stop.set()  # whatever is left of it; the next call starts a new connection
                again = "starts it again" if isinstance(self.server, MCPStdioServer) else "connects again"
                raise MCPConnectionError(f"MCP server {self.label!r} went away before answering ({exc.message}); "
                                         f"the next call {again}") from exc
            if exc.code == types.REQUEST_TIMEOUT:
                raise MCPToolError(f"MCP server {self.label!r} did not answer within {timeout:g} seconds") from exc
            raise MCPToolError(f"MCP server {self.label!r} refused the call: {exc.message} "
                               f"(JSON-RPC error {exc.code})") from exc
        except Exception as exc:  # a malformed result, structured content breaking the tool's output schema...
            raise MCPToolError(f"MCP server {self.label!r} answered with something unusable: "
                               f"{_describe(exc)}") from exc
        text = render_result(result)
        if result.is_error:
            raise MCPToolError(text or "the tool failed without saying why")
        return text

    async def _open(self) -> _ConnectionRun:
        """The live connection, started (again) if there is none."""
        live = self._live
        if live is not None and not live.gone and not self._closed:
            return live  # the usual case, without a trip through the event loop for the lock
        async with self._lock:
            if self._closed:
                raise UsageError(f"the tools of MCP server {self.label!r} are used outside 'async with MCPTools'")
            live = self._live
            if live is not None and not live.gone:
                return live
            if live is not None:
                with anyio.move_on_after(self._connect_timeout):
                    await live.ended.wait()
                _log.info("restarting an MCP server that went away", server=self.label,
                          stderr="\n".join(live.stderr_tail()[-5:]))
            live = _ConnectionRun()
            try:
                with anyio.fail_after(self._connect_timeout):
                    await self._group.start(self._run, live)
            except Exception as exc:  # TimeoutError included
                raise MCPConnectionError(self._failed_to_open(live, exc)) from _first(exc)
            self._live = live  # only now: a call must never see a connection still starting
            return live

    def _failed_to_open(self, live: _ConnectionRun, exc: Exception) -> str:
        """Why the server could not be started or reached: its last words on stderr (with the lines before
        them), a refused token, or the error the client saw."""
        if isinstance(self.server, MCPHTTPServer):
            where = self.server.url
            why = _REFUSED.get(live.refused or 0) or _describe(exc)
            what = "connect to"
        else:
            where = self.server.command
            tail = live.stderr_tail()
            why = tail[-1] if tail else _describe(exc)
            if len(tail) > 1:
                why += "\nthe end of its stderr:\n" + "\n".join(f"    {line}" for line in tail)
            what = "start"
        where = repr(self.label) if where in self.label else f"{self.label!r} ({where})"
        return f"could not {what} MCP server {where}: {why}"

    async def _run(self, live: _ConnectionRun, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        started = False
        if isinstance(self.server, MCPStdioServer):
            live.errlog = tempfile.TemporaryFile(prefix="mcp-stderr-")
        try:
            async with Client(self._transport(live), client_info=_CLIENT, cache=None) as client:
                live.client = client
                task_status.started()
                started = True
                await live.stop.wait()
        except Exception as exc:
            if not started:
                raise
            # The transport failed under the connection (an HTTP server that died): the calls it cut short
            # have their error already; the next call starts a new connection.
            _log.warning("MCP connection failed", server=self.label, error=_describe(exc))
        finally:
            live.close_errlog()
            live.ended.set()

    @asynccontextmanager
    async def _transport(self, live: _ConnectionRun) -> AsyncIterator[Any]:
        server = self.server
        if isinstance(server, MCPStdioServer):
            params = StdioServerParameters(command=server.command, args=list(server.args),
                                           env=None if server.env is None else dict(server.env),
                                           cwd=server.cwd)
            # Only the file's descriptor is used (it becomes the server's stderr), so a binary file will do.
            async with stdio_client(params, errlog=cast(Any, live.errlog)) as (read, write):
                yield _Watched(read, live.stop), write
            return
        headers = dict(server.headers)
        if server.token is not None:
            headers["Authorization"] = f"Bearer {server.token}"

        async def note_refusal(response: httpx2.Response) -> None:
            if response.status_code in _REFUSED:
                live.refused = response.status_code

        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0),
                                      event_hooks={"response": [note_refusal]}) as http:
            async with streamable_http_client(server.url, http_client=http) as (read, write):
                yield _Watched(read, live.stop), write

    def close(self) -> None:
        self._closed = True
        if self._live is not None:
            self._live.stop.set()


class _Watched:
    """A transport's read stream that sets ``hung_up`` when it ends: the server exited or closed the stream."""

    def __init__(self, inner: Any, hung_up: anyio.Event) -> None:
        self._inner = inner
        self._hung_up = hung_up

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._hung_up.set()
            raise

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _Watched:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def render_result(result: types.CallToolResult) -> str:
    """A tool result's content as text for the model; binary content is described, not inlined."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, (types.ImageContent, types.AudioContent)):
            parts.append(f"[{block.type} content ({block.mime_type}, {len(block.data) * 3 // 4:,} bytes) not shown]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource {block.name}: {block.uri}]")
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):
                parts.append(resource.text)
            else:
                parts.append(f"[binary resource {resource.uri} ({resource.mime_type or 'unknown type'}) not shown]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _describe(exc: BaseException) -> str:
    leaf = _first(exc)
    if isinstance(leaf, TimeoutError):
        return "timed out"
    text = leaf.message if isinstance(leaf, _ProtocolError) else str(leaf)
    return f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__
