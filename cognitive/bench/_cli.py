"""``python -m cognitive.bench``: run registry patterns over a task set and print what each one got right and
what it cost."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, cast

import anyio

from cognitive import names
from cognitive.bench._progress import Progress
from cognitive.bench._report import (compare_escalation, render_table, write_json, write_png,
                                     write_reliability)
from cognitive.bench._run import MAX_TOKENS, MAX_TURNS, Report, contenders, default_budget, run_bench
from cognitive.bench._simulated import simulated_provider
from cognitive.bench._tasks import CHECKERS, Task, builtin_tasks, load_tasks
from loop import Closable, LoopError, Provider, UsageError, has, tracing
from provider import Retry, from_spec

DESCRIPTION = """\
Run reasoning patterns over a task set and report, per pattern: accuracy (right and not degraded), pass rate
(right), degraded rate, mean input and output tokens, model and tool calls, wall time and cost (when the model
is priced), and accuracy per kind of task. Without --provider it runs on an offline simulated model (a noisy
solver of the built-in tasks): its figures measure the framework and the patterns' control flow, not a real
model's quality."""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(prog="python -m cognitive.bench", description=DESCRIPTION)
    cli.add_argument("--patterns", help="comma-separated registry names (default: every registered pattern; "
                     "those that need a setting are skipped, saying so)")
    cli.add_argument("--quick", action="store_true", help="a tiny built-in set (two tasks of each kind)")
    cli.add_argument("--tasks", metavar="FILE", help='a JSONL file of {"question": ..., "answer": ...} lines '
                     "instead of the built-in set")
    cli.add_argument("--checker", default="exact", choices=sorted(CHECKERS),
                     help="how --tasks answers are checked (default: exact)")
    cli.add_argument("--provider", metavar="SPEC",
                     help="openai:MODEL, anthropic:MODEL or openai-compatible:MODEL@URL (default: the offline "
                     "simulated model)")
    cli.add_argument("--seed", type=int, default=0, help="the simulated model's seed (default: 0)")
    cli.add_argument("--max-turns", type=_positive, default=MAX_TURNS,
                     help=f"model calls one task may make (default: {MAX_TURNS})")
    cli.add_argument("--max-tokens", type=_positive, default=MAX_TOKENS,
                     help=f"input tokens, and output tokens, one task may use (default: {MAX_TOKENS})")
    cli.add_argument("--repeat", type=_positive, default=1,
                     help="run each task this many times and average (the simulated model draws afresh each "
                     "time; a real one samples afresh above temperature 0) (default: 1)")
    cli.add_argument("--concurrency", type=_positive, default=4, help="runs at once (default: 4)")
    cli.add_argument("--json", metavar="PATH", help="write the report as JSON")
    cli.add_argument("--png", metavar="PATH", help="plot accuracy against mean tokens (needs matplotlib)")
    cli.add_argument("--reliability", metavar="PATH",
                     help="write kind -> pattern -> accuracy as JSON, for Escalation(reliability=...)")
    cli.add_argument("--escalation", default="escalation", metavar="NAME",
                     help="the escalation policy to compare with the best single pattern, when it ran "
                     "(default: escalation)")
    return cli


def _tasks(args: argparse.Namespace) -> tuple[Task, ...]:
    if args.tasks:
        return load_tasks(args.tasks, args.checker)
    return builtin_tasks(quick=args.quick)


def _provider(args: argparse.Namespace, say: Any) -> tuple[Provider, str]:
    if args.provider:
        return Retry(from_spec(args.provider)), args.provider
    if args.tasks:
        say("note: the simulated model answers only the built-in kinds of task; pass --provider to measure "
            "a real model on your tasks")
    return simulated_provider(seed=args.seed), f"simulated (offline, seed {args.seed})"


async def _run(args: argparse.Namespace, say: Any) -> Report:
    patterns = [n.strip() for n in args.patterns.split(",") if n.strip()] if args.patterns else list(names())
    contenders(patterns)  # an unknown name is an error before anything runs
    tasks = _tasks(args)
    model, label = _provider(args, say)
    try:
        times = f", {args.repeat} times each" if args.repeat > 1 else ""
        say(f"{len(tasks)} task(s){times} x {len(patterns)} pattern(s) on {label}; each run within "
            f"{args.max_turns} model calls and {args.max_tokens:,} tokens")
        return await run_bench(patterns, tasks, provider=model, provider_name=label, concurrency=args.concurrency,
                               repeat=args.repeat,
                               budget=default_budget(max_turns=args.max_turns, max_tokens=args.max_tokens),
                               progress=Progress(sys.stderr))
    finally:
        if has(model, Closable):
            await cast(Closable, model).aclose()


def _single(exc: BaseException) -> LoopError | None:
    """The one ``LoopError`` ``exc`` is or wraps (a task group raises a group), or ``None``."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, LoopError) else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; the exit status: 0, or 2 for a usage error (printed on stderr)."""
    args = parser().parse_args(argv)
    tracing.configure_logging(level="warning")

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    try:
        report = anyio.run(_run, args, say)
    except (LoopError, BaseExceptionGroup) as exc:
        error = _single(exc)
        if error is None:
            raise
        say(f"error: {error}")
        return 2
    except KeyboardInterrupt:
        return 130
    print(render_table(report))
    escalation = None
    if any(r.name == args.escalation for r in report.results) and len(report.results) > 1:
        escalation = compare_escalation(report, args.escalation)
        print(f"\n{escalation.summary()}")
    try:
        if args.json:
            write_json(report, args.json, escalation=escalation)
        if args.reliability:
            write_reliability(report, args.reliability)
        if args.png:
            write_png(report, args.png)
    except UsageError as exc:
        say(f"error: {exc}")
        return 2
    return 0
