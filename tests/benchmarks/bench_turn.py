"""(a) Per-turn overhead of ``ReAct`` over a zero-latency provider, untraced and traced.

Each ReAct run answers one user message in ``TOOL_TURNS`` turns that each call one trivial async ``@tool``,
then one final text turn (so ``TOOL_TURNS + 1`` step turns per run, close to ReAct's default cap of 12). The
model is a ``provider.Function`` whose reply function builds the reply objects; it never waits.

The baseline is a bare hand-written loop doing the same work: it calls the *same* reply function (getting the
same reply objects), parses each call's JSON arguments, awaits the *same* tool function and appends replies and
results to a list. It does not stream, build turns, check schemas, publish events or yield to the event loop.

    overhead per turn = (framework time - bare time) / step turns

Targets: <= 35 µs per turn with tracing off, the same inside a budget (``WithBudget``: every turn and tool call
reserved and charged); <= 100 µs with spans going to an in-memory exporter
(``loop.tracing.configure(TracerProvider())`` with a ``SimpleSpanProcessor(InMemorySpanExporter())``; the
global OpenTelemetry provider is never touched). The traced row's ratio is traced / untraced overhead.
"""

from __future__ import annotations

import cProfile
import io
import json
import math
import pstats
import time
from types import SimpleNamespace
from typing import Any

import anyio
import anyio.lowlevel
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import provider
from cognitive import ReAct, WithBudget
from loop import Budget, Role, State, Step, Text, ToolCall, tool, tracing
from tests.benchmarks._harness import Figure, interleave_async

TOOL_TURNS = 10
TARGET_US = 35.0
TRACED_TARGET_US = 100.0


@tool
async def lookup(key: int) -> str:
    """Look a key up (a trivial tool: returns at once).

    Args:
        key: which entry to read.
    """
    return "ok"


def make_reply_fn(tool_turns: int) -> Any:
    """The model: one ``lookup`` call per turn until the history holds ``tool_turns`` calls, then an answer.

    It reads only ``len(request.turns)``, so the bare loop can drive it with its own list of messages.
    """
    limit = 1 + 2 * tool_turns  # the user turn, then (call, result) per tool turn

    def reply(request: Any) -> Any:
        seen = len(request.turns)
        if seen < limit:
            return provider.tool_call("lookup", {"key": seen})
        return "All entries read."

    return reply


async def bare_run(reply_fn: Any, user_turn: Any, *, yield_per_reply: bool = False) -> list[Any]:
    """The hand-written loop the framework is compared with.

    ``yield_per_reply`` adds the one event-loop yield per reply that ``provider.Function`` makes (as any real
    stream would); the notes report its cost so it can be told apart from the loop's own overhead.
    """
    history: list[Any] = [user_turn]
    request = SimpleNamespace(turns=history)
    while True:
        reply = reply_fn(request)
        if yield_per_reply:
            await anyio.lowlevel.checkpoint()
        history.append(reply)
        calls = [p for p in (reply if isinstance(reply, list) else [reply]) if isinstance(p, ToolCall)]
        if not calls:
            return history
        for call in calls:
            arguments = json.loads(call.arguments)
            history.append(await lookup(**arguments))


class Setup:
    """Everything one measurement needs, built once outside the timed region."""

    def __init__(self, tool_turns: int) -> None:
        self.tool_turns = tool_turns
        self.reply_fn = make_reply_fn(tool_turns)
        self.step = Step(provider.Function(self.reply_fn), tools=[lookup])
        self.react = ReAct(self.step, max_turns=tool_turns + 1)
        self.budgeted = WithBudget(self.react, Budget(max_turns=tool_turns + 1, max_tool_calls=tool_turns, name="run"))
        self.state = State().append(Role.USER, Text("Read every entry."))
        self.turns_per_run = tool_turns + 1

    async def framework(self, runs: int) -> None:
        react, state = self.react, self.state
        for _ in range(runs):
            await react.run(state)

    async def framework_budgeted(self, runs: int) -> None:
        budgeted, state = self.budgeted, self.state
        for _ in range(runs):
            await budgeted.run(state)

    async def bare(self, runs: int, *, yield_per_reply: bool = False) -> None:
        reply_fn, user = self.reply_fn, self.state.last
        for _ in range(runs):
            await bare_run(reply_fn, user, yield_per_reply=yield_per_reply)


async def _check(setup: Setup) -> None:
    """Both loops must do the work they claim before anything is timed."""
    done = await setup.react.run(setup.state)
    assert done.answer == "All entries read." and not done.degraded, done
    assert len(done) == 1 + 2 * setup.tool_turns + 1, len(done)
    assert all(not r.is_error for t in done for r in t.tool_results), "a tool call failed"
    budgeted = await setup.budgeted.run(setup.state)
    assert budgeted.answer == done.answer and budgeted.outcome is not None and budgeted.outcome.ok, budgeted.outcome
    bare = await bare_run(setup.reply_fn, setup.state.last)
    assert len(bare) == len(done), (len(bare), len(done))


async def _measure(setup: Setup, runs: int, warmup: int, repeats: int) -> dict[str, float]:
    exporter = InMemorySpanExporter()
    traced_provider = TracerProvider()
    traced_provider.add_span_processor(SimpleSpanProcessor(exporter))

    async def traced() -> None:
        tracing.configure(traced_provider)
        try:
            await setup.framework(runs)
        finally:
            tracing.configure(None)

    await _check(setup)
    try:
        seconds = await interleave_async(
            {
                "bare": lambda: setup.bare(runs),
                "bare_yield": lambda: setup.bare(runs, yield_per_reply=True),
                "framework": lambda: setup.framework(runs),
                "budgeted": lambda: setup.framework_budgeted(runs),
                "traced": traced,
            },
            warmup=warmup, repeats=repeats,
        )
    finally:
        tracing.configure(None)
    # Every traced sample must really have recorded its spans, or the traced figure means nothing.
    spans_per_run = len(exporter.get_finished_spans()) / ((warmup + repeats) * runs)
    exporter.clear()
    traced_provider.shutdown()
    # One "chat" span per turn, one "execute_tool" span per tool turn, and the pattern's own span.
    expected = setup.turns_per_run + (setup.turns_per_run - 1) + 1
    assert spans_per_run == expected, f"{spans_per_run} spans recorded per traced run, expected {expected}"
    seconds["spans_per_run"] = spans_per_run
    return seconds


def run(quick: bool = False) -> list[Figure]:
    """Measure (a); ``quick`` uses tiny sizes (for the smoke test)."""
    tool_turns = 3 if quick else TOOL_TURNS
    runs, warmup, repeats = (5, 1, 3) if quick else (40, 2, 9)
    setup = Setup(tool_turns)
    seconds = anyio.run(_measure, setup, runs, warmup, repeats, backend="asyncio")
    turns = runs * setup.turns_per_run
    bare_us = seconds["bare"] / turns * 1e6
    framework_us = seconds["framework"] / turns * 1e6
    traced_us = seconds["traced"] / turns * 1e6
    budgeted_us = seconds["budgeted"] / turns * 1e6
    over = framework_us - bare_us
    over_traced = traced_us - bare_us
    yield_us = (seconds["bare_yield"] - seconds["bare"]) / turns * 1e6
    sizes = (f"{runs} ReAct runs x {setup.turns_per_run} step turns ({tool_turns} with one tool call) per sample, "
             f"median of {repeats}")
    span_us = bare_span_seconds(200 if quick else 5000) * 1e6
    spans_per_turn = seconds["spans_per_run"] / setup.turns_per_run
    floor_us = spans_per_turn * span_us
    return [
        Figure(
            "(a) turn", "ReAct overhead per turn, tracing off", over, "µs", bare_us, "bare loop per turn",
            high=TARGET_US, target_text=f"<= {TARGET_US:g} µs", ratio_value=framework_us / bare_us,
            notes=(f"ratio = framework / bare time per turn; framework {framework_us:.1f} µs/turn; {sizes}",
                   f"{yield_us:.1f} µs/turn of the overhead is the one event-loop yield per reply that "
                   "provider.Function makes (a bare loop with that yield, same run)"),
        ),
        Figure(
            "(a) turn", "ReAct overhead per turn, inside a budget", budgeted_us - bare_us, "µs", bare_us,
            "bare loop per turn", high=TARGET_US, target_text=f"<= {TARGET_US:g} µs",
            ratio_value=budgeted_us / bare_us,
            notes=(f"WithBudget(ReAct) with turn and tool-call limits: every call reserved and charged; {sizes}",),
        ),
        Figure(
            "(a) turn", "ReAct overhead per turn, in-memory spans", over_traced, "µs", over,
            "untraced overhead", high=TRACED_TARGET_US, target_text=f"<= {TRACED_TARGET_US:g} µs",
            notes=(f"ratio = traced / untraced overhead; traced {traced_us:.1f} µs/turn, "
                   f"{seconds['spans_per_run']:.0f} spans per run",),
        ),
        Figure(
            "(a) turn", "tracing's cost per turn, against the SDK's spans", traced_us - framework_us, "µs", floor_us,
            f"{spans_per_turn:.2f} bare SDK spans",
            notes=(f"one OpenTelemetry SDK span with a chat span's attributes, made current, ended and exported "
                   f"in memory, alone: {span_us:.1f} µs; the GenAI conventions ask for a chat span per turn and an "
                   "execute_tool span per tool call, so this is the floor of what tracing adds",),
        ),
    ]


def bare_span_seconds(count: int) -> float:
    """What one OpenTelemetry SDK span costs on its own (best of 5 rounds of ``count``): started with a chat
    span's attributes, made current, ended, exported to memory; the floor under the traced figure."""
    exporter = InMemorySpanExporter()
    provider_ = TracerProvider()
    provider_.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider_.get_tracer("bench")
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "function",
                                  "gen_ai.request.model": "demo", "cognitive_loop.run.path": "ReAct",
                                  "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 5,
                                  "gen_ai.response.finish_reasons": ("stop",)}
    best = math.inf
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(count):
            span = tracer.start_span("chat", attributes=attributes)
            token = otel_context.attach(trace.set_span_in_context(span))
            otel_context.detach(token)
            span.end()
        best = min(best, (time.perf_counter() - started) / count)
        exporter.clear()
    provider_.shutdown()
    return best


def profile(top: int = 25, runs: int = 300) -> str:
    """cProfile of the untraced framework loop: the ``top`` functions by own time, per step turn."""
    setup = Setup(TOOL_TURNS)
    anyio.run(setup.framework, 5, backend="asyncio")  # warm up
    profiler = cProfile.Profile()
    profiler.enable()
    anyio.run(setup.framework, runs, backend="asyncio")
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    turns = runs * setup.turns_per_run
    head = f"cProfile of {runs} ReAct runs = {turns} step turns (divide times by {turns} for per turn)"
    return head + "\n" + out.getvalue()


if __name__ == "__main__":
    import sys

    if "--profile" in sys.argv:
        print(profile())
    else:
        from tests.benchmarks._harness import render_table

        print(render_table(run(quick="--quick" in sys.argv)))
