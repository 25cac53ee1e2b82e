"""The Python examples of the README and the guide run as written, printing what the text says they print."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.examples.docs import PYTHON_BLOCKS as BLOCKS


def test_the_quickstart_block_runs_and_prints_the_fixed_answer(capsys: pytest.CaptureFixture[str]) -> None:
    quickstart = next(b for b in BLOCKS if "def says_5" in b)
    assert len(quickstart.strip().splitlines()) <= 20
    exec(compile(quickstart, "README quickstart", "exec"), {})
    assert capsys.readouterr().out.strip() == "2 + 3 = 5"


def test_the_verifier_snippet_builds_verifiers() -> None:
    snippet = next(b for b in BLOCKS if "CommandVerifier(" in b)
    namespace: dict = {}
    exec(snippet, namespace)
    assert namespace["no_todo"].name == "no-todo"
    assert namespace["tests"].argv == ("pytest", "-q") and namespace["tests"].timeout == 120


def test_the_plugin_snippet_passes_pasted_into_a_fresh_project(tmp_path: Path) -> None:
    """The README's plugin example, word for word, as the only file of a new project: no conftest, no ini."""
    example = next(b for b in BLOCKS if "def test_agent_uses_the_tool" in b)
    project = tmp_path / "fresh_project"
    project.mkdir()
    (project / "test_agent.py").write_text(example)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider"], cwd=project, env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.fullmatch(r"=+ [1-9]\d* passed in [\d.]+s =+", summary), run.stdout
    assert f"rootdir: {project}" in run.stdout and "configfile" not in run.stdout  # nothing of ours leaked in


def _run_block(marker: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    block = next(b for b in BLOCKS if marker in b)
    assert len(block.strip().splitlines()) <= 25, "README examples stay short"
    exec(compile(block, f"README block with {marker!r}", "exec"), {})
    return capsys.readouterr().out.strip().splitlines()


def test_the_outcomes_example_shows_a_clean_retry_is_ok(capsys: pytest.CaptureFixture[str]) -> None:
    (line,) = _run_block("ReAct(step, max_turns=1)", capsys)
    assert line == "ok {'retries': 1, 'results': {'complete': 'pass'}}"


def test_the_budget_example_ends_in_a_degraded_answer_with_its_spend(capsys: pytest.CaptureFixture[str]) -> None:
    answer, spent = _run_block("Budget(max_tool_calls=3", capsys)
    text, status, reason = answer.split(" | ")
    assert text == "Here is what I found so far." and status == "degraded"
    assert reason.startswith("budget 'research' ran out (max_tool_calls=3 reached)")
    assert spent == "{'turns': 5, 'tool_calls': 3}"


def test_the_fan_out_example_answers_per_branch(capsys: pytest.CaptureFixture[str]) -> None:
    (line,) = _run_block("anyio.run(fan_out", capsys)
    assert line == str([(f"branch {i}", f"idea from branch {i}", 1) for i in (1, 2, 3)])


def test_the_typed_answer_example_prints_the_value(capsys: pytest.CaptureFixture[str]) -> None:
    (line,) = _run_block("answer_value(state, City)", capsys)
    assert line == "City(name='Paris', population=2100000)"


def test_the_extending_provider_example_answers_with_the_tool_and_passes_its_check(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The README's own provider, run as written, then through the provider conformance check it names."""
    import anyio

    from provider.testing import check_provider

    block = next(b for b in BLOCKS if "class Adder" in b)
    namespace: dict = {}
    exec(compile(block, "README block with 'class Adder'", "exec"), namespace)
    assert capsys.readouterr().out.strip() == "The sum is 5."
    state = namespace["state"]
    assert [c.name for t in state for c in t.tool_calls] == ["add"] and state.usage.output_tokens > 0
    provider_lines = block[block.index("class Adder"):block.index("@tool")].strip().splitlines()
    assert len(provider_lines) <= 20, "the provider example stays about twenty lines"
    anyio.run(check_provider, namespace["Adder"])


def _run_long_block(marker: str, capsys: pytest.CaptureFixture[str], limit: int) -> list[str]:
    block = next(b for b in BLOCKS if marker in b)
    assert len(block.strip().splitlines()) <= limit, "README examples stay short"
    exec(compile(block, f"README block with {marker!r}", "exec"), {})
    return capsys.readouterr().out.strip().splitlines()


def test_the_patterns_example_votes_inside_one_budget(capsys: pytest.CaptureFixture[str]) -> None:
    (line,) = _run_long_block("SelfConsistency(ReAct(step), n=5)", capsys, 25)
    assert line == "The sum is 5. 1.0 10"  # 5 samples of 2 turns, each charged to the one budget


def test_the_registry_example_routes_on_the_small_model(capsys: pytest.CaptureFixture[str]) -> None:
    (line,) = _run_long_block('cognitive.build("router"', capsys, 25)
    assert line == "42 arithmetic"


def test_the_own_pattern_example_builds_by_name_and_nests(capsys: pytest.CaptureFixture[str]) -> None:
    import cognitive

    try:
        (line,) = _run_long_block("class DraftThenPolish", capsys, 30)
    finally:
        cognitive._registry._FACTORIES.pop("draft-then-polish", None)
    assert line == "Paris. ok"
    block = next(b for b in BLOCKS if "class DraftThenPolish" in b)
    pattern = block[block.index("class DraftThenPolish"):block.index("register(")]
    assert len(pattern.strip().splitlines()) <= 20


def test_the_structured_tool_parameters_example_passes_built_records(capsys: pytest.CaptureFixture[str]) -> None:
    (line,) = _run_block("class Line:", capsys)
    assert line == "3 items ordered"


def test_the_rewoo_example_answers_from_three_tool_calls(capsys: pytest.CaptureFixture[str]) -> None:
    answer, steps = _run_block("ReWOO(Step(demo_provider()", capsys)
    assert answer == "Dana Okafor is 3 generations of mentors back from Ada Reyes." and steps == "3"


def test_the_own_graph_example_keeps_only_notes_and_the_answer(capsys: pytest.CaptureFixture[str]) -> None:
    answer, kinds = _run_block("from examples.own_graph import", capsys)
    assert answer == "About 2,100,000 people live in Paris, the capital of France."
    assert kinds == "['user', 'work_notes', 'stage', 'assistant']"
