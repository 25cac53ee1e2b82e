"""(p) Framework time per model call of ``PEOATR`` (and ``Deliberate``) over a zero-latency provider, beside
``ReAct``'s on the same model in the same run.

One ``provider.Function`` model answers every pattern: asked for a plan (``Steps``) it gives ``SUBGOALS``
subgoals; asked for a reflection (``Next``) it says "continue"; in an act stage it calls the trivial async
``lookup`` tool once, then reports; anywhere else it calls ``lookup`` until the request holds ``TOOL_TURNS``
results, then answers (what ReAct does with it). It never waits, so all the time measured is the framework's:
stages, branches, typed asks (schema turn, validation), the work's notes and the answer stage for PEOATR; turns,
tool calls and events for ReAct. A PEOATR run makes ``1 + 4 * SUBGOALS + 1`` model calls; a ReAct run
``TOOL_TURNS + 1``.

    time per model call = wall time of the runs / model calls they made

Target: PEOATR <= 60 µs per model call, tracing off. ReAct's figure (the same model, timed interleaved with
it) is the baseline; the ratio shows what the stages cost over a plain tool loop per call. Deliberate is shown
for information.
"""

from __future__ import annotations

import cProfile
import functools
import io
import json
import pstats
from typing import Any

import anyio

import provider
from cognitive import Pattern, ReAct
from cognitive.planning._peoatr import PEOATR, Deliberate
from loop import Request, Role, State, Step, Text, tool
from tests.benchmarks._harness import Figure, interleave_async

SUBGOALS = 3
TOOL_TURNS = 10
TARGET_US = 60.0
PLAN = json.dumps({"steps": [f"read entry {i}" for i in range(SUBGOALS)]})
NEXT = json.dumps({"decision": "continue", "reason": "the next entry is still to read"})


@tool
async def lookup(key: int) -> str:
    """Look a key up (a trivial tool: returns at once).

    Args:
        key: which entry to read.
    """
    return "ok"


def reply(request: Request) -> Any:
    """The one model for all three patterns (see the module's docstring)."""
    schema = request.options.output_schema
    if schema is not None:
        return PLAN if "steps" in schema["properties"] else NEXT
    turns = request.turns
    last = turns[-1]
    if last.kind == "stage":
        stage = last.meta["stage"]
        return provider.tool_call("lookup", {"key": 1}) if stage == "act" else f"{stage}: noted."
    if last.role is Role.TOOL and len(turns) < 1 + 2 * TOOL_TURNS and turns[-3].kind != "stage":
        return provider.tool_call("lookup", {"key": len(turns)})
    if last.role is Role.USER:
        return provider.tool_call("lookup", {"key": 0})
    return "Done: every entry read."


class Setup:
    """The patterns on one step, and each one's model calls per run (counted once, before any timing)."""

    def __init__(self) -> None:
        self.calls = 0

        def counted(request: Request) -> Any:
            self.calls += 1
            return reply(request)

        step = Step(provider.Function(counted), tools=[lookup])
        self.patterns: dict[str, Pattern] = {"peoatr": PEOATR(step), "deliberate": Deliberate(step), "react": ReAct(step)}
        self.state = State().append(Role.USER, Text("Read every entry."))
        self.per_run: dict[str, int] = {}

    async def check(self) -> None:
        """Each pattern does the work it is timed for: every round, every call, a clean answer."""
        for name, pattern in self.patterns.items():
            self.calls = 0
            done = await pattern.run(self.state)
            assert done.answer and not done.degraded, (name, done.outcome)
            self.per_run[name] = self.calls
        assert self.per_run["peoatr"] == 1 + 4 * SUBGOALS + 1, self.per_run
        assert self.per_run["deliberate"] == 2 + 4 * SUBGOALS + 1, self.per_run
        assert self.per_run["react"] == TOOL_TURNS + 1, self.per_run

    async def many(self, name: str, runs: int) -> None:
        pattern, state = self.patterns[name], self.state
        for _ in range(runs):
            await pattern.run(state)


async def _measure(setup: Setup, runs: int, warmup: int, repeats: int) -> dict[str, float]:
    await setup.check()
    return await interleave_async({name: functools.partial(setup.many, name, runs) for name in setup.patterns},
                                  warmup=warmup, repeats=repeats)


def run(quick: bool = False) -> list[Figure]:
    """Measure (p); ``quick`` uses tiny sizes (for the smoke test)."""
    runs, warmup, repeats = (3, 1, 3) if quick else (40, 2, 9)
    setup = Setup()
    seconds = anyio.run(_measure, setup, runs, warmup, repeats, backend="asyncio")
    us = {name: seconds[name] / (runs * setup.per_run[name]) * 1e6 for name in setup.patterns}
    sizes = (f"{runs} runs per sample, median of {repeats}; model calls per run: PEOATR {setup.per_run['peoatr']}, "
             f"Deliberate {setup.per_run['deliberate']}, ReAct {setup.per_run['react']}")
    return [
        Figure("(p) peoatr", "PEOATR time per model call", us["peoatr"], "µs", us["react"], "ReAct per model call",
               high=TARGET_US, target_text=f"<= {TARGET_US:g} µs",
               notes=(f"ratio = PEOATR / ReAct time per model call, zero-latency model, tracing off; {sizes}",)),
        Figure("(p) peoatr", "Deliberate time per model call", us["deliberate"], "µs", us["react"],
               "ReAct per model call", notes=("for information: PEOATR's loop with a think stage first",)),
    ]


def profile(top: int = 25, runs: int = 200) -> str:
    """cProfile of PEOATR runs: the ``top`` functions by own time."""
    setup = Setup()
    anyio.run(setup.many, "peoatr", 5, backend="asyncio")  # warm up
    profiler = cProfile.Profile()
    profiler.enable()
    anyio.run(setup.many, "peoatr", runs, backend="asyncio")
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


if __name__ == "__main__":
    import sys

    from tests.benchmarks._harness import render_table

    if "--profile" in sys.argv:
        print(profile())
    else:
        print(render_table(run(quick="--quick" in sys.argv)))
