"""``MCPConduit``: a manager's agent served as an MCP server, so any MCP client (or another agent) can use it.

The server has one tool (``ask`` unless named otherwise) taking ``{"message": "..."}``. Each call is one new
conversation: a session is opened, the message is asked, and the answer comes back as the tool's text. While
the agent works, a client that sent a progress token gets a progress notification per completed model turn and
per finished tool call. An agent that fails, or whose run was stopped by a budget or cap (a degraded run),
answers with an MCP tool error (``isError``) carrying the message, since a degraded run is never a success.
A client cancelling its call interrupts the agent. A call in flight when the manager stops (a server shutting
down, ``Manager.stop``) is answered with a tool error saying so; over HTTP, shutting down stops accepting
connections, then waits (``shutdown_timeout``) for the calls in flight to be answered before the MCP sessions end.

The conversation runs for the client as its ``loop.Caller`` (the bearer token's owner over HTTP, the local user
over stdio), and tool calls that need approval are put to the client as an elicitation, during the call or, from
protocol version 2026-07-28, through an ``input_required`` round trip (``session.mcp._approvals``).

Over stdio the protocol owns stdout: while serving, the SDK points file descriptor 1 at stderr, so stray
prints and logs cannot corrupt it (the command line also sends structlog to stderr). Over streamable HTTP it
serves ``path`` (``/mcp``) with uvicorn on asyncio or Hypercorn on trio and, like ``HTTPConduit``, requires a
bearer token unless told otherwise on a loopback host; it describes that token as the MCP authorization spec has
a server do (``session.mcp._auth``: protected resource metadata, and 401 challenges pointing at it). The HTTP
conduit serves the same endpoint at ``/mcp`` beside its other routes, on its port and behind its tokens
(``session.mcp._mount``).
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

import anyio
import anyio.abc
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from loop import (Caller, LoopError, Role, State, ToolCall, ToolFinished, TurnCompleted, UsageError, awaiting_approval,
                  tracing)
from loop.checks import positive_int, positive_number
from provider import is_loopback
from session._bearer import TokenQuota
from session._manager import Manager, ShuttingDown
from session._serving import DEFAULT_MAX_BODY_BYTES, listen, serve_asgi
from session._events import ApprovalRequested
from session._session import Session
from session.mcp._approvals import Asked, answer_of, asks_by_retry, boundary, caller_of, can_elicit, decisions, elicit
from session.mcp._auth import ProtectedResource
from session.mcp._mount import Posts, drained

_log = tracing.logger("session.mcp")
DESCRIPTION = ("Ask an AI agent. Send a complete, self-contained request in 'message'; the agent works on it "
               "(it may use its own tools) and answers in text. Each call is a new conversation.")
_SHUTTING_DOWN = ("the server is shutting down: the agent was stopped before it finished (its work so far is "
                  "lost); call again once the server is back")
_GONE = ("the tool calls this answer is for no longer wait for approval (they were answered, or their time ran "
         "out); call again to start over")
Report = Callable[[float, "float | None", "str | None"], Awaitable[None]]


class MCPConduit:
    """Serves a manager's agent over MCP: ``transport="stdio"`` (default) or ``"http"`` (streamable HTTP).

    ``tool`` and ``description`` are the tool's name and what clients (and their models) are told about it;
    ``name`` is the server's name. HTTP settings: ``host``, ``port`` (0: any free port), ``path``, ``token``
    (the bearer token clients must send; without one the conduit is refused unless ``allow_no_token`` and
    ``host`` is a loopback address), ``max_body_bytes`` (larger request bodies get 413; 4 MiB by default),
    ``header_timeout`` (seconds a connection has to send each request's headers) and ``shutdown_timeout``
    (seconds requests in flight get on shutdown).

    With a token, a request without it (or with another) gets 401 with ``WWW-Authenticate: Bearer realm="mcp",
    resource_metadata="..."`` (plus ``error="invalid_token"`` for a wrong one) and a JSON-RPC error saying it
    is unauthorized; ``GET /.well-known/oauth-protected-resource`` (and the same followed by ``path``) answer
    the RFC 9728 metadata without a token. It names no authorization server: the token is fixed, not OAuth.
    """

    def __init__(
        self,
        *,
        transport: Literal["stdio", "http"] = "stdio",
        tool: str = "ask",
        description: str = DESCRIPTION,
        name: str = "agent",
        host: str = "127.0.0.1",
        port: int = 8000,
        path: str = "/mcp",
        token: str | None = None,
        allow_no_token: bool = False,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        header_timeout: float = 10.0,
        shutdown_timeout: float = 5.0,
    ) -> None:
        if transport not in ("stdio", "http"):
            raise UsageError(f"transport must be 'stdio' or 'http', got {transport!r}")
        for what, value in (("tool", tool), ("name", name)):
            if not isinstance(value, str) or not value or not all(c.isalnum() or c in "_-." for c in value):
                raise UsageError(f"{what} must be letters, digits, '_', '-' or '.', got {value!r}")
        if not isinstance(description, str) or not description.strip():
            raise UsageError("description must be a non-empty string: it tells clients what the tool does")
        if transport == "http":
            if token is not None and (not isinstance(token, str) or not token or any(c.isspace() for c in token)):
                raise UsageError("token must be a non-empty string without spaces")
            if token is None and not allow_no_token:
                raise UsageError("MCPConduit over HTTP needs a bearer token (token=...); to serve this machine only "
                                 "without one, pass allow_no_token=True with a loopback host")
            if token is None and not is_loopback(host):
                raise UsageError(f"refusing to serve {host!r} without a token; pass token=... or use 127.0.0.1")
            if not (isinstance(port, int) and not isinstance(port, bool) and 0 <= port <= 65535):
                raise UsageError(f"port must be 0..65535 (0: any free port), got {port!r}")
            if not isinstance(path, str) or not path.startswith("/"):
                raise UsageError(f"path must start with '/', got {path!r}")
            positive_int("max_body_bytes", max_body_bytes)
            positive_number("header_timeout", header_timeout, unit="seconds")
            positive_number("shutdown_timeout", shutdown_timeout, unit="seconds")
        self.transport = transport
        self.tool, self.description, self.name = tool, description, name
        self.host, self.port, self.path = host, port, path
        self.token = token
        self.max_body_bytes = max_body_bytes
        self.header_timeout = float(header_timeout)
        self.shutdown_timeout = float(shutdown_timeout)

    def server(self, manager: Manager, *, quota: TokenQuota | None = None) -> Server:
        """The MCP server (the SDK's low-level ``Server``) answering for ``manager``; ``serve`` runs it, and
        ``mcp.Client(conduit.server(manager))`` talks to it in-process. The manager must be running. With a
        ``quota`` (a server's sessions per token), each call's conversation is opened within its caller's: a
        call beyond it is answered with a tool error saying so."""
        if not isinstance(manager, Manager):
            raise UsageError(f"MCPConduit serves a session Manager, got {manager!r}")
        if quota is not None and not isinstance(quota, TokenQuota):
            raise UsageError(f"quota must be a TokenQuota or None, got {quota!r}")
        agent = _AgentTool(manager, self.tool, self.description, quota)
        server = Server(self.name, version="0.1.0", on_list_tools=agent.list_tools, on_call_tool=agent.call_tool)
        server.middleware.append(boundary(self.name, manager.approval_timeout))  # seals an approval's round trip
        return server

    async def serve(self, manager: Manager, *, task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED
                    ) -> None:
        """Serve until the client hangs up (stdio) or until cancelled (HTTP). With ``await
        group.start(conduit.serve, manager)`` over HTTP the caller gets the endpoint's URL once it listens."""
        server = self.server(manager)
        if self.transport == "stdio":
            async with stdio_server() as (read, write):
                task_status.started("stdio")
                await server.run(read, write, server.create_initialization_options())
            return
        await self._serve_http(server, task_status)

    async def _serve_http(self, server: Server, task_status: anyio.abc.TaskStatus[str]) -> None:
        posts = Posts(server.streamable_http_app(streamable_http_path=self.path, host=self.host,
                                                  max_request_body_size=self.max_body_bytes))
        app: Any = posts
        if self.token is not None:
            app = ProtectedResource(app, token=self.token, path=self.path, name=self.name)
        with listen(self.host, self.port) as sock:
            # The MCP sessions end before the server's wait does, so their open streams do not hold it up; but only
            # once the calls in flight are answered, or the session's end would cut their answers off.
            await serve_asgi(app, sock, host=self.host, path=self.path, shutdown_timeout=self.shutdown_timeout,
                             header_timeout=self.header_timeout, task_status=task_status,
                             around=drained(server.session_manager.run(), posts, self.shutdown_timeout),
                             what="MCP server")


class _AgentTool:
    """The one tool: a message in, the agent's answer out, progress on the way."""

    def __init__(self, manager: Manager, name: str, description: str, quota: TokenQuota | None) -> None:
        self.manager = manager
        self.name = name
        self.quota = quota
        schema = {
            "type": "object",
            "properties": {"message": {"type": "string", "description": "what to ask the agent"}},
            "required": ["message"],
            "additionalProperties": False,
        }
        self.spec = types.Tool(name=name, description=description, input_schema=schema)
        self.answering: set[str] = set()  # the conversations calls run now (a retry must not take one over)

    async def list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[self.spec])

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams
                        ) -> types.CallToolResult | types.InputRequiredResult:
        if params.name != self.name:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        arguments: Mapping[str, Any] = params.arguments or {}
        message = arguments.get("message")
        if not isinstance(message, str) or not message.strip() or set(arguments) - {"message"}:
            return _failure("the tool takes one argument, 'message': a non-empty string")
        caller = caller_of(ctx)
        asked = None
        if params.request_state is not None:  # the client's answer to the approval its call asked for
            try:
                asked = Asked.from_state(params.request_state)
            except ValueError as exc:
                return _failure(f"the call cannot go on: {exc}")
            if not asked.session.startswith(f"{caller.namespace}:"):  # sealed for this caller: never, but cheap
                return _failure("the call cannot go on: its conversation is another caller's")
            if asked.session in self.answering:
                return _failure("this call's approval is being answered already")
        try:
            # A new conversation lives in the caller's namespace, as the HTTP conduit keys a token's sessions.
            key = f"{caller.namespace}:{secrets.token_urlsafe(18)}" if asked is None else asked.session
            session = await (self.manager.open(key) if self.quota is None else self.quota.open(caller.id, key))
        except ShuttingDown:
            return _failure(_SHUTTING_DOWN)
        except LoopError as exc:
            return _failure(f"the agent cannot take the call: {exc}")
        self.answering.add(session.id)
        outcome: State | Exception | tuple[ToolCall, ...] | None = None
        try:
            if asked is None:
                outcome = await _run(session, functools.partial(session.ask, message, caller=caller), ctx, caller)
            elif not session.busy and tuple(c.id for c in awaiting_approval(session.state)) == asked.calls:
                given = decisions(awaiting_approval(session.state), answer_of(params.input_responses))
                outcome = await _run(session, functools.partial(session.decide, given, caller=caller), ctx, caller)
        finally:
            self.answering.discard(session.id)
            with anyio.CancelScope(shield=True):  # a cancelled call interrupts the agent
                # Stopped before the client's retry can open the conversation again, when it waits for one.
                await self.manager.close(session.id, wait=isinstance(outcome, tuple))
        if outcome is None:  # the calls the answer is for wait no more
            return _failure(_GONE)
        if isinstance(outcome, tuple):  # calls wait for the client's approval: it calls again with its answer
            return Asked(session.id, tuple(c.id for c in outcome)).result(outcome)
        if isinstance(outcome, Exception) and self.manager.stopping:
            return _failure(_SHUTTING_DOWN)
        if isinstance(outcome, Exception):
            _log.info("agent call failed", session=session.id, error=repr(outcome))  # the session warned already
            return _failure(f"the agent failed: {type(outcome).__name__}: {outcome}")
        answer = outcome.answer
        result = outcome.outcome
        if result is not None and not result.ok:
            reason = result.reason or "a budget or cap stopped it"
            return _failure(f"{answer or ''}\n\n[the agent did not finish ({result.status}): {reason}]".strip())
        if not answer:
            return _failure("the agent finished without a written answer")
        return types.CallToolResult(content=[types.TextContent(type="text", text=answer)])


async def _run(session: Session, start: Callable[[], Awaitable[State]], ctx: Any, caller: Caller
               ) -> State | Exception | tuple[ToolCall, ...]:
    """Run ``start`` (the message, or the decisions resuming it), reporting progress and asking the client about
    the calls that need approval meanwhile; the conversation, the exception processing raised, or the calls the
    conversation keeps waiting for a client that answers by calling again (see ``session.mcp._approvals``)."""
    later = asks_by_retry(ctx) and can_elicit(ctx)
    with session.events.subscribe(buffer=None, main_line=True) as events, \
            session.events.subscribe(buffer=None) as everything:
        async with anyio.create_task_group() as group:
            group.start_soon(_progress, events, ctx.session.report_progress)
            group.start_soon(_answer_live, everything, session, ctx, caller)
            result: State | Exception | tuple[ToolCall, ...]
            try:
                state = await start()
                while (calls := awaiting_approval(state)) and not later:
                    deadline = min((r.deadline for r in session.pending_approvals() if not r.live), default=None)
                    state = await session.decide(await elicit(ctx, calls, deadline), caller=caller)
                result = calls or state
            except Exception as exc:
                result = exc
            finally:
                events.close()  # the reporter sends what is buffered, then ends
                everything.close()
    return result


async def _answer_live(events: Any, session: Session, ctx: Any, caller: Caller) -> None:
    """Ask the client about each set of calls a running program waits on, as they come, until the run ends."""
    async with anyio.create_task_group() as group:
        async for event in events:
            if isinstance(event, ApprovalRequested) and event.live:
                group.start_soon(_approve_live, session, ctx, caller, event)
        group.cancel_scope.cancel()  # the run is over: nothing waits for those answers any more


async def _approve_live(session: Session, ctx: Any, caller: Caller, request: ApprovalRequested) -> None:
    calls = request.calls
    given = await elicit(ctx, calls, request.deadline)
    waiting = {c.id for request in session.pending_approvals() if request.live for c in request.calls}
    given = [d for d in given if d.call_id in waiting]  # not those the time ran out for meanwhile
    if given:
        session.approve(given, caller=caller)


async def _progress(events: Any, report: Report) -> None:
    count = turns = 0
    async for event in events:
        if isinstance(event, TurnCompleted) and event.turn.role is Role.ASSISTANT:
            turns += 1
            calls = [c.name for c in event.turn.tool_calls]
            text = f"turn {turns}: calling {', '.join(calls)}" if calls else f"turn {turns}: answered"
        elif isinstance(event, ToolFinished):
            text = f"{event.call.name} {'failed' if event.result.is_error else 'done'}"
        else:
            continue
        count += 1
        try:
            await report(count, None, text)  # a no-op when the client sent no progress token
        except Exception as exc:  # the client went away: the answer will not reach it either
            _log.info("progress not delivered", error=repr(exc))
            return


def _failure(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
