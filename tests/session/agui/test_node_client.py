"""The official AG-UI client, ``@ag-ui/client``'s ``HttpAgent`` (Node), against the conduit on 127.0.0.1: a
tool-calling run, a run that fails, and a second run on the same thread, as its subscriber receives them.

The client runs from ``$AGUI_NODE_DIR`` (by default ``~/.cache/cognitive-loop/agui-node``), installed there from
``node/package.json`` (its lock pins ``@ag-ui/client`` 1.0.0) by the command ``INSTALL`` names, as .ci/run does. The
tests never install it: without Node or the client they skip, saying how to install it, and under ``CI=true``
they fail."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from loop import Request, Role, tool
from loop.errors import ProviderError
from provider import Function, tool_call
from tests.session.agui.helpers import TOKEN, on_socket

HERE = Path(__file__).parent / "node"
CLIENT_VERSION = "1.0.0"
INSTALL = ("mkdir -p \"$AGUI_NODE_DIR\" && cp tests/session/agui/node/package.json tests/session/agui/node/"
           "package-lock.json \"$AGUI_NODE_DIR\"/ && npm ci --prefix \"$AGUI_NODE_DIR\" --no-audit --no-fund")


def _folder() -> Path:
    return Path(os.environ.get("AGUI_NODE_DIR") or Path.home() / ".cache" / "cognitive-loop" / "agui-node")


def _installed(folder: Path) -> bool:
    found = folder / "node_modules" / "@ag-ui" / "client" / "package.json"
    return found.is_file() and json.loads(found.read_text()).get("version") == CLIENT_VERSION


def _unavailable(why: str) -> None:
    message = f"{why}; install the client with: AGUI_NODE_DIR={_folder()} sh -c '{INSTALL}'"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def client_folder() -> Path:
    """The folder the client runs from, with ``@ag-ui/client`` installed."""
    if shutil.which("node") is None:
        _unavailable("Node is not installed (no `node` on PATH)")
    folder = _folder()
    if not _installed(folder):
        _unavailable(f"@ag-ui/client {CLIENT_VERSION} is not installed in {folder}")
    shutil.copyfile(HERE / "client.cjs", folder / "client.cjs")
    return folder


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def model(request: Request) -> Any:
    last = request.turns[-1]
    if last.role is Role.TOOL:
        return f"sum is {last.tool_results[0].content}"
    if last.text == "add":
        return tool_call("add", {"a": 2, "b": 3}, id="c1")
    if last.text == "fail":
        raise ProviderError("the model is unreachable", status=503)
    return f"{last.text.upper()} after {sum(t.role is Role.USER for t in request.turns) - 1} earlier"


async def drive(folder: Path, thread: str, texts: list[str]) -> list[dict[str, Any]]:
    """Run the client against a conduit on 127.0.0.1, a run per text on ``thread``; what it saw, per run."""
    async with on_socket(Function(model), tools=[add]) as served:
        assert isinstance(served.transport_or_url, str)
        spec = {"url": served.transport_or_url + "/agui", "token": TOKEN, "threadId": thread,
                "runs": [{"text": text} for text in texts]}
        with anyio.fail_after(30):
            done = await anyio.run_process(["node", str(folder / "client.cjs"), json.dumps(spec)], cwd=folder,
                                           check=False)
    assert done.returncode == 0, done.stderr.decode()
    runs: list[dict[str, Any]] = json.loads(done.stdout)["runs"]
    return runs


async def test_the_official_client_runs_a_tool_calling_agent(client_folder: Path) -> None:
    [seen] = await drive(client_folder, "node-1", ["add"])
    kinds = [e["type"] for e in seen["events"]]
    assert kinds[0] == "RUN_STARTED" and kinds[-2:] == ["MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert kinds.index("TOOL_CALL_START") < kinds.index("TOOL_CALL_END") < kinds.index("TOOL_CALL_RESULT")
    assert seen["failed"] is None and seen["error"] is None
    assert seen["finished"]["outcome"] == "success"
    assert seen["finished"]["result"] == {"status": "ok", "answer": "sum is 5"}
    assert seen["result"] == {"status": "ok", "answer": "sum is 5"}
    assert [(m["role"], m["toolCalls"], m["content"]) for m in seen["messages"]] == [
        ("user", [], "add"), ("assistant", ["add"], None), ("tool", [], "5"), ("assistant", [], "sum is 5")]


async def test_the_official_client_hears_a_run_error(client_folder: Path) -> None:
    [seen] = await drive(client_folder, "node-2", ["fail"])
    assert seen["error"]["code"] == "provider_error"
    assert "the model is unreachable" in seen["error"]["message"]
    assert seen["finished"] is None
    assert [e["type"] for e in seen["events"]][-1] == "RUN_ERROR"


async def test_the_official_client_runs_twice_on_one_thread(client_folder: Path) -> None:
    first, second = await drive(client_folder, "node-3", ["hello", "again"])
    assert first["result"]["answer"] == "HELLO after 0 earlier"
    assert second["result"]["answer"] == "AGAIN after 1 earlier", "the server kept the thread's history"
    messages = second["messages"]
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "hello"), ("assistant", "HELLO after 0 earlier"), ("user", "again"),
        ("assistant", "AGAIN after 1 earlier")]
    assert len({m["id"] for m in messages}) == len(messages), "no message twice"
