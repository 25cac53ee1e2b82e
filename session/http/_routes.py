"""The HTTP conduit's routes: a manager's sessions over HTTP: messages in, a resumable SSE event stream out.

Routes (all but ``OPEN_PATHS``, the health and OpenAPI ones, need ``Authorization: Bearer <token>``)::

    POST   /sessions                        201 {"id"}                    open a session (no body, or {})
    GET    /sessions                        200 {"sessions"}              the token's stored conversations, newest first
    DELETE /sessions/{id}                   204                           close it (its conversation stays stored)
    POST   /sessions/{id}/messages          202 {"message_id","position"} queue a user message {"text"} or {"parts"}
    POST   /sessions/{id}/interrupt         200 {"dropped"}               cancel the current message
    GET    /sessions/{id}/turns             200 {"turns","next"}          a page of the stored conversation
    GET    /sessions/{id}/events            200 text/event-stream         every event, resumable by Last-Event-ID
                                                                          (the main line's; ?branches=true: all)
    GET    /sessions/{id}/approvals         200 {"approvals"}             tool calls waiting for approval
    POST   /sessions/{id}/approvals         202 {"message_id"}            approve or deny them (``_approvals``)
    GET    /openapi.json, /openapi-3.1.json 200                           the OpenAPI document (3.2; as 3.1.1)
    GET    /healthz                         200 {"status"}                whether the server is up
    POST   /v1/chat/completions, GET /v1/models    the OpenAI-compatible API (see ``session.openai``)

A session belongs to the token that opened it; to any other token it does not exist (404). Each token's
sessions live in a namespace of their own: the manager and its store know a session as ``<owner>:<id>``,
where the owner is a digest of the token, so ownership needs no table and outlives a restart: with a durable
store, the same token reaches the same conversation after the server restarts. Closing a session
(``DELETE``, or the manager closing it when idle) keeps its conversation: its turns and event stream can
still be read (which opens nothing), and the next message reopens it. A session no message was ever sent to
has nothing stored: once closed, it is gone. Event ids rise across logs and restarts (they start from the
clock), so a reader that comes back with an id an earlier log gave out reads the current log from its start.

Request bodies are JSON objects in UTF-8, read within the conduit's ``body_timeout`` (else 408), nested at
most ``MAX_JSON_DEPTH`` deep and holding no lone UTF-16 surrogate (else 400: such text could be neither stored nor
streamed). A body in another encoding (UTF-16 or UTF-32, which ``json.loads`` would take) is 400 too, named. A
request whose client leaves before its body has arrived is logged with status 499 (client closed request).
Errors are JSON: ``{"error": {"type": "...", "message": "..."}}``. A message is ``{"text"}``, or ``{"parts"}``: its
text and the images and files it shows, in the form the history sends turns back in (``_wire.read_message``).

What one token can make the server hold is bounded: a conversation holds at most ``max_conversation_bytes`` of
message text (413 ``conversation_too_large`` beyond; counted as a running total per conversation, measured once
when this app takes a stored conversation up), and history is read a page at a time (``?after=&limit=``, at most
``MAX_PAGE_SIZE`` turns), a page holding much text being encoded in a worker thread so that it cannot stall the
event loop.
"""

from __future__ import annotations

import functools
import json
import re
import secrets
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from loop import EventBus, Text, tracing
from session._bearer import TokenQuota, caller_in
from session._events import MessageQueued
from session._manager import Manager, ShuttingDown
from session._message import Message
from session._serving import DEFAULT_MAX_CONVERSATION_BYTES, MAX_JSON_DEPTH, json_depth, lone_surrogate, utf8_json
from session._session import Session
from session.http._approvals import ApprovalRoutes
from session.http._eventlog import EventLog, sse, time_ids
from session.http._guards import Problem
from session.http._owned import OpenSession
from session.http._history import (LIST_SIZE, OFF_LOOP_CHARS, fitting, listing, page_chunks, page_number, sent,
                                   text_size)
from session.http._openapi import MAX_EVENT_ID, MAX_PAGE_SIZE, OPENAPI, OPENAPI_31, PAGE_SIZE
from session.http._shared import feed_sse, publishing
from session.http._streamed import Streamed
from session.http._wire import json_response as _json
from session.http._wire import read_message
from session.openai._errors import OpenAIError
from session.stores._protocol import FeedStore, HandOffStore

_log = tracing.logger("session.http")
OPEN_PATHS = ("/healthz", "/openapi.json", "/openapi-3.1.json")  # need no token, and no read budget
_EVENT_ID = re.compile(r"[0-9]{1,18}")
MAX_NAME = 200  # the longest session id a client may use (the manager's id adds the owner's namespace)


def _over_quota(why: str) -> Problem:
    return Problem(429, "session_quota", why)


def session_key(owner: str, session_id: str) -> str:
    """The id the manager and its store know a token's session ``session_id`` by: in the owner's namespace."""
    return f"{owner}:{session_id}"


class SessionRoutes:
    """The session routes of one running app, and their shared state: the manager, and each session's owner
    and event log."""

    def __init__(self, manager: Manager, group: anyio.abc.TaskGroup, *, keepalive: float, log_size: int,
                 quota: TokenQuota | None = None, body_timeout: float = 30.0,
                 max_conversation_bytes: int | None = DEFAULT_MAX_CONVERSATION_BYTES) -> None:
        self.manager = manager
        self.group = group
        self.keepalive = keepalive
        self.log_size = log_size
        self.quota = quota
        self.body_timeout = body_timeout
        self.max_conversation_bytes = max_conversation_bytes
        self.sessions: dict[str, OpenSession] = {}  # by key
        # A store several processes share carries the events between them (see ``_shared``).
        self.feed = manager.store.event_feed() if isinstance(manager.store, FeedStore) else None
        # Messages for a session another server runs go to that server (its events come back through the feed).
        self.hands_off = (self.feed is not None and manager.leasing is not None
                          and isinstance(manager.store, HandOffStore))
        self._unwatch = None if self.feed is None else manager.watch(functools.partial(publishing, self.feed))

    @staticmethod
    def key(request: Request, session_id: str) -> str:
        """The manager's id for the session the request's token calls ``session_id``."""
        return session_key(request.state.owner, session_id)

    def opened(self, session_id: str, session: Session) -> None:
        """A session was opened by the OpenAI-compatible API: its log, if this app keeps one, follows it. A
        conversation already past ``max_conversation_bytes`` takes no more (413, in OpenAI's format). It is
        measured in full each time (that API posts its messages itself, past ``_count``'s running totals); an
        ASCII text costs no more than its length to measure."""
        limit = self.max_conversation_bytes
        if limit is not None and text_size(session.state) > limit:
            raise OpenAIError(413, f"The conversation {session_id!r} holds more than {limit} bytes of message text, "
                                   "the most the server keeps in one conversation; start a new one.",
                              code="conversation_too_large")
        owned = self.sessions.get(session.id)
        if owned is not None:
            self._follow(owned, session)

    def routes(self) -> list[Route]:
        """``/healthz``, the OpenAPI documents and the session routes, answered by this object's methods."""
        session = "/sessions/{id}"
        return [
            Route("/healthz", self.healthz, methods=["GET"]),
            Route("/openapi.json", self.openapi, methods=["GET"]),
            Route("/openapi-3.1.json", self.openapi_31, methods=["GET"]),
            Route("/sessions", self.sessions_route, methods=["GET", "POST"]),
            Route(session, self.delete, methods=["DELETE"]),
            Route(f"{session}/messages", self.message, methods=["POST"]),
            Route(f"{session}/interrupt", self.interrupt, methods=["POST"]),
            Route(f"{session}/turns", self.turns, methods=["GET"]),
            Route(f"{session}/events", self.events, methods=["GET"]),
            *ApprovalRoutes(self).routes(),
        ]

    def close(self) -> None:
        """End every event stream and stop recording (the app is going away)."""
        if self._unwatch is not None:
            self._unwatch()
        for owned in self.sessions.values():
            owned.log.close()

    # -- helpers ------------------------------------------------------------------------------------------

    async def _owned(self, request: Request) -> OpenSession:
        """The session the path names, for the request's token: in use here, open in the manager (opened
        through the OpenAI-compatible API), or stored (closed, or from before a restart); else 404."""
        session_id = request.path_params["id"]
        key = self.key(request, session_id)
        owned = self.sessions.get(key)
        if owned is not None:
            return owned
        session = self.manager.get(key)
        if session is None or session.closed:
            # Known from the store only: reading it opens nothing; a message reopens it (``_live``), and
            # its log follows it from then on.
            if len(session_id) > MAX_NAME or await self.manager.store.load(key) is None:
                raise Problem(404, "not_found", f"no session {session_id!r}")
            events = EventBus()
        else:
            events = session.events
        owned = self.sessions.get(key)  # another request may have taken it up while the store was read
        if owned is None:
            owned = self._track(key, session_id, events)
        return owned

    def _track(self, key: str, session_id: str, events: EventBus) -> OpenSession:
        """Start keeping the session's event log. Logs of sessions no longer open are dropped once this app
        holds twice as many as the manager may have open (a client coming back to one gets a new log,
        numbered on from the old: see ``time_ids``), so a long-running server does not grow without end."""
        if len(self.sessions) >= 2 * self.manager.max_sessions:
            for stale in [o for o in self.sessions.values() if self.manager.get(o.key) is None]:
                del self.sessions[stale.key]
                stale.log.close()
        log = EventLog(events, size=self.log_size, first_id=time_ids())
        owned = self.sessions[key] = OpenSession(key, session_id, log)
        self.group.start_soon(log.run)
        return owned

    def _open(self, owned: OpenSession) -> Session | None:
        """The session if it is open, with its log following its events (it may have been reopened)."""
        session = self.manager.get(owned.key)
        if session is None or session.closed:
            return None
        self._follow(owned, session)
        return session

    async def _open_for(self, request: Request, key: str) -> Session:
        """Open (or reopen) the session the manager knows as ``key``, within the request's token's quota."""
        if self.quota is None:
            return await self.manager.open(key)
        return await self.quota.open(request.state.owner, key, refuse=_over_quota)

    async def _live(self, request: Request, owned: OpenSession) -> Session:
        """The session, reopened from the store if the manager closed it (e.g. when it was idle)."""
        session = self._open(owned)
        if session is None:
            session = await self._open_for(request, owned.key)
            self._follow(owned, session)
        return session

    def _follow(self, owned: OpenSession, session: Session) -> None:
        """Make the session's log record ``session``'s events; a log let go meanwhile (deleted, or pruned by
        ``_track`` while this request waited) is replaced by the current one, or a new one."""
        if owned.log.closed:
            current = self.sessions.get(owned.key)
            owned = current if current is not None else self._track(owned.key, owned.id, session.events)
        if owned.log.events is not session.events:
            owned.log.attach(session.events)

    async def _body(self, request: Request, *, required: bool) -> dict[str, Any]:
        try:
            with anyio.fail_after(self.body_timeout):
                raw = await request.body()
        except TimeoutError:
            raise Problem(408, "request_timeout", f"the request body did not arrive within {self.body_timeout:g} s",
                          {"connection": "close"}) from None
        except ClientDisconnect:  # logged as client-closed, not as a failure of the server's
            raise Problem(499, "client_closed_request", "the client closed the connection before its request body "
                                                        "arrived") from None
        try:
            text = utf8_json(raw)  # first: every check below reads the body as UTF-8
        except ValueError as exc:
            raise Problem(400, "bad_json", f"the request body must be JSON in UTF-8 (RFC 8259), and {exc}") from None
        if not text.strip(" \t\n\r"):  # no body: nothing but JSON's whitespace
            if required:
                raise Problem(400, "bad_json", "the request body is empty; send a JSON object")
            return {}
        if json_depth(raw) > MAX_JSON_DEPTH:
            raise Problem(400, "bad_json", f"the request body nests arrays and objects more than {MAX_JSON_DEPTH} "
                                           "deep")
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise Problem(400, "bad_json", f"the request body is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise Problem(422, "invalid_request", f"the request body must be a JSON object, not {type(data).__name__}")
        where = lone_surrogate(data, text=raw)
        if where is not None:
            raise Problem(400, "bad_unicode", f"{where!r} holds a lone UTF-16 surrogate (an escape such as "
                                              "\\ud800 without its pair), which is not text; send valid Unicode")
        return data

    # -- routes -------------------------------------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        failing = [s.store_failing for s in self.manager.sessions() if s.store_failing]
        if not failing:
            return _json({"status": "ok"})
        whose = f"{len(failing)} session's" if len(failing) == 1 else f"{len(failing)} sessions'"
        return _json({"status": "degraded", "store": f"failing under {whose} messages: {failing[0]}"})

    async def openapi(self, request: Request) -> Response:
        return _json(OPENAPI)

    async def openapi_31(self, request: Request) -> Response:
        return _json(OPENAPI_31)

    async def sessions_route(self, request: Request) -> Response:
        return await (self.create(request) if request.method == "POST" else self.listing(request))

    async def listing(self, request: Request) -> Response:
        limit = page_number(request, "limit", 1, MAX_PAGE_SIZE) or LIST_SIZE
        return _json(await listing(self.manager.store, session_key(request.state.owner, ""), limit))

    async def create(self, request: Request) -> Response:
        await self._body(request, required=False)  # it has no fields yet, but a broken one is refused, not ignored
        session_id = secrets.token_urlsafe(18)
        key = self.key(request, session_id)
        self._track(key, session_id, (await self._open_for(request, key)).events)
        return _json({"id": session_id}, 201, {"location": f"/sessions/{session_id}"})

    async def delete(self, request: Request) -> Response:
        owned = await self._owned(request)
        del self.sessions[owned.key]
        await self.manager.close(owned.key)
        owned.log.close()
        return Response(status_code=204)

    async def message(self, request: Request) -> Response:
        owned = await self._owned(request)
        message = read_message(await self._body(request, required=True))
        if self.manager.stopping:  # draining: its sessions take no new messages; another server takes this one
            raise ShuttingDown("the server is shutting down: it takes no new messages")
        text = message if isinstance(message, str) else "".join(p.text for p in message if isinstance(p, Text))
        if self._open(owned) is None and self.hands_off:  # not running here: it may be running on another server
            handed = await self._hand_off(request, owned, message, text)
            if handed is not None:
                return handed
        session = await self._live(request, owned)
        added = owned.count(session.state.turns, text, self.max_conversation_bytes)
        # The queue position is only published, so read it off the bus around the post. The message is in the
        # store (its inbox) before the 202 goes out: it runs even if the process is killed first.
        try:
            with session.events.subscribe(buffer=None) as probe:
                message_id = await session.post(message, caller=caller_in(request.scope))
                queued = [e for e in probe.drain() if isinstance(e, MessageQueued) and e.message_id == message_id]
        except BaseException:
            if owned.size is not None:  # not stored after all
                owned.size -= added
            raise
        return _json({"message_id": message_id, "position": queued[0].position if queued else 0}, 202)

    async def _hand_off(self, request: Request, owned: OpenSession, message: Message, text: str) -> Response | None:
        """Post the message to the server that runs the session, when another does (``Manager.hand_off``): the
        202 the message gets; ``None`` when this server should run it."""
        added = 0
        if self.max_conversation_bytes is not None:
            state = await self.manager.history(owned.key)
            added = owned.count(state.turns if state is not None else (), text, self.max_conversation_bytes)
        handed = None
        try:
            handed = await self.manager.hand_off(owned.key, message, caller=caller_in(request.scope))
        finally:
            if handed is None and owned.size is not None:  # not posted here after all
                owned.size -= added
        if handed is None:
            return None
        return _json({"message_id": handed[0], "position": handed[1]}, 202)

    async def interrupt(self, request: Request) -> Response:
        owned = await self._owned(request)
        data = await self._body(request, required=False)
        drop = data.get("drop_queued", True)
        if not isinstance(drop, bool):
            raise Problem(422, "invalid_request", f"'drop_queued' must be true or false, got {drop!r}"[:200])
        session = self._open(owned)
        dropped = 0 if session is None else session.interrupt(drop_queued=drop)
        return _json({"dropped": dropped})

    async def turns(self, request: Request) -> Response:
        after = page_number(request, "after", 0, MAX_EVENT_ID)
        limit = page_number(request, "limit", 1, MAX_PAGE_SIZE) or PAGE_SIZE
        owned = await self._owned(request)
        session = self._open(owned)
        state = session.state if session is not None else await self.manager.history(owned.key)
        if session is None and state is None:  # closed, and nothing was ever stored (or it was deleted)
            if self.sessions.get(owned.key) is owned:
                del self.sessions[owned.key]
                owned.log.close()
            raise Problem(404, "not_found", f"no session {owned.id!r}")
        turns = () if state is None else state.turns
        start = 0 if after is None else after + 1
        page, chars = fitting(turns[start:start + limit])
        end = start + len(page)
        after_page = end - 1 if end < len(turns) else None
        if chars <= OFF_LOOP_CHARS:
            return Response(b"".join(page_chunks(owned.id, page, after_page)), media_type="application/json")
        # Encoding megabytes of JSON takes long enough to stall every other request on the loop; and sent a
        # chunk at a time, the page is never copied whole into one buffer.
        chunks = await anyio.to_thread.run_sync(page_chunks, owned.id, page, after_page)
        length = str(sum(len(chunk) for chunk in chunks))
        return Streamed(sent(chunks), media_type="application/json", headers={"content-length": length})

    async def events(self, request: Request) -> Response:
        owned = await self._owned(request)
        if request.method == "HEAD":  # Starlette adds HEAD to GET routes; an endless body makes no sense for it
            return Response(media_type="text/event-stream")
        # The header wins: a browser reconnects to the same URL (with its old ?after=) plus a newer header. Both
        # must be event ids (or empty, as if not given).
        header, query = request.headers.get("last-event-id", ""), request.query_params.get("after", "")
        for name, raw in (("Last-Event-ID", header), ("?after=", query)):
            if raw and not _EVENT_ID.fullmatch(raw):
                raise Problem(400, "bad_event_id",
                              f"{name} must be an event id (0 to {MAX_EVENT_ID}), got {raw!r}"[:200])
        branches = request.query_params.get("branches", "false")
        if branches not in ("true", "false"):
            raise Problem(400, "bad_query", f"'branches' must be true or false, got {branches!r}"[:200])
        after = int(header or query or "0")
        if self.feed is not None:  # wherever the session runs, its events are in the feed
            stream = feed_sse(self.feed, owned.key, after, branches=branches == "true", keepalive=self.keepalive)
        else:
            self._open(owned)
            stream = sse(owned.log.reader(after, branches=branches == "true"), self.keepalive)
        return Streamed(stream, media_type="text/event-stream",
                        headers={"cache-control": "no-cache", "x-accel-buffering": "no"})
