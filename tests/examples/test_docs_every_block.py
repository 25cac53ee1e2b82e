"""Every Python block of the README and the guide runs, as pasted into a file of its own.

Blocks whose printed output a test checks are run by that test (``CHECKED_ELSEWHERE`` names it); every other
block runs here, in this process, in a fresh working directory, with no model named in the environment; a block
that builds a real model's provider gets placeholder keys and base URLs aimed at a closed loopback port, so
building it works and calling it would fail loudly instead of reaching the network. A new block is run by
this test from the moment it is written."""

import contextlib
import io
from pathlib import Path

import pytest

from tests.examples.docs import PYTHON_BLOCKS, blocks

CHECKED_ELSEWHERE = {  # a marker found in exactly one block -> the test that runs it and checks its output
    "def says_5": "test_docs_examples.py::test_the_quickstart_block_runs_and_prints_the_fixed_answer",
    "def test_agent_uses_the_tool": "test_docs_examples.py::test_the_plugin_snippet_passes_pasted_into_a_fresh_project",
    "SQLiteStore(\"chats.db\")": "test_docs_blocks.py::test_the_manager_block_answers_from_a_store_in_the_working_directory",
    "MCPStdioServer(sys.executable": "test_docs_blocks.py::test_the_mcp_tools_block_calls_the_time_server",
    "MCPConduit(name=\"calculator\"": "test_docs_blocks.py::test_the_mcp_conduit_block_serves_until_the_client_hangs_up",
    'files={"main.py": "print(6 * 7)"}': "test_docs_blocks.py::test_the_sandbox_blocks_run_in_docker",
    "DockerSandbox(config, warm=2)": "test_docs_blocks.py::test_the_sandbox_blocks_run_in_docker",
    "ToolBridge([price], max_tool_calls=20)": "test_docs_blocks.py::test_the_sandbox_blocks_run_in_docker",
    "CodeAction(Step(Scripted([program]))": "test_docs_blocks.py::test_the_sandbox_blocks_run_in_docker",
    "from openai import OpenAI": "test_docs_walkthroughs.py::test_the_serve_walkthrough_answers_curl_and_the_openai_client",
    "class DraftThenPolish": "test_docs_examples.py::test_the_own_pattern_example_builds_by_name_and_nests",
}


def _elsewhere(code: str) -> bool:
    return any(marker in code for marker in CHECKED_ELSEWHERE)


MODEL_VARIABLES = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
                   "ANTHROPIC_MODEL")
HERE = [(page, code) for page, code in blocks("python") if not _elsewhere(code)]


@pytest.mark.parametrize("marker", sorted(CHECKED_ELSEWHERE))
def test_each_block_checked_elsewhere_is_one_block(marker: str) -> None:
    found = [b for b in PYTHON_BLOCKS if marker in b]
    assert len(found) == 1, f"{marker!r} should name one block, and names {len(found)}"


@pytest.mark.parametrize(("page", "code"), HERE, ids=[f"{page}-{i}" for i, (page, _) in enumerate(HERE)])
def test_the_block_runs(page: str, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in MODEL_VARIABLES:  # as in a shell that names no model: provider.from_environment picks the demo
        monkeypatch.delenv(name, raising=False)
    if any(maker in code for maker in ("OpenAICompatible(", "Anthropic(")):  # builds a real model's provider
        for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
            monkeypatch.setenv(name, "placeholder-key")
        for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
            monkeypatch.setenv(name, "http://127.0.0.1:9")  # the discard port: nothing listens there
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, f"{page} block", "exec"), {"__name__": "__main__"})
