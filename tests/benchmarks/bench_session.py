"""Sessions at scale: 1,000 concurrent sessions x 5 messages against a model that takes 50 ms per reply.

Every session gets its five messages at once (they queue, FIFO) and answers them one after another, so the
ideal total is 5 x 50 ms = 250 ms however many sessions run. The figure is the wall time from the first
message sent to the last answer stored (memory store, one ``SingleShot`` turn per message), against that ideal
(target <= 1.5x on 2 cores) and against a bare baseline measured in the same run: the same number of anyio
tasks each sleeping 50 ms five times. Peak memory per session comes from a separate run under tracemalloc.

The load runs in a fresh interpreter that imports what a session server imports (``python -m
tests.benchmarks.bench_session`` runs it alone), as pyperf runs each benchmark in its own worker: at this
scale a full garbage collection is a sizeable part of 250 ms, and its cost grows with every object alive in
the process, so the other benchmarks' imports (MCP, the Docker SDK, ...) would tax this one. It runs twice:
with the default collector, as an application embedding a ``Manager`` gets it, and as ``python -m session
serve`` runs it, after ``session.tune_collector()`` (start-up objects frozen, the young generation collected
every 20,000 allocations rather than 700). Each row's notes count the
collections of each generation during the timed runs. A third run stores the conversations in an SQLite
file instead of memory (informational: the cost of durability, against the memory store's figure).

Over HTTP (``HTTPConduit`` served by uvicorn on 127.0.0.1, a model that answers at once): p50/p99 latency
from posting a message to its first event on the session's SSE stream, and to its first text delta, against
the p50 of a plain ``GET /healthz`` round trip on the same server.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import httpx

from cognitive import SingleShot, new_turn_processor
from loop import Request
from provider import Function
from session import (HTTPConduit, Manager, MemoryStore, MessageFailed, MessageFinished, SQLiteStore, Store,
                     tune_collector)
from tests.benchmarks._harness import Figure, median

_ROOT = str(Path(__file__).resolve().parents[2])

REPLY_SECONDS = 0.05
TARGET_RATIO = 1.5


async def _reply(request: Request) -> str:
    await anyio.sleep(REPLY_SECONDS)
    return f"answer to {request.turns[-1].text}"


class _Collections:
    """Counts garbage collections of each generation, and the time they take, while ``active`` (set for the
    timed part of each run)."""

    def __init__(self) -> None:
        self.active = False
        self.counts = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if not self.active:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            generation = info["generation"]
            self.counts[generation] += 1
            self.seconds[generation] += time.perf_counter() - self._started

    def timed(self, count: int, messages: int) -> float:
        try:
            return anyio.run(_sessions, count, messages, self)
        finally:
            self.active = False

    def summary(self, runs: int) -> str:
        return ", ".join(f"gen {g}: {self.counts[g] / runs:.1f} ({self.seconds[g] / runs * 1000:.0f} ms)"
                         for g in range(3))


async def _sessions(count: int, messages: int, window: _Collections | None = None, store: Store | None = None
                    ) -> float:
    """Seconds from the first message sent to the last message answered, for ``count`` sessions."""
    manager = Manager(new_turn_processor(SingleShot), provider=Function(_reply), store=store or MemoryStore(),
                      max_sessions=count, queue_size=messages)
    async with manager:
        sessions = [await manager.open(f"s{i}") for i in range(count)]
        failed = 0

        async def converse(session: Any, events: Any) -> None:
            nonlocal failed
            finished = 0
            with events:
                async for event in events:
                    if isinstance(event, (MessageFinished, MessageFailed)):
                        failed += isinstance(event, MessageFailed)
                        finished += 1
                        if finished == messages:
                            return

        if window is not None:
            window.active = True
        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for session in sessions:
                events = session.events.subscribe(buffer=None)
                for n in range(messages):
                    session.send(f"m{n}")
                group.start_soon(converse, session, events)
        elapsed = time.perf_counter() - started
        if window is not None:
            window.active = False
        if failed:
            raise RuntimeError(f"{failed} messages failed")
        answered = sum(len(s.state) for s in sessions)
        if answered != count * messages * 2:
            raise RuntimeError(f"expected {count * messages * 2} stored turns, found {answered}")
    return elapsed


async def _bare(count: int, messages: int) -> float:
    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for _ in range(count):
            async def one() -> None:
                for _ in range(messages):
                    await anyio.sleep(REPLY_SECONDS)
            group.start_soon(one)
    return time.perf_counter() - started


def _peak_bytes(fn: Any, count: int, messages: int) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        anyio.run(fn, count, messages)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def _http_latency(messages: int) -> dict[str, list[float]]:
    """Seconds from POST to the message's first SSE event and first text delta; and healthz round trips."""
    manager = Manager(new_turn_processor(SingleShot), provider=Function(lambda r: "a quick answer"),
                      store=MemoryStore())
    conduit = HTTPConduit(host="127.0.0.1", port=0, token="bench", rate_limit=None)
    found: dict[str, list[float]] = {"first_event": [], "first_text": [], "healthz": []}
    async with manager, anyio.create_task_group() as group:
        url = await group.start(conduit.serve, manager)
        async with httpx.AsyncClient(base_url=url, headers={"authorization": "Bearer bench"}, timeout=10) as http:
            session_id = (await http.post("/sessions")).json()["id"]
            async with http.stream("GET", f"/sessions/{session_id}/events") as stream:
                lines = stream.aiter_lines()
                for _ in range(messages):
                    started = time.perf_counter()
                    await http.post(f"/sessions/{session_id}/messages", json={"text": "hi"})
                    first_event = first_text = None
                    async for line in lines:
                        if not line.startswith("event:"):
                            continue
                        kind = line.split(":", 1)[1].strip()
                        now = time.perf_counter() - started
                        first_event = now if first_event is None else first_event
                        if kind == "text_delta" and first_text is None:
                            first_text = now
                        if kind in ("message_finished", "message_failed"):
                            break
                    found["first_event"].append(first_event or float("nan"))
                    found["first_text"].append(first_text or float("nan"))
            for _ in range(messages):
                started = time.perf_counter()
                await http.get("/healthz")
                found["healthz"].append(time.perf_counter() - started)
        group.cancel_scope.cancel()
    return found


def load(count: int, messages: int, repeats: int) -> dict[str, Any]:
    """The session load, timed: default collector, bare tasks, then start-up objects frozen (medians, s)."""
    gc.collect()
    found: dict[str, Any] = {"tracked_at_start": len(gc.get_objects())}
    framework, bare, frozen, durable = [], [], [], []
    default_gc, frozen_gc = _Collections(), _Collections()
    gc.callbacks.extend([default_gc, frozen_gc])
    try:
        for _ in range(repeats):
            gc.collect()
            framework.append(default_gc.timed(count, messages))
            gc.collect()
            bare.append(anyio.run(_bare, count, messages))
        threshold = gc.get_threshold()
        for _ in range(repeats):
            tune_collector()
            try:
                frozen.append(frozen_gc.timed(count, messages))
            finally:
                gc.unfreeze()
                gc.set_threshold(*threshold)
        with tempfile.TemporaryDirectory() as folder:
            for n in range(repeats):
                gc.collect()
                store = SQLiteStore(Path(folder) / f"sessions-{n}.db")
                durable.append(anyio.run(_sessions, count, messages, None, store))
    finally:
        gc.callbacks.remove(default_gc)
        gc.callbacks.remove(frozen_gc)
    found.update(framework=median(framework), bare=median(bare), frozen=median(frozen), durable=median(durable),
                 framework_runs=framework, frozen_runs=frozen, durable_runs=durable,
                 default_gc=default_gc.summary(repeats), frozen_gc=frozen_gc.summary(repeats))
    return found


def _load_in_fresh_interpreter(count: int, messages: int, repeats: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "tests.benchmarks.bench_session", "--json", str(count), str(messages), str(repeats)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=_ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"the session load failed in its own interpreter:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(quick: bool = False) -> list[Figure]:
    count, messages, repeats = (50, 2, 1) if quick else (1000, 5, 5)
    ideal = messages * REPLY_SECONDS
    found = _load_in_fresh_interpreter(count, messages, repeats)
    total, baseline, frozen = found["framework"], found["bare"], found["frozen"]
    heap = f"{found['tracked_at_start']:,} objects tracked at start"
    per_session = _peak_bytes(_sessions, count, messages) / count
    per_task = _peak_bytes(_bare, count, messages) / count
    latency = anyio.run(_http_latency, 20 if quick else 300)
    healthz = median(latency["healthz"]) * 1000
    http_rows = [
        Figure("(s) http", f"POST message -> first SSE event, {label}", _percentile(latency[key], q) * 1000, "ms",
               healthz, "GET /healthz p50", target_text="-",
               notes=(f"{len(latency[key])} messages, one at a time, over uvicorn on 127.0.0.1",) if q == 0.5 else ())
        for key, name in (("first_event", "event"), ("first_text", "text"))
        for q, label in ((0.5, f"p50 ({name})"), (0.99, f"p99 ({name})"))
    ]
    runs = lambda key: ", ".join(f"{t * 1000:.0f}" for t in found[key])  # noqa: E731
    return [
        Figure("(s) sessions", f"{count:,} sessions x {messages} messages, 50 ms replies", total * 1000, "ms",
               ideal * 1000, f"ideal ({messages} x 50 ms)", high=TARGET_RATIO, on_ratio=True,
               target_text=f"ratio <= {TARGET_RATIO}x", notes=(
                   f"default collector, in a fresh interpreter ({heap}); median of {repeats} runs: {runs('framework_runs')} ms",
                   f"bare anyio tasks doing the same sleeps, same interpreter: {baseline * 1000:.0f} ms "
                   f"({total / baseline:.2f}x of it)",
                   f"collections per run, while timed: {found['default_gc']}")),
        Figure("(s) sessions", f"{count:,} sessions x {messages} messages, as serve runs it", frozen * 1000,
               "ms", ideal * 1000, f"ideal ({messages} x 50 ms)", high=TARGET_RATIO, on_ratio=True,
               target_text=f"ratio <= {TARGET_RATIO}x", notes=(
                   "session.tune_collector() before the load, as `python -m session serve` calls it after start-up "
                   "(start-up objects frozen, young collections every 20,000 allocations); "
                   f"median of {repeats} runs: {runs('frozen_runs')} ms",
                   f"collections per run, while timed: {found['frozen_gc']}")),
        Figure("(s) sessions", f"{count:,} sessions x {messages} messages, SQLite store", found["durable"] * 1000,
               "ms", total * 1000, "the same with the memory store", target_text="-", notes=(
                   "WAL journal, synchronous=NORMAL, a file in a temporary folder; appends that arrive while a "
                   f"transaction is written share the next one; median of {repeats} runs: {runs('durable_runs')} ms",)),
        Figure("(s) sessions", "peak memory per session", per_session / 1024, "KiB", per_task / 1024,
               "bare task doing the sleeps", target_text="-", notes=(
                   f"tracemalloc peak over a separate run of the same load: {per_session * count / 2**20:.1f} "
                   f"MiB for {count:,} sessions with {messages} messages each (memory store included)",)),
        *http_rows,
    ]


def main(argv: list[str]) -> None:
    """``--json COUNT MESSAGES REPEATS``: run the load here and print its figures as one JSON line."""
    if len(argv) != 4 or argv[0] != "--json":
        raise SystemExit("usage: python -m tests.benchmarks.bench_session --json COUNT MESSAGES REPEATS")
    print(json.dumps(load(*(int(a) for a in argv[1:]))))


if __name__ == "__main__":
    main(sys.argv[1:])
