"""The MCP conduit's streamable HTTP endpoint as a part of another server: ``MCPEndpoint``, which the HTTP
conduit mounts at ``/mcp`` beside its other routes, on the same port and behind the same guards and tokens.

What the stand-alone MCP server over HTTP does for itself (``MCPConduit(transport="http")``), the app around the
endpoint does here: checking the bearer token (the endpoint gives the MCP-flavoured challenge and error body to
use under its path, and serves the protected resource metadata they point at), the ``Host`` and ``Origin``
headers, and the body size. Each MCP session belongs to the token that opened it: a request with another token
naming it is answered as if it did not exist (404), as the SDK does for the principals it knows.

Also here, as the stand-alone server uses them too: ``Posts``, which counts the JSON-RPC requests in flight, and
``drained``, the SDK's session manager left only once they are answered, so that shutting down does not cut
answers off.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import anyio.abc
from mcp.server import Server
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.datastructures import URLPath
from starlette.routing import BaseRoute, Match, NoMatchFound
from starlette.types import Scope as ASGIScope

from loop import UsageError
from loop.checks import positive_int, positive_number
from session._bearer import Refusal, Scope, owner_in
from session.mcp._auth import ResourceMetadata, refused

__all__ = ["MCPEndpoint", "Posts", "drained"]


class Posts:
    """An MCP app, counting the POST requests in flight (the JSON-RPC requests, ``tools/call`` among them; a GET
    is a session's long-lived stream of notifications, which only ends with the session)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.count = 0
        self.idle = anyio.Event()
        self.idle.set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        self.count += 1
        self.idle = anyio.Event() if self.count == 1 else self.idle
        try:
            await self.app(scope, receive, send)
        finally:
            self.count -= 1
            if not self.count:
                self.idle.set()


@asynccontextmanager
async def drained(sessions: AbstractAsyncContextManager[Any], posts: Posts, timeout: float) -> AsyncIterator[None]:
    """``sessions`` (the SDK's session manager running), left once the POST requests in flight are answered, or
    after ``timeout`` seconds."""
    async with sessions:
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(timeout):
                await posts.idle.wait()


class _Route(BaseRoute):
    """A Starlette route answering exactly the paths of ``apps`` (each with its ASGI app), every method: the
    MCP endpoint takes GET, POST and DELETE at one path, and answers the others itself. (Not a ``Route``: the
    HTTP conduit's OpenAPI document describes its ``Route`` s, and MCP is described by its own specification.)"""

    def __init__(self, apps: dict[str, Any]) -> None:
        self.apps = apps

    def matches(self, scope: ASGIScope) -> tuple[Match, ASGIScope]:
        if scope["type"] == "http" and scope["path"] in self.apps:
            return Match.FULL, {}
        return Match.NONE, {}

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:
        raise NoMatchFound(name, path_params)

    async def handle(self, scope: ASGIScope, receive: Any, send: Any) -> None:
        await self.apps[scope["path"]](scope, receive, send)


class _AsOwner:
    """Tells the SDK who sends each request: the owner the bearer check let it in as (``scope["state"]``), as the
    principal the SDK binds an MCP session to when it opens, and checks on every later request of it."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        owner = owner_in(scope)
        scope["user"] = AuthenticatedUser(AccessToken(token=owner, client_id=owner, scopes=[]))
        await self.app(scope, receive, send)


class MCPEndpoint:
    """The streamable HTTP endpoint of ``server`` (``MCPConduit.server``) at ``path``, for another app to serve.

    ``routes()`` are its Starlette routes: ``path`` itself, and the protected resource metadata (``metadata``,
    ``session.mcp._auth``) at ``open_paths``, which need no token. The app must put its bearer check in front of
    every other path, setting the owner in ``scope["state"]`` (``session._bearer.BearerAuth``), and answer a
    refused request under ``path`` with ``challenge`` and ``error_body``. Request bodies over
    ``max_body_bytes`` get 413 (the app's own limit may come first).

    ``run`` serves the MCP sessions (the SDK's session manager) until ``close``, which first waits, for at most
    ``shutdown_timeout`` seconds, for the requests in flight to be answered, then ends every session and its
    open streams. A request that comes before ``run`` has started, or after ``close``, fails (500).
    """

    def __init__(self, server: Server, *, path: str = "/mcp", name: str = "agent",
                 max_body_bytes: int, shutdown_timeout: float) -> None:
        if not isinstance(path, str) or not path.startswith("/") or path == "/":
            raise UsageError(f"the MCP endpoint's path must start with '/' and name something, got {path!r}")
        positive_int("max_body_bytes", max_body_bytes)
        positive_number("shutdown_timeout", shutdown_timeout, unit="seconds")
        self.path = path
        self.metadata = ResourceMetadata(path=path, name=name)
        self.shutdown_timeout = float(shutdown_timeout)
        # No Host or Origin checks of the SDK's own: the app around the endpoint makes them, for all its routes.
        self._sessions = StreamableHTTPSessionManager(app=server, max_request_body_size=max_body_bytes)
        self._posts = Posts(_AsOwner(self._sessions.handle_request))
        self._closing = anyio.Event()
        self._closed = anyio.Event()
        self._ran = False

    @property
    def open_paths(self) -> frozenset[str]:
        """The paths that need no token: the protected resource metadata."""
        return self.metadata.paths

    def routes(self) -> list[BaseRoute]:
        """The endpoint at ``path``, and the metadata at ``open_paths``."""
        apps: dict[str, Any] = {path: self.metadata.serve for path in self.metadata.paths}
        apps[self.path] = self._posts
        return [_Route(apps)]

    def challenge(self, scope: Scope, refusal: Refusal) -> str:
        """The ``WWW-Authenticate`` value of a request under ``path`` refused for its token."""
        return self.metadata.challenge(scope, refusal)

    @staticmethod
    def error_body(refusal: Refusal) -> dict[str, Any]:
        """The body of a request under ``path`` refused for its token: a JSON-RPC error MCP clients show."""
        return refused(refusal)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve the MCP sessions until ``close``; started (``task_status``) once requests can come. It runs once."""
        if self._ran:
            raise UsageError("an MCP endpoint runs once; make another to serve again")
        self._ran = True
        try:
            async with drained(self._sessions.run(), self._posts, self.shutdown_timeout):
                task_status.started()
                await self._closing.wait()
        finally:
            self._closed.set()

    async def close(self) -> None:
        """End ``run``: once the requests in flight are answered (or ``shutdown_timeout`` passed), every MCP
        session ends. Returns when they have; at once if ``run`` never ran."""
        self._closing.set()
        if not self._ran:
            return
        with anyio.CancelScope(shield=True):
            await self._closed.wait()
