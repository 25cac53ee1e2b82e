"""(b) Tool calls in one turn run concurrently: 8 calls that each sleep 100 ms against 1 such call.

One ``Step.turn`` whose model (a ``provider.Function``) asks for ``nap(seconds=0.1)`` eight times, timed
against the same turn asking for it once. The step runs a turn's calls in an anyio task group, so eight should
cost about one. Target: <= 1.15x the one-call turn.
"""

from __future__ import annotations

from typing import Any

import anyio

import provider
from loop import Role, State, Step, Text, tool
from tests.benchmarks._harness import Figure, interleave_async

CALLS = 8
NAP = 0.100
TARGET = 1.15


@tool
async def nap(seconds: float) -> str:
    """Sleep without blocking the event loop.

    Args:
        seconds: how long to sleep.
    """
    await anyio.sleep(seconds)
    return "rested"


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


def run(quick: bool = False) -> list[Figure]:
    """Measure (b); ``quick`` uses 10 ms naps and one sample (for the smoke test)."""
    seconds, warmup, repeats = (NAP / 10, 0, 1) if quick else (NAP, 1, 5)
    t = anyio.run(_measure, seconds, warmup, repeats, backend="asyncio")
    return [
        Figure(
            "(b) tools", f"turn with {CALLS} tool calls of {seconds * 1e3:g} ms", t["many"] * 1e3, "ms",
            t["one"] * 1e3, "turn with 1 call", high=TARGET, on_ratio=True, target_text=f"ratio <= {TARGET:g}x",
            notes=(f"anyio.sleep in each call; run one after another they would take {CALLS}x; median of {repeats}",),
        ),
    ]


if __name__ == "__main__":
    import sys

    from tests.benchmarks._harness import render_table

    print(render_table(run(quick="--quick" in sys.argv)))
