"""(c) Verifiers run concurrently: ``run_all`` of 3 verifiers that each sleep 100 ms against 1 verifier.

Each verifier is a ``FunctionVerifier`` over an async check that sleeps (anyio) and passes. ``run_all`` runs
them in a task group, so three should cost about one. Target: <= 1.15x the single verifier.
"""

from __future__ import annotations

import anyio

from loop import Role, State, Text
from tests.benchmarks._harness import Figure, interleave_async
from verifier import FunctionVerifier, Status, run_all

VERIFIERS = 3
NAP = 0.100
TARGET = 1.15


def make_verifiers(count: int, seconds: float) -> list[FunctionVerifier]:
    async def slow_check(state: State) -> bool:
        await anyio.sleep(seconds)
        return True

    return [FunctionVerifier(slow_check, name=f"slow_{i}") for i in range(count)]


async def _measure(seconds: float, warmup: int, repeats: int) -> dict[str, float]:
    many, one = make_verifiers(VERIFIERS, seconds), make_verifiers(1, seconds)
    state = State().append(Role.USER, Text("Check me.")).append(Role.ASSISTANT, Text("Done."))
    results = await run_all(many, state)
    assert [r.status for r in results] == [Status.PASS] * VERIFIERS, results
    return await interleave_async(
        {"many": lambda: run_all(many, state), "one": lambda: run_all(one, state)}, warmup=warmup, repeats=repeats
    )


def run(quick: bool = False) -> list[Figure]:
    """Measure (c); ``quick`` uses 10 ms sleeps and one sample (for the smoke test)."""
    seconds, warmup, repeats = (NAP / 10, 0, 1) if quick else (NAP, 1, 5)
    t = anyio.run(_measure, seconds, warmup, repeats, backend="asyncio")
    return [
        Figure(
            "(c) verify", f"run_all of {VERIFIERS} verifiers of {seconds * 1e3:g} ms", t["many"] * 1e3, "ms",
            t["one"] * 1e3, "1 verifier", high=TARGET, on_ratio=True, target_text=f"ratio <= {TARGET:g}x",
            notes=(f"anyio.sleep in each check; run one after another they would take {VERIFIERS}x; "
                   f"median of {repeats}",),
        ),
    ]


if __name__ == "__main__":
    import sys

    from tests.benchmarks._harness import render_table

    print(render_table(run(quick="--quick" in sys.argv)))
