"""What one ``PostgresStore`` keeps of its own writes: the version of each conversation it last saw (``Views``,
for the conflict check), the queue of each conversation's writes (``WriteQueues``, for their order), and the
leases it took (``HeldLeases``, for the fencing check)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from session.stores._protocol import Lease


class Views:
    """The version of each conversation as this store last saw it (0: absent; ``None``: unknown, after a write
    whose outcome was lost), for the conflict check. Calls come from worker threads, hence the lock.

    A load and an append of one conversation can overlap (a page shows a conversation while its run writes), and
    the load may have read the database before the append committed. So each view carries a tick of this
    store's clock: an append's is taken when it has committed, a load's just before it reads, and a load only
    replaces a view older than its own start. The oldest views are forgotten past ``limit`` conversations."""

    def __init__(self, limit: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, tuple[int | None, int]] = OrderedDict()
        self._clock = 0
        self._limit = limit

    def tick(self) -> int:
        """A moment of this store's clock: a load takes one just before it reads."""
        with self._lock:
            self._clock += 1
            return self._clock

    def expected(self, session_id: str) -> int | None:
        """The version an append expects to find (``None``: no expectation, the append is not checked)."""
        with self._lock:
            seen = self._seen.get(session_id)
            return None if seen is None else seen[0]

    def wrote(self, session_id: str, version: int | None) -> None:
        """This store's write of the conversation committed ``version`` (0: it deleted it; ``None``: unknown)."""
        with self._lock:
            self._clock += 1
            self._put(session_id, version, self._clock)

    def read(self, session_id: str, version: int, began: int) -> None:
        """A load that began at tick ``began`` found ``version``: it is the view unless a newer one is held."""
        with self._lock:
            seen = self._seen.get(session_id)
            if seen is None or seen[1] < began:
                self._put(session_id, version, began)

    def _put(self, session_id: str, version: int | None, tick: int) -> None:
        self._seen[session_id] = (version, tick)
        self._seen.move_to_end(session_id)
        if len(self._seen) > self._limit:
            self._seen.popitem(last=False)


class _Queue:
    """The writes of one conversation (or checkpoint) waiting to run, in the order they were called."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = anyio.Lock()  # fair: waiters get it in the order they asked
        self.users = 0


class WriteQueues:
    """Writes of one conversation (or one checkpoint) from this store run one at a time, in the order they were
    called, as the ``InboxStore`` contract asks (a post, then a done of the same message), though each runs in a
    worker thread of its own. Queues exist only while someone is in them."""

    def __init__(self) -> None:
        self._queues: dict[tuple[str, str], _Queue] = {}

    @asynccontextmanager
    async def of(self, kind: str, name: str) -> AsyncIterator[None]:
        """Wait for the earlier writes of ``name`` (a ``kind``: a session, a checkpoint), then hold the queue.
        Nothing before the lock awaits, so callers line up in the order they called."""
        key = (kind, name)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _Queue()
        queue.users += 1
        try:
            async with queue.lock:
                yield
        finally:
            queue.users -= 1
            if queue.users == 0:
                del self._queues[key]


class HeldLeases:
    """The lease this store took of each conversation (holder and epoch), which fences its writes of it (see
    ``_postgres_leases``), until it releases the lease or a renewal finds it gone. Used on the event loop's thread
    only, never across an await: a write reads its conversation's before its worker thread starts."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[str, int]] = {}

    def of(self, session_id: str) -> tuple[str, int] | None:
        """The lease held of ``session_id`` (holder, epoch), or ``None``."""
        return self._held.get(session_id)

    def acquired(self, session_id: str, holder: str, lease: Lease | None) -> None:
        """``holder`` asked for the lease of ``session_id`` and got ``lease``; ``None``: another holder's is live,
        so one ``holder`` held before is gone."""
        if lease is not None:
            self._held[session_id] = (lease.holder, lease.epoch)
        else:
            self.released(session_id, holder)

    def released(self, session_id: str, holder: str) -> None:
        """``holder``'s lease of ``session_id`` is given up (if this store held one of it)."""
        held = self._held.get(session_id)
        if held is not None and held[0] == holder:
            del self._held[session_id]

    def of_holder(self, holder: str) -> dict[str, tuple[str, int]]:
        """The leases held by ``holder``, by conversation: what a renewal expects to find."""
        return {session_id: held for session_id, held in self._held.items() if held[0] == holder}

    def renewed(self, expected: dict[str, tuple[str, int]], kept: tuple[str, ...]) -> None:
        """A renewal that ``expected`` these leases kept those of ``kept``: forget the others, unless taken again
        (with a new epoch) while it ran."""
        for session_id, held in expected.items():
            if session_id not in kept and self._held.get(session_id) == held:
                del self._held[session_id]
