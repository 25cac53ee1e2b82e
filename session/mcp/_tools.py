"""Tools from MCP servers: ``MCPTools`` connects to servers and turns each of their tools into a ``loop.Tool``.

    async with MCPTools(MCPStdioServer("mcp-server-time", name="time")) as tools:
        manager = Manager(processor, provider=model, make_step=step_factory(tools))

A server is started over stdio (``MCPStdioServer``: a command) or reached over streamable HTTP
(``MCPHTTPServer``: a URL, headers, a bearer token). Its tools are named ``<namespace><separator><tool>``, the
namespace being the server's name unless set, so two servers with a tool of the same name can both be used.
A call that fails on the server (``isError``), is refused by it (a JSON-RPC error) or outlasts its timeout
raises ``MCPToolError``; one cut short because the server died raises ``MCPConnectionError``. A step turns
either into an error result the model reads. The next call after a server died starts it again.

Each connection runs in a task of the ``MCPTools`` task group, not in the task of the call that opened it, so
a connection opened (or reopened) by any tool call is closed in order when the ``async with`` ends.
"""

from __future__ import annotations

import fnmatch
import json
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import attrs
import httpx2
import jsonschema
import mcp_types as types
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError as _ProtocolError

from loop import LoopError, ToolSpec, UsageError, tracing
from session.mcp._servers import UNSAFE, MCPHTTPServer, MCPServer, MCPStdioServer, check_seconds

_log = tracing.logger("session.mcp")
_CLIENT = types.Implementation(name="cognitive-loop", version="0.1.0")
_MAX_PAGES = 100


class MCPToolError(LoopError):
    """Raised by an MCP tool's ``call`` when the server reports the call failed, refuses it, or is too slow."""


class MCPConnectionError(LoopError):
    """Raised when an MCP server cannot be started or reached, or went away while a call was running."""


class MCPTool:
    """One tool of an MCP server, as a ``loop.Tool``: its spec carries the server's JSON schema unchanged."""

    def __init__(self, spec: ToolSpec, remote_name: str, connection: _Connection, timeout: float) -> None:
        self.spec = spec
        self.remote_name = remote_name
        self.timeout = timeout
        self._connection = connection

    @property
    def server(self) -> str:
        """The name of the server the tool belongs to."""
        return self._connection.label

    async def call(self, arguments: Mapping[str, Any]) -> str:
        """Call the tool on its server (reconnecting first if the server died) and return its content as text."""
        return await self._connection.call(self.remote_name, dict(arguments), self.timeout)

    def __repr__(self) -> str:
        return f"MCPTool({self.spec.name!r}, server={self.server!r})"


class MCPTools:
    """The tools of one or more MCP servers, open for the body of ``async with``.

    Entering connects to every server at once and lists its tools (``connect_timeout`` bounds each);
    failing that it raises ``MCPConnectionError`` and leaves nothing running. Inside, the object is a sequence
    of ``MCPTool`` ready for ``Step(tools=...)`` or ``session.step_factory(...)``. Two tools with the same
    name (same namespace and tool name) raise ``UsageError``. Leaving stops every server it started.
    """

    def __init__(self, *servers: MCPServer, timeout: float = 60.0, connect_timeout: float = 30.0,
                 separator: str = "_") -> None:
        for server in servers:
            if not isinstance(server, (MCPStdioServer, MCPHTTPServer)):
                raise UsageError(f"MCPTools takes MCPStdioServer or MCPHTTPServer values, got {server!r}")
        if not servers:
            raise UsageError("MCPTools needs at least one server")
        check_seconds("timeout", timeout)
        check_seconds("connect_timeout", connect_timeout)
        if not isinstance(separator, str) or not separator or separator.isspace():
            raise UsageError(f"separator must be a non-empty string, got {separator!r}")
        self.servers = servers
        self.timeout = float(timeout)
        self.connect_timeout = float(connect_timeout)
        self.separator = separator
        self._tools: tuple[MCPTool, ...] = ()
        self._connections: list[_Connection] = []
        self._group: anyio.abc.TaskGroup | None = None

    def __iter__(self) -> Iterator[MCPTool]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __getitem__(self, name: str) -> MCPTool:
        for t in self._tools:
            if t.spec.name == name:
                return t
        raise KeyError(name)

    async def __aenter__(self) -> MCPTools:
        if self._group is not None:
            raise UsageError("this MCPTools is already open")
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        try:
            self._connections = [_Connection(s, group, self.connect_timeout) for s in self.servers]
            listed: list[list[types.Tool]] = [[] for _ in self._connections]

            async def connect(index: int) -> None:
                listed[index] = await self._connections[index].connect()

            async with anyio.create_task_group() as connecting:
                for index in range(len(self._connections)):
                    connecting.start_soon(connect, index)
            self._tools = self._build(listed)
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            error = _first(exc)
            if error is not exc:
                raise error from error.__cause__  # a server that failed: its error, not a group around it
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        group, self._group = self._group, None
        for connection in self._connections:
            connection.close()
        self._tools = ()
        if group is not None:
            group.cancel_scope.shield = True  # servers are stopped in order even when the block is cancelled
            await group.__aexit__(None, None, None)

    def _build(self, listed: list[list[types.Tool]]) -> tuple[MCPTool, ...]:
        tools: dict[str, MCPTool] = {}
        for connection, remote in zip(self._connections, listed):
            server = connection.server
            names = [t.name for t in remote]
            missing = [p for p in server.include or () if not any(c in p for c in "*?[") and p not in names]
            if missing:
                raise UsageError(f"include names tools that {connection.label!r} does not have: "
                                 f"{', '.join(missing)}; it has: {', '.join(names) or 'none'}")
            namespace = UNSAFE.sub("_", connection.label) if server.namespace is None else server.namespace
            for t in remote:
                if not _selected(t.name, server.include, server.exclude):
                    continue
                schema = dict(t.input_schema or {"type": "object"})
                try:
                    jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator
                                                        ).check_schema(schema)
                except jsonschema.SchemaError as exc:
                    _log.warning("skipping an MCP tool with an invalid schema", server=connection.label,
                                 tool=t.name, error=exc.message)
                    continue
                local = UNSAFE.sub("_", t.name)
                name = f"{namespace}{self.separator}{local}" if namespace else local
                if name in tools:
                    raise UsageError(f"two MCP tools would be named {name!r} (servers {tools[name].server!r} "
                                     f"and {connection.label!r}); give the servers different namespaces")
                spec = ToolSpec(name, t.description or t.title or t.name, schema)
                tools[name] = MCPTool(spec, t.name, connection, server.timeout or self.timeout)
        return tuple(tools.values())

    def __repr__(self) -> str:
        if self._group is None:
            return f"MCPTools({', '.join(s.label for s in self.servers)}; closed)"
        return f"MCPTools({', '.join(c.label for c in self._connections)}; {len(self._tools)} tools)"


def _selected(name: str, include: tuple[str, ...] | None, exclude: tuple[str, ...]) -> bool:
    if include is not None and not any(fnmatch.fnmatchcase(name, p) for p in include):
        return False
    return not any(fnmatch.fnmatchcase(name, p) for p in exclude)


def _first(exc: BaseException) -> BaseException:
    """The first error (not a cancellation) inside nested exception groups; ``exc`` itself if none is."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first(inner)
            if isinstance(found, Exception) and not isinstance(found, BaseExceptionGroup):
                return found
    return exc


@attrs.define(eq=False)
class _Live:
    """One run of a connection. ``stop`` asks it to end (or says the server hung up); ``ended`` says it has."""

    client: Client | None = None
    stop: anyio.Event = attrs.Factory(anyio.Event)
    ended: anyio.Event = attrs.Factory(anyio.Event)

    @property
    def gone(self) -> bool:
        return self.stop.is_set() or self.ended.is_set()


class _Connection:
    """One server's connection, run by a task of ``group`` and started again by the first call after it died."""

    def __init__(self, server: MCPServer, group: anyio.abc.TaskGroup, connect_timeout: float) -> None:
        self.server = server
        self.label = server.label
        self._group = group
        self._connect_timeout = connect_timeout
        self._live: _Live | None = None
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

    async def _open(self) -> _Live:
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
                _log.info("restarting an MCP server that went away", server=self.label)
                with anyio.move_on_after(self._connect_timeout):
                    await live.ended.wait()
            live = _Live()
            try:
                with anyio.fail_after(self._connect_timeout):
                    await self._group.start(self._run, live)
            except Exception as exc:  # TimeoutError included
                where = self.server.url if isinstance(self.server, MCPHTTPServer) else self.server.command
                where = repr(self.label) if where in self.label else f"{self.label!r} ({where})"
                raise MCPConnectionError(f"could not connect to MCP server {where}: {_describe(exc)}") from exc
            self._live = live  # only now: a call must never see a connection still starting
            return live

    async def _run(self, live: _Live, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        started = False
        try:
            async with Client(self._transport(live.stop), client_info=_CLIENT, cache=None) as client:
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
            live.ended.set()

    @asynccontextmanager
    async def _transport(self, hung_up: anyio.Event) -> AsyncIterator[Any]:
        server = self.server
        if isinstance(server, MCPStdioServer):
            params = StdioServerParameters(command=server.command, args=list(server.args), env=server.env,
                                           cwd=server.cwd)
            async with stdio_client(params, errlog=sys.stderr) as (read, write):
                yield _Watched(read, hung_up), write
            return
        headers = dict(server.headers)
        if server.token is not None:
            headers["Authorization"] = f"Bearer {server.token}"
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)) as http:
            async with streamable_http_client(server.url, http_client=http) as (read, write):
                yield _Watched(read, hung_up), write

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
