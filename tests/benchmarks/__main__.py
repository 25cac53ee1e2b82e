"""Run every benchmark in one process and print one table.

    python -m tests.benchmarks              # the full suite (one to two minutes)
    python -m tests.benchmarks --quick      # tiny sizes: proves the code runs, figures mean little
    python -m tests.benchmarks --only turn,state
    python -m tests.benchmarks --profile    # cProfile of benchmark (a), top functions by own time

Benchmarks report; they do not fail the build. A MISS still exits 0. The exit status is 1 only when a
benchmark crashes (its traceback is printed and the others still run).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable

import logging

import structlog

from loop import tracing
from tests.benchmarks import (bench_context, bench_embeddings, bench_guardrails, bench_mcp, bench_memory_prompt,
                              bench_memory_recall, bench_peoatr, bench_planning, bench_prompt_cache,
                              bench_response_cache, bench_responses_wire, bench_runs, bench_sandbox, bench_scale_out,
                              bench_search, bench_semantic_cache, bench_session, bench_state, bench_tools, bench_turn,
                              bench_verify, bench_wire)
from tests.benchmarks._harness import Figure, render_table

BENCHMARKS: dict[str, Callable[..., list[Figure]]] = {
    "turn": bench_turn.run,
    "tools": bench_tools.run,
    "runs": bench_runs.run,
    "context": bench_context.run,
    "verify": bench_verify.run,
    "state": bench_state.run,
    "session": bench_session.run,
    "wire": bench_wire.run,
    "responses_wire": bench_responses_wire.run,
    "mcp": bench_mcp.run,
    "sandbox": bench_sandbox.run,
    "planning": bench_planning.run,
    "peoatr": bench_peoatr.run,
    "search": bench_search.run,
    "prompt_cache": bench_prompt_cache.run,
    "response_cache": bench_response_cache.run,
    "guardrails": bench_guardrails.run,
    "scale_out": bench_scale_out.run,
    "embeddings": bench_embeddings.run,
    "memory": bench_memory_recall.run,
    "memory_prompt": bench_memory_prompt.run,
    "semantic_cache": bench_semantic_cache.run,
}


def environment() -> list[str]:
    """Lines describing where the figures were measured."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        usable = os.cpu_count() or 0
    try:
        load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "unknown"
    versions = []
    for name in ("anyio", "attrs", "jsonschema", "opentelemetry-sdk"):
        try:
            versions.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{name} (not installed)")
    if tracing.enabled():
        traced = "ON: an OpenTelemetry SDK provider is installed, so the 'tracing off' figures include spans"
    else:
        traced = "off (no OpenTelemetry SDK provider installed or configured)"
    return [
        f"python:   {platform.python_implementation()} {platform.python_version()} on {platform.platform()}",
        f"cpus:     {os.cpu_count()} (usable by this process: {usable}); load average 1/5/15 min: {load}",
        f"tracing:  {traced}; the 'in-memory spans' row turns it on for its own samples only",
        f"packages: {', '.join(versions)}; event loop: anyio on asyncio",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes; proves the code runs")
    parser.add_argument("--only", default="", help=f"comma-separated subset of {','.join(BENCHMARKS)}")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of benchmark (a) and stop")
    args = parser.parse_args(argv)
    if args.profile:
        print(bench_turn.profile())
        return 0
    chosen = [n.strip() for n in args.only.split(",") if n.strip()] or list(BENCHMARKS)
    unknown = [n for n in chosen if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")

    # Request logs and the like would drown the table; warnings still show.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print("\n".join(environment()))
    print(f"mode:     {'quick (tiny sizes; figures are not meaningful)' if args.quick else 'full'}\n")
    figures: list[Figure] = []
    crashed: list[str] = []
    started = time.perf_counter()
    for name in chosen:
        t0 = time.perf_counter()
        try:
            figures += BENCHMARKS[name](quick=args.quick)
        except Exception:
            crashed.append(name)
            print(f"benchmark {name!r} crashed:", file=sys.stderr)
            traceback.print_exc()
        finally:
            tracing.configure(None)  # never leave a crashed benchmark's tracer behind
        print(f"  ran {name:<7} in {time.perf_counter() - t0:5.1f} s", flush=True)
    print()
    print(render_table(figures))
    misses = sum(f.verdict == "MISS" for f in figures)
    passes = sum(f.verdict == "PASS" for f in figures)
    print(f"\n{passes} PASS, {misses} MISS, {len(crashed)} crashed"
          f"{' (' + ', '.join(crashed) + ')' if crashed else ''}; {time.perf_counter() - started:.1f} s in all")
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
