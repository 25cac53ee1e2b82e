"""The AG-UI protocol on the HTTP conduit: ``POST /agui`` takes a ``RunAgentInput`` and streams the run as AG-UI
events (``text/event-stream``, encoded by ``ag_ui.encoder.EventEncoder``), so frontends written for the protocol
(``@ag-ui/client``'s ``HttpAgent``, CopilotKit) drive a served agent unchanged.

Threads. ``threadId`` names the conversation: the session the session routes know by the same id for the same
token (``/sessions/{threadId}``: its turns, its event stream, its approvals), so a thread started here can be
followed or continued there, and the other way round; another token naming the same thread gets a conversation of
its own. A thread that does not exist yet starts from the input's messages before its last one; one that exists
keeps its stored history and takes only the input's new message (the client sends the whole conversation each
time). That message is the last user message, or the tool messages answering the calls the last run left for
the client. With a ``quota``, a thread is opened within the token's.

The stream (see ``_translate``): ``RUN_STARTED``; the main line's model turns as they are written, each an
assistant message (``REASONING_*`` for its reasoning, ``TEXT_MESSAGE_*`` for its text, ``TOOL_CALL_*`` for its
calls); ``TOOL_CALL_RESULT`` for each result stored; ``STEP_STARTED``/``STEP_FINISHED`` around each nested
pattern run (a step per run path); then ``MESSAGES_SNAPSHOT`` (the whole conversation as AG-UI messages, which the
client's own list takes over) and one of:

- ``RUN_FINISHED`` with ``result`` ``{"status": "ok", "answer": ...}``.
- ``RUN_FINISHED`` with ``result.status`` ``"degraded"`` and its ``reason`` (a budget or cap stopped the run and
  the answer was written with what the pattern had). AG-UI 1.0 has no outcome for "completed, but worse than
  asked": its outcomes are success, interrupt (waiting for an answer) and cancelled (nothing produced). A degraded
  run did complete and did produce an answer, so the outcome is success, and the run's own ``result`` says it is
  degraded, and why: a client reading ``result.status`` never takes it for a clean answer.
- ``RUN_FINISHED`` with the interrupt outcome when tool calls wait for approval: one ``Interrupt`` per call (its
  id and ``toolCallId`` are the call's id, ``reason`` ``"tool_approval"``, ``expiresAt`` when the call is denied
  unanswered). The next input's ``resume`` entries answer them, all together: ``"resolved"`` with the payload
  ``{"approved": true|false, "reason": "..."}`` (or just ``true``/``false``), or ``"cancelled"`` (denied); the
  approved calls run and the run goes on in that stream.
- ``RUN_FINISHED`` with the success outcome and ``pendingToolCallIds`` when the model called frontend tools
  (the input's ``tools``, offered beside the agent's own, ``loop.external_tools``): the calls were streamed, and
  the next input's tool messages answer them; the run goes on from there.
- ``RUN_ERROR`` when the run failed (its message and a ``code``: ``provider_error``, ``interrupted``,
  ``guardrail``, ``server_shutting_down``, ...; never a stack trace).

Approvals. ``approvals`` is ``"ask"`` (the default: calls the conversation can keep open end the run with
interrupts, as above), ``"deny"`` or ``"allow"`` (decided as they come, for a server whose policy is its own).
Calls a running program waits on (a branch's, a code-action program's) cannot end the run: they wait for the
session routes' approvals, as every conduit's do.

Errors before the stream starts are HTTP statuses with ``{"error": {"type", "message"}}``: 400 (not JSON), 422 (not
a valid ``RunAgentInput``, naming the field; tool messages that do not answer the thread's open calls; ``resume``
entries that do not answer its interrupts), 409 (``resume`` when nothing waits), 408/413 (a body too slow or too
large), 429 (the token's quota, or the thread's queue full), 503 (the manager's sessions, or shutting down).

Cancellation. A client that disconnects stops its run: the message is interrupted if it runs (its open tool calls
get "cancelled" results in the stored conversation), or, still queued behind another run of the thread, is no
longer waited for. A stream quiet for ``keepalive`` seconds gets an SSE comment, so proxies keep it open.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Union

from starlette.requests import ClientDisconnect, Request
from starlette.routing import Route

from loop import Approver, Decision, LoopError, Part, ToolCall, ToolResult, UsageError, awaiting_approval, tracing
from loop.checks import positive_int, positive_number
from session._bearer import TokenQuota, caller_in, owner_in
from session._body import BodyTooLarge, read_body
from session._manager import Manager, SessionLimit, ShuttingDown
from session._steps import agent_tool_names
from session._message import ToolResultsMismatch, before
from session._problem import Problem
from session._session import Session
from session.agui._errors import client_closed
from session.agui._input import RunRequest, decisions, parse_input
from session.agui._run import SHUTTING_DOWN, Run
from session.openai._errors import OpenAIError

SessionKey = Callable[[Request, str], str]
SessionOpened = Callable[[str, Session], None]
POLICIES = ("ask", "deny", "allow")
DENIED = "the server's approval policy for AG-UI runs denies calls that need approval"
ALLOWED = "allowed by the server's approval policy for AG-UI runs"
_log = tracing.logger("session.agui")


def agui_routes(manager: Manager, *, session_key: SessionKey, on_open: SessionOpened, quota: TokenQuota | None,
                keepalive: float, body_timeout: float, max_body_bytes: int, approvals: str = "ask") -> list[Route]:
    """``POST /agui`` over ``manager`` (see the module docstring), to mount beside the session routes.

    ``session_key(request, thread_id)`` is the id the manager knows the thread's session by (the session routes'
    namespace for the request's token); ``on_open(thread_id, session)`` hears of every thread a run opens, once it
    is open. With a ``quota``, threads are opened within the request's token's. A body must arrive within
    ``body_timeout`` seconds and hold at most ``max_body_bytes``; a stream quiet for ``keepalive`` seconds gets a
    comment. ``approvals`` decides calls that need approval: ``"ask"``, ``"deny"`` or ``"allow"``. The manager must
    be entered (``async with manager:``) while requests are served."""
    endpoint = _Endpoint(manager, session_key=session_key, on_open=on_open, quota=quota, keepalive=keepalive,
                         body_timeout=body_timeout, max_body_bytes=max_body_bytes, approvals=approvals)
    return [Route("/agui", endpoint.run, methods=["POST"])]


def check_approvals(policy: object) -> str:
    """``policy`` when the AG-UI route knows it, else ``UsageError``."""
    if policy not in POLICIES:
        raise UsageError(f"approvals must be one of {', '.join(map(repr, POLICIES))}, got {policy!r}")
    return str(policy)


def _policy_approver(policy: str) -> Approver | None:
    """The approver deciding every call that needs approval as ``policy`` says; ``None`` to ask (keep them open)."""
    if policy == "ask":
        return None
    approve = policy == "allow"

    async def decide(calls: tuple[ToolCall, ...]) -> list[Decision]:
        return [Decision(c.id, approve, ALLOWED if approve else DENIED) for c in calls]

    return decide


class _Endpoint:
    """The handler behind ``agui_routes``; each run's own work goes to a ``Run``."""

    def __init__(self, manager: Manager, *, session_key: SessionKey, on_open: SessionOpened,
                 quota: TokenQuota | None, keepalive: float, body_timeout: float, max_body_bytes: int,
                 approvals: str) -> None:
        if not isinstance(manager, Manager):
            raise UsageError(f"agui_routes needs a session Manager, got {manager!r}")
        if not callable(session_key):
            raise UsageError(f"session_key must be a function (request, thread_id) -> str, got {session_key!r}")
        if not callable(on_open):
            raise UsageError(f"on_open must be a function (thread_id, session), got {on_open!r}")
        if quota is not None and not isinstance(quota, TokenQuota):
            raise UsageError(f"quota must be a TokenQuota or None, got {quota!r}")
        self.manager = manager
        self.session_key = session_key
        self.on_open = on_open
        self.quota = quota
        self.keepalive = float(positive_number("keepalive", keepalive, unit="seconds"))
        self.body_timeout = float(positive_number("body_timeout", body_timeout, unit="seconds"))
        self.max_body_bytes = positive_int("max_body_bytes", max_body_bytes)
        self.approver = _policy_approver(check_approvals(approvals))
        self._agent_tools: frozenset[str] | None = None

    def agent_tools(self) -> frozenset[str]:
        """The names of the agent's own tools, which frontend tools may not take (found once)."""
        if self._agent_tools is None:
            self._agent_tools = agent_tool_names(self.manager)
        return self._agent_tools

    async def run(self, request: Request) -> Any:
        try:
            run_request = parse_input(await self._body(request), agent_tools=self.agent_tools())
            session = await self._open(request, run_request)
            message, given = self._message(session, run_request)
        except Problem as problem:
            return problem.response()
        return Run(self, session, run_request, message=message, decisions=given, caller=caller_in(request.scope))

    async def _body(self, request: Request) -> bytes:
        try:
            return await read_body(request, max_bytes=self.max_body_bytes, timeout=self.body_timeout)
        except BodyTooLarge:
            raise Problem(413, "payload_too_large",
                          f"the request body is larger than {self.max_body_bytes} bytes") from None
        except TimeoutError:
            raise Problem(408, "request_timeout", f"the request body did not arrive within {self.body_timeout:g} s",
                          {"connection": "close"}) from None
        except ClientDisconnect:
            raise client_closed() from None

    async def _open(self, request: Request, run_request: RunRequest) -> Session:
        """The thread's session, opened (from the input's earlier messages when the thread is new)."""
        thread = run_request.thread_id
        history = run_request.conversation.history
        try:
            key = self.session_key(request, thread)
            if self.quota is None:
                session = await self.manager.open(key, history=history)
            else:
                session = await self.quota.open(owner_in(request.scope), key, history=history, refuse=_over_quota)
            self.on_open(thread, session)
        except Problem:
            raise
        except OpenAIError as exc:  # what the session routes refuse a conversation with (one grown too large)
            raise Problem(exc.status, exc.code or "refused", exc.message) from None
        except ShuttingDown:
            raise Problem(503, "server_shutting_down", SHUTTING_DOWN) from None
        except SessionLimit as exc:
            raise Problem(503, "session_limit", str(exc)) from None
        except UsageError as exc:
            raise Problem(422, "invalid_request", f"threadId: {exc}") from None
        except LoopError as exc:
            _log.warning("could not open a thread", thread=thread, error=repr(exc))
            raise Problem(500, "session_unavailable", f"could not open the thread: {exc}") from exc
        return session

    def _message(self, session: Session, run_request: RunRequest
                 ) -> tuple[Union[str, tuple[Part, ...], None], list[Decision] | None]:
        """What the run sends the thread: the input's new message (the user's text, or parts with the images and
        files it shows, or results), or the decisions its ``resume`` entries give."""
        state = session.state
        if run_request.resume:
            return None, decisions(run_request.resume, awaiting_approval(state))
        message = run_request.conversation.message
        if isinstance(message, tuple) and isinstance(message[0], ToolResult):
            # results, named as the thread's own open calls are
            names = {c.id: c.name for c in state.pending_calls}
            message = tuple(ToolResult(r.call_id, names.get(r.call_id, r.name), r.content, r.is_error, r.attachments)
                            for r in message if isinstance(r, ToolResult))
            try:
                before(state, message)
            except ToolResultsMismatch as exc:
                raise Problem(422, "tool_call_mismatch", f"the tool messages do not answer the thread's open tool "
                                                         f"calls: {exc}") from None
        return message, None


def _over_quota(why: str) -> Problem:
    return Problem(429, "session_quota", f"too many open sessions: {why}")
