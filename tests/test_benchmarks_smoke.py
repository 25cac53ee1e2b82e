"""The benchmark suite (tests/benchmarks, not collected by default) runs: every benchmark at tiny sizes.

This proves the code works, not that the figures are good; run ``python -m tests.benchmarks`` for those.
"""

from __future__ import annotations

import math

import pytest

from loop import tracing
from tests.benchmarks import __main__ as suite
from tests.benchmarks import bench_verify
from tests.benchmarks._harness import Figure


@pytest.mark.parametrize("name", list(suite.BENCHMARKS))
def test_benchmark_runs_and_reports_positive_figures(name: str) -> None:
    figures = suite.BENCHMARKS[name](quick=True)
    assert figures
    for figure in figures:
        assert isinstance(figure, Figure)
        rate = figure.unit == "%" and not figure.on_ratio  # a rate may be 0 (no false hits), and its ratio too
        for number in (figure.value, figure.baseline) if rate else (figure.value, figure.baseline, figure.ratio):
            assert isinstance(number, float) and math.isfinite(number) and (number > 0 or rate), figure
        assert figure.verdict in ("PASS", "MISS", "info")
    assert not tracing.enabled()  # the traced benchmark puts tracing back as it found it


def test_the_runner_prints_a_table_and_exits_non_zero_only_on_a_crash(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def crash(quick: bool = False) -> list[Figure]:
        raise RuntimeError("boom")

    monkeypatch.setattr(suite, "BENCHMARKS", {"verify": bench_verify.run, "crash": crash})
    assert suite.main(["--quick", "--only", "verify"]) == 0
    out = capsys.readouterr().out
    assert "cpus:" in out and "tracing:" in out and "run_all of 3 verifiers" in out
    assert "PASS" in out or "MISS" in out

    assert suite.main(["--quick"]) == 1
    captured = capsys.readouterr()
    assert "RuntimeError: boom" in captured.err and "1 crashed (crash)" in captured.out
