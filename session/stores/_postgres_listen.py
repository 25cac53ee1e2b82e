"""The listening side of ``PostgresEvents``: what a notification carries (``notice_payload``, ``read_notice``),
the followers it feeds (``EventFollower``), and the one connection per instance that listens (``Listener``).

**Following.** A follower reads what the table holds after its position, then takes the notifications of its
session. One that follows on from its position (its ``after`` is at most the last id the follower gave) gives
its inline events; one that does not (a batch it never heard of came between) or whose events did not fit sends
it to the table again, for every id after its position. It holds at most ``buffer`` notifications; beyond that it
drops them and reads the table instead, so a slow follower never holds up the listener or the others.

**A thread, not psycopg's async API**, as the store does it (psycopg's async API waits on asyncio only). The
listener's thread waits, with ``select``, on the connection's socket and on a socket of its own at once:
``stop`` and a change of ``wanted`` write a byte to the second, so the thread answers them at once rather than
at its next timeout, even while it waits out a back-off. What the channel carries goes to the event loop through
``anyio.from_thread.run_sync`` with the loop's token, a batch at a time; the thread never touches the followers.

**Connection lost.** A server restart, a terminated backend or a network failure ends the connection; the thread
connects again with a growing back-off (``FIRST_DELAY`` doubling up to ``MAX_DELAY``), and after every ``LISTEN``
calls ``on_listening`` on the loop: what was published while nobody listened was never delivered, so every
follower reads the table again. A connection quiet for ``HEALTH`` seconds is asked ``SELECT 1``, so that one the
server dropped without a word is noticed too.

**Idle.** While no one follows (``wanted`` is false) the thread closes its connection, so that a process that
only publishes holds no server process for listening, and waits to be wanted again.
"""

from __future__ import annotations

import json
import select
import socket
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import attrs
import psycopg
from anyio.lowlevel import EventLoopToken
from psycopg import sql

from loop import tracing
from session.stores._postgres_url import Conninfo

if TYPE_CHECKING:
    from session.stores._postgres_events import PostgresEvents

Conn = psycopg.Connection[Any]
_log = tracing.logger("session.stores")

FIRST_DELAY = 0.1  # seconds before the first attempt to connect again, doubling after each failure
MAX_DELAY = 5.0  # the longest wait between two attempts
HEALTH = 15.0  # seconds of quiet after which the connection is checked
INLINE_LIMIT = 7000  # bytes of a payload that may carry its events; NOTIFY refuses 8000
PAGE = 1000  # events a follower reads from the table at a time


@attrs.frozen
class StoredEvent:
    """One published event: its ``id`` (rising within its session), its wire ``type``, its JSON text ``data``,
    and whether the conversation's main line published it (``main``); the fields of the event log's entries."""

    id: int
    type: str
    data: str
    main: bool = True


@attrs.frozen
class Notice:
    """What a notification says of a published batch: its session, the session's newest id before it
    (``after``), its first and last ids, and its events when they fitted (else ``None``)."""

    session_id: str
    after: int
    first: int
    last: int
    events: tuple[StoredEvent, ...] | None


def notice_payload(session_id: str, after: int, events: Sequence[StoredEvent]) -> str:
    """The payload of a batch's notification: with its events while it stays under ``INLINE_LIMIT`` bytes."""
    head = {"session": session_id, "after": after, "first": events[0].id, "last": events[-1].id}
    if sum(len(e.type) + len(e.data) for e in events) < INLINE_LIMIT:  # else it cannot fit: no need to try
        inline = {**head, "events": [[e.id, e.type, e.data, e.main] for e in events]}
        payload = json.dumps(inline, ensure_ascii=False, separators=(",", ":"))
        if len(payload.encode()) <= INLINE_LIMIT:
            return payload
    return json.dumps(head, ensure_ascii=False, separators=(",", ":"))


def read_notice(payload: str) -> Notice | None:
    """The ``Notice`` a payload holds, or ``None`` for one that is not ours (anyone may notify the channel)."""
    try:
        data = json.loads(payload)
        events = data.get("events")
        return Notice(str(data["session"]), int(data["after"]), int(data["first"]), int(data["last"]),
                      None if events is None else tuple(StoredEvent(int(i), str(t), str(d), bool(m))
                                                        for i, t, d, m in events))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


class _LoopGone(Exception):
    """Raised in the thread when the event loop it hands notifications to has ended."""


class Listener:
    """A thread that ``LISTEN``s on the channel ``prepare(conn)`` names (``prepare`` also makes the table if it
    is missing) while ``wanted``, and calls ``on_payloads(payloads)`` on the event loop of ``token`` with each
    batch of notification payloads, in the order the server sent them. ``start`` starts the thread; ``stop``
    ends it and closes its connection (in a worker thread: it joins the thread).

    ``pid`` is the server process of the connection while it listens (``None`` otherwise), ``connects`` how many
    times it began to listen and ``drops`` how many times a connection was lost: for tests and diagnostics.
    """

    def __init__(self, conninfo: Conninfo, token: EventLoopToken, *, prepare: Callable[[Conn], str],
                 on_payloads: Callable[[list[str]], None], on_listening: Callable[[], None]) -> None:
        self._conninfo = conninfo
        self._token = token
        self._prepare = prepare
        self._on_payloads = on_payloads
        self._on_listening = on_listening
        self.wanted = False
        self.pid: int | None = None
        self.connects = 0
        self.drops = 0
        self._stopping = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="cognitive-loop-events-listener", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def want(self, wanted: bool) -> None:
        """Listen (``True``), or close the connection and wait (``False``); from the event loop's thread."""
        if wanted != self.wanted:
            self.wanted = wanted
            self._wake()

    def stop(self) -> None:
        """End the thread and wait for it (it closes its connection first). Blocking: call it in a worker thread.
        Waits at most for an attempt to connect under way (the URL's ``connect_timeout``)."""
        self._stopping = True
        self._wake()
        if self._thread.is_alive():
            self._thread.join()
        self._wake_r.close()
        self._wake_w.close()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"!")
        except (BlockingIOError, OSError):  # full: a wake-up is pending already; closed: the thread has ended
            pass

    # The thread.

    def _run(self) -> None:
        conn: Conn | None = None
        delay = FIRST_DELAY
        lost = False  # whether the last attempt failed or the connection was lost: logged once, until it is back
        try:
            while not self._stopping:
                if not self.wanted:
                    self._close(conn)
                    conn = None
                    self._wait(None, None)
                    continue
                if conn is None:
                    try:
                        conn = self._listen()
                    except (psycopg.Error, OSError) as exc:
                        if not lost:
                            _log.warning("cannot listen for events; trying again", store=self._conninfo.url,
                                         error=self._conninfo.describe(exc))
                        lost = True
                        self._wait(None, delay)
                        delay = min(delay * 2, MAX_DELAY)
                        continue
                    if lost:
                        _log.info("listening for events again", store=self._conninfo.url)
                    lost, delay = False, FIRST_DELAY
                    self._to_loop(self._on_listening)
                try:
                    if not self._wait(conn, HEALTH):
                        conn.execute("SELECT 1")  # quiet for long: is the server still there?
                    payloads = [n.payload for n in conn.notifies(timeout=0)]
                except psycopg.Error as exc:
                    _log.warning("lost the connection listening for events; connecting again",
                                 store=self._conninfo.url, error=self._conninfo.describe(exc))
                    lost = True
                    self.drops += 1
                    self._close(conn)
                    conn = None
                    continue
                if payloads:
                    self._to_loop(self._on_payloads, payloads)
        except _LoopGone:
            pass
        finally:
            self._close(conn)

    def _listen(self) -> Conn:
        conn = psycopg.connect(**self._conninfo.params, autocommit=True)
        try:
            channel = self._prepare(conn)
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        except BaseException:
            conn.close()
            raise
        self.pid = conn.info.backend_pid
        self.connects += 1
        return conn

    def _close(self, conn: Conn | None) -> None:
        self.pid = None
        if conn is not None:
            conn.close()

    def _wait(self, conn: Conn | None, timeout: float | None) -> bool:
        """Wait until the connection has something to read, a wake-up comes or ``timeout`` passes; whether
        anything came."""
        wake = self._wake_r.fileno()
        watched = [wake] if conn is None else [wake, conn.fileno()]
        readable, _, _ = select.select(watched, [], [], timeout)
        if wake in readable:
            self._wake_r.recv(4096)
        return bool(readable)

    def _to_loop(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            anyio.from_thread.run_sync(fn, *args, token=self._token)
        except RuntimeError as exc:  # asyncio's "event loop is closed", trio's RunFinishedError
            raise _LoopGone from exc


class EventFollower:
    """One follower of a session's events in a ``PostgresEvents``: an async iterator of ``StoredEvent``s, each
    once, in the order of their ids, without a gap; ``position`` is the id of the last one it gave (its
    ``after`` at first). It ends when its ``PostgresEvents`` closes, or it is closed (``aclose``; ``async with``).

    It takes notifications from its first step on. A step that is cancelled or fails stops its taking them (a
    cancelled follower holds nothing); a next step takes them again, and reads the table first, so it loses
    nothing. A step waits in a worker thread while it reads the table, and on nothing else.
    """

    def __init__(self, events: PostgresEvents, session_id: str, after: int) -> None:
        self.session_id = session_id
        self.position = after
        self.reads = 0  # how many times it read the table: for tests and diagnostics
        self._events = events
        self._ready: deque[StoredEvent] = deque()  # read or notified, not yet given
        self._notices: deque[Notice] = deque()
        self._stale = True  # whether the next step reads the table
        self._subscribed = False
        self._ended = False
        self._wake: anyio.Event | None = None

    def __aiter__(self) -> EventFollower:
        return self

    async def __anext__(self) -> StoredEvent:
        while not self._ready:
            if self._ended or self._events._closed:
                self._unsubscribe()
                raise StopAsyncIteration
            if not self._subscribed:
                self._events._subscribe(self)
                self._subscribed, self._stale = True, True
            try:
                await self._step()
            except Exception:
                self._unsubscribe()
                if self._events._closed:  # closed while this step read: the follow ends, as it would have after
                    raise StopAsyncIteration from None
                raise
            except BaseException:
                self._unsubscribe()
                raise
        event = self._ready.popleft()
        self.position = event.id
        return event

    async def _step(self) -> None:
        """Read the table, take one notification, or wait for one."""
        if self._stale:
            self._stale = False
            self._notices.clear()  # what they say was committed before the read begins: the read has it
            self.reads += 1
            events = await self._events._read(self.session_id, self.position)
            self._ready.extend(events)
            if len(events) == PAGE:
                self._stale = True  # there may be more
            return
        if not self._notices:
            self._wake = anyio.Event()
            await self._wake.wait()
            return
        notice = self._notices.popleft()
        if notice.last <= self.position:
            return  # given already (read from the table)
        if notice.after > self.position or notice.events is None:
            self._stale = True  # a batch it never heard of came between, or these events did not fit
            return
        self._ready.extend(e for e in notice.events if e.id > self.position)

    def _offer(self, notice: Notice) -> None:
        """On the event loop: a notification of its session."""
        if self._stale:
            return  # it will read the table, which has the batch
        if len(self._notices) >= self._events.buffer:
            self._reread()  # fallen behind: the table has them all
            return
        self._notices.append(notice)
        self._wake_up()

    def _reread(self) -> None:
        self._notices.clear()
        self._stale = True
        self._wake_up()

    def _wake_up(self) -> None:
        wake, self._wake = self._wake, None
        if wake is not None:
            wake.set()

    def _unsubscribe(self) -> None:
        if self._subscribed:
            self._subscribed = False
            self._notices.clear()
            self._events._unsubscribe(self)

    async def aclose(self) -> None:
        """Stop following: the iteration ends."""
        self._ended = True
        self._unsubscribe()
        self._wake_up()

    async def __aenter__(self) -> EventFollower:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"EventFollower({self.session_id!r}, position={self.position})"
