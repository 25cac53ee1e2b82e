"""``HTTPConduit``: serves a manager's sessions over HTTP (with uvicorn on asyncio, Hypercorn on trio): the
session routes, the OpenAI-compatible API, the AG-UI route, the MCP and A2A endpoints beside them, the chat page at
``/``, and the guards in front of them all (request log, same-site checks, bearer auth, rate limit, body size)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

import anyio
import anyio.abc
from starlette.applications import Starlette
from starlette.middleware import Middleware

from loop import UsageError
from loop.checks import positive_int, positive_number
from provider import is_loopback
from session._bearer import Challenge, Refusal, Scope, TokenQuota, under
from session._manager import Manager
from session.agui._app import agui_routes, check_approvals
from session._serving import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONVERSATION_BYTES, listen, serve_asgi
from session.http._guards import (ERROR_HANDLERS, OPENAI_PREFIX, BearerAuth, BodyLimit, RateLimit, RateLimited,
                                  RequestLog)
from session.http._origin import SameSite, check_hosts, check_origins
from session.http._routes import OPEN_PATHS, SessionRoutes, session_key
from session.openai._app import openai_routes
from session.openai._policy import check_policy
from session.openai._errors import unauthorized as openai_unauthorized
from session.web._page import PAGE_PATHS, page_routes

if TYPE_CHECKING:
    from session.a2a import A2AEndpoint
    from session.mcp._conduit import MCPConduit
    from session.mcp._mount import MCPEndpoint

__all__ = ["HTTPConduit"]

MCP_PATH = "/mcp"
"""Where the MCP endpoint is served (``HTTPConduit(mcp=True)``)."""
A2A_PATH = "/a2a"
"""Where the A2A endpoint is served (``HTTPConduit(a2a=True)``); its agent card is at the well-known paths."""


def _check_tokens(token: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if token is None:
        return None
    tokens = (token,) if isinstance(token, str) else tuple(token)
    if not tokens:
        raise UsageError("token must be a string or a non-empty sequence of strings")
    for t in tokens:
        if not (isinstance(t, str) and t and t.isprintable() and not any(c.isspace() for c in t)):
            raise UsageError("a bearer token must be a non-empty string of printable characters without spaces")
    return tokens


class HTTPConduit:
    """Serves a manager's sessions over HTTP (the routes are listed in ``session.http._routes``).

    ``token`` is the bearer token clients must send (or several, one per client: each sees only its own
    sessions). Without one the conduit is refused unless ``allow_no_token`` and ``host`` is a loopback
    address. Request bodies over ``max_body_bytes`` (4 MiB by default, ``DEFAULT_MAX_BODY_BYTES``) get 413;
    POSTs beyond ``rate_limit`` per token (by default 20 a second, in bursts of up to 100), and reads beyond its
    own budget for them (100 a second, in bursts of 200; ``/healthz`` and the OpenAPI documents are never
    limited), get 429 with a ``Retry-After`` in whole seconds (``None``: no limit). The event stream sends a
    keep-alive comment after ``keepalive`` quiet seconds and keeps the last ``event_log_size`` events of each
    session for clients that resume. Unless ``openai_model`` is ``None``, the same server answers the OpenAI-compatible
    ``/v1/chat/completions`` and ``/v1/models`` (listing that model name) behind the same token. Every error
    answered under ``/v1`` (401, 429, 413, an unknown route ...) is in OpenAI's format,
    ``{"error": {"message", "type", "param", "code"}}``; elsewhere it is ``{"error": {"type", "message"}}``.

    Limits against clients that take more than their share: one token may hold at most
    ``max_sessions_per_token`` sessions open at once, over both APIs (429 ``session_quota`` beyond; ``None``:
    only the manager's ``max_sessions``), and a session no message was sent to is closed after the manager's
    ``empty_timeout`` (60 s by default), freeing its place. A connection must send each request's headers
    within ``header_timeout`` seconds (else it is closed: on asyncio with 408, on trio without an answer; that is
    ``serve``'s: with ``app``, it is the ASGI server's to enforce), and a request's body within ``body_timeout``
    seconds of its headers (else 408).
    A JSON body may nest arrays and objects at most 64 deep (``MAX_JSON_DEPTH``; deeper gets 400). A
    conversation may hold at most ``max_conversation_bytes`` of message text (UTF-8; 64 MiB by default, ``None``:
    no limit): a message that would pass it gets 413 (``conversation_too_large``), and so does a request under
    ``/v1`` naming a kept conversation already past it. History is read a page of turns at a time.

    Against web pages in a browser (``session.http._origin``): the ``Host`` header must name the server
    (``allowed_hosts``; by default, serving a loopback address, the loopback names; else any), a request from
    another origin is refused (403) unless that origin is in ``cors_origins`` (CORS is off by default), and a
    body must be sent as JSON (415 otherwise).

    Tool calls that need approval wait for a person on the session routes (``/sessions/{id}/approvals``); under
    ``/v1``, whose clients cannot be asked, ``openai_approvals`` decides them: ``"deny"`` (the default) or
    ``"allow"``.

    ``POST /agui`` speaks the AG-UI protocol (``session.agui``) on the same sessions: a thread there is the
    session of the same id here. AG-UI clients can be asked, so by default (``agui_approvals="ask"``) a call that
    needs approval ends the run with the protocol's interrupt, answered by the next run's ``resume``; ``"deny"``
    and ``"allow"`` decide them instead. Unless ``page`` is false, ``GET /`` serves the chat page (``session.web``): it
    asks for the token in the browser and uses the routes above; its few files are the only paths besides
    ``/healthz``, the OpenAPI documents (``/openapi.json``, and ``/openapi-3.1.json`` for tools that read 3.1
    only) and the MCP endpoint's metadata that need no token.

    Unless ``mcp`` is false, ``/mcp`` is an MCP server over streamable HTTP (``session.mcp.MCPConduit``'s, on
    the same port): one tool, named ``mcp_tool`` (``ask``) and described to clients by ``mcp_description``
    (``MCPConduit``'s default unless given), asks the agent in a new conversation per call. It is behind the same
    tokens (each token's calls run as its caller, in its namespace: their conversations are among the token's
    sessions, and count towards ``max_sessions_per_token`` while they run), the same ``Host`` and ``Origin``
    checks, rate limit and body size; a request refused for its token gets the challenge and JSON-RPC error MCP
    clients expect, pointing at the protected resource metadata served without a token at
    ``/.well-known/oauth-protected-resource/mcp`` (``session.mcp._auth``). Tool calls that need approval are put
    to the MCP client as an elicitation. An MCP session belongs to the token that opened it. On shutdown, the
    MCP calls in flight get ``shutdown_timeout`` to be answered before the MCP sessions end.

    Unless ``a2a`` is false, ``/a2a`` is an A2A (Agent2Agent) endpoint (``session.a2a.A2AEndpoint``, JSON-RPC,
    protocol 1.0 and 0.3) and the agent card, named ``a2a_name`` and described by ``a2a_description``, is served
    without a token at ``/.well-known/agent-card.json`` (and ``/.well-known/agent.json``); it names ``a2a_url``
    as the endpoint, or, unless given, the URL each request came to. A task's ``contextId`` is the session of the
    same id here, for the same token; each message is a task, and ``tasks/cancel`` interrupts it. Calls that need
    approval end a task ``input-required`` by default (``a2a_approvals="ask"``), answered by the client's reply
    in the task; ``"deny"`` and ``"allow"`` decide them instead. The A2A endpoint runs its tasks on asyncio only
    (a2a-sdk's request handler is built on asyncio tasks): on trio it answers every call with an error saying so.
    On shutdown, the tasks still running once the server stopped are ended (their messages interrupted).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        token: str | Sequence[str] | None = None,
        allow_no_token: bool = False,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        rate_limit: RateLimit | None = RateLimit(),
        keepalive: float = 15.0,
        event_log_size: int = 10_000,
        shutdown_timeout: float = 5.0,
        openai_model: str | None = "agent",
        max_sessions_per_token: int | None = 100,
        header_timeout: float = 10.0,
        body_timeout: float = 30.0,
        allowed_hosts: Sequence[str] | None = None,
        cors_origins: Sequence[str] = (),
        max_conversation_bytes: int | None = DEFAULT_MAX_CONVERSATION_BYTES,
        openai_approvals: str = "deny",
        agui_approvals: str = "ask",
        page: bool = True,
        mcp: bool = True,
        mcp_tool: str = "ask",
        mcp_description: str | None = None,
        a2a: bool = True,
        a2a_name: str = "agent",
        a2a_description: str | None = None,
        a2a_url: str | None = None,
        a2a_approvals: str = "ask",
    ) -> None:
        self.tokens = _check_tokens(token)
        self.openai_approvals = check_policy(openai_approvals)
        self.agui_approvals = check_approvals(agui_approvals)
        if not isinstance(host, str) or not host:
            raise UsageError(f"host must be a host name or address, got {host!r}")
        if self.tokens is None and not allow_no_token:
            raise UsageError("HTTPConduit needs a bearer token (token=...); to serve this machine only without one, "
                             "pass allow_no_token=True with a loopback host")
        if self.tokens is None and not is_loopback(host):
            raise UsageError(f"refusing to serve {host!r} without a token: anyone who can reach it could use "
                             "every session; pass token=... or serve a loopback host (127.0.0.1)")
        if not (isinstance(port, int) and not isinstance(port, bool) and 0 <= port <= 65535):
            raise UsageError(f"port must be 0..65535 (0: any free port), got {port!r}")
        positive_int("max_body_bytes", max_body_bytes)
        if rate_limit is not None and not isinstance(rate_limit, RateLimit):
            raise UsageError(f"rate_limit must be a RateLimit or None, got {rate_limit!r}")
        positive_number("keepalive", keepalive, unit="seconds")
        positive_number("shutdown_timeout", shutdown_timeout, unit="seconds")
        positive_int("event_log_size", event_log_size)
        if max_sessions_per_token is not None:
            positive_int("max_sessions_per_token", max_sessions_per_token)
        positive_number("header_timeout", header_timeout, unit="seconds")
        positive_number("body_timeout", body_timeout, unit="seconds")
        if max_conversation_bytes is not None:
            positive_int("max_conversation_bytes", max_conversation_bytes)
        self.host, self.port = host, port
        self.allowed_hosts = check_hosts(allowed_hosts, host)
        self.cors_origins = check_origins(cors_origins)
        self.max_body_bytes = max_body_bytes
        self.rate_limit = rate_limit
        self.keepalive = float(keepalive)
        self.event_log_size = event_log_size
        self.shutdown_timeout = float(shutdown_timeout)
        self.max_sessions_per_token = max_sessions_per_token
        self.header_timeout = float(header_timeout)
        self.body_timeout = float(body_timeout)
        self.max_conversation_bytes = max_conversation_bytes
        if openai_model is not None and (not isinstance(openai_model, str) or not openai_model.strip()):
            raise UsageError(f"openai_model must be a model name or None, got {openai_model!r}")
        self.openai_model = openai_model
        if not isinstance(page, bool):
            raise UsageError(f"page must be true or false, got {page!r}")
        self.page = page
        if not isinstance(mcp, bool):
            raise UsageError(f"mcp must be true or false, got {mcp!r}")
        self.mcp = mcp
        self._mcp = _mcp_conduit(mcp_tool, mcp_description) if mcp else None
        self.mcp_tool = mcp_tool
        self.mcp_description = None if self._mcp is None else self._mcp.description
        if not isinstance(a2a, bool):
            raise UsageError(f"a2a must be true or false, got {a2a!r}")
        self.a2a = a2a
        self.a2a_name, self.a2a_description, self.a2a_url = a2a_name, a2a_description, a2a_url
        if a2a:
            from session.a2a._approvals import check_policy as check_a2a_policy

            a2a_approvals = check_a2a_policy(a2a_approvals)
        self.a2a_approvals = a2a_approvals

    @contextlib.asynccontextmanager
    async def _running(self, manager: Manager
                       ) -> AsyncIterator[tuple[Starlette, SessionRoutes, MCPEndpoint | None]]:
        """The app for ``manager``, and what ends it: ``SessionRoutes.close`` ends the event streams, the MCP
        endpoint's ``close`` its sessions once the calls in flight are answered (both run on the way out)."""
        if not isinstance(manager, Manager):
            raise UsageError(f"HTTPConduit serves a session Manager, got {manager!r}")
        async with anyio.create_task_group() as group:
            quota = None if self.max_sessions_per_token is None else TokenQuota(
                manager, per_token=self.max_sessions_per_token)
            api = SessionRoutes(manager, group, keepalive=self.keepalive, log_size=self.event_log_size, quota=quota,
                                body_timeout=self.body_timeout, max_conversation_bytes=self.max_conversation_bytes)
            endpoint = None if self._mcp is None else self._endpoint(manager, quota)
            a2a = self._a2a(api) if self.a2a else None
            try:
                if endpoint is not None:
                    await group.start(endpoint.run)
                yield self._starlette(api, endpoint, a2a), api, endpoint
            finally:
                api.close()
                if endpoint is not None:
                    await endpoint.close()
                if a2a is not None:
                    await a2a.close()

    def _endpoint(self, manager: Manager, quota: TokenQuota | None) -> MCPEndpoint:
        from session.mcp._mount import MCPEndpoint

        assert self._mcp is not None
        return MCPEndpoint(self._mcp.server(manager, quota=quota), path=MCP_PATH, name=self._mcp.name,
                           max_body_bytes=self.max_body_bytes, shutdown_timeout=self.shutdown_timeout)

    def _a2a(self, api: SessionRoutes) -> A2AEndpoint:
        """The A2A endpoint over the session routes' manager: their sessions, namespaces, quota and limits."""
        from session.a2a import A2AEndpoint
        from session.a2a._endpoint import DESCRIPTION

        return A2AEndpoint(api.manager, path=A2A_PATH, name=self.a2a_name, url=self.a2a_url,
                           description=DESCRIPTION if self.a2a_description is None else self.a2a_description,
                           bearer=self.tokens is not None, session_key=session_key, on_open=api.opened,
                           quota=api.quota, approvals=self.a2a_approvals)

    @contextlib.asynccontextmanager
    async def app(self, manager: Manager) -> AsyncIterator[Starlette]:
        """The ASGI app for ``manager``, running for the body of the ``async with``; on exit every event
        stream ends, and the MCP sessions once their calls in flight are answered."""
        async with self._running(manager) as (app, _, _):
            yield app

    def _starlette(self, api: SessionRoutes, endpoint: MCPEndpoint | None = None,
                   a2a: A2AEndpoint | None = None) -> Starlette:
        open_paths: tuple[str, ...] = (*OPEN_PATHS, *PAGE_PATHS) if self.page else OPEN_PATHS
        routes = [*(page_routes() if self.page else ()), *api.routes()]
        routes += agui_routes(api.manager, session_key=api.key, on_open=api.opened, quota=api.quota,
                              keepalive=self.keepalive, body_timeout=self.body_timeout,
                              max_body_bytes=self.max_body_bytes, approvals=self.agui_approvals)
        if self.openai_model is not None:
            routes += openai_routes(api.manager, model_name=self.openai_model, session_key=api.key, on_open=api.opened,
                                    max_body_bytes=self.max_body_bytes, keepalive=self.keepalive, quota=api.quota,
                                    body_timeout=self.body_timeout, approvals=self.openai_approvals)
        error_bodies = {OPENAI_PREFIX: openai_unauthorized}
        challenge = None
        if endpoint is not None:
            routes += endpoint.routes()
            open_paths = (*open_paths, *sorted(endpoint.open_paths))
            error_bodies[endpoint.path] = endpoint.error_body
            challenge = _challenges(endpoint)
        if a2a is not None:
            routes += a2a.routes()
            open_paths = (*open_paths, *sorted(a2a.open_paths))
        middleware = [Middleware(RequestLog),
                      Middleware(SameSite, allowed_hosts=self.allowed_hosts, cors_origins=self.cors_origins),
                      Middleware(BearerAuth, tokens=self.tokens, open_paths=open_paths, error_bodies=error_bodies,
                                 challenge=challenge)]
        if self.rate_limit is not None:
            middleware.append(Middleware(RateLimited, limit=self.rate_limit, exempt=open_paths))
        middleware.append(Middleware(BodyLimit, max_bytes=self.max_body_bytes))
        return Starlette(routes=routes, middleware=middleware, exception_handlers=ERROR_HANDLERS)

    async def serve(self, manager: Manager, *, task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED
                    ) -> None:
        """Serve ``manager`` until cancelled, with uvicorn on asyncio or Hypercorn on trio. With ``await
        group.start(conduit.serve, manager)`` the caller gets the server's URL once it accepts connections
        (useful with ``port=0``).

        On cancellation it stops accepting, ends every event stream, lets requests in flight finish (for up
        to ``shutdown_timeout`` seconds) and re-raises. Sessions and their turns are the manager's: they go on.
        """
        with listen(self.host, self.port) as sock:  # bound first, so a port in use fails plainly
            async with self._running(manager) as (app, api, endpoint):
                # Event streams end first; the MCP sessions (and their streams) once the MCP calls in flight are
                # answered, before the server's wait for the requests in flight is over.
                await serve_asgi(app, sock, host=self.host, shutdown_timeout=self.shutdown_timeout,
                                 header_timeout=self.header_timeout, task_status=task_status,
                                 on_stop=api.close, around=_closing(endpoint))


@contextlib.asynccontextmanager
async def _closing(endpoint: MCPEndpoint | None) -> AsyncIterator[None]:
    """Closes ``endpoint`` (if there is one) on the way out of the ``async with``."""
    try:
        yield
    finally:
        if endpoint is not None:
            await endpoint.close()


def _challenges(endpoint: MCPEndpoint) -> Challenge:
    """The ``WWW-Authenticate`` value of a refused request: the MCP endpoint's under its path, else the
    session API's."""
    def challenge(scope: Scope, refusal: Refusal) -> str:
        if under(scope["path"], endpoint.path):
            return endpoint.challenge(scope, refusal)
        return 'Bearer realm="session"'

    return challenge


def _mcp_conduit(tool: str, description: str | None) -> MCPConduit:
    """The MCP conduit whose server the ``/mcp`` endpoint serves: its tool's name and description checked."""
    from session.mcp._conduit import DESCRIPTION, MCPConduit

    if description is not None and not isinstance(description, str):
        raise UsageError(f"mcp_description must be a string or None (the default), got {description!r}")
    try:
        return MCPConduit(tool=tool, description=DESCRIPTION if description is None else description)
    except UsageError as exc:  # "tool must be ..." or "description must be ...": as this conduit names them
        raise UsageError(f"mcp_{exc}") from None
