"""Guardrail hold-back: what holding a streamed answer back until its output checks pass costs a person watching.

``WithGuardrails(SingleShot(step), step, output=[NoSecrets()])`` on a provider that streams its answer in
``CHUNKS`` chunks of about 12 characters, sleeping ``DELAY`` seconds before each (a model writing at a steady
pace). A main-line subscriber, as a streaming conduit reads the bus, notes when each text delta reaches it. The
same run with ``hold_back=False`` is timed interleaved with it, in the same event loop.

(a) Time to first visible text, hold-back against streaming as written: the cost of hold-back, which grows with
    the length of the answer (informational: the ratio is about the number of chunks).
(b) Time to the whole answer visible: hold-back releases it at once when the checks pass, so the person has the
    whole answer no later than without it. Target: ratio <= 1.10.
(c) The run's CPU cost with no delay, 400 chunks: what keeping and releasing each event adds to publishing
    it. Target: ratio <= 1.5.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import AsyncIterator

import anyio

from cognitive import SingleShot, WithGuardrails
from loop import Delta, Finish, Request, Role, State, Step, Text, TextDelta
from provider import Function
from tests.benchmarks._harness import Figure
from verifier import NoSecrets

CHUNKS = 40
QUICK_CHUNKS = 8
DELAY = 0.002
REPEATS = 15
QUICK_REPEATS = 3
FAST_CHUNKS = 400
TARGET_WHOLE = 1.10
TARGET_CPU = 1.5
PIECE = "a steady pace"


def streamer(chunks: int, delay: float) -> Function:
    async def model(request: Request) -> AsyncIterator[Delta]:
        for n in range(chunks):
            if delay:
                await anyio.sleep(delay)
            yield TextDelta(f"{PIECE} {n}. ")
        yield Finish("stop")

    return Function(model)


def ask() -> State:
    return State().append(Role.USER, Text("Tell me about the museum."))


async def timed(hold_back: bool, chunks: int, delay: float) -> tuple[float, float, float]:
    """Seconds from the start of a run to its first and to its last text delta reaching a main-line subscriber,
    and to the run's end."""
    step = Step(streamer(chunks, delay))
    agent = WithGuardrails(SingleShot(step), step, output=[NoSecrets()], hold_back=hold_back)
    seen: list[float] = []
    gc.collect()
    with step.events.subscribe(buffer=None, main_line=True) as events:
        async with anyio.create_task_group() as group:
            async def watch() -> None:
                async for event in events:
                    if type(event) is TextDelta:
                        seen.append(time.perf_counter())

            group.start_soon(watch)
            start = time.perf_counter()
            state = await agent.run(ask())
            end = time.perf_counter()
            events.close()
    if len(seen) != chunks or state.answer != "".join(f"{PIECE} {n}. " for n in range(chunks)):
        raise RuntimeError(f"the subscriber saw {len(seen)} deltas of {chunks}, or the answer differs")
    return seen[0] - start, seen[-1] - start, end - start


async def measure(chunks: int, repeats: int) -> dict[str, list[tuple[float, float, float]]]:
    cases = {"hold": True, "stream": False}
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in cases}
    for name, hold in cases.items():  # warm-up, untimed
        await timed(hold, chunks, DELAY)
    for _ in range(repeats):
        for name, hold in cases.items():  # interleaved: a burst of load hits both
            results[name].append(await timed(hold, chunks, DELAY))
    fast: dict[str, list[tuple[float, float, float]]] = {f"fast {name}": [] for name in cases}
    for _ in range(repeats):
        for name, hold in cases.items():
            fast[f"fast {name}"].append(await timed(hold, FAST_CHUNKS, 0.0))
    return {**results, **fast}


def _median(samples: list[tuple[float, float, float]], index: int) -> float:
    return statistics.median(s[index] for s in samples)


def run(quick: bool = False) -> list[Figure]:
    chunks = QUICK_CHUNKS if quick else CHUNKS
    repeats = QUICK_REPEATS if quick else REPEATS
    got = anyio.run(measure, chunks, repeats)
    ms = 1000.0
    first_hold, first_stream = _median(got["hold"], 0) * ms, _median(got["stream"], 0) * ms
    whole_hold, whole_stream = _median(got["hold"], 1) * ms, _median(got["stream"], 1) * ms
    cpu_hold, cpu_stream = _median(got["fast hold"], 2) * ms, _median(got["fast stream"], 2) * ms
    pace = f"{chunks} chunks, {DELAY * ms:g} ms before each; median of {repeats}, interleaved"
    return [
        Figure("(a) guardrail hold-back", "time to first visible text", first_hold, "ms", first_stream,
               "hold_back=False, same run", notes=(pace,)),
        Figure("(b) guardrail hold-back", "time to the whole answer visible", whole_hold, "ms", whole_stream,
               "hold_back=False, same run", high=TARGET_WHOLE, on_ratio=True, target_text=f"ratio <= {TARGET_WHOLE}",
               notes=("held text is released at once when the output checks pass",)),
        Figure("(c) guardrail hold-back", f"run of {FAST_CHUNKS} chunks, no delay", cpu_hold, "ms", cpu_stream,
               "hold_back=False, same run", high=TARGET_CPU, on_ratio=True, target_text=f"ratio <= {TARGET_CPU}",
               notes=("each delta kept, stamped and released once, against published once",)),
    ]


if __name__ == "__main__":
    from tests.benchmarks._harness import render_table

    print(render_table(run()))
