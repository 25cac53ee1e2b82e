"""The OpenAI-compatible endpoint: any OpenAI client can talk to the pattern a ``Manager`` runs, and use it as its
model, with structured output and its own tools.

``openai_routes(manager)`` returns ``POST /v1/chat/completions``, ``POST /v1/responses`` (OpenAI's Responses
API, described in ``session.openai._responses``), ``GET /v1/models`` and ``GET /v1/models/{id}`` to mount in any
Starlette app (which does its own auth); ``openai_app(manager, token=...)`` serves them alone.

Sessions. Chat Completions is stateless: the client sends the whole conversation each time. Each request gets
a fresh session whose stored conversation is seeded with every message but the last; the last must be the
user's (or tool results, below), and it is the message the session processes. The session is closed once the
answer is out, and its conversation deleted from the store (when the store can delete) unless
``keep_conversations``. A client that wants the server to keep a conversation, with the tool calls, results and
reports it never sees, sends an ``X-Session-Id: <id>`` header: a session that does not exist yet starts from
the request's earlier messages; one that exists keeps its stored history and only the request's last message
is used. The ``user`` field is not a session id: clients put a stable end-user id there, shared by all of that
user's conversations. Responses carry ``X-Session-Id`` whenever the conversation is kept.

Answers. ``message.content`` is the final answer (``state.answer``), streamed or not: the text of the turn the
run ended with, never the text of earlier turns (what a model writes before calling tools is working, and travels
in ``reasoning_content``, below). ``finish_reason`` is ``"stop"``, or ``"length"`` when the run was degraded (a
budget or cap stopped it and the answer was written with what the pattern had), so a degraded run never passes
for a clean one. ``usage`` sums every model call the request made: all turns after the request's message, not
only the last. Sampling parameters (``temperature``, ``max_tokens`` ...) are accepted and not used: the pattern
chooses its own options.

``stop`` (a string, or an array of at most 4 non-empty strings) is applied as OpenAI applies it, to the final
answer only: the content ends just before the first place a stop sequence starts (the sequence and all after it
are not sent), streamed or not, and ``finish_reason`` stays ``"stop"`` (``"length"`` for a degraded run). The
agent's own turns are never cut: the model is not asked to stop, so a stop sequence in its working text or a tool
call cannot break the run, and the run goes on to its end. ``stop`` with a typed ``response_format`` is 400 (the
content is validated JSON, which a cut would break); a wrong type, an empty sequence or more than 4 are 400, each
naming ``stop``.

Structured output. ``response_format`` ``json_schema`` (strict or not) and ``json_object`` run the message
with a typed answer (``cognitive.WithOutput``, native mode): an answer that already validates is kept, else a
tool-free formatting turn asks the provider for the schema, retried with the validation report. ``content`` is
the validated JSON (streamed once, at the end). An answer that never validates fails the request (500,
``verification_failed``). A schema that is not valid JSON Schema, or refers outside itself, is 400. The schema's
regular expressions are matched by RE2, in time linear in the answer (and off the event loop), so a pattern built
to backtrack cannot stall the server: a pattern RE2 cannot compile (a lookaround, a backreference) is 400, named.

Client tools. The client's ``tools`` are offered to the model beside the agent's own (a client tool named
like an agent tool is 400): the agent's tools run on the server as always; a call to a client tool ends the
run (``loop.external_tools``), and the answer carries it in ``tool_calls`` with ``finish_reason``
``"tool_calls"`` (when the model called both kinds in one turn, the agent's ran first, and only the client's
are handed over). The client's next request sends the results as ``tool`` messages after that assistant
message, and the run goes on from them: in the same stored conversation with ``X-Session-Id`` (the results
must answer exactly its open calls, else 400), else rebuilt from the messages (where the agent's own calls of
that turn are not: only a kept conversation holds them). ``tool_choice`` is laid over every turn of the run;
``parallel_tool_calls`` is accepted and not used. Patterns continue by running again from the results: in a
kept conversation a ``Chain`` goes on in its last stage and a ``Router`` down the route it took (they read where
they stopped from the answer that handed the calls over); in a rebuilt one they start over.

What the agent did goes in ``reasoning_content``, a field standard clients ignore and reasoning-aware
(DeepSeek-style) clients show apart from the answer: the model's reasoning, and a line (or block) for each
tool call, tool result, verification report and degradation::

    → calling add({"a": 2, "b": 3})
    ← add: 5
    verification report (attempt 1):
    # Verification: 1 of 1 checks did not pass
    ...
    degraded: ReAct reached max_turns=12 ...

The text a model writes in a turn that goes on to call the server's tools (``Let me work that out with the
divide tool.``) is a block of its own in this trace, before that turn's call lines. Streaming sends all of it as
it happens, as ``delta.reasoning_content``; a non-streaming answer carries the same lines in
``message.reasoning_content``.

Streaming (``"stream": true``): ``chat.completion.chunk`` events: the role first, the agent's work as
``delta.reasoning_content`` as it happens, the answer as ``delta.content``, calls left for the client as one
``delta.tool_calls``, a last chunk with ``finish_reason``, a usage chunk (``choices: []``) if
``stream_options.include_usage``, and ``data: [DONE]``; SSE comments keep a quiet stream (a long tool call) open
through proxies. The streamed content is the non-streaming ``message.content``, and sent text cannot be taken
back, so text goes out as ``content`` only once it is known to be the answer:

- When no turn of the run can call a tool (the agent has no tools and the client sent none, or ``tool_choice`` is
  ``"none"``), all text is answer text, and it streams the moment the model writes it (held back only as long as
  it could be the start of a ``stop`` sequence). A pattern that writes several answers then keeps them all in the
  stream, separated by a blank line: a draft its verifier rejected, or another branch's answer; the stream ends
  with the final one (sent once more at the end if the last streamed turn was not it, as when an earlier branch
  won or a turn middleware replayed it).
- Otherwise a turn's text shows what it is only once the turn has ended: the text of a turn that called the
  server's tools is working text, sent then as one ``reasoning_content`` block before its calls (the same block
  the non-streaming ``reasoning_content`` holds); the answer is sent as ``content`` once the run has ended, in
  one piece, exactly as the non-streaming answer holds it. A typed answer too: its JSON goes out once, at the end.
  So a client streaming a tool-using agent sees the work live and the answer whole.

Cancellation. A client that disconnects before its answer (a closed stream, or an SDK timeout on a
non-streaming request) stops its run: a fresh session is closed; a named session's message is interrupted if
it is running (one still queued behind another client's message runs later). Tool calls open at that moment
get "cancelled" results in the stored conversation.

Retries. The SDKs retry timeouts and 5xx answers, which would run the agent, and its tools, again. A request
with an ``X-Request-Id: <key>`` header is run once per key (per token): a retry with the same key and body
waits for the first run and gets its answer (a stream gets it as one burst of chunks), kept for
``idempotency_ttl`` seconds; and when a keyed request's client disconnects, its run waits ``retry_grace``
seconds for a retry to take it over before it is stopped. The same key with another body is 400
(``request_id_reused``). An answer that was never accepted (429, 503) is not kept: its retry runs.

Errors. Bad requests are answered as OpenAI does: ``{"error": {"message", "type", "param", "code"}}`` with 400,
404 (unknown model), 408 (a body slower than ``body_timeout``), 413 (body over ``max_body_bytes``); 503 when
the manager has its most sessions open, 429 when a named session's queue is full or the token holds as many open
sessions as its ``quota`` allows (all safe to retry). A body that is not UTF-8 (UTF-16 or UTF-32, which
``json.loads`` would guess: ``invalid_encoding``), nests arrays and objects more than ``MAX_JSON_DEPTH`` (64) deep,
or holds a lone UTF-16 surrogate anywhere (text UTF-8 cannot carry), is 400. A request whose client leaves before
its answer is answered 499 (nginx's "client closed request"), which only the request log sees.
A run that raises is answered 500 (502 when the model provider failed, 409 when the message was interrupted) with
``x-should-retry: false``: a retry would run the agent and its tools again. Mid-stream, the error is a
``data: {"error": {...}}`` event and the stream ends with no finish reason and no ``[DONE]`` (the ``openai``
package raises ``APIError``). A request in flight when the server shuts down (``Manager.stop``: its run is
cancelled) is answered 503 ``server_shutting_down``; a stream gets that error event, then ``data: [DONE]``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Union

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from loop import LoopError, UsageError, tracing
from loop.checks import positive_int, positive_number
from session._bearer import BearerAuth, TokenQuota, caller_in, owner_in
from session._body import BodyTooLarge, read_body
from session._manager import Manager
from session._steps import agent_tool_names
from session._serving import DEFAULT_MAX_BODY_BYTES
from session._session import Session
from session._message import ToolResultsMismatch, before
from session.openai._answer import failure, opening_errors
from session.openai._completion import SESSION_HEADER, Completion
from session.openai._policy import policy_approver
from session.openai._errors import client_closed, unauthorized
from session.openai._replay import KEY_HEADER, Replay, Replays
from session.openai._responses import Responses
from session.openai._wire import ChatWire
from session.stores import DeletingStore
from session.openai._request import ChatRequest, OpenAIError, parse_chat_request

SessionAccess = Callable[[Request, str], Union[bool, Awaitable[bool]]]
SessionKey = Callable[[Request, str], str]
SessionOpened = Callable[[str, Session], None]
_log = tracing.logger("session.openai")


def openai_routes(manager: Manager, *, model_name: str = "agent", keep_conversations: bool = False,
                  max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, session_access: SessionAccess | None = None,
                  session_key: SessionKey | None = None, on_open: SessionOpened | None = None,
                  keepalive: float = 15.0, quota: TokenQuota | None = None,
                  body_timeout: float = 30.0, retry_grace: float = 30.0, idempotency_ttl: float = 600.0,
                  approvals: str = "deny") -> list[Route]:
    """The routes of the OpenAI-compatible API over ``manager`` (see the module docstring for the semantics).

    ``model_name`` is the one model listed and accepted. ``session_access(request, session_id)`` (sync or
    async), if given, decides whether a request may use the session its ``X-Session-Id`` names; refused
    requests get 404. ``session_key(request, session_id)``, if given, is the id the manager knows that session by
    (clients only ever see their own name for it): a server with several clients puts each client's sessions
    in a namespace of its own, so two clients naming the same session never share it, even after a restart.
    ``on_open(session_id, session)``, if given, hears of every session a request names, once it is open (the
    HTTP conduit uses it to keep that session's event log following it). With a ``quota``, every session is
    opened through it, for the request's token. A request's body must arrive within ``body_timeout`` seconds.
    A stream quiet for ``keepalive`` seconds (a long tool call) gets an SSE comment, so
    proxies do not close it. A request with an ``X-Request-Id`` keeps its answer ``idempotency_ttl`` seconds for
    retries, and a run whose client left waits ``retry_grace`` seconds for a retry before it is stopped. Tool
    calls that need approval are decided by ``approvals``: ``"deny"`` or ``"allow"`` (see ``session.openai._policy``).
    The manager must be entered (``async with manager:``) while requests are served.
    """
    endpoint = _Endpoint(manager, model_name=model_name, keep_conversations=keep_conversations,
                         max_body_bytes=max_body_bytes, session_access=session_access, session_key=session_key,
                         on_open=on_open, keepalive=keepalive, quota=quota, body_timeout=body_timeout,
                         retry_grace=retry_grace, idempotency_ttl=idempotency_ttl, approvals=approvals)
    return [
        Route("/v1/chat/completions", endpoint.create, methods=["POST"]),
        Route("/v1/responses", Responses(endpoint).create, methods=["POST"]),
        Route("/v1/models", endpoint.models, methods=["GET"]),
        Route("/v1/models/{model:path}", endpoint.model, methods=["GET"]),
    ]


def openai_app(manager: Manager, *, token: str | None = None, enter_manager: bool = True, **settings: Any) -> Starlette:
    """A Starlette app serving only ``openai_routes(manager, **settings)``.

    With a ``token``, every request needs ``Authorization: Bearer <token>`` (the ``api_key`` of an OpenAI
    client); others get 401 in OpenAI's error format. With ``enter_manager``, the app's lifespan runs
    ``async with manager:`` (servers such as uvicorn and Hypercorn run it; ``httpx.ASGITransport`` does not).
    """
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise UsageError(f"token must be a non-empty string or None, got {token!r}")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if enter_manager:
            async with manager:
                yield
        else:
            yield

    return Starlette(routes=openai_routes(manager, **settings), lifespan=lifespan,
                     middleware=[Middleware(BearerAuth, tokens=[token], realm=None, error_body=unauthorized)]
                     if token is not None else [],
                     exception_handlers={HTTPException: _http_error, Exception: _crash})


class _Endpoint:
    """The handlers behind ``openai_routes``; each completion's own work goes to a ``Completion``."""

    def __init__(self, manager: Manager, *, model_name: str, keep_conversations: bool, max_body_bytes: int,
                 session_access: SessionAccess | None, session_key: SessionKey | None,
                 on_open: SessionOpened | None, keepalive: float, quota: TokenQuota | None,
                 body_timeout: float, retry_grace: float, idempotency_ttl: float, approvals: str = "deny") -> None:
        if not callable(getattr(manager, "open", None)):
            raise UsageError(f"openai_routes needs a session Manager, got {manager!r}")
        if not isinstance(model_name, str) or not model_name:
            raise UsageError(f"model_name must be a non-empty string, got {model_name!r}")
        positive_int("max_body_bytes", max_body_bytes)
        positive_number("keepalive", keepalive, unit="seconds")
        positive_number("body_timeout", body_timeout, unit="seconds")
        if quota is not None and not isinstance(quota, TokenQuota):
            raise UsageError(f"quota must be a TokenQuota or None, got {quota!r}")
        if session_access is not None and not callable(session_access):
            raise UsageError(f"session_access must be a function (request, session_id) -> bool, got {session_access!r}")
        if session_key is not None and not callable(session_key):
            raise UsageError(f"session_key must be a function (request, session_id) -> str, got {session_key!r}")
        if on_open is not None and not callable(on_open):
            raise UsageError(f"on_open must be a function (session_id, session), got {on_open!r}")
        self.manager = manager
        self.approver = policy_approver(approvals)
        self.model_name = model_name
        self.keep_conversations = bool(keep_conversations)
        self.max_body_bytes = max_body_bytes
        self.session_access = session_access
        self.session_key = session_key
        self.on_open = on_open
        self.keepalive = float(keepalive)
        self.quota = quota
        self.body_timeout = float(body_timeout)
        self.retry_grace = float(positive_number("retry_grace", retry_grace, unit="seconds"))
        self.replays = Replays(ttl=idempotency_ttl)
        self.created = int(time.time())
        self._agent_tools: frozenset[str] | None = None

    def _model(self) -> dict[str, Any]:
        return {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "session"}

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [self._model()]})

    async def model(self, request: Request) -> Response:
        name = request.path_params["model"]
        if name != self.model_name:
            return OpenAIError(404, f"The model `{name}` does not exist or you do not have access to it.",
                               param="model", code="model_not_found").response()
        return JSONResponse(self._model())

    async def create(self, request: Request) -> Any:
        entry = None
        try:
            body = await self.read(request)
            chat = parse_chat_request(body, model_name=self.model_name, agent_tools=self.agent_tools())
            named_session = _session_header(request)  # checked first: a retry must name a valid session too
            key = request.headers.get(KEY_HEADER)
            if key is not None:
                named = (named_session or "").encode()
                entry, new = self.replays.take(owner_in(request.scope), key,
                                               named + b"\n" + body)
                if not new:  # a retry: the first request's run answers it
                    return Replay(entry, stream=chat.stream, wire=functools.partial(
                        ChatWire, model=self.model_name, include_usage=chat.include_usage))
            session, name, fresh = await self._open(request, chat)
        except BaseException as error:
            if entry is not None:
                self.replays.drop(entry)  # nothing ran: a retry may run
            if isinstance(error, OpenAIError):
                return error.response()
            raise
        wire = ChatWire(name if fresh else "chatcmpl-" + secrets.token_urlsafe(18), int(time.time()),
                        self.model_name, include_usage=chat.include_usage)
        kept = not fresh or self.keep_conversations
        completion = Completion(self, session, chat, wire, fresh=fresh, entry=entry, caller=caller_in(request.scope),
                                headers={SESSION_HEADER: name} if kept else {})
        return completion if chat.stream else await completion.respond(request.receive)

    def agent_tools(self) -> frozenset[str]:
        """The names of the agent's own tools, which client tools may not take (found once)."""
        if self._agent_tools is None:
            self._agent_tools = agent_tool_names(self.manager)
        return self._agent_tools

    async def read(self, request: Request) -> bytes:
        try:
            return await read_body(request, max_bytes=self.max_body_bytes, timeout=self.body_timeout)
        except BodyTooLarge:
            raise OpenAIError(413, f"The request body is larger than {self.max_body_bytes} bytes.",
                              code="request_too_large") from None
        except TimeoutError:
            raise OpenAIError(408, f"The request body did not arrive within {self.body_timeout:g} seconds.",
                              code="request_timeout", headers={"connection": "close"}) from None
        except ClientDisconnect:  # logged as client-closed, not as a failure of the server's
            raise client_closed() from None

    async def _open(self, request: Request, chat: ChatRequest) -> tuple[Session, str, bool]:
        """The request's session, the name its client knows it by, and whether it is a fresh one for this
        request (named ``chatcmpl-...``) rather than the one the client named."""
        named = _session_header(request)
        with opening_errors():
            if named is None:
                name = "chatcmpl-" + secrets.token_urlsafe(18)
                return await self.open_fresh(request, self.key(request, name), chat), name, True
            await self.check_access(request, named, OpenAIError(404, f"No session {named!r} is available to you.",
                                                                code="session_not_found"))
            session = await self.open_key(request, self.key(request, named), chat)
            _check_results(session, chat)
            if self.on_open is not None:
                self.on_open(named, session)
            return session, named, False

    async def check_access(self, request: Request, name: str, refusal: OpenAIError) -> None:
        """Raise ``refusal`` unless the request may use the session it calls ``name`` (``session_access``)."""
        allowed = True if self.session_access is None else self.session_access(request, name)
        if inspect.isawaitable(allowed):
            allowed = await allowed
        if not allowed:
            raise refusal

    def key(self, request: Request, name: str) -> str:
        return name if self.session_key is None else self.session_key(request, name)

    async def open_key(self, request: Request, session_id: str, chat: ChatRequest) -> Session:
        if self.quota is None:
            return await self.manager.open(session_id, history=chat.history)
        owner = owner_in(request.scope)
        return await self.quota.open(owner, session_id, history=chat.history, refuse=_quota_error)

    async def open_fresh(self, request: Request, session_id: str, chat: ChatRequest) -> Session:
        try:
            return await self.open_key(request, session_id, chat)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.forget(session_id)
            raise

    async def forget(self, session_id: str) -> None:
        """Delete a per-request conversation from the store, if the store can delete."""
        store = self.manager.store
        if not self.keep_conversations and isinstance(store, DeletingStore):
            try:
                await store.delete(session_id)
            except LoopError as exc:
                _log.warning("could not delete a per-request conversation", session=session_id, error=repr(exc))


def _check_results(session: Session, chat: ChatRequest) -> None:
    """Tool results sent to a kept conversation must answer the calls it left for the client: the check the
    session makes when it takes the message, made now too, so that a streaming client gets a plain 400."""
    if chat.results is not None:
        try:
            before(session.state, chat.results)
        except ToolResultsMismatch as exc:
            raise failure(exc) from None


def _quota_error(why: str) -> OpenAIError:
    return OpenAIError(429, f"Too many open sessions: {why}.", type="requests", code="session_quota")


async def _crash(request: Request, exc: Exception) -> Response:
    """An error no handler answers, in OpenAI's format (the server logs it)."""
    return OpenAIError(500, f"The server failed ({type(exc).__name__}); its log has the details.", type="server_error",
                       code="internal_error").response()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)  # the only exception this handler is registered for
    what = {404: "Unknown request URL", 405: "Method not allowed"}.get(exc.status_code, exc.detail)
    return OpenAIError(exc.status_code, f"{what}: {request.method} {request.url.path}.",
                       code={404: "unknown_url", 405: "method_not_allowed"}.get(exc.status_code),
                       headers=exc.headers).response()


def _session_header(request: Request) -> str | None:
    """The session the request's ``X-Session-Id`` names (``None`` without one); 400 when it names none."""
    named = request.headers.get(SESSION_HEADER)
    if named is not None and not (named.strip() and len(named) <= 200):
        raise OpenAIError(400, "The X-Session-Id header must name a session in 1 to 200 characters.",
                          code="invalid_session_id")
    return named
