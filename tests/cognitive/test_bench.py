"""The benchmark harness: patterns run over a task set under a budget, measured, reported as a table, JSON and a
plot; degraded runs never count as accurate; the per-kind accuracy feeds Escalation."""

import functools
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import attrs
import jsonschema
import pytest

import cognitive
import cognitive.bench as bench
from cognitive import Escalation, build
from cognitive.bench import (PatternResult, Progress, Report, TaskRun, builtin_tasks, compare_escalation,
                             default_budget, reliability, reliability_by_kind, render_table, report_json, run_bench,
                             simulated_provider, write_json, write_png, write_reliability)
from cognitive.bench._cli import _provider, main, parser
from cognitive.bench._simulated import SimulatedModel
from cognitive.wrappers._escalation import escalation
from loop import Budget, Step, UsageError, tracing
from provider import Function

ROOT = Path(__file__).resolve().parents[2]
QUICK = builtin_tasks(quick=True)

FIGURES = {"type": "object", "required": [
    "tasks", "repeats", "accuracy", "pass_rate", "degraded_rate", "error_rate", "mean_input_tokens", "mean_output_tokens",
    "mean_tokens", "mean_model_calls", "mean_tool_calls", "seconds", "cost"], "properties": {
    "tasks": {"type": "integer", "minimum": 1}, "repeats": {"type": "integer", "minimum": 1},
    **{name: {"type": "number", "minimum": 0, "maximum": 1}
       for name in ("accuracy", "pass_rate", "degraded_rate", "error_rate")},
    **{name: {"type": "number", "minimum": 0} for name in (
        "mean_input_tokens", "mean_output_tokens", "mean_tokens", "mean_model_calls", "mean_tool_calls", "seconds")},
    "cost": {"type": ["number", "null"]}}}
RUN = {"type": "object", "required": ["task", "kind", "correct", "degraded", "repeat", "answer", "reason", "error",
                                      "input_tokens", "output_tokens", "model_calls", "tool_calls", "seconds",
                                      "cost"],
       "properties": {"correct": {"type": "boolean"}, "degraded": {"type": "boolean"},
                      "error": {"type": ["string", "null"]}, "model_calls": {"type": "integer"}}}
REPORT = {
    "type": "object",
    "required": ["format", "provider", "budget", "tasks", "patterns", "skipped", "reliability"],
    "properties": {
        "format": {"const": 1},
        "provider": {"type": "string"},
        "budget": {"type": "object", "properties": {"max_turns": {"type": "integer"}}},
        "tasks": {"type": "object", "required": ["count", "kinds"]},
        "patterns": {"type": "object", "minProperties": 1, "additionalProperties": {"allOf": [FIGURES, {
            "required": ["by_kind", "runs"], "properties": {
                "by_kind": {"type": "object", "additionalProperties": FIGURES},
                "runs": {"type": "array", "items": RUN}}}]}},
        "skipped": {"type": "object", "additionalProperties": {"type": "string"}},
        "reliability": {"type": "object", "additionalProperties": {
            "type": "object", "additionalProperties": {"type": "number", "minimum": 0, "maximum": 1}}},
    },
}


@pytest.fixture(scope="module")
def report() -> Report:
    """One run of three patterns (and one that needs a setting) on the quick set, shared by the tests that read it."""
    return anyio.run(functools.partial(run_bench, ["react", "self-consistency", "verify", "with-budget"], QUICK))


def test_a_run_measures_each_pattern_and_skips_one_that_needs_a_setting(report: Report) -> None:
    assert [r.name for r in report.results] == ["react", "self-consistency", "verify"]
    assert report.skipped == {"with-budget": "needs the setting 'budget'"}
    assert report.task_kinds == {"arithmetic": 2, "game24": 2, "lookup": 2}
    react, voted = report.result("react"), report.result("self-consistency")
    assert react.tasks == 6 and [r.task for r in react.runs] == [t.id for t in QUICK]
    assert voted.mean_model_calls > 4 * react.mean_model_calls * 0.8  # five samples a task
    assert react.mean_tool_calls > 0 and report.result("verify").mean_tool_calls == 0
    assert all(r.mean_input_tokens > 0 and r.mean_output_tokens > 0 for r in report.results)
    assert all(r.cost is None for r in report.results)  # the simulated model has no price
    assert report.result("verify").of_kind("lookup").accuracy == 0  # no tool, no made-up facts
    assert react.of_kind("lookup").accuracy == 1


def test_the_table_has_a_row_per_pattern_and_says_what_was_skipped(report: Report) -> None:
    table = render_table(report)
    lines = table.splitlines()
    assert lines[0].split()[:4] == ["pattern", "acc", "pass", "degr"] and "lookup" in lines[0]
    assert [line.split()[0] for line in lines[2:5]] == ["react", "self-consistency", "verify"]
    row = lines[2].split()
    assert row[1] == f"{report.result('react').accuracy:.2f}" and row[10] == "-"
    assert lines[-1] == "skipped with-budget: needs the setting 'budget'"


def test_the_json_follows_its_schema_and_carries_reliability(report: Report, tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    write_json(report, path)
    data = json.loads(path.read_text())
    jsonschema.validate(data, REPORT)
    assert data["reliability"]["lookup"] == {"react": 1.0, "self-consistency": 1.0, "verify": 0.0}
    assert data["patterns"]["react"]["accuracy"] == report.result("react").accuracy
    write_reliability(report, tmp_path / "reliability.json")
    assert json.loads((tmp_path / "reliability.json").read_text()) == reliability_by_kind(report)


def test_the_png_plots_every_pattern(report: Report, tmp_path: Path) -> None:
    path = tmp_path / "plot.png"
    write_png(report, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def test_without_matplotlib_the_png_error_names_the_extra(report: Report, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of it now fails
    with pytest.raises(UsageError, match=r"needs matplotlib: pip install 'cognitive-loop\[plot\]'"):
        write_png(report, tmp_path / "plot.png")
    assert not (tmp_path / "plot.png").exists()


async def test_a_degraded_run_is_never_counted_as_accurate() -> None:
    arithmetic = [t for t in QUICK if t.kind == "arithmetic"]
    sure = simulated_provider(skill={"arithmetic": 1.0})
    free = await run_bench(["self-consistency"], arithmetic, provider=sure)
    assert free.results[0].accuracy == 1
    tight = await run_bench(["self-consistency"], arithmetic, provider=sure, budget=Budget(max_turns=2))
    result = tight.results[0]
    assert result.pass_rate == 1 and result.degraded_rate == 1  # right answers, from a run cut short
    assert result.accuracy == 0
    assert all("max_turns=2" in r.reason for r in result.runs)


async def test_the_model_never_reads_the_expected_answer() -> None:
    changed = [attrs.evolve(t, answer="(1 + 1) * 12" if t.kind == "game24" else "98765") for t in QUICK]
    before = await run_bench(["react"], QUICK)
    after = await run_bench(["react"], changed)
    assert [r.answer for r in before.results[0].runs] == [r.answer for r in after.results[0].runs]
    assert before.results[0].accuracy > 0 and after.results[0].accuracy == 0


async def test_repeats_are_fresh_draws_averaged_per_pattern() -> None:
    once = (await run_bench(["react"], QUICK)).results[0]
    thrice = (await run_bench(["react"], QUICK, repeat=3)).results[0]
    assert (once.tasks, once.repeats, len(once.runs)) == (6, 1, 6) and {r.repeat for r in once.runs} == {0}
    assert (thrice.tasks, thrice.repeats, len(thrice.runs)) == (6, 3, 18)
    assert {r.repeat for r in thrice.runs} == {1, 2, 3}
    answers = {(r.task, r.repeat): r.answer for r in thrice.runs}
    assert any(len({answers[t.id, n] for n in (1, 2, 3)}) > 1 for t in QUICK)  # the model drew afresh
    assert thrice.accuracy == sum(r.accurate for r in thrice.runs) / 18


async def test_a_pattern_that_raises_is_a_failed_run_and_one_that_cannot_be_built_is_skipped() -> None:
    class Broken:
        async def run(self, state: Any) -> Any:
            raise RuntimeError("out of order")

    def unbuildable(step: Step) -> Any:
        raise UsageError("needs a sandbox")

    done = await run_bench({"broken": lambda step: Broken(), "nope": unbuildable}, QUICK[:2])
    broken = done.result("broken")
    assert broken.error_rate == 1 and broken.accuracy == 0 and broken.runs[0].error == "RuntimeError: out of order"
    assert done.skipped == {"nope": "building it failed: needs a sandbox"}


async def test_bad_arguments_are_clear() -> None:
    with pytest.raises(cognitive.RegistryError, match="no pattern is named 'reac'"):
        await run_bench(["reac"], QUICK)
    with pytest.raises(UsageError, match="at least one task"):
        await run_bench(["react"], [])
    with pytest.raises(UsageError, match="provider is a loop.Provider"):
        await run_bench(["react"], QUICK, provider="openai:gpt-4o")  # type: ignore[arg-type]


@pytest.mark.parametrize("spec, message", [
    ("gpt-4o", "has no 'KIND:'"), ("mistral:large", "unknown provider kind 'mistral'"),
    ("openai-compatible:llama3", "needs MODEL@BASE_URL")])
def test_a_bad_provider_spec_is_named_with_the_accepted_forms(spec: str, message: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    args = parser().parse_args(["--provider", spec])
    with pytest.raises(UsageError, match=message) as raised:
        _provider(args, print)
    assert "openai:MODEL, anthropic:MODEL, openai-compatible:MODEL@BASE_URL" in str(raised.value)


def test_progress_redraws_one_line_on_a_terminal_and_writes_a_line_per_pattern_elsewhere(report: Report) -> None:
    for live in (True, False):
        out = io.StringIO()
        progress = Progress(out, live=live)
        progress.start("react", 2)
        progress.advance()
        progress.advance()
        progress.finish(report.result("react"))
        progress.skip("chain", "needs the setting 'stages'")
        text = out.getvalue()
        lines = text.splitlines()
        assert lines[-1].strip() == "chain                  skipped: needs the setting 'stages'"
        if live:
            assert "\rreact" in text and "[############............] 1/2" in text
        else:
            assert "\r" not in text and len(lines) == 2 and lines[0].startswith("react") and "accuracy" in lines[0]


async def test_reliability_per_kind_makes_escalation_pass_over_a_rung_measured_unreliable(report: Report) -> None:
    measured = reliability(report, "lookup", rungs=["verify", "react"])
    assert measured == {"react": 1.0, "verify": 0.0}
    lookup = next(t for t in QUICK if t.kind == "lookup")
    step = Step(simulated_provider(), tools=lookup.tools)
    policy = Escalation({"verify": build("verify", step), "react": build("react", step)}, judge=step,
                        reliability=measured)
    done = await policy.run(lookup.question)
    assert lookup.check(done.answer or "")
    assert done.outcome is not None
    choices = done.outcome.data["Escalation"]["choices"]
    assert choices[0]["rung"] == "verify" and choices[0]["skipped"] is True
    assert choices[-1]["rung"] == "react"


async def test_escalation_is_compared_with_the_best_single_pattern() -> None:
    rungs = ("single-shot", "self-consistency")
    patterns = {"single-shot": "single-shot", "self-consistency": "self-consistency",
                "escalation": lambda step: escalation(step, rungs=rungs)}
    done = await run_bench(patterns, builtin_tasks())
    check = compare_escalation(done)
    cheap, best, policy = (done.result(n) for n in ("single-shot", "self-consistency", "escalation"))
    assert check.best == "self-consistency" and check.best_accuracy == best.accuracy
    assert check.tokens == policy.mean_tokens and check.token_share == policy.mean_tokens / best.mean_tokens
    assert check.met == (policy.accuracy >= best.accuracy and check.token_share <= 0.5)
    # The cheapest adequate rung first: far better than the cheap rung, for a fraction of the voting's tokens.
    assert policy.accuracy > cheap.accuracy + 0.2 and check.token_share < 0.7
    assert report_json(done, escalation=check)["escalation"]["best"] == "self-consistency"


@pytest.mark.parametrize("seed, repeat", [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (0, 5)])
def test_the_registry_escalation_meets_its_target_on_five_seeds_and_over_five_repeats(seed: int, repeat: int) -> None:
    # The documented comparison: at least the best single pattern's accuracy with at most half its tokens.
    singles = ["single-shot", "self-consistency", "tree-of-thoughts", "deliberate"]
    done = anyio.run(functools.partial(run_bench, [*singles, "escalation"], builtin_tasks(),
                                       provider=simulated_provider(seed=seed), repeat=repeat))
    check = compare_escalation(done)
    assert check.met, check.summary()


def _result(name: str, accuracy: float, tokens: int) -> PatternResult:
    runs = tuple(TaskRun(f"t{i}", "k", i < accuracy * 10, False, input_tokens=tokens) for i in range(10))
    return PatternResult(name, runs)


def test_the_escalation_target_is_its_accuracy_for_at_most_half_its_tokens() -> None:
    made = Report((_result("cheap", 0.5, 100), _result("best", 0.8, 1000), _result("tied", 0.8, 2000),
                   _result("escalation", 0.8, 500)))
    check = compare_escalation(made)
    assert (check.best, check.token_share, check.met) == ("best", 0.5, True)
    assert "met." in check.summary()
    worse = compare_escalation(Report(made.results[:3] + (_result("escalation", 0.7, 100),)))
    assert not worse.met and "not met" in worse.summary()
    dearer = compare_escalation(Report(made.results[:3] + (_result("escalation", 0.9, 600),)))
    assert not dearer.met
    with pytest.raises(UsageError, match="another pattern"):
        compare_escalation(Report((_result("escalation", 1, 1),)))


async def test_every_registry_pattern_runs_on_the_quick_set_or_is_skipped_with_its_reason() -> None:
    done = await run_bench(cognitive.names(), QUICK, budget=default_budget(max_turns=60))
    ran = {r.name for r in done.results}
    assert ran | set(done.skipped) == set(cognitive.names())
    assert {"react", "single-shot", "verify", "self-consistency"} <= ran
    for result in done.results:
        assert result.error_rate == 0, [(r.task, r.error) for r in result.runs if r.error]
    for name, reason in done.skipped.items():
        assert reason.startswith(("needs the setting", "building it failed")), (name, reason)


def test_the_public_names() -> None:
    assert sorted(bench.__all__) == sorted([
        "CHECKERS", "Checker", "Contender", "EscalationCheck", "PLOT_EXTRA", "PatternResult", "Progress", "Report",
        "SimulatedModel", "Task", "TaskRun", "builtin_tasks", "check_contains", "check_exact", "check_game24",
        "check_number", "compare_escalation", "default_budget", "load_tasks", "lookup", "reliability",
        "reliability_by_kind", "render_table", "report_json", "run_bench", "run_task", "simulated_provider",
        "write_json", "write_png", "write_reliability"])


def test_the_command_line_runs_offline_and_writes_the_table_json_plot_and_reliability(tmp_path: Path) -> None:
    out = {name: tmp_path / name for name in ("r.json", "r.png", "rel.json")}
    done = subprocess.run(
        [sys.executable, "-m", "cognitive.bench", "--quick", "--patterns", "react,verify,with-output,escalation",
         "--json", str(out["r.json"]), "--png", str(out["r.png"]), "--reliability", str(out["rel.json"])],
        cwd=ROOT, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[0] == "pattern" and [line.split()[0] for line in lines[2:4]] == ["react", "verify"]
    assert lines[-3] == "skipped with-output: needs the setting 'output_type'"
    assert lines[-1].startswith("escalation: accuracy ") and "the best single pattern, " in lines[-1]
    assert "6 task(s) x 4 pattern(s) on simulated (offline, seed 0)" in done.stderr
    assert "react                  6 tasks  accuracy" in done.stderr  # one progress line a pattern: not a terminal
    written = json.loads(out["r.json"].read_text())
    jsonschema.validate(written, REPORT)
    assert written["escalation"]["escalation"] == "escalation" and isinstance(written["escalation"]["met"], bool)
    assert out["r.png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(json.loads(out["rel.json"].read_text())) == {"arithmetic", "game24", "lookup"}


@pytest.mark.parametrize("argv, message", [
    (["--provider", "gpt-4o"], "error: provider spec 'gpt-4o' has no 'KIND:'; use one of openai:MODEL"),
    (["--patterns", "react,reac"], "error: no pattern is named 'reac' (did you mean 'react'?)"),
    (["--tasks", "missing.jsonl"], "error: cannot read the task file 'missing.jsonl'"),
])
def test_the_command_line_says_what_is_wrong_and_exits_2(argv: list[str], message: str,
                                                         capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "configure_logging", lambda **_: None)  # leave the test's logging alone
    assert main(["--quick", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(message)


def test_the_command_closes_the_provider_it_opened(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    import cognitive.bench._cli as cli

    closed: list[str] = []

    class Holding(Function):
        async def aclose(self) -> None:
            closed.append("closed")

    monkeypatch.setattr(cli, "from_spec", lambda spec: Holding(SimulatedModel()))
    monkeypatch.setattr(tracing, "configure_logging", lambda **_: None)  # leave the test's logging alone
    assert main(["--provider", "openai:stand-in", "--quick", "--patterns", "single-shot"]) == 0
    assert closed == ["closed"]  # through the Retry the command wraps it in
    assert "single-shot" in capsys.readouterr().out
