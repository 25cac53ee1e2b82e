"""Every Python block of the README runs as pasted: each is a whole program (its imports, no ``await`` outside a
function), names nothing it does not define, and the ones that need more than this process (a sandbox, an MCP
server, a served agent) run here in a child process, printing what the README says they print."""

import builtins
import os
import subprocess
import sys
import symtable
from pathlib import Path

import pytest

from tests.examples import ROOT
from tests.examples.docs import PYTHON_BLOCKS as BLOCKS
from tests.sandbox.docker_env import require_docker


def _undefined(code: str) -> set[str]:
    """Global names the block reads but never binds (imports, assignments, definitions) and are not builtins."""
    table = symtable.symtable(code, "README block", "exec")
    bound = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}
    used: set[str] = set()

    def walk(scope: symtable.SymbolTable) -> None:
        for symbol in scope.get_symbols():
            if symbol.is_referenced() and (symbol.is_global() or scope is table):
                used.add(symbol.get_name())
        for child in scope.get_children():
            walk(child)

    walk(table)
    return used - bound - set(dir(builtins))


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_every_python_block_is_a_whole_program(block: str) -> None:
    compile(block, "README block", "exec")  # no await outside a function: a SyntaxError here
    assert not _undefined(block), f"the block uses names it never defines: {sorted(_undefined(block))}\n{block}"


def _run(marker: str, tmp_path: Path, stdin: str = "") -> str:
    (block,) = [b for b in BLOCKS if marker in b]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=env, input=stdin, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_manager_block_answers_from_a_store_in_the_working_directory(tmp_path: Path) -> None:
    assert _run("SQLiteStore(\"chats.db\")", tmp_path).strip() == "2 + 3 = 5"
    assert (tmp_path / "chats.db").exists()


def test_the_mcp_tools_block_calls_the_time_server(tmp_path: Path) -> None:
    assert _run("MCPStdioServer(sys.executable", tmp_path).strip() == "Asia/Tokyo"


def test_the_mcp_conduit_block_serves_until_the_client_hangs_up(tmp_path: Path) -> None:
    assert _run("MCPConduit(name=\"calculator\"", tmp_path, stdin="") == ""  # no client: it ends at once


@pytest.mark.docker
@pytest.mark.parametrize(("marker", "printed"), [
    ('files={"main.py": "print(6 * 7)"}', "0 42"),
    ("DockerSandbox(config, warm=2)", "strict"),
    ("ToolBridge([price], max_tool_calls=20)", "FINAL: 6.0"),
    ("CodeAction(Step(Scripted([program]))", "6.0"),
])
def test_the_sandbox_blocks_run_in_docker(marker: str, printed: str, tmp_path: Path) -> None:
    require_docker()
    assert _run(marker, tmp_path).strip() == printed
