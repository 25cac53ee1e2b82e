"""What one ``PostgresStore`` keeps of its own writes: the version of each conversation it last saw (``Views``,
for the conflict check), and the queue of each conversation's writes (``WriteQueues``, for their order)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio


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
