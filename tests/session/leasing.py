"""A ``LeaseStore`` (and ``FeedStore``) in memory for the manager's lease tests: ``Shared`` is the database, and each ``Worker`` a
store one process would hold on it, remembering the leases it took and fencing its writes by their epochs, as
``PostgresStore`` does. Two managers on two workers of one ``Shared`` act as two processes."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import attrs

from loop import State, Turn
from session import MemoryStore
from session.stores import Lease
from session.stores._protocol import LeaseLost, check_holder, check_session_id, check_ttl


class Shared:
    """The conversations, inboxes, leases and events every worker sees."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        # session id -> holder, epoch, expires (time.monotonic), and whether its holder released it
        self.leases: dict[str, tuple[str, int, float, bool]] = {}
        self.feed = MemoryFeed()

    def take_over(self, session_id: str, holder: str) -> None:
        """Give the lease to ``holder`` now, lapsed or not (as if its holder had stalled past the ttl)."""
        epoch = self.leases[session_id][1] if session_id in self.leases else 0
        self.leases[session_id] = (holder, epoch + 1, time.monotonic() + 3600, False)

    def lapse(self, session_id: str, holder: str, epoch: int) -> None:
        """A lease ``holder`` held and let lapse (it died)."""
        self.leases[session_id] = (holder, epoch, 0.0, False)


class Worker:
    """One process's store on ``shared``: it remembers the leases it took, and fences its writes by them."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self.held: dict[str, tuple[str, int]] = {}  # session id -> holder, epoch
        self.release_delay = 0.0

    def _fence(self, session_id: str) -> None:
        lease = self.shared.leases.get(session_id)
        mine = self.held.get(session_id)
        if mine is not None:
            if lease is None or lease[:2] != mine:
                raise LeaseLost(f"session {session_id!r} was taken over")
        elif lease is not None and not lease[3] and lease[2] > time.monotonic():
            raise LeaseLost(f"session {session_id!r} is leased to {lease[0]}")

    async def load(self, session_id: str) -> State | None:
        return await self.shared.store.load(session_id)

    def event_feed(self) -> MemoryFeed:
        return self.shared.feed

    async def append(self, session_id: str, start: int, turns: Sequence[Turn], meta: Mapping[str, Any]) -> None:
        self._fence(check_session_id(session_id))
        await self.shared.store.append(session_id, start, turns, meta)

    async def delete(self, session_id: str) -> bool:
        self._fence(check_session_id(session_id))
        return await self.shared.store.delete(session_id)

    async def post(self, session_id: str, message: Turn) -> None:
        await self.shared.store.post(session_id, message)

    async def inbox(self, session_id: str) -> tuple[Turn, ...]:
        return await self.shared.store.inbox(session_id)

    async def inboxes(self) -> tuple[str, ...]:
        return await self.shared.store.inboxes()

    async def done(self, session_id: str, message_id: str) -> None:
        self._fence(check_session_id(session_id))
        await self.shared.store.done(session_id, message_id)

    async def acquire(self, session_id: str, holder: str, ttl: float) -> Lease | None:
        check_session_id(session_id), check_holder(holder), check_ttl(ttl)
        now = time.monotonic()
        found = self.shared.leases.get(session_id)
        if found is None:
            epoch = 1
        elif found[0] == holder and not found[3]:
            epoch = found[1]
        elif found[3] or found[2] <= now:
            epoch = found[1] + 1
        else:
            self.held.pop(session_id, None)
            return None
        self.shared.leases[session_id] = (holder, epoch, now + ttl, False)
        self.held[session_id] = (holder, epoch)
        return Lease(session_id, holder, epoch, time.time() + ttl)

    async def renew(self, holder: str, ttl: float) -> tuple[str, ...]:
        check_holder(holder), check_ttl(ttl)
        now = time.monotonic()
        kept = []
        for session_id, (who, epoch, _, released) in list(self.shared.leases.items()):
            if who == holder and not released:
                self.shared.leases[session_id] = (who, epoch, now + ttl, False)
                kept.append(session_id)
        for session_id, (who, _) in list(self.held.items()):
            if who == holder and session_id not in kept:
                del self.held[session_id]
        return tuple(sorted(kept))

    async def release(self, session_id: str, holder: str) -> None:
        check_session_id(session_id), check_holder(holder)
        if self.release_delay:
            await anyio.sleep(self.release_delay)  # a round trip to a database, during which others go on
        found = self.shared.leases.get(session_id)
        if found is not None and found[0] == holder:
            self.shared.leases[session_id] = (holder, found[1], 0.0, True)
        if self.held.get(session_id, ("",))[0] == holder:
            del self.held[session_id]

    async def lapsed(self) -> tuple[str, ...]:
        now = time.monotonic()
        return tuple(s for s in await self.shared.store.inboxes()
                     if s not in self.shared.leases or self.shared.leases[s][3] or self.shared.leases[s][2] <= now)


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
