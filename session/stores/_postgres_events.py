"""``PostgresEvents``: a session's events in a PostgreSQL table, which any process can publish and any process
can follow live, resuming after an event id, with no broker: the table and PostgreSQL's own LISTEN/NOTIFY.

**The table.** ``events (id, session_id, type, data, main, at)``, in the first schema of the connection's
``search_path`` (as are the store's tables), made with ``CREATE TABLE IF NOT EXISTS`` on first use under an advisory
transaction lock (two processes making it at once would otherwise collide in the catalog). ``id`` is an
identity column, so ids rise across the table; ``at`` is the server's clock, for retention.

**Ids in order, and why that needs a lock.** An identity value is taken when a row is inserted, but transactions
commit in any order: were two publishes to one session to run at once, the one holding the lower ids could commit
after a reader had read past them ("id > last"), and that reader would skip them for good. So each publish first
takes a transaction-level advisory lock keyed on its session id: publishes to one session, from any process,
take turns through their commits, and a publish's ids are taken after every earlier publish of the session has
committed. Within a session, then, commit order is id order, and reading "id > last" never skips a row that
commits later. Other sessions' publishes run alongside (a collision of the keys' hashes only makes two sessions
take turns), so a session's ids rise but are not consecutive.

**Notifications.** After inserting, a publish sends one ``NOTIFY`` for the batch, delivered at its commit, on a
channel named after the schema (a channel belongs to the database, the table to its schema, so stores in
different schemas of one database keep apart). The payload names the session, the batch's first and last ids
and ``after``, the session's newest id before the batch; it carries the events themselves only while it stays
under ``INLINE_LIMIT`` bytes (NOTIFY refuses 8000), and otherwise readers fetch them by id.

**Following.** A follower reads the table, then takes its session's notifications, falling back on the table
whenever one does not follow on from the last id it gave, did not carry its events, or it fell behind. Each
``PostgresEvents`` has one listening connection, whatever its followers, and whenever that connection begins to
listen (again, after being lost) every follower reads the table once more, so nothing published meanwhile is
missed. The details are in ``_postgres_listen``.

Like the store, this uses psycopg's blocking API in worker threads, so it runs on asyncio and on trio.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread
import psycopg

from loop import UsageError, tracing
from loop.checks import non_negative_int, positive_int, positive_number
from session.stores._postgres_listen import (PAGE, EventFollower, Listener, StoredEvent, notice_payload,
                                            read_notice)
from session.stores._postgres_sql import NOW
from session.stores._postgres_pool import Connections
from session.stores._postgres_url import Conninfo
from session.stores._protocol import check_session_id

__all__ = ["EventFollower", "PostgresEvents", "StoredEvent"]

T = TypeVar("T")
Conn = psycopg.Connection[Any]
_log = tracing.logger("session.stores")

# Taken while the table is made (for that transaction only). Its value is "cl_event" in ASCII.
_TABLE_LOCK = 0x636C5F6576656E74
# The first key of the two-key advisory lock a publish takes on its session (the second is the id's hash).
# Its value is "cl_e" in ASCII; the two-key locks do not share keys with the one-key ones.
_SESSION_LOCK = 0x636C5F65

_TABLE = (
    """CREATE TABLE IF NOT EXISTS events (
        id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        session_id  text NOT NULL,
        type        text NOT NULL,
        data        text NOT NULL,
        main        boolean NOT NULL,
        at          double precision NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS events_session ON events (session_id, id)",
    "CREATE INDEX IF NOT EXISTS events_at ON events (at)",
)
_INSERT = f"""
    WITH before AS (SELECT coalesce(max(id), 0) AS id FROM events WHERE session_id = %(session)s)
    INSERT INTO events (session_id, type, data, main, at)
    SELECT %(session)s, u.type, u.data, u.main, {NOW}
    FROM unnest(%(types)s::text[], %(data)s::text[], %(main)s::boolean[]) WITH ORDINALITY AS u(type, data, main, n)
    ORDER BY u.n
    RETURNING id, (SELECT id FROM before)"""
_SELECT = "SELECT id, type, data, main FROM events WHERE session_id = %s AND id > %s ORDER BY id LIMIT %s"
_PRUNE = f"DELETE FROM events WHERE at < {NOW} - %s"


def channel_of(schema: str) -> str:
    """The channel of the events table in ``schema``: named by a hash, as a channel's name has at most 63 bytes."""
    return "cl_events_" + hashlib.sha256(schema.encode()).hexdigest()[:20]


def prepare(conn: Conn) -> str:
    """Make the events table if it is missing (in the first schema of ``search_path``), on connection ``conn``
    (autocommit); the channel its notifications go on."""
    with conn.transaction():
        row = conn.execute("SELECT current_schema()").fetchone()
        if row is None or row[0] is None:
            raise psycopg.ProgrammingError("no schema of the connection's search_path exists to hold the events")
        schema = row[0]
        found = conn.execute("SELECT to_regclass(format('%%I.events', %s::text))", (schema,)).fetchone()
        if found is None or found[0] is None:  # checked first, so that a role that may not create can use it
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_TABLE_LOCK,))
            for statement in _TABLE:
                conn.execute(statement)
    return channel_of(schema)


def check_events(events: Any) -> tuple[tuple[str, str, bool], ...]:
    """``events`` as a tuple of ``(type, data, main)`` triples; ``UsageError`` saying what is wrong otherwise."""
    if isinstance(events, (str, bytes)) or not isinstance(events, Sequence):
        raise UsageError(f"events are a sequence of (type, data, main) tuples, got {events!r}"[:400])
    for i, event in enumerate(events):
        if not (isinstance(event, tuple) and len(event) == 3 and isinstance(event[0], str) and event[0]
                and isinstance(event[1], str) and isinstance(event[2], bool)):
            raise UsageError(f"event {i} must be a (type, data, main) tuple of a non-empty str, a str of JSON "
                             f"text and a bool, got {event!r}"[:400])
        for what, text in (("type", event[0]), ("data", event[1])):
            if "\x00" in text:
                raise UsageError(f"event {i}'s {what} holds a NUL character, which PostgreSQL text cannot")
            try:
                text.encode()
            except UnicodeEncodeError:
                raise UsageError(f"event {i}'s {what} is not valid Unicode (it holds a lone surrogate)") from None
    return tuple(events)


class PostgresEvents:
    """The events of sessions in a PostgreSQL database at ``url`` (as ``PostgresStore`` takes it; the table goes
    in the first schema of its ``search_path``), published by any process and followed live by any other (see
    the module's notes).

    ``publish`` adds a session's events; ``follow`` gives an ``EventFollower`` of a session's events after an id;
    ``prune`` drops old ones. With ``keep`` (seconds), publishing also drops the events older than that, at most
    once per tenth of ``keep`` (and per minute). A follower holds at most ``buffer`` notifications before it
    falls back on reading the table. Up to ``pool_size`` connections publish and read, and a call waits up to
    ``timeout`` seconds for one; one more listens while anyone follows. Nothing connects until the first call.
    Errors of the server raise ``StoreError``; the password never shows. Whoever makes it closes it (``aclose``
    or ``async with``); followers then end. Its followers belong to the event loop that started the first.
    """

    def __init__(self, url: str | Conninfo, *, keep: float | None = None, buffer: int = 256, pool_size: int = 2,
                 timeout: float = 30.0) -> None:
        self._conninfo = url if isinstance(url, Conninfo) else Conninfo(url)
        self.keep = positive_number("keep", keep, unit="seconds", optional=True)
        self.buffer = positive_int("buffer (notifications a follower holds)", buffer)
        self.pool_size = positive_int("pool_size", pool_size)
        self.timeout = positive_number("timeout", timeout, unit="seconds")
        self.url = self._conninfo.url  # shown without its password
        self._db = Connections(self, self._conninfo, size=self.pool_size, timeout=self.timeout,
                               name="cognitive-loop-events", prepare=self._prepare, first="cannot make the events table")
        self._channel = ""
        self._followers: dict[str, set[EventFollower]] = {}
        self._listener: Listener | None = None
        self._pruned = -math.inf  # when publishing last dropped old events (time.monotonic)

    # Connecting and running calls.

    def _prepare(self, conn: Conn) -> None:
        """Make the table if it is missing, and learn the channel (on the first call's connection of its own)."""
        self._channel = prepare(conn)

    def _check_open(self) -> None:
        self._db.check_open()

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(conn, *args)`` in a worker thread, on a connection of the pool; errors become ``StoreError``."""
        return await self._db.call(fn, *args)

    @property
    def _closed(self) -> bool:
        return self._db.closed

    # Publishing.

    async def publish(self, session_id: str, events: Sequence[tuple[str, str, bool]]) -> list[int]:
        """Add ``events``, ``(type, data, main)`` triples (``data`` JSON text, kept as given), to session
        ``session_id``, all in one transaction, and notify every follower; their ids, in order. Publishes to one
        session take turns, from any process (see the module's notes)."""
        check_session_id(session_id)
        batch = check_events(events)
        self._check_open()
        if not batch:
            return []
        return await self._call(self._publish, session_id, batch)

    def _publish(self, conn: Conn, session_id: str, batch: tuple[tuple[str, str, bool], ...]) -> list[int]:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_SESSION_LOCK, session_id))
            # A statement of its own after the lock: its snapshot sees every earlier publish of the session.
            rows = conn.execute(_INSERT, {"session": session_id, "types": [e[0] for e in batch],
                                          "data": [e[1] for e in batch], "main": [e[2] for e in batch]}).fetchall()
            ids = sorted(row[0] for row in rows)  # taken in the order of the rows (ORDER BY n)
            stored = [StoredEvent(i, *event) for i, event in zip(ids, batch)]
            conn.execute("SELECT pg_notify(%s, %s)", (self._channel, notice_payload(session_id, rows[0][1], stored)))
        if self.keep is not None and time.monotonic() - self._pruned >= min(self.keep / 10, 60.0):
            self._pruned = time.monotonic()
            try:
                dropped = conn.execute(_PRUNE, (self.keep,)).rowcount
            except psycopg.Error as exc:  # the events are published: a failed clean-up is only logged
                _log.warning("cannot drop old events", store=self.url, error=self._conninfo.describe(exc))
            else:
                if dropped:
                    _log.debug("dropped old events", store=self.url, count=dropped)
        return ids

    async def prune(self, older_than: float) -> int:
        """Drop the events published more than ``older_than`` seconds ago (by the server's clock); how many."""
        positive_number("older_than", older_than, unit="seconds")
        dropped: int = await self._call(lambda conn: conn.execute(_PRUNE, (float(older_than),)).rowcount)
        return dropped

    # Following.

    def follow(self, session_id: str, after: int = 0) -> EventFollower:
        """A follower of session ``session_id``'s events with an id above ``after`` (0: all it holds), what the
        table holds first, then live ones: iterate it (``async for``) and close it, or use it as
        ``async with events.follow(...) as follower``. One left unclosed stays subscribed (holding at most
        ``buffer`` notifications) until this closes."""
        check_session_id(session_id)
        non_negative_int("after (an event id)", after)
        self._check_open()
        return EventFollower(self, session_id, after)

    async def _read(self, session_id: str, after: int) -> list[StoredEvent]:
        return await self._call(lambda conn: [StoredEvent(*row) for row in conn.execute(
            _SELECT, (session_id, after, PAGE))])

    def _subscribe(self, follower: EventFollower) -> None:
        self._followers.setdefault(follower.session_id, set()).add(follower)
        if self._listener is None:
            self._listener = Listener(self._conninfo, anyio.lowlevel.current_token(), prepare=prepare,
                                      on_payloads=self._on_payloads, on_listening=self._on_listening)
            self._listener.start()
        self._listener.want(True)

    def _unsubscribe(self, follower: EventFollower) -> None:
        followers = self._followers.get(follower.session_id)
        if followers is not None:
            followers.discard(follower)
            if not followers:
                del self._followers[follower.session_id]
        if not self._followers and self._listener is not None:
            self._listener.want(False)

    def _on_payloads(self, payloads: list[str]) -> None:
        """On the event loop: hand each notification to the followers of its session."""
        for payload in payloads:
            notice = read_notice(payload)
            if notice is None:
                _log.debug("ignored a notification that is not an event batch", store=self.url)
                continue
            for follower in self._followers.get(notice.session_id, ()):
                follower._offer(notice)

    def _on_listening(self) -> None:
        """On the event loop: the listener begins to listen (again); every follower reads the table."""
        for followers in self._followers.values():
            for follower in followers:
                follower._reread()

    # Closing.

    async def aclose(self) -> None:
        """Stop listening, end the followers and close the connections; later calls raise ``UsageError``.
        Closing twice is fine."""
        with anyio.CancelScope(shield=True):  # a cancelled close would leave the connections open
            await self._db.aclose()
            listener, self._listener = self._listener, None
            for followers in list(self._followers.values()):
                for follower in list(followers):
                    follower._reread()  # wakes it: it sees the close and ends
            if listener is not None:
                await anyio.to_thread.run_sync(listener.stop)

    async def __aenter__(self) -> PostgresEvents:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __str__(self) -> str:
        return f"PostgreSQL events {self.url!r}"

    def __repr__(self) -> str:
        return f"PostgresEvents({self.url!r})"
