"""``check_lease_store``, the ``LeaseStore`` conformance check, on a lease store in memory: the store passes, and
each way of breaking the contract fails it, naming the rule broken. (PostgresStore runs it in
``tests/session/stores/test_postgres_leases.py``.)"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from session.stores import Lease, LeaseStore
from session.stores._protocol import check_session_id
from session.testing import ConformanceError, check_lease_store
from tests.session.leasing import Shared, Worker


def workers(kind: type[Worker] = Worker) -> Any:
    db = Shared()
    return lambda: kind(db)


async def test_a_lease_store_that_keeps_the_contract_passes() -> None:
    shared = Shared()
    made: list[Worker] = []

    def make() -> Worker:
        made.append(Worker(shared))
        return made[-1]

    await check_lease_store(make)
    assert len(made) == 3 and all(isinstance(w, LeaseStore) for w in made)


async def test_an_async_factory_is_awaited() -> None:
    db = Shared()

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
