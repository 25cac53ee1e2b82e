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
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import jsonschema
import mcp_types as types

from loop import ToolSpec, UsageError, tracing
from loop.checks import positive_number
from session._groups import errors_in, unwrap
from session.mcp._connection import Connection, MCPConnectionError, MCPToolError, render_result
from session.mcp._servers import UNSAFE, MCPHTTPServer, MCPServer, MCPStdioServer

__all__ = ["MCPConnectionError", "MCPTool", "MCPToolError", "MCPTools", "render_result"]
_log = tracing.logger("session.mcp")


class MCPTool:
    """One tool of an MCP server, as a ``loop.Tool``: its spec carries the server's JSON schema unchanged."""

    def __init__(self, spec: ToolSpec, remote_name: str, connection: Connection, timeout: float) -> None:
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
    failing that it raises ``MCPConnectionError`` naming the cause (a stdio server's last words on stderr, a
    refused token) and leaves nothing running. Inside, the object is a sequence of ``MCPTool`` ready for
    ``Step(tools=...)`` or ``session.step_factory(...)``. Two tools with the same name (same namespace and
    tool name), or an ``include`` entry matching none of a server's tools, raise ``UsageError``. Leaving stops
    every server it started. Errors come out as themselves, never inside an exception group.
    """

    def __init__(self, *servers: MCPServer, timeout: float = 60.0, connect_timeout: float = 30.0,
                 separator: str = "_") -> None:
        for server in servers:
            if not isinstance(server, (MCPStdioServer, MCPHTTPServer)):
                raise UsageError(f"MCPTools takes MCPStdioServer or MCPHTTPServer values, got {server!r}")
        if not servers:
            raise UsageError("MCPTools needs at least one server")
        if not isinstance(separator, str) or not separator or separator.isspace():
            raise UsageError(f"separator must be a non-empty string, got {separator!r}")
        self.servers = servers
        self.timeout = positive_number("timeout", timeout, unit="seconds")
        self.connect_timeout = positive_number("connect_timeout", connect_timeout, unit="seconds")
        self.separator = separator
        self._tools: tuple[MCPTool, ...] = ()
        self._connections: list[Connection] = []
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
            self._connections = [Connection(s, group, self.connect_timeout) for s in self.servers]
            listed: list[list[types.Tool]] = [[] for _ in self._connections]

            async def connect(index: int) -> None:
                listed[index] = await self._connections[index].connect()

            async with anyio.create_task_group() as connecting:
                for index in range(len(self._connections)):
                    connecting.start_soon(connect, index)
            self._tools = self._build(listed)
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            if not isinstance(exc, BaseExceptionGroup):
                raise
            error = unwrap(exc)
            if error is not exc:
                raise error from error.__cause__  # a server that failed: its error, not a group around it
            failed = errors_in(exc)
            if all(isinstance(e, MCPConnectionError) for e in failed):  # servers failing at once: one error
                raise MCPConnectionError("\n".join(str(e) for e in failed)) from exc
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
            try:
                await group.__aexit__(None, None, None)
            except BaseExceptionGroup as failed:
                error = unwrap(failed)
                if error is failed:
                    raise
                raise error from error.__cause__

    def _build(self, listed: list[list[types.Tool]]) -> tuple[MCPTool, ...]:
        tools: dict[str, MCPTool] = {}
        for connection, remote in zip(self._connections, listed):
            server = connection.server
            names = [t.name for t in remote]
            unmatched = [p for p in server.include or () if not any(fnmatch.fnmatchcase(n, p) for n in names)]
            if unmatched:
                raise UsageError(f"include matches no tool of {connection.label!r}: {', '.join(unmatched)}; "
                                 f"it has: {', '.join(names) or 'none'}")
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
