"""SemanticCache on the real local model (multilingual-e5-small through ``provider.LocalE5``) in a SQLiteMemory:
at the default threshold a paraphrase hits, an unrelated question and one just below the threshold miss, users
are kept apart and erased, and a store embedding questions as passages could not tell a repeat from a
different question."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from cognitive import SingleShot
from cognitive.memory._semantic_cache import THRESHOLD, SemanticCache
from cognitive.memory._sqlite import SQLiteMemory
from loop import Caller, Request, Role, State, Step, Text, run_context
from provider import Function
from provider._e5 import LocalE5
from provider._embedder import SymmetricEmbedder

E5 = LocalE5()  # loaded once for the module, on first use
STORED = "How do I reverse a list in Python?"
PARAPHRASE = "What's the way to reverse a Python list?"
NEAR_MISS = "How do I reverse a string in Python?"  # scores about 0.958: just below the threshold


def ask(text: str) -> State:
    return State().append(Role.USER, Text(text))


class Model:
    def __init__(self) -> None:
        self.requests: list[Request] = []

    def __call__(self, request: Request) -> str:
        self.requests.append(request)
        return f"answer {len(self.requests)}"


@pytest.fixture
async def memory() -> AsyncIterator[SQLiteMemory]:
    async with SQLiteMemory(":memory:", SymmetricEmbedder(E5)) as store:
        yield store


def cache(memory: Any, model: Model, **settings: Any) -> SemanticCache:
    step = Step(Function(model))
    return SemanticCache(SingleShot(step), step, memory, agent="helpdesk", **settings)


def found(state: State) -> Any:
    assert state.outcome is not None
    return state.outcome.data["SemanticCache"]


async def test_a_paraphrase_hits_and_a_question_just_below_the_threshold_misses(memory: SQLiteMemory) -> None:
    model = Model()
    cached = cache(memory, model)
    await cached.run(ask(STORED))
    hit = await cached.run(ask(PARAPHRASE))
    assert found(hit)["hit"] is True and found(hit)["question"] == STORED, found(hit)
    assert found(hit)["score"] >= THRESHOLD and hit.answer == "answer 1"
    near = await cached.run(ask(NEAR_MISS))
    assert found(near)["hit"] is False and THRESHOLD - 0.03 < found(near)["score"] < THRESHOLD, found(near)
    assert near.answer == "answer 2" and len(model.requests) == 2


async def test_a_repeat_in_other_case_and_punctuation_hits(memory: SQLiteMemory) -> None:
    model = Model()
    cached = cache(memory, model)
    await cached.run(ask("How many ounces are in a cup?"))
    for again in ("how many ounces are in a cup", "How many ounces are in a cup?", "A cup is how many ounces?"):
        state = await cached.run(ask(again))
        assert found(state)["hit"] is True, (again, found(state))
    assert len(model.requests) == 1


async def test_an_unrelated_question_misses(memory: SQLiteMemory) -> None:
    model = Model()
    cached = cache(memory, model)
    await cached.run(ask("How do I reset my password?"))
    for other in ("How do I reset my router?", "How do I track my order?", "What is the capital of Australia?"):
        state = await cached.run(ask(other))
        assert found(state)["hit"] is False, (other, found(state))
    assert len(model.requests) == 4


async def test_users_are_kept_apart_and_erasing_one_erases_their_answers(memory: SQLiteMemory) -> None:
    model = Model()
    cached = cache(memory, model)
    ann, bob = Caller("ann", "acme"), Caller("bob", "acme")
    with run_context(caller=ann):
        await cached.run(ask(STORED))
    with run_context(caller=bob):
        assert found(await cached.run(ask(PARAPHRASE)))["hit"] is False
    with run_context(caller=ann):
        assert found(await cached.run(ask(PARAPHRASE)))["hit"] is True
    assert await memory.erase("ann", "acme") == 1
    with run_context(caller=ann):
        assert found(await cached.run(ask(PARAPHRASE)))["hit"] is False
    with run_context(caller=bob):
        assert found(await cached.run(ask(PARAPHRASE)))["hit"] is True, "bob's own answer is still kept"


async def test_questions_stored_as_passages_score_a_repeat_no_higher_than_a_different_question() -> None:
    async with SQLiteMemory(":memory:", E5) as asymmetric:
        model = Model()
        cached = cache(asymmetric, model)
        await cached.run(ask(STORED))
        repeat = found(await cached.run(ask(STORED)))
        assert repeat["hit"] is False and repeat["score"] < THRESHOLD, repeat
    async with SQLiteMemory(":memory:", SymmetricEmbedder(E5)) as symmetric:
        cached = cache(symmetric, Model())
        await cached.run(ask(STORED))
        assert found(await cached.run(ask(STORED)))["score"] == pytest.approx(1.0, abs=1e-4)
