"""(b) Tool calls: concurrency within a turn, and what a sync tool's worker thread costs.

Concurrency: one ``Step.turn`` whose model (a ``provider.Function``) asks for ``nap(seconds=0.1)`` eight
times, timed against the same turn asking for it once. The step runs a turn's calls in an anyio task group, so
eight should cost about one. Target: <= 1.15x the one-call turn.

Sync tools: a turn calling a trivial sync ``@tool`` (run in a worker thread, so that a blocking one never
blocks the event loop) against the same turn calling the same function written ``async``. Each sample times
``TURNS`` turns. Target: <= 2x. The notes give the bare hand-off of a no-op to a parked thread and back,
measured alongside: the part of the gap no thread hop can avoid.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any

import anyio

import provider
from loop import Role, State, Step, Text, tool
from tests.benchmarks._harness import Figure, interleave_async

CALLS = 8
NAP = 0.100
TARGET = 1.15
SYNC_TARGET = 2.0
TURNS = 200


@tool
async def nap(seconds: float) -> str:
    """Sleep without blocking the event loop.

    Args:
        seconds: how long to sleep.
    """
    await anyio.sleep(seconds)
    return "rested"


@tool
def add(a: int, b: int) -> int:
    """Add two integers (sync: runs in a worker thread).

    Args:
        a: the first.
        b: the second.
    """
    return a + b


@tool
async def add_async(a: int, b: int) -> int:
    """Add two integers (async: runs on the event loop).

    Args:
        a: the first.
        b: the second.
    """
    return a + b


def make_step(calls: int, seconds: float) -> Step:
    """A step whose model calls ``nap`` ``calls`` times in its one reply."""

    def reply(request: Any) -> Any:
        return [provider.tool_call("nap", {"seconds": seconds}) for _ in range(calls)]

    return Step(provider.Function(reply), tools=[nap])


async def _measure(seconds: float, warmup: int, repeats: int) -> dict[str, float]:
    many, one = make_step(CALLS, seconds), make_step(1, seconds)
    state = State().append(Role.USER, Text("Rest a while."))
    done = await many.turn(state)
    results = done.last.tool_results if done.last is not None else ()
    assert len(results) == CALLS and not any(r.is_error for r in results), done.last
    return await interleave_async(
        {"many": lambda: many.turn(state), "one": lambda: one.turn(state)}, warmup=warmup, repeats=repeats
    )


def _plus(a: int, b: int) -> int:
    return a + b


@tool
async def add_to_thread(a: int, b: int) -> int:
    """Add two integers in a worker thread that anyio hands out (the baseline for the tool thread pool).

    Args:
        a: the first.
        b: the second.
    """
    return await anyio.to_thread.run_sync(_plus, a, b)


def adding_step(adder: Any) -> Step:
    """A step whose model calls ``adder`` once in its one reply."""
    name = adder.spec.name
    return Step(provider.Function(lambda request: provider.tool_call(name, {"a": 1, "b": 2})), tools=[adder])


async def bare_handoffs(count: int) -> None:
    """``count`` hand-offs of a no-op to a parked thread and back, with nothing else: a future, a queue, and
    ``call_soon_threadsafe``."""
    loop = asyncio.get_running_loop()
    inbox: queue.SimpleQueue[asyncio.Future[None] | None] = queue.SimpleQueue()

    def serve() -> None:
        while (future := inbox.get()) is not None:
            loop.call_soon_threadsafe(future.set_result, None)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    for _ in range(count):
        future = loop.create_future()
        inbox.put(future)
        await future
    inbox.put(None)
    thread.join()


async def _measure_sync(turns: int, warmup: int, repeats: int) -> dict[str, float]:
    threaded, inline, anyio_thread = adding_step(add), adding_step(add_async), adding_step(add_to_thread)
    state = State().append(Role.USER, Text("Add one and two."))
    for step in (threaded, inline, anyio_thread):
        (result,) = (await step.turn(state)).last.tool_results  # type: ignore[union-attr]
        assert (result.content, result.is_error) == ("3", False), result

    async def run_turns(step: Step) -> None:
        for _ in range(turns):
            await step.turn(state)

    t = await interleave_async(
        {"sync": lambda: run_turns(threaded), "async": lambda: run_turns(inline), "hop": lambda: bare_handoffs(turns),
         "to_thread": lambda: run_turns(anyio_thread)},
        warmup=warmup, repeats=repeats,
    )
    return {name: seconds / turns for name, seconds in t.items()}


def run(quick: bool = False) -> list[Figure]:
    """Measure (b); ``quick`` uses 10 ms naps, few turns and one sample (for the smoke test)."""
    seconds, warmup, repeats = (NAP / 10, 0, 1) if quick else (NAP, 1, 5)
    t = anyio.run(_measure, seconds, warmup, repeats, backend="asyncio")
    turns, sync_warmup, sync_repeats = (10, 0, 1) if quick else (TURNS, 2, 9)
    s = anyio.run(_measure_sync, turns, sync_warmup, sync_repeats, backend="asyncio")
    return [
        Figure(
            "(b) tools", f"turn with {CALLS} tool calls of {seconds * 1e3:g} ms", t["many"] * 1e3, "ms",
            t["one"] * 1e3, "turn with 1 call", high=TARGET, on_ratio=True, target_text=f"ratio <= {TARGET:g}x",
            notes=(f"anyio.sleep in each call; run one after another they would take {CALLS}x; median of {repeats}",),
        ),
        Figure(
            "(b) tools", "turn calling a sync tool", s["sync"] * 1e6, "µs", s["async"] * 1e6,
            "same turn, async tool", high=SYNC_TARGET, on_ratio=True, target_text=f"ratio <= {SYNC_TARGET:g}x",
            notes=(
                f"per turn, median of {sync_repeats} samples of {turns} turns; the sync tool runs in a worker thread",
                f"a bare hand-off of a no-op to a parked thread and back (two thread wake-ups, nothing else) costs "
                f"{s['hop'] * 1e6:.1f} µs here: the async turn plus that alone would be "
                f"{(s['async'] + s['hop']) / s['async']:.2f}x; where the OS puts the two threads moves it run to run",
            ),
        ),
        Figure(
            "(b) tools", "sync tool turn, the step's own thread pool", s["sync"] * 1e6, "µs", s["to_thread"] * 1e6,
            "same turn, the call through anyio.to_thread.run_sync", high=1.0, on_ratio=True,
            target_text="ratio <= 1x (else use anyio's)",
            notes=(f"per turn, median of {sync_repeats} samples of {turns} turns; both hand the call to a parked "
                   "worker thread and back",),
        ),
    ]


if __name__ == "__main__":
    import sys

    from tests.benchmarks._harness import render_table

    print(render_table(run(quick="--quick" in sys.argv)))
