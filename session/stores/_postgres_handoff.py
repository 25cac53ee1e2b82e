"""Handing a message to the worker that holds its conversation (``HandOffStore`` for ``PostgresStore``).

**In one transaction.** ``hand_off`` reads the conversation's live lease ``FOR SHARE``, stores the message in the
inbox and notifies the holder (``pg_notify`` on the schema's inbox channel, with the holder and the conversation).
The lock keeps the holder from releasing the lease until the message is stored, so a holder that lets go of it
afterwards finds the message waiting (and is told of it). A notification is delivered when its transaction
commits, so the holder never hears of a message it cannot read yet. Without a live lease nothing is stored: the
caller takes the lease and runs the conversation itself.

**Following.** Each process following hand-offs has one ``Listener`` (a thread and a connection of its own, see
``_postgres_listen``) on the inbox channel and keeps the notifications meant for its holder, one per conversation
until read. It gives ``None`` (anything may have been missed) each time it begins to listen, again after a lost
connection, and when more conversations are waiting than it keeps.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread
import psycopg

from loop import Turn, UsageError, tracing
from loop.checks import positive_int
from session.stores._postgres_listen import Listener
from session.stores._postgres_sql import NOW, keep_blobs
from session.stores._postgres_url import Conninfo
from session.stores._postgres_views import WriteQueues
from session.stores._protocol import check_holder, check_posted, check_session_id
from session.stores._sqlite_file import Rows

T = TypeVar("T")
Conn = psycopg.Connection[Any]
_log = tracing.logger("session.stores")

KEPT = 4096  # conversations a follower keeps until read; beyond that it gives None and forgets them

_HOLDER = f"SELECT holder FROM leases WHERE session_id = %s AND expires > {NOW} FOR SHARE"
_INSERT = ("INSERT INTO inbox (session_id, message_id, data) VALUES (%s, %s, %s) "
           "ON CONFLICT (session_id, message_id) DO NOTHING")
_WAITING = "SELECT count(*) FROM inbox WHERE session_id = %s"
# The channel is named in SQL exactly as ``inbox_channel`` names it in Python.
_NOTIFY = ("SELECT pg_notify('cl_inbox_' || left(encode(sha256(convert_to(current_schema(), 'UTF8')), 'hex'), 20), "
           "%s)")


def inbox_channel(schema: str) -> str:
    """The channel hand-offs in ``schema`` are notified on (named by a hash: a channel's name has at most 63
    bytes)."""
    return "cl_inbox_" + hashlib.sha256(schema.encode()).hexdigest()[:20]


def hand_off_message(conn: Conn, session_id: str, message_id: str, rows: Rows, limit: int) -> int | None:
    """Store the message and notify the live lease's holder, in one transaction, unless ``limit`` messages wait
    already; how many messages wait before it (or, when ``limit`` do, their number, and nothing is stored), or
    ``None`` (nothing stored) when no lease of the conversation is live."""
    with conn.transaction():
        row = conn.execute(_HOLDER, (session_id,)).fetchone()
        if row is None:
            return None
        counted = conn.execute(_WAITING, (session_id,)).fetchone()
        waiting = int(counted[0]) if counted is not None else 0
        if waiting >= limit:
            return waiting
        if conn.execute(_INSERT, (session_id, message_id, rows.texts[0])).rowcount:
            keep_blobs(conn, session_id, rows.blobs)
        conn.execute(_NOTIFY, (json.dumps([row[0], session_id]),))
        return waiting


def _channel(conn: Conn) -> str:
    row = conn.execute("SELECT current_schema()").fetchone()
    if row is None or row[0] is None:
        raise psycopg.ProgrammingError("no schema of the connection's search_path exists to hold the inbox")
    return inbox_channel(row[0])


class HandOffFollower:
    """The conversations handed to ``holder`` (``HandOffs``): iterate it, and close it (``aclose`` or ``async
    with``). It belongs to the event loop it was made on."""

    def __init__(self, conninfo: Conninfo, holder: str) -> None:
        self.holder = holder
        self._waiting: dict[str, None] = {}  # conversation ids in the order they came, each once
        self._missed = False
        self._ready = anyio.Event()
        self._closed = False
        self._listener = Listener(conninfo, anyio.lowlevel.current_token(), prepare=_channel,
                                  on_payloads=self._on_payloads, on_listening=self._on_listening)
        self._listener.start()
        self._listener.want(True)

    def _on_payloads(self, payloads: list[str]) -> None:
        for payload in payloads:
            try:
                holder, session_id = json.loads(payload)
            except (ValueError, TypeError):
                _log.debug("ignored a notification that is not a hand-off", payload=payload[:100])
                continue
            if holder == self.holder and isinstance(session_id, str):
                if len(self._waiting) >= KEPT:
                    self._missed = True
                else:
                    self._waiting[session_id] = None
        self._ready.set()

    def _on_listening(self) -> None:
        self._missed = True  # what was notified while nobody listened was never delivered
        self._ready.set()

    def __aiter__(self) -> HandOffFollower:
        return self

    async def __anext__(self) -> str | None:
        while True:
            if self._closed:
                raise StopAsyncIteration
            if self._missed:
                self._missed = False
                self._waiting.clear()
                return None
            if self._waiting:
                session_id = next(iter(self._waiting))
                del self._waiting[session_id]
                return session_id
            self._ready = anyio.Event()
            await self._ready.wait()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._ready.set()
            await anyio.to_thread.run_sync(self._listener.stop)

    async def __aenter__(self) -> HandOffFollower:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"HandOffFollower(holder={self.holder!r})"


class PostgresHandOff:
    """``PostgresStore``'s calls of the ``HandOffStore`` ability. The store gives what they use: ``_call``, the
    queue of each conversation's writes, its connection settings and ``_check_open``."""

    _queued: WriteQueues
    _conninfo: Conninfo

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        raise NotImplementedError

    def _check_open(self) -> None:
        raise NotImplementedError

    async def hand_off(self, session_id: str, message: Turn, *, limit: int) -> int | None:
        """Put ``message`` in the inbox of conversation ``session_id`` for the worker holding its live lease, and
        tell that worker, unless ``limit`` messages wait there already (see ``HandOffStore``); how many messages
        wait before it, or ``None`` (nothing stored) when no lease of it is live."""
        check_session_id(session_id)
        positive_int("limit (messages waiting)", limit)
        message_id = check_posted(message)
        self._check_open()
        try:
            rows = Rows((message,))
        except (TypeError, ValueError) as exc:
            raise UsageError(f"cannot store a message for session {session_id!r}: its meta must be JSON data "
                             f"({exc})") from exc
        async with self._queued.of("session", session_id):
            return await self._call(hand_off_message, session_id, message_id, rows, limit)

    async def waiting_ids(self, session_id: str) -> tuple[str, ...]:
        """The ``message_id`` of each message in the inbox of conversation ``session_id``, oldest first."""
        check_session_id(session_id)
        return await self._call(lambda conn: tuple(row[0] for row in conn.execute(
            "SELECT message_id FROM inbox WHERE session_id = %s ORDER BY seq", (session_id,))))

    def hand_offs(self, holder: str) -> HandOffFollower:
        """Follow the conversations other workers hand messages to ``holder`` in (see ``HandOffFollower``)."""
        check_holder(holder)
        self._check_open()
        return HandOffFollower(self._conninfo, holder)
