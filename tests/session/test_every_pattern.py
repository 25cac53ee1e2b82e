"""Every pattern of the registry and every example's agent answers in a session (``Manager``), storing only
what extends the conversation, and through a real ``python -m session serve`` process, over Chat Completions and
the Responses API: a pattern cannot tell where it runs. New registry names and examples are picked up by themselves."""

import importlib
import inspect
import re
import subprocess
import sys
from typing import Any

import anyio
import httpx
import pytest

import cognitive
from loop import Executor, Role, State, Turn
from cognitive import new_turn_processor
from session import Manager, MemoryStore, step_factory
from tests.session import registry_agent
from tests.session.test_cli import ENV, ROOT, read_until

NEEDS_DOCKER = {"code_action"}  # its agent runs programs in a DockerSandbox
EXAMPLES = [pytest.param(p.stem, marks=[pytest.mark.docker] if p.stem in NEEDS_DOCKER else [])
            for p in sorted((ROOT / "examples").glob("*.py"))
            if "def make_agent(" in p.read_text()]


class Appends(MemoryStore):
    """A memory store that keeps every append it is asked for: ``(start, turns)``."""

    def __init__(self) -> None:
        super().__init__()
        self.appends: list[tuple[int, tuple[Turn, ...]]] = []

    async def append(self, session_id: str, start: int, turns: Any, meta: Any) -> None:
        self.appends.append((start, tuple(turns)))
        await super().append(session_id, start, turns, meta)


def assert_only_extended(appends: list[tuple[int, tuple[Turn, ...]]]) -> None:
    """Each append starts where the stored conversation ends, except that the answer's outcome may be written
    onto the stored answer turn (the turn itself unchanged)."""
    stored: list[Turn] = []
    for start, turns in appends:
        assert start >= len(stored) - 1, f"an append at {start} rewrote stored turns (stored: {len(stored)})"
        if start == len(stored) - 1:
            before, after = stored[start], turns[0]
            assert (before.role, before.parts, before.name) == (after.role, after.parts, after.name), \
                f"turn {start} was rewritten, not only given an outcome"
        stored[start:] = turns


@pytest.mark.parametrize("name", cognitive.names())
async def test_every_registry_pattern_answers_in_a_session_storing_only_extensions(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REGISTRY_PATTERN", name)
    store = Appends()
    made: list[Executor] = []

    def factory(executor: Executor) -> cognitive.Pattern:
        made.append(executor)
        return registry_agent.make_agent(executor)

    manager = Manager(new_turn_processor(factory), provider=registry_agent.demo_provider(), store=store,
                      make_step=step_factory(registry_agent.TOOLS))
    with anyio.fail_after(20):
        async with manager:
            session = await manager.open()
            state = await session.ask("What is it?")
            again = await session.ask("And again?")
    assert state.answer and again.answer, f"{name} wrote no answer"
    assert [t.role for t in again].count(Role.USER) == 2
    assert type(made[0]).__name__ == "Step", "a session hands a factory its own Step"
    assert_only_extended(store.appends)


@pytest.mark.parametrize("example", EXAMPLES)
async def test_every_example_agent_answers_in_a_session(example: str) -> None:
    module = importlib.import_module(f"examples.{example}")
    assert callable(getattr(module, "demo_provider", None)), f"examples.{example} must have a demo_provider()"
    extra = [p for p in list(inspect.signature(module.make_agent).parameters.values())[1:]
             if p.default is inspect.Parameter.empty]
    assert not extra, f"examples.{example}:make_agent must be servable: give {[p.name for p in extra]} defaults"
    tools = getattr(module, "TOOLS", ())
    manager = Manager(new_turn_processor(module.make_agent), provider=module.demo_provider(),
                      make_step=step_factory(tools))
    with anyio.fail_after(30):
        async with manager:
            state = await (await manager.open()).ask("Hello, what can you do?")
    assert isinstance(state, State) and state.answer


async def _ask_served(target: str, env: dict[str, str], backend: str = "asyncio") -> str:
    child = subprocess.Popen([sys.executable, "-m", "session", "serve", target, "--port", "0", "--store",
                              "memory://", "--backend", backend], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             cwd=ROOT, env=env)
    try:
        said = await read_until(child.stderr, "OpenAPI at /openapi.json")
        found = re.search(r"serving on (http://127\.0\.0\.1:\d+):", said)
        assert found, said
        async with httpx.AsyncClient(base_url=found.group(1), timeout=30) as http:
            reply = await http.post("/v1/chat/completions", json={
                "model": "agent", "messages": [{"role": "user", "content": "Hello, what can you do?"}]})
            assert reply.status_code == 200, f"{target}: {reply.status_code} {reply.text}"
            response = await http.post("/v1/responses", json={"model": "agent", "input": "And again?"})
        assert response.status_code == 200, f"{target}: {response.status_code} {response.text}"
        body = response.json()
        assert body["status"] in ("completed", "incomplete"), f"{target}: {body}"
        assert any(item["type"] == "message" for item in body["output"]), f"{target}: no answer in {body}"
        content: str = reply.json()["choices"][0]["message"]["content"]
        return content
    finally:
        child.kill()
        child.wait()
        child.stderr.close()  # type: ignore[union-attr]


@pytest.mark.slow
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the server is a subprocess: this side only asks
@pytest.mark.parametrize("target", [*(f"registry:{n}" for n in cognitive.names()), *EXAMPLES])
async def test_every_pattern_and_example_answers_through_a_served_process(target: str) -> None:
    env = {k: v for k, v in ENV.items() if k != "SESSION_TOKEN"}
    if target.startswith("registry:"):
        env["REGISTRY_PATTERN"] = target.split(":", 1)[1]
        answer = await _ask_served("tests.session.registry_agent:make_agent", env)
    else:
        answer = await _ask_served(f"examples.{target}:make_agent", env)
    assert answer


@pytest.mark.slow
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the server is a subprocess: this side only asks
@pytest.mark.parametrize("example", EXAMPLES)
async def test_every_example_answers_through_a_process_served_on_trio(example: str) -> None:
    env = {k: v for k, v in ENV.items() if k != "SESSION_TOKEN"}
    assert await _ask_served(f"examples.{example}:make_agent", env, backend="trio")


async def test_loop_detection_in_a_session_stores_each_turn_as_it_completes_and_rewrites_none() -> None:
    from cognitive import ReAct
    from provider import Scripted, tool_call

    store = Appends()
    model = Scripted([tool_call("look", {"topic": "cats"}), tool_call("look", {"topic": " CATS "}),
                      tool_call("look", {"topic": "cats"}), "cats are cats"])
    manager = Manager(new_turn_processor(lambda step: ReAct(step, detect_loops=True)), provider=model, store=store,
                      make_step=step_factory(registry_agent.TOOLS))
    with anyio.fail_after(10):
        async with manager:
            state = await (await manager.open()).ask("find cats")
    assert state.answer == "cats are cats" and state.degraded
    assert_only_extended(store.appends)
    assert [start for start, _ in store.appends][:8] == list(range(8)), "one turn stored at a time, as each completed"
