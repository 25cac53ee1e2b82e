"""A ``LeaseStore`` (and ``FeedStore``) in memory, for the tests of the manager's leases and of the lease
conformance check: ``Shared`` is the database, and each ``Worker`` a store one process would hold on it, remembering
the leases it took and fencing its writes by their epochs, as ``PostgresStore`` does. Two managers on two workers of
one ``Shared`` act as two processes. Its steps (``fence``, ``epoch``, ``check``) are methods, for the conformance
check's tests to break one at a time."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import attrs

from loop import State, Turn, UsageError
from session import MemoryStore
from session.stores import Lease, LeaseLost
from session.stores._protocol import check_session_id


class Shared:
    """What the workers share: the conversations and inboxes, each conversation's lease row ``[holder, epoch,
    expires, released]`` (kept when released, so that epochs only grow), and the events."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.leases: dict[str, list[Any]] = {}
        self.feed = MemoryFeed()

    def take_over(self, session_id: str, holder: str) -> None:
        """Give the lease to ``holder`` now, lapsed or not (as if its holder had stalled past the ttl)."""
        epoch = self.leases[session_id][1] if session_id in self.leases else 0
        self.leases[session_id] = [holder, epoch + 1, time.time() + 3600, False]

    def lapse(self, session_id: str, holder: str, epoch: int) -> None:
        """A lease ``holder`` held and let lapse (it died)."""
        self.leases[session_id] = [holder, epoch, 0.0, False]


class Worker:
    """One worker's store on a ``Database``: it remembers the leases it took and fences its writes by them."""

    def __init__(self, db: Shared) -> None:
        self.db = db
        self.held: dict[str, tuple[str, int]] = {}
        self.release_delay = 0.0  # seconds a release takes, as a round trip to a database would

    def fence(self, session_id: str) -> None:
        row, held = self.db.leases.get(session_id), self.held.get(session_id)
        if held is None:
            if row is not None and row[2] > time.time():
                raise LeaseLost(f"session {session_id!r} is leased to {row[0]!r}")
        elif row is None or (row[0], row[1]) != held:
            raise LeaseLost(f"the lease of session {session_id!r} was taken over")

    async def load(self, session_id: str) -> State | None:
        return await self.db.store.load(session_id)

    def event_feed(self) -> MemoryFeed:
        return self.db.feed

    async def append(self, session_id: str, start: int, turns: Sequence[Turn], meta: Mapping[str, Any]) -> None:
        self.fence(check_session_id(session_id))
        await self.db.store.append(session_id, start, turns, meta)

    async def delete(self, session_id: str) -> bool:
        self.fence(check_session_id(session_id))
        return await self.db.store.delete(session_id)

    async def post(self, session_id: str, message: Turn) -> None:
        await self.db.store.post(session_id, message)

    async def inbox(self, session_id: str) -> tuple[Turn, ...]:
        return await self.db.store.inbox(session_id)

    async def inboxes(self) -> tuple[str, ...]:
        return await self.db.store.inboxes()

    async def done(self, session_id: str, message_id: str) -> None:
        self.fence(check_session_id(session_id))
        await self.db.store.done(session_id, message_id)

    @staticmethod
    def check(holder: Any, ttl: Any = 1.0) -> None:
        if not isinstance(holder, str) or not holder:
            raise UsageError(f"bad holder {holder!r}")
        if not isinstance(ttl, (int, float)) or isinstance(ttl, bool) or not 0 < ttl < math.inf:
            raise UsageError(f"bad ttl {ttl!r}")

    def epoch(self, row: list[Any] | None, holder: str, now: float) -> int | None:
        """The epoch ``holder`` gets, or ``None`` while another's lease is live."""
        if row is None:
            return 1
        if row[0] == holder and not row[3]:
            return int(row[1])
        return int(row[1]) + 1 if row[2] <= now else None

    async def acquire(self, session_id: str, holder: str, ttl: float) -> Lease | None:
        self.check(holder, ttl)
        now = time.time()
        epoch = self.epoch(self.db.leases.get(check_session_id(session_id)), holder, now)
        if epoch is None:
            if self.held.get(session_id, ("",))[0] == holder:
                del self.held[session_id]
            return None
        self.db.leases[session_id] = [holder, epoch, now + ttl, False]
        self.held[session_id] = (holder, epoch)
        return Lease(session_id, holder, epoch, now + ttl)

    async def renew(self, holder: str, ttl: float) -> tuple[str, ...]:
        self.check(holder, ttl)
        kept = sorted(s for s, row in self.db.leases.items() if row[0] == holder and not row[3])
        for session_id in kept:
            self.db.leases[session_id][2] = time.time() + ttl
        for session_id, held in list(self.held.items()):
            if held[0] == holder and session_id not in kept:
                del self.held[session_id]
        return tuple(kept)

    async def release(self, session_id: str, holder: str) -> None:
        self.check(holder)
        if self.release_delay:
            await anyio.sleep(self.release_delay)  # others go on meanwhile
        row = self.db.leases.get(check_session_id(session_id))
        if row is not None and row[0] == holder:
            row[2], row[3] = -math.inf, True
        if self.held.get(session_id, ("",))[0] == holder:
            del self.held[session_id]

    async def lapsed(self) -> tuple[str, ...]:
        now = time.time()
        return tuple(s for s in await self.db.store.inboxes() if s not in self.db.leases or self.db.leases[s][2] <= now)


@attrs.frozen
class FedEvent:
    id: int
    type: str
    data: str
    main: bool


class MemoryFeed:
    """An ``EventFeed`` in memory, shared by the workers of one ``Shared``."""

    def __init__(self) -> None:
        self.events: list[tuple[str, FedEvent]] = []
        self._changed = anyio.Event()

    async def publish(self, session_id: str, events: Sequence[tuple[str, str, bool]]) -> list[int]:
        ids = []
        for type_, data, main in events:
            event = FedEvent(len(self.events) + 1, type_, data, main)
            self.events.append((session_id, event))
            ids.append(event.id)
        self._changed.set()
        self._changed = anyio.Event()
        return ids

    def follow(self, session_id: str, after: int = 0) -> Following:
        return Following(self, session_id, after)


class Following:
    def __init__(self, feed: MemoryFeed, session_id: str, after: int) -> None:
        self.feed, self.session_id, self.position = feed, session_id, after

    def __aiter__(self) -> Following:
        return self

    async def __anext__(self) -> FedEvent:
        while True:
            for session_id, event in self.feed.events[self.position:]:
                self.position = event.id
                if session_id == self.session_id:
                    return event
            await self.feed._changed.wait()

    async def aclose(self) -> None:
        pass
