"""Response cache: what a hit costs against the model call it replaces.

Every figure times whole ``Step.turn`` calls (streaming, turn building, events) on a one-message conversation
over ``loop.ResponseCache``. The model is a provider that replays a recorded response: ``CHUNKS`` text deltas
of 16 characters (a 200-word answer), then usage and finish. A miss asks the model (each batch uses fresh
conversations, so every request misses) and stores the response; a hit answers the same conversations again
from the store. Misses and hits are timed interleaved in one run.

(a) A hit against a miss on a model with a realistic pace: the first delta after ``FIRST_TOKEN`` seconds, then
    one every ``BETWEEN`` seconds (real models are slower still, so the ratio only improves). Target: a hit
    costs at most 1% of the call it replaces.
(b) The same on a model that never waits: what the cache's own work costs, hit against miss (informational).
(c) (b) with the responses kept in a ``SQLiteCache`` file instead of memory (informational).
(d) A miss through the cache against the same turn on the bare provider, no waits: what keying and storing
    add to a call that misses (informational).
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

from loop import Delta, DeltaStream, Finish, Request, Role, State, Step, Text, TextDelta, Usage, UsageDelta
from loop._cache import MemoryCache, ResponseCache
from loop._cache_sqlite import SQLiteCache
from tests.benchmarks._harness import Figure, interleave_async

CHUNKS = 80
FIRST_TOKEN = 0.050  # seconds to the first delta
BETWEEN = 0.005  # seconds between deltas
TARGET = 0.01
ANSWER = ("The Amazon basin drains about seven million square kilometres, the largest on Earth; the Congo "
          "follows with nearly four million. ") * 12
RECORDED: tuple[Delta, ...] = (*(TextDelta(ANSWER[i:i + 16]) for i in range(0, 16 * CHUNKS, 16)),
                               UsageDelta(Usage(1200, 320), model="bench-model"), Finish("stop"))


class Recorded:
    """Replays ``RECORDED`` for every request, after ``first`` seconds and ``between`` seconds per delta (no
    waits at all when both are 0)."""

    def __init__(self, first: float = 0.0, between: float = 0.0) -> None:
        self.first, self.between = first, between

    def stream(self, request: Request) -> DeltaStream:
        return self._stream()

    async def _stream(self) -> AsyncGenerator[Delta, None]:
        if self.first:
            await anyio.sleep(self.first)
        else:
            await anyio.lowlevel.checkpoint()  # a real provider yields to the event loop at least once
        for delta in RECORDED:
            if self.between:
                await anyio.sleep(self.between)
            yield delta


def conversations(count: int, batch: int) -> list[State]:
    return [State().append(Role.USER, Text(f"Question {batch}.{n}: which river basin is the largest?"))
            for n in range(count)]


async def _cases(provider: Recorded, store_factory: Callable[[], Any], per_batch: int,
                 bare: bool = False) -> dict[str, Callable[[], Awaitable[Any]]]:
    """Three timed cases: a batch of misses (fresh conversations and store), a batch of hits (the conversations
    the last miss batch stored), and, with ``bare``, the same fresh turns on the provider without a cache."""
    batches = iter(range(1_000_000))
    last: dict[str, Any] = {}

    async def misses() -> None:
        store = store_factory()
        step = Step(ResponseCache(provider, store=store))
        states = conversations(per_batch, next(batches))
        for state in states:
            await step.turn(state)
        last["step"], last["states"] = step, states

    async def hits() -> None:
        step, states = last["step"], last["states"]
        for state in states:
            done = await step.turn(state)
            assert done.last is not None and done.last.meta.get("cache") == "hit"

    async def plain() -> None:
        step = Step(provider)
        for state in conversations(per_batch, next(batches)):
            await step.turn(state)

    cases: dict[str, Callable[[], Awaitable[Any]]] = {"miss": misses, "hit": hits}
    if bare:
        cases["bare"] = plain
    return cases


async def measure(quick: bool) -> dict[str, dict[str, float]]:
    paced = Recorded(0.001, 0.0) if quick else Recorded(FIRST_TOKEN, BETWEEN)
    fast = Recorded()
    per_batch = 3 if quick else 200
    repeats = 2 if quick else 7
    out: dict[str, dict[str, float]] = {}
    paced_batch = 1 if quick else 3
    got = await interleave_async(await _cases(paced, MemoryCache, paced_batch), warmup=1,
                                 repeats=2 if quick else 3)
    out["paced"] = {k: v / paced_batch for k, v in got.items()}
    got = await interleave_async(await _cases(fast, MemoryCache, per_batch, bare=True), warmup=1, repeats=repeats)
    out["fast"] = {k: v / per_batch for k, v in got.items()}
    with tempfile.TemporaryDirectory() as folder:
        files = iter(range(1_000_000))
        stores: list[SQLiteCache] = []

        def sqlite() -> SQLiteCache:
            stores.append(SQLiteCache(Path(folder) / f"cache{next(files)}.db"))
            return stores[-1]

        sqlite_batch = 3 if quick else 50
        got = await interleave_async(await _cases(fast, sqlite, sqlite_batch), warmup=1, repeats=repeats)
        out["sqlite"] = {k: v / sqlite_batch for k, v in got.items()}
        for store in stores:
            store.close()
    return out


def run(quick: bool = False) -> list[Figure]:
    got = anyio.run(measure, quick)
    paced, fast, sqlite = got["paced"], got["fast"], got["sqlite"]
    us = 1e6
    pace = "1 ms to the first delta (quick)" if quick else (
        f"{FIRST_TOKEN * 1000:g} ms to the first delta, {BETWEEN * 1000:g} ms per delta after")
    return [
        Figure("(a) response cache", "hit, model with a realistic pace", paced["hit"] * us, "µs",
               paced["miss"] * us, "miss: the model call", high=TARGET, on_ratio=True, target_text=f"<= {TARGET:g}x",
               notes=(f"{len(RECORDED)} recorded deltas; {pace}; memory store; per Step.turn; a hit takes "
                      f"1/{paced['miss'] / paced['hit']:,.0f} of the call it replaces",)),
        Figure("(b) response cache", "hit, model that never waits", fast["hit"] * us, "µs", fast["miss"] * us,
               "miss through the cache",
               notes=("what the cache's own work costs: a miss keys, streams and stores; a hit keys and replays",)),
        Figure("(c) response cache", "hit, SQLite store, model that never waits", sqlite["hit"] * us, "µs",
               sqlite["miss"] * us, "miss through the cache",
               notes=("one database file per batch, each statement in a worker thread",)),
        Figure("(d) response cache", "miss, model that never waits", fast["miss"] * us, "µs", fast["bare"] * us,
               "the same turn without a cache",
               notes=("what keying the request and storing the response add to a call that misses",)),
    ]


if __name__ == "__main__":
    from tests.benchmarks._harness import render_table

    print(render_table(run()))
