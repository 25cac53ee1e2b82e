"""A benchmark harness for the patterns: run them over a task set, on any provider, and measure each one.

A task set is questions with their expected answers and a checker (``Task``). The built-in set
(``builtin_tasks``) has arithmetic word problems, Game of 24 puzzles and multi-hop questions only a tool can
answer; your own come from a JSONL file (``load_tasks``). Each task runs under a budget (``WithBudget``), and a
run that ended degraded is never counted a success: accuracy is right *and* not degraded, pass rate is right.
Per pattern the ``Report`` holds accuracy, pass rate, degraded rate, mean input and output tokens, model and
tool calls, wall time, cost when the model is priced, and accuracy per kind of task, which is what
``Escalation(reliability=...)`` takes (``reliability``).

From the command line::

    python -m cognitive.bench                                # every registry pattern, built-in set, offline
    python -m cognitive.bench --quick --patterns react,self-consistency --json out.json --png out.png
    python -m cognitive.bench --tasks mine.jsonl --checker number --provider openai:gpt-4o-mini
    python -m cognitive.bench --repeat 5 --reliability reliability.json   # steadier figures, and per-kind accuracy

From Python::

    report = anyio.run(functools.partial(run_bench, ["react", "verify"], builtin_tasks(quick=True)))
    print(render_table(report))

Without a provider it runs on ``SimulatedModel``, an offline noisy solver of the built-in tasks: its figures
measure the framework and the patterns' control flow, not a real model's quality.

When the report holds a pattern named ``escalation`` (``--escalation NAME`` for another), the command line also
compares it with the best single pattern (``compare_escalation``): its accuracy, and its share of that
pattern's tokens.

Import the names from ``cognitive.bench``; the modules here are private.
"""

from cognitive.bench._progress import Progress
from cognitive.bench._report import (PLOT_EXTRA, EscalationCheck, compare_escalation, reliability,
                                     reliability_by_kind, render_table, report_json, write_json, write_png,
                                     write_reliability)
from cognitive.bench._run import (Contender, PatternResult, Report, TaskRun, default_budget, run_bench,
                                  run_task)
from cognitive.bench._simulated import SimulatedModel, simulated_provider
from cognitive.bench._tasks import (CHECKERS, Checker, Task, builtin_tasks, check_contains, check_exact,
                                    check_game24, check_number, load_tasks, lookup)

__all__ = [
    "CHECKERS",
    "Checker",
    "Contender",
    "EscalationCheck",
    "PLOT_EXTRA",
    "PatternResult",
    "Progress",
    "Report",
    "SimulatedModel",
    "Task",
    "TaskRun",
    "builtin_tasks",
    "check_contains",
    "check_exact",
    "check_game24",
    "check_number",
    "compare_escalation",
    "default_budget",
    "load_tasks",
    "lookup",
    "reliability",
    "reliability_by_kind",
    "render_table",
    "report_json",
    "run_bench",
    "run_task",
    "simulated_provider",
    "write_json",
    "write_png",
    "write_reliability",
]
