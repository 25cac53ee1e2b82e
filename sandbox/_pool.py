"""The warm pool: started, idle containers, so a run does not wait for one to start.

Each container serves exactly one run and is then destroyed; a new one is started in the background to take
its place. A container is never reused, so nothing one run leaves behind can reach the next.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

import anyio
import anyio.abc

from loop import tracing
from sandbox._protocol import SandboxError

_log = tracing.logger("sandbox.pool")


class WarmPool:
    """Keeps ``size`` idle containers started. ``take`` hands one out; ``discard`` destroys one in the background.

    ``start`` and ``remove`` are blocking functions (container id in, out) run in worker threads. Containers
    idle for longer than ``max_age`` seconds are replaced, since their supervisors end themselves after the
    configured idle time.
    """

    def __init__(self, start: Callable[[], str], remove: Callable[[str], None], *, size: int,
                 max_age: float) -> None:
        self._start = start
        self._remove = remove
        self.size = size
        self._max_age = max_age
        self._idle: collections.deque[tuple[str, float]] = collections.deque()
        self._changed = anyio.Event()
        self._group: anyio.abc.TaskGroup | None = None
        self._filler: anyio.CancelScope | None = None
        self._filler_done = anyio.Event()

    @property
    def idle(self) -> int:
        return len(self._idle)

    async def run(self, group: anyio.abc.TaskGroup) -> None:
        """Start filling in the background of ``group``; removals of used containers run there too."""
        self._group = group
        self._filler = anyio.CancelScope()
        group.start_soon(self._fill, self._filler)

    async def _fill(self, scope: anyio.CancelScope) -> None:
        try:
            with scope:
                await self._fill_forever()
        finally:
            self._filler_done.set()

    async def _fill_forever(self) -> None:
        backoff = 0.5
        while True:
            self._drop_stale()
            if len(self._idle) >= self.size:
                waiting = self._changed
                with anyio.move_on_after(self._max_age / 4):  # wake now and then to replace stale ones
                    await waiting.wait()
                continue
            try:
                # Shielded: a container being started when the pool closes must still be recorded, or
                # nobody would remove it.
                with anyio.CancelScope(shield=True):
                    cid = await anyio.to_thread.run_sync(self._start)
            except SandboxError as exc:
                # Runs still work (each starts its own container); try again later, not in a hot loop.
                _log.warning("warm pool could not start a container", error=str(exc), retry_in=backoff)
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            backoff = 0.5
            self._idle.append((cid, time.monotonic()))
            self._pulse()

    def _pulse(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def _drop_stale(self) -> None:
        now = time.monotonic()
        while self._idle and now - self._idle[0][1] > self._max_age:
            self.discard(self._idle.popleft()[0])

    def take(self) -> str | None:
        """An idle container's id (the caller now owns it), or ``None`` when none is ready."""
        self._drop_stale()
        cid = self._idle.popleft()[0] if self._idle else None
        self._pulse()  # the filler starts a replacement
        return cid

    def discard(self, cid: str) -> None:
        """Destroy a container in the background."""
        if self._group is None:
            raise RuntimeError("the pool is not running")
        self._group.start_soon(self._removing, cid)

    async def _removing(self, cid: str) -> None:
        try:
            await anyio.to_thread.run_sync(self._remove, cid)
        except SandboxError as exc:
            # Not the runs' concern, nor a reason to stop the pool: the engine removes it once it stops.
            _log.warning("warm pool could not remove a container", container=cid[:12], error=str(exc))

    async def wait_full(self) -> None:
        """Return once ``size`` containers are idle."""
        while len(self._idle) < self.size:
            await self._changed.wait()

    async def close(self) -> None:
        """Stop filling and destroy every idle container (removals already under way finish in the group)."""
        with anyio.CancelScope(shield=True):
            if self._filler is not None:
                self._filler.cancel()
                await self._filler_done.wait()
            idle = [cid for cid, _ in self._idle]
            self._idle.clear()
            async with anyio.create_task_group() as group:
                for cid in idle:
                    group.start_soon(self._removing, cid)

    def __repr__(self) -> str:
        return f"WarmPool(size={self.size}, idle={len(self._idle)})"
