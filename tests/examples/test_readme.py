"""The README's Python examples run as written."""

import re

import pytest

from tests.examples import ROOT

BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def test_the_quickstart_block_runs_and_prints_the_fixed_answer(capsys: pytest.CaptureFixture[str]) -> None:
    quickstart = next(b for b in BLOCKS if "anyio.run(agent.run" in b)
    assert len(quickstart.strip().splitlines()) <= 20
    exec(compile(quickstart, "README quickstart", "exec"), {})
    assert capsys.readouterr().out.strip() == "2 + 3 = 5"


def test_the_verifier_snippet_builds_verifiers() -> None:
    snippet = next(b for b in BLOCKS if "CommandVerifier(" in b)
    namespace: dict = {}
    exec("from verifier import CommandVerifier, FunctionVerifier\n" + snippet, namespace)
    assert namespace["no_todo"].name == "no-todo"
    assert namespace["tests"].argv == ("pytest", "-q") and namespace["tests"].timeout == 120


async def test_the_plugin_example_passes(scripted, event_recorder) -> None:
    example = next(b for b in BLOCKS if "def test_agent_uses_the_tool" in b)
    namespace: dict = {}
    exec("from cognitive import ReAct\nfrom loop import Role, State, Step, Text, tool\n"
         "from provider import tool_call\n"
         "@tool\nasync def add(a: float, b: float) -> float:\n    '''Add.'''\n    return a + b\n" + example, namespace)
    await namespace["test_agent_uses_the_tool"](scripted, event_recorder)


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
