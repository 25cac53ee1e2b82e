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
