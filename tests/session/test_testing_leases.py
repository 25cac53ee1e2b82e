"""``check_lease_store``, the ``LeaseStore`` conformance check, on a lease store in memory: the store passes, and
each way of breaking the contract fails it, naming the rule broken. (PostgresStore runs it in
``tests/session/stores/test_postgres_leases.py``.)"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import pytest

from loop import State, Turn, UsageError
from session import MemoryStore
from session.stores import Lease, LeaseLost, LeaseStore
from session.stores._protocol import check_session_id
from session.testing import ConformanceError, check_lease_store


class Database:
    """What the workers share: the conversations and inboxes, and each conversation's lease row
    ``[holder, epoch, expires, released]``, kept when released so that epochs only grow."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.leases: dict[str, list[Any]] = {}


class Worker:
    """One worker's store on a ``Database``: it remembers the leases it took and fences its writes by them."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.held: dict[str, tuple[str, int]] = {}

    def fence(self, session_id: str) -> None:
        row, held = self.db.leases.get(session_id), self.held.get(session_id)
        if held is None:
            if row is not None and row[2] > time.time():
                raise LeaseLost(f"session {session_id!r} is leased to {row[0]!r}")
        elif row is None or (row[0], row[1]) != held:
            raise LeaseLost(f"the lease of session {session_id!r} was taken over")

    async def load(self, session_id: str) -> State | None:
        return await self.db.store.load(session_id)

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
        row = self.db.leases.get(check_session_id(session_id))
        if row is not None and row[0] == holder:
            row[2], row[3] = -math.inf, True
        if self.held.get(session_id, ("",))[0] == holder:
            del self.held[session_id]

    async def lapsed(self) -> tuple[str, ...]:
        now = time.time()
        return tuple(s for s in await self.db.store.inboxes() if s not in self.db.leases or self.db.leases[s][2] <= now)


def workers(kind: type[Worker] = Worker) -> Any:
    db = Database()
    return lambda: kind(db)


async def test_a_lease_store_that_keeps_the_contract_passes() -> None:
    shared = Database()
    made: list[Worker] = []

    def make() -> Worker:
        made.append(Worker(shared))
        return made[-1]

    await check_lease_store(make)
    assert len(made) == 3 and all(isinstance(w, LeaseStore) for w in made)


async def test_an_async_factory_is_awaited() -> None:
    db = Database()

    async def make() -> Worker:
        await anyio.sleep(0)
        return Worker(db)

    await check_lease_store(make)


class Unfenced(Worker):
    def fence(self, session_id: str) -> None:
        pass


class DoneUnfenced(Worker):
    async def done(self, session_id: str, message_id: str) -> None:
        await self.db.store.done(session_id, message_id)


class SameEpoch(Worker):
    """Hands a lease over without raising its epoch."""

    def epoch(self, row: list[Any] | None, holder: str, now: float) -> int | None:
        epoch = super().epoch(row, holder, now)
        return epoch if row is None or epoch is None else int(row[1])


class Stealing(Worker):
    """Takes a lease whether or not its holder's is live."""

    def epoch(self, row: list[Any] | None, holder: str, now: float) -> int | None:
        return 1 if row is None else int(row[1]) + (row[0] != holder)


class RenewsReleased(Worker):
    async def renew(self, holder: str, ttl: float) -> tuple[str, ...]:
        for row in self.db.leases.values():
            row[3] = row[3] and row[0] != holder
        return await super().renew(holder, ttl)


class RenewsLiveOnly(Worker):
    async def renew(self, holder: str, ttl: float) -> tuple[str, ...]:
        for row in self.db.leases.values():
            row[3] = row[3] or (row[0] == holder and row[2] <= time.time())
        return await super().renew(holder, ttl)


class Racy(Worker):
    """Looks the lease up, then waits, then writes it: racing workers all win."""

    async def acquire(self, session_id: str, holder: str, ttl: float) -> Lease | None:
        self.check(holder, ttl)
        now = time.time()
        epoch = self.epoch(self.db.leases.get(check_session_id(session_id)), holder, now)
        await anyio.sleep(0.01)
        if epoch is None:
            return None
        self.db.leases[session_id] = [holder, epoch, now + ttl, False]
        self.held[session_id] = (holder, epoch)
        return Lease(session_id, holder, epoch, now + ttl)


class LapsedListsAll(Worker):
    async def lapsed(self) -> tuple[str, ...]:
        return await self.inboxes()


class LaxTtl(Worker):
    @staticmethod
    def check(holder: Any, ttl: Any = 1.0) -> None:
        Worker.check(holder)


@pytest.mark.parametrize(("kind", "rule"), [
    (Unfenced, "append: a store holding no lease may not write while another's lease is live"),
    (DoneUnfenced, "done: a store holding no lease may not write"),
    (SameEpoch, "a lease that changes hands gets a higher epoch"),
    (Stealing, "acquire of a live lease another holds is None"),
    (RenewsReleased, "renew leaves out a released lease"),
    (RenewsLiveOnly, "renew extends a lapsed lease nobody took"),
    (Racy, "of workers racing for a lapsed lease exactly one wins"),
    (LapsedListsAll, "lapsed names the conversations with messages waiting whose lease is free or lapsed"),
    (LaxTtl, r"acquire\('lease:x', 'worker-a', 0\) must raise UsageError"),
])
async def test_a_broken_lease_store_fails_the_check_naming_the_rule(kind: type[Worker], rule: str) -> None:
    with pytest.raises(ConformanceError, match=f"store breaks the contract: {rule}"):
        await check_lease_store(workers(kind))
