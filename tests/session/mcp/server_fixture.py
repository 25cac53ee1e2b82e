"""An MCP server for the MCP tests, built on the SDK's ``MCPServer`` (what FastMCP became in mcp 2).

    python -m tests.session.mcp.server_fixture [--name NAME] [--http PORT [--token T]]

Serves over stdio, or over streamable HTTP on 127.0.0.1:PORT at ``/mcp`` with ``--http`` (port 0: any free
port); once it listens it prints ``listening on PORT`` on stdout. Its tools cover
what a client must handle: a rich input schema, a tool that raises, one that hangs, one that kills the server
mid-call, and one that reports the server's pid (so a test can tell that a reconnect started a new process).
With ``--token T`` the HTTP server refuses requests without ``Authorization: Bearer T``.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
from enum import Enum
from typing import Annotated

import anyio
from pydantic import BaseModel, Field

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError


class Unit(str, Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Place(BaseModel):
    city: str
    country: str = "FR"


def build(name: str) -> MCPServer:
    """The server, named ``name`` (the default namespace of its tools on the client side)."""
    server = MCPServer(name, version="1.0", log_level="WARNING")

    @server.tool(description="Echo the text back.")
    def echo(text: Annotated[str, Field(description="what to echo")]) -> str:
        return f"{name}: {text}"

    @server.tool(description="Forecast for a place.")
    def forecast(
        place: Place,
        days: Annotated[int, Field(ge=1, le=7, description="how many days")],
        unit: Unit = Unit.CELSIUS,
        tags: list[str] | None = None,
    ) -> str:
        return f"{place.city}/{place.country}: {days} days in {unit.value}, tags={tags or []}"

    @server.tool(description="Always fails.")
    def fail(message: str) -> str:
        raise ToolError(f"failed on purpose: {message}")

    @server.tool(description="Raises an unexpected exception.")
    def explode() -> str:
        raise RuntimeError("kaboom")

    @server.tool(description="Sleep, then answer.")
    async def hang(seconds: float) -> str:
        await anyio.sleep(seconds)
        return "woke up"

    @server.tool(description="Kill the server in the middle of this call.")
    async def crash() -> str:
        await anyio.sleep(0.05)
        os._exit(3)

    @server.tool(description="The server's process id.")
    def pid() -> int:
        return os.getpid()

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="fixture")
    parser.add_argument("--http", type=int, default=None, help="serve streamable HTTP on this port")
    parser.add_argument("--token", default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    server = build(args.name)
    if args.http is None:
        anyio.run(server.run_stdio_async)
        return
    import socket

    import uvicorn

    app = server.streamable_http_app()
    if args.token:
        app.add_middleware(_RequireToken, token=args.token)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.http))
    sock.listen(64)
    print(f"listening on {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning")
    anyio.run(functools.partial(uvicorn.Server(config).serve, sockets=[sock]))


class _RequireToken:
    """ASGI middleware: 401 unless the request carries the bearer token."""

    def __init__(self, app, *, token: str) -> None:  # type: ignore[no-untyped-def]
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != self.expected:
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await self.app(scope, receive, send)


if __name__ == "__main__":
    main()
