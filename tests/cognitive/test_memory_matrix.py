"""The memory view inside the nesting matrix: every pattern of the matrix, on a step showing ``RecallMemory``, alone
and wrapped in ``Remembering``. Every model request of a cell (branches, judges and stages included) shows the
recalled system turn just before its newest user message, and the conversation a cell returns holds no memory
turn."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from cognitive import Pattern
from cognitive.memory._protocol import Scope
from cognitive.memory._recall import MEMORY_KIND, RecallMemory
from cognitive.memory._remember import Remembering, remember_messages
from cognitive.memory._sqlite import SQLiteMemory
from loop import Caller, Role, Step, run_context
from provider import Function
from provider._embedder import HashingEmbedder
from tests.cognitive.test_matrix import PATTERNS, Model, lookup, start

ANN = Caller("ann", "acme")
FACT = "The user's favourite number is 42."


@pytest.fixture
async def memory() -> AsyncIterator[SQLiteMemory]:
    async with SQLiteMemory(":memory:", HashingEmbedder()) as store:
        await store.remember(Scope("ann", "acme"), FACT)
        yield store


@pytest.mark.parametrize("remembering", [False, True], ids=["recall", "remembering"])
@pytest.mark.parametrize("pattern", list(PATTERNS))
async def test_every_request_of_every_pattern_sees_the_memory_and_the_conversation_keeps_none(
        pattern: str, remembering: bool, memory: SQLiteMemory) -> None:
    model = Model()
    # min_score=-1: every request is shown the fact, whatever words its message shares with it.
    step = Step(Function(model), tools=[lookup], transforms=[RecallMemory(memory, min_score=-1.0)])
    cell: Pattern = PATTERNS[pattern](step)
    if remembering:
        cell = Remembering(cell, memory, policy=remember_messages)
    with run_context(caller=ANN):
        state = await cell.run(start())
    assert state.answer and not state.pending_calls
    assert state.outcome is None or state.outcome.status == "ok", state.outcome
    assert model.requests
    for request in model.requests:
        turns = request.turns
        users = [i for i, t in enumerate(turns) if t.role is Role.USER]
        assert users, f"{pattern}: a request with no user message at {request.path}"
        shown = [i for i, t in enumerate(turns) if t.kind == MEMORY_KIND]
        assert shown == [users[-1] - 1], f"{pattern}: {request.path} shows memory at {shown}"
        assert turns[shown[0]].role is Role.SYSTEM and FACT in turns[shown[0]].text
    assert not any(t.kind == MEMORY_KIND for t in state)
    kept = sorted(i.text for i in await memory.items(Scope("ann", "acme")))
    assert kept == (sorted([FACT, start()[0].text]) if remembering else [FACT])
    if remembering:
        assert state.outcome is not None and "remembered" in state.outcome.data["Remembering"]
