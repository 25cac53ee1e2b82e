"""Watching the event loop for stalls while something runs: a 10 ms ticker that records every gap."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

import anyio


@contextlib.asynccontextmanager
async def loop_gaps(period: float = 0.01) -> AsyncIterator[list[float]]:
    """``async with loop_gaps() as gaps:`` — while the block runs, a task sleeps ``period`` seconds at a time
    and appends each wake-up's distance from the last to ``gaps``; a gap well past ``period`` is a stall."""
    gaps: list[float] = []

    async def tick() -> None:
        last = time.perf_counter()
        while True:
            await anyio.sleep(period)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    async with anyio.create_task_group() as group:
        group.start_soon(tick)
        try:
            yield gaps
        finally:
            group.cancel_scope.cancel()
