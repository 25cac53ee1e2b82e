"""``EventLog``: a session's events, numbered and kept, so a reader can catch up and then follow live.

This is what lets a client that disconnects lose nothing: the log records every event of the session whether
or not anyone is reading, and a reader that comes back with the last id it saw gets exactly what came after.
It records the events of branches, tools' own runs and verifiers too, marked as off the main line, for the
readers that ask for them (a view of the whole run); the others never see them.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from typing import Any, Union

import anyio
import attrs

from loop import EventBus, Stamped, UsageError
from loop.checks import non_negative_int, positive_int
from session.http._wire import dumps, event_to_json

__all__ = ["EventLog", "EventReader", "EventsLost", "LoggedEvent", "encoded", "frame", "sse", "time_ids"]


def time_ids() -> int:
    """A first id for a new log above any id an earlier log gave out: microseconds since the epoch (a log
    would need more than one event a microsecond, for its whole life, to catch up with its successor)."""
    return time.time_ns() // 1_000


@attrs.frozen
class LoggedEvent:
    """One recorded event: its number in the log (from 1), its wire ``type``, its JSON text ``data``, and whether
    the conversation's main line published it (``main``) rather than a branch, a tool's own run or a verifier."""

    id: int
    type: str
    data: str
    main: bool = True


@attrs.frozen
class EventsLost:
    """Stands in for ``count`` events a reader asked for that the log no longer holds (it keeps the last N)."""

    count: int


Entry = Union[LoggedEvent, EventsLost]


def encoded(event: Any) -> tuple[str, str, bool]:
    """An event as a log keeps it: its wire type, its JSON text, and whether the main line published it. A
    ``Stamped`` event says the run path that published it (``"path"``, when there is one), and one off the main
    line says ``"main": false``."""
    main = True
    if type(event) is Stamped:
        data = event_to_json(event.event)
        if event.path:
            data["path"] = event.path
        if not event.main:
            main = data["main"] = False
    else:
        data = event_to_json(event)
    return data["type"], dumps(data), main


class EventLog:
    """Records every event published on ``events`` with a rising integer id (from ``first_id``), keeping the
    last ``size``.

    It subscribes at once (without a buffer limit, so nothing is dropped) and records events while ``run``
    runs, which it must, in a task group; readers also bring it up to date, so they never see it lag. ``attach`` moves it to another bus (a session reopened under the
    same id) and numbering carries on. Readers (``reader(after)``) replay what follows an id, then wait for
    more. ``close`` stops recording; readers then finish once they have read everything.

    A log that replaces another (a session reopened after its log was dropped, or a server restarted) should
    start above every id the old one gave out, so that a reader coming back with an old id reads the new log
    from its start: ``first_id=time_ids()`` does, while the clock goes forward.
    """

    def __init__(self, events: EventBus, *, size: int = 10_000, first_id: int = 1) -> None:
        self.size = positive_int("an event log's size", size)
        positive_int("an event log's first id", first_id)
        self.events = events
        self.closed = False
        self._subscription = events.subscribe(buffer=None, stamped=True)
        self._ring: list[LoggedEvent] = []
        self._start = first_id
        self._next = first_id
        self._wake: anyio.Event | None = None
        self._moved: anyio.Event | None = None

    @property
    def last_id(self) -> int:
        """The id of the newest event; one less than the first id before the first event."""
        return self._next - 1

    @property
    def first_id(self) -> int:
        """The id of the oldest event still kept (``last_id + 1`` while the log is empty)."""
        return max(self._start, self._next - self.size)

    def entry(self, event_id: int) -> LoggedEvent:
        """The kept event with this id; ``UsageError`` if it is not (or no longer) in the log."""
        if not self.first_id <= event_id <= self.last_id:
            raise UsageError(f"event {event_id} is not in the log (it holds {self.first_id}..{self.last_id})")
        return self._ring[(event_id - self._start) % self.size]

    def record(self, event: Any) -> LoggedEvent:
        """Number and keep ``event`` (``encoded`` for the wire now), evicting the oldest beyond ``size``."""
        entry = LoggedEvent(self._next, *encoded(event))
        if len(self._ring) < self.size:
            self._ring.append(entry)
        else:
            self._ring[(entry.id - self._start) % self.size] = entry
        self._next += 1
        self._wake_readers()
        return entry

    def attach(self, events: EventBus) -> None:
        """Record from ``events`` from now on (a session reopened under the same id); the same bus is a no-op."""
        if self.closed:
            raise UsageError("this event log is closed")
        if events is self.events:
            return
        # Catching up and subscribing anew happen without a checkpoint between them, so no event falls in a gap.
        self.catch_up()
        self._subscription.close()
        self._subscription = events.subscribe(buffer=None, stamped=True)
        self.events = events
        if self._moved is not None:
            self._moved.set()

    def close(self) -> None:
        """Stop recording; readers finish once they have read what the log holds."""
        if not self.closed:
            self.catch_up()
            self.closed = True
            self._subscription.close()
            self._wake_readers()
            if self._moved is not None:
                self._moved.set()

    async def run(self) -> None:
        """Record events until ``close``. Run it in a task group; cancelling it stops recording too."""
        try:
            while not self.closed:
                subscription = self._subscription
                self._moved = anyio.Event()
                async for event in subscription:
                    self.record(event)
                if subscription is self._subscription and not self.closed:
                    await self._moved.wait()  # closed by someone else: wait for attach or close
        finally:
            self.close()

    def reader(self, after: int = 0, *, branches: bool = False) -> EventReader:
        """A reader of the events after id ``after`` (0: from the start): the main line's only, unless
        ``branches``. An id from before this log's first (one a log it replaced gave out) reads from its start;
        an id beyond the newest, from the newest on."""
        non_negative_int("'after' (an event id)", after)
        self.catch_up()
        return EventReader(self, min(max(after, self._start - 1), self.last_id), branches=branches)

    def catch_up(self) -> None:
        """Record the events published but not yet recorded (``run`` does so too, a moment later)."""
        if not self.closed:
            for event in self._subscription.drain():
                self.record(event)

    def _wake_readers(self) -> None:
        wake, self._wake = self._wake, None
        if wake is not None:
            wake.set()

    async def _changed(self) -> None:
        if self._wake is None:
            self._wake = anyio.Event()
        await self._wake.wait()


class EventReader:
    """One reader's place in an ``EventLog``: ``position`` is the id of the last event it was given (or passed
    over: a reader without ``branches`` skips the events off the main line)."""

    def __init__(self, log: EventLog, position: int, *, branches: bool = False) -> None:
        self.log = log
        self.position = position
        self.branches = branches

    @property
    def done(self) -> bool:
        """Whether the log is closed and this reader has everything it holds."""
        return self.log.closed and self.position >= self.log.last_id

    def pending(self) -> list[Entry]:
        """Every entry after ``position`` the log holds, without waiting; an ``EventsLost`` first if some of
        them were evicted before this reader got to them."""
        log = self.log
        log.catch_up()
        out: list[Entry] = []
        first = log.first_id
        if self.position + 1 < first:
            out.append(EventsLost(first - 1 - self.position))
            self.position = first - 1
        while self.position < log.last_id:
            entry = log.entry(self.position + 1)
            if entry.main or self.branches:
                out.append(entry)
            self.position = entry.id
        return out

    async def wait(self) -> None:
        """Return once there is something after ``position`` or the log is closed. Safe to cancel."""
        self.log.catch_up()
        while not self.log.closed and self.position >= self.log.last_id:
            await self.log._changed()


def frame(event_id: int, event_type: str, data: str) -> str:
    """One event as a server-sent event: its id, its type and its JSON text."""
    return f"id: {event_id}\nevent: {event_type}\ndata: {data}\n\n"


def _frame(item: Entry) -> str:
    if isinstance(item, EventsLost):
        return f"event: events_lost\ndata: {dumps({'type': 'events_lost', 'count': item.count})}\n\n"
    return frame(item.id, item.type, item.data)


async def sse(reader: EventReader, keepalive: float) -> AsyncGenerator[str, None]:
    """What ``reader`` reads, as server-sent events (an ``events_lost`` event, without an id, for events it
    missed), with a keep-alive comment after ``keepalive`` quiet seconds; it ends when the log is closed."""
    while True:
        for item in reader.pending():
            yield _frame(item)
        if reader.done:
            return
        with anyio.move_on_after(keepalive) as waited:
            await reader.wait()
        if waited.cancelled_caught:
            yield ": keep-alive\n\n"

