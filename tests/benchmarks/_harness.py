"""Shared timing helpers and the ``Figure`` every benchmark returns.

Noise control, the same everywhere: ``perf_counter`` around a batch of work, warm-up batches that are thrown
away, a ``gc.collect()`` before each timed batch, and the median of several repeats. When a figure is compared
with a baseline, the two are timed *interleaved* (A, B, A, B, ...) so that a burst of load on a noisy machine
hits both sides rather than one.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Figure:
    """One measured figure, its baseline from the same run, and the target it is held to.

    ``value`` and ``baseline`` are in ``unit``. The target applies to ``value`` or, when ``on_ratio``, to
    ``ratio`` (value / baseline unless the benchmark passes its own). ``low``/``high`` bound it; both ``None``
    makes the row informational (a contrast, not a goal).
    """

    bench: str
    name: str
    value: float
    unit: str
    baseline: float
    baseline_name: str
    high: float | None = None
    low: float | None = None
    on_ratio: bool = False
    target_text: str = ""
    ratio_value: float | None = None
    notes: tuple[str, ...] = ()

    @property
    def ratio(self) -> float:
        if self.ratio_value is not None:
            return self.ratio_value
        return self.value / self.baseline if self.baseline else float("inf")

    @property
    def verdict(self) -> str:
        if self.high is None and self.low is None:
            return "info"
        checked = self.ratio if self.on_ratio else self.value
        ok = (self.high is None or checked <= self.high) and (self.low is None or checked >= self.low)
        return "PASS" if ok else "MISS"


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def time_sync(fn: Callable[[], Any]) -> float:
    """Seconds one call of ``fn`` takes, after a full garbage collection."""
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


async def time_async(fn: Callable[[], Awaitable[Any]]) -> float:
    """Seconds one awaited call of ``fn`` takes, after a full garbage collection."""
    gc.collect()
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


def interleave_sync(cases: Mapping[str, Callable[[], Any]], *, warmup: int, repeats: int) -> dict[str, float]:
    """Median seconds per case, timing the cases in turn ``repeats`` times after ``warmup`` untimed rounds."""
    for _ in range(warmup):
        for fn in cases.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            samples[name].append(time_sync(fn))
    return {name: median(s) for name, s in samples.items()}


async def interleave_async(
    cases: Mapping[str, Callable[[], Awaitable[Any]]], *, warmup: int, repeats: int
) -> dict[str, float]:
    """``interleave_sync`` for coroutines; run it inside one event loop so loop start-up is never timed."""
    for _ in range(warmup):
        for fn in cases.values():
            await fn()
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            samples[name].append(await time_async(fn))
    return {name: median(s) for name, s in samples.items()}


# -- the report ---------------------------------------------------------------------------------------------


def _num(value: float, unit: str) -> str:
    text = f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{text} {unit}"


def render_table(figures: list[Figure]) -> str:
    """The figures as a plain-text table, then each row's notes (how the ratio and per-op costs were got)."""
    head = ("#", "benchmark", "figure", "value", "baseline (same run)", "ratio", "target", "result")
    rows = []
    for i, f in enumerate(figures, 1):
        rows.append((
            str(i), f.bench, f.name, _num(f.value, f.unit), f"{f.baseline_name}: {_num(f.baseline, f.unit)}",
            f"{f.ratio:.2f}x", f.target_text or "-", f.verdict,
        ))
    widths = [max(len(r[c]) for r in [head, *rows]) for c in range(len(head))]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths)), line]
    out += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)) for r in rows]
    notes = [f"  [{i}] {n}" for i, f in enumerate(figures, 1) for n in f.notes]
    if notes:
        out += ["", "notes:", *notes]
    return "\n".join(out)
