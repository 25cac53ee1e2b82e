"""What a benchmark run shows: the table, the JSON, the plot, the reliability that feeds ``Escalation``, and
whether an escalation policy matched the best single pattern for less."""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from cognitive.bench._run import PatternResult, Report
from loop import UsageError

PLOT_EXTRA = "plot"
"""The optional extra that installs what ``write_png`` needs: ``pip install 'cognitive-loop[plot]'``."""


def render_table(report: Report) -> str:
    """One row per pattern: accuracy (right and not degraded), pass rate (right), degraded rate, errors, mean
    input and output tokens, model calls and tool calls per task, wall time (all tasks) and cost (``-`` when the
    model has no known price), then the accuracy on each kind of task."""
    kinds = list(report.task_kinds)
    head = ["pattern", "acc", "pass", "degr", "err", "in tok", "out tok", "calls", "tools", "time s", "cost",
            *(f"{kind[:10]}" for kind in kinds)]
    rows = [head]
    for r in report.results:
        cost = "-" if r.cost is None else f"{r.cost:.4f}"
        rows.append([r.name, f"{r.accuracy:.2f}", f"{r.pass_rate:.2f}", f"{r.degraded_rate:.2f}",
                     f"{r.error_rate:.2f}", f"{r.mean_input_tokens:,.0f}", f"{r.mean_output_tokens:,.0f}",
                     f"{r.mean_model_calls:.1f}", f"{r.mean_tool_calls:.1f}", f"{r.seconds:.2f}", cost,
                     *(f"{r.of_kind(k).accuracy:.2f}" if k in r.kinds else "-" for k in kinds)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for name, reason in report.skipped.items():
        lines.append(f"skipped {name}: {reason}")
    return "\n".join(lines)


def reliability(report: Report, kind: str, *, rungs: Iterable[str] | None = None) -> dict[str, float]:
    """Each pattern's accuracy on the tasks of ``kind`` (pattern name -> accuracy), as
    ``Escalation(reliability=...)`` takes it; ``rungs`` keeps only those names (an escalation's rungs)."""
    keep = None if rungs is None else set(rungs)
    return {r.name: r.of_kind(kind).accuracy for r in report.results
            if kind in r.kinds and (keep is None or r.name in keep)}


def reliability_by_kind(report: Report) -> dict[str, dict[str, float]]:
    """``reliability`` for every kind of task: kind -> pattern -> accuracy."""
    return {kind: reliability(report, kind) for kind in report.task_kinds}


@attrs.frozen
class EscalationCheck:
    """An escalation policy's figures beside the best single pattern's (the most accurate other pattern of the
    report, the one with fewer tokens on a tie). ``met``: at least its accuracy with at most ``share`` (half)
    of its mean tokens."""

    escalation: str
    best: str
    accuracy: float
    best_accuracy: float
    tokens: float
    best_tokens: float
    share: float = 0.5

    @property
    def token_share(self) -> float:
        return self.tokens / self.best_tokens if self.best_tokens else float("inf")

    @property
    def met(self) -> bool:
        return self.accuracy >= self.best_accuracy and self.token_share <= self.share

    def summary(self) -> str:
        verdict = "met" if self.met else "not met"
        return (f"{self.escalation}: accuracy {self.accuracy:.2f} with {self.tokens:,.0f} tokens/task; the best single "
                f"pattern, {self.best}: {self.best_accuracy:.2f} with {self.best_tokens:,.0f} tokens/task "
                f"({self.token_share:.0%} of its tokens). Target (at least its accuracy with at most "
                f"{self.share:.0%} of its tokens): {verdict}.")

    def to_dict(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "token_share": self.token_share, "met": self.met}


def compare_escalation(report: Report, escalation: str = "escalation", *, among: Iterable[str] | None = None,
                       share: float = 0.5) -> EscalationCheck:
    """How the pattern ``escalation`` of ``report`` compares with the best of the others (or of ``among``)."""
    policy = report.result(escalation)
    names = None if among is None else set(among)
    others = [r for r in report.results if r.name != escalation and (names is None or r.name in names)]
    if not others:
        raise UsageError(f"compare_escalation needs another pattern in the report beside {escalation!r}")
    best = min(others, key=lambda r: (-r.accuracy, r.mean_tokens))
    return EscalationCheck(escalation, best.name, policy.accuracy, best.accuracy, policy.mean_tokens,
                           best.mean_tokens, share)


def report_json(report: Report, *, escalation: EscalationCheck | None = None) -> dict[str, Any]:
    """The report as JSON data: ``Report.to_dict()`` plus ``reliability`` (kind -> pattern -> accuracy) and, when
    given, the ``escalation`` comparison."""
    data = report.to_dict()
    data["reliability"] = reliability_by_kind(report)
    if escalation is not None:
        data["escalation"] = escalation.to_dict()
    return data


def write_json(report: Report, path: str | Path, *, escalation: EscalationCheck | None = None) -> None:
    """Write ``report_json(report)`` to ``path``."""
    _write(path, json.dumps(report_json(report, escalation=escalation), indent=2) + "\n")


def write_reliability(report: Report, path: str | Path) -> None:
    """Write ``reliability_by_kind(report)`` (kind -> pattern -> accuracy) to ``path`` as JSON."""
    _write(path, json.dumps(reliability_by_kind(report), indent=2) + "\n")


def _write(path: str | Path, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {str(path)!r}: {exc}") from exc


def write_png(report: Report, path: str | Path) -> None:
    """Plot accuracy against mean tokens per task, one labelled point per pattern, to the PNG file ``path``.
    Needs matplotlib (``pip install 'cognitive-loop[plot]'``); raises ``UsageError`` saying so without it."""
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
    except ImportError:
        raise UsageError(f"the PNG plot needs matplotlib: pip install 'cognitive-loop[{PLOT_EXTRA}]' "
                         "(or pip install matplotlib)") from None
    matplotlib.use("Agg")  # no display: write the file only
    plt: Any = importlib.import_module("matplotlib.pyplot")
    results: list[PatternResult] = list(report.results)
    figure, axes = plt.subplots(figsize=(8, 5.5), dpi=110)
    try:
        xs = [max(r.mean_tokens, 1.0) for r in results]
        ys = [r.accuracy for r in results]
        axes.scatter(xs, ys, s=36, zorder=3,
                     color=["#f57900" if "escalation" in r.name else "#3465a4" for r in results])
        if xs and max(xs) / min(xs) > 20:
            axes.set_xscale("log")
        axes.set_ylim(-0.05, 1.05)
        axes.autoscale_view()
        _label(figure, axes, [r.name for r in results], xs, ys)
        axes.set_xlabel("mean tokens per task (input + output)")
        axes.set_ylabel("accuracy (right and not degraded)")
        axes.set_title(f"{sum(report.task_kinds.values())} tasks on {report.provider}", fontsize=10)
        axes.grid(True, alpha=0.3)
        figure.tight_layout()
        figure.savefig(str(path), format="png")
    except OSError as exc:
        raise UsageError(f"cannot write {str(path)!r}: {exc}") from exc
    finally:
        plt.close(figure)


_OFFSETS = (3, -11, 12, -20, 21, -29, 30, -38)  # points above (+) or below (-) a point, tried in turn


def _label(figure: Any, axes: Any, names: list[str], xs: list[float], ys: list[float]) -> None:
    """Each point's name to its right, at the first height where it covers no other label or point."""
    scale = figure.dpi / 72  # display pixels per point
    points = [tuple(axes.transData.transform((x, y))) for x, y in zip(xs, ys)]
    placed: list[tuple[float, float, float, float]] = []
    for index in sorted(range(len(names)), key=lambda i: (xs[i], ys[i])):
        px, py = points[index]
        width, height = len(names[index]) * 4.6 * scale, 8 * scale
        chosen, box = _OFFSETS[0], (0.0, 0.0, 0.0, 0.0)
        for dy in _OFFSETS:
            box = (px + 5 * scale, py + dy * scale, px + 5 * scale + width, py + dy * scale + height)
            clear = not any(_overlap(box, other) for other in placed) and not any(
                box[0] - 4 <= qx <= box[2] + 4 and box[1] - 4 <= qy <= box[3] + 4
                for n, (qx, qy) in enumerate(points) if n != index)
            if clear:
                chosen = dy
                break
        else:
            box = (px + 5 * scale, py + chosen * scale, px + 5 * scale + width, py + chosen * scale + height)
        placed.append(box)
        axes.annotate(names[index], (xs[index], ys[index]), textcoords="offset points", xytext=(5, chosen),
                      fontsize=8)


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
