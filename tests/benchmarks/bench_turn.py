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

What tracing adds (traced - untraced framework time) is held to <= 1.5x what the bare loop pays to make the same
spans with bare OpenTelemetry SDK calls (names and attributes copied from one traced run, each span current for its
block, the chat span's usage set after the reply; ``bare_traced_run``). That is what any loop emitting the GenAI
conventions' spans pays: a ``chat`` span per model call and an ``execute_tool`` span per tool call, which
instrumentations SHOULD emit. The traced / untraced ratio is reported, not held to a target: making those two
spans costs a bare loop more than the framework's whole untraced turn, so that ratio measures how lean the
untraced turn is, not how lean the tracing is.
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
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
FLOOR_TARGET = 1.5  # tracing's cost per turn / the SDK recording the same spans


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



class SpanShapes:
    """The spans one traced ReAct run exported, as a hand-written loop would make them: names and attributes of
    the agent span, of a chat span (split into what is known before the reply and what only after) and of a
    tool span."""

    _AFTER = ("gen_ai.usage.", "gen_ai.response.", "cognitive_loop.usage.")

    def __init__(self, spans: list[Any]) -> None:
        def one(prefix: str) -> Any:
            found = [s for s in spans if s.name.startswith(prefix)]
            assert found, f"no {prefix!r} span was recorded"
            return found[-1]

        agent, chat, tool = one("invoke_agent"), one("chat"), one("execute_tool")
        self.agent_name, self.agent = agent.name, dict(agent.attributes or {})
        self.chat_name = chat.name
        attributes = dict(chat.attributes or {})
        self.chat_after = {k: v for k, v in attributes.items() if k.startswith(self._AFTER)}
        self.chat = {k: v for k, v in attributes.items() if k not in self.chat_after}
        self.tool = {k: v for k, v in (tool.attributes or {}).items() if k != "gen_ai.tool.call.id"}
        self.count = len(spans)


class _Current:
    """A span made current for a block and ended after it, with bare OpenTelemetry calls."""

    def __init__(self, tracer: Any, name: str, attributes: dict[str, Any]) -> None:
        self.span = tracer.start_span(name, attributes=attributes)

    def __enter__(self) -> Any:
        self.token = otel_context.attach(trace.set_span_in_context(self.span))
        return self.span

    def __exit__(self, *exc: object) -> None:
        otel_context.detach(self.token)
        self.span.end()


async def bare_traced_run(reply_fn: Any, user_turn: Any, tracer: Any, shapes: SpanShapes) -> list[Any]:
    """``bare_run`` making the framework's spans with bare SDK calls: one agent span around the run, a chat span
    around each reply (its usage set after the reply), an ``execute_tool`` span around each call, each current
    for its block. What emitting these spans costs any loop is this run's time less ``bare_run``'s."""
    history: list[Any] = [user_turn]
    request = SimpleNamespace(turns=history)
    with _Current(tracer, shapes.agent_name, shapes.agent):
        while True:
            with _Current(tracer, shapes.chat_name, shapes.chat) as span:
                reply = reply_fn(request)
                await anyio.lowlevel.checkpoint()
                span.set_attributes(shapes.chat_after)
            history.append(reply)
            calls = [p for p in (reply if isinstance(reply, list) else [reply]) if isinstance(p, ToolCall)]
            if not calls:
                return history
            for call in calls:
                with _Current(tracer, f"execute_tool {call.name}", {**shapes.tool, "gen_ai.tool.call.id": call.id}):
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

    async def bare_traced(self, runs: int, tracer: Any, shapes: SpanShapes) -> None:
        reply_fn, user = self.reply_fn, self.state.last
        for _ in range(runs):
            await bare_traced_run(reply_fn, user, tracer, shapes)


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


def _in_memory() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider_ = TracerProvider()
    provider_.add_span_processor(SimpleSpanProcessor(exporter))
    return provider_, exporter


async def _measure(setup: Setup, runs: int, warmup: int, repeats: int) -> dict[str, float]:
    traced_provider, exporter = _in_memory()
    bare_provider, bare_exporter = _in_memory()
    bare_tracer = bare_provider.get_tracer("bench")

    async def traced() -> None:
        tracing.configure(traced_provider)
        try:
            await setup.framework(runs)
        finally:
            tracing.configure(None)

    await _check(setup)
    tracing.configure(traced_provider)
    try:
        await setup.framework(1)
    finally:
        tracing.configure(None)
    shapes = SpanShapes(list(exporter.get_finished_spans()))
    exporter.clear()
    try:
        seconds = await interleave_async(
            {
                "bare": lambda: setup.bare(runs),
                "bare_yield": lambda: setup.bare(runs, yield_per_reply=True),
                "bare_traced": lambda: setup.bare_traced(runs, bare_tracer, shapes),
                "framework": lambda: setup.framework(runs),
                "budgeted": lambda: setup.framework_budgeted(runs),
                "traced": traced,
            },
            warmup=warmup, repeats=repeats,
        )
    finally:
        tracing.configure(None)
    # Every traced sample must really have recorded its spans, or the traced figures mean nothing.
    samples = (warmup + repeats) * runs
    spans_per_run = len(exporter.get_finished_spans()) / samples
    bare_spans_per_run = len(bare_exporter.get_finished_spans()) / samples
    for provider_, exporter_ in ((traced_provider, exporter), (bare_provider, bare_exporter)):
        exporter_.clear()
        provider_.shutdown()
    # One "chat" span per turn, one "execute_tool" span per tool turn, and the pattern's own span.
    expected = setup.turns_per_run + (setup.turns_per_run - 1) + 1
    assert spans_per_run == expected == shapes.count == bare_spans_per_run, (
        f"{spans_per_run} spans recorded per traced run ({bare_spans_per_run} by the bare loop), expected {expected}")
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
    floor_us = (seconds["bare_traced"] - seconds["bare_yield"]) / turns * 1e6
    spans_per_turn = seconds["spans_per_run"] / setup.turns_per_run
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
            "(a) turn", "tracing's cost per turn, against a bare loop's", traced_us - framework_us, "µs", floor_us,
            f"bare loop, same {spans_per_turn:.2f} spans", high=FLOOR_TARGET, on_ratio=True,
            target_text=f"<= {FLOOR_TARGET:g}x",
            notes=("value = traced - untraced framework time per turn; baseline = the bare loop making the same "
                   "spans (names, attributes, nesting, each current for its block) with bare OpenTelemetry SDK "
                   "calls, less the bare loop: what emitting the GenAI conventions' chat and execute_tool spans "
                   "costs any loop",),
        ),
    ]


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
