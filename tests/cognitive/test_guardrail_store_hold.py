"""An answer with output checks is not stored before its checks pass: a client reading the stored conversation
while they run sees the turns before it, and the answer once it passed; a tripped one is never stored as written."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from cognitive import ReAct, WithGuardrails, new_turn_processor
from loop import Request, Role, State, TurnExecutor, tool
from provider import Function, tool_call
from session import Manager, MemoryStore, step_factory
from verifier import FunctionVerifier, failed, passed

checking = anyio.Event()
release = anyio.Event()


@tool
async def look(city: str) -> str:
    """The weather."""
    return f"sunny in {city}"


def model(request: Request) -> Any:
    if request.turns[-1].role is Role.USER:
        return tool_call("look", {"city": "Oslo"}, id="l1")
    return "It is sunny in Oslo. secret-word"


async def slow_check(state: State) -> Any:
    checking.set()
    await release.wait()
    return failed("it says the secret word") if "secret-word" in (state.answer or "") and trip else passed()


trip = False


def guarded(step: TurnExecutor) -> WithGuardrails:
    return WithGuardrails(ReAct(step), step, output=[FunctionVerifier(slow_check, name="slow")])


@pytest.fixture(autouse=True)
def fresh() -> None:
    global checking, release
    checking, release = anyio.Event(), anyio.Event()


@pytest.mark.parametrize("trips", [False, True])
async def test_the_store_holds_no_answer_while_its_checks_run(trips: bool) -> None:
    global trip
    trip = trips
    store = MemoryStore()
    async with Manager(new_turn_processor(guarded), provider=Function(model), store=store,
                       make_step=step_factory([look])) as manager:
        session = await manager.open("s1")
        session.send("Weather in Oslo?")
        with anyio.fail_after(5):
            await checking.wait()
        during = await store.load("s1")
        assert during is not None and [t.role for t in during] == [Role.USER, Role.ASSISTANT, Role.TOOL], \
            "the tool call and its result are stored; the answer is not, while the checks run"
        release.set()
        with anyio.fail_after(5):
            while session.busy:
                await anyio.sleep(0.01)
    after = await store.load("s1")
    assert after is not None and after[-1].role is Role.ASSISTANT
    if trips:
        assert "secret-word" not in after[-1].text and "blocked by guardrail slow" in after[-1].text
    else:
        assert after.answer == "It is sunny in Oslo. secret-word"
