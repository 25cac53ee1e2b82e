"""SemanticCache on the real local model (multilingual-e5-small through ``provider.LocalE5``) in a SQLiteMemory:
at the default threshold a paraphrase hits, an unrelated question and one just below the threshold miss, users
are kept apart and erased, and a store embedding questions as passages could not tell a repeat from a
different question. With the answer check, a reworded question whose remembered answer fits it hits below
``THRESHOLD``, and questions sharing most words (one at 0.999) are refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from cognitive import SingleShot
from cognitive.memory._semantic_cache import CHECKED_THRESHOLD, THRESHOLD, SemanticCache
from cognitive.memory._sqlite import SQLiteMemory
from loop import Caller, Request, Role, State, Step, Text, run_context
from provider import Function
from provider._e5 import LocalE5
from provider._embedder import SymmetricEmbedder
from tests.benchmarks.paraphrases import ANSWERS

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


class Helpful:
    """A model answering each question of ``ANSWERS`` as written there (others with a fixed sentence)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, request: Request) -> str:
        self.asked.append(request.turns[-1].text)
        return ANSWERS.get(self.asked[-1], "Here is how to do that.")


def checking(memory: SQLiteMemory, model: Helpful) -> SemanticCache:
    step = Step(Function(model))
    return SemanticCache(SingleShot(step), step, memory, agent="helpdesk", embedder=E5)


@pytest.mark.parametrize("stored, reworded", [
    ("Why was my card declined?", "What could cause my card payment to be declined?"),
    ("How do I convert Celsius to Fahrenheit?", "What's the formula to turn Celsius into Fahrenheit?"),
])
async def test_the_answer_check_takes_a_rewording_its_answer_fits_below_the_plain_threshold(
        memory: SQLiteMemory, stored: str, reworded: str) -> None:
    model = Helpful()
    cached = checking(memory, model)
    assert cached.threshold == CHECKED_THRESHOLD
    await cached.run(ask(stored))
    hit = await cached.run(ask(reworded))
    assert found(hit)["hit"] is True and found(hit)["fit"] >= 0 and hit.answer == ANSWERS[stored], found(hit)
    assert found(hit)["score"] < THRESHOLD, "a miss without the check"
    assert model.asked == [stored]


@pytest.mark.parametrize("stored, different", [
    ("How do I convert Celsius to Fahrenheit?", "How do I convert Fahrenheit to Celsius?"),
    ("How do I enable two-factor authentication?", "How do I disable two-factor authentication?"),
    ("How do I upgrade my plan?", "How do I downgrade my plan?"),
])
async def test_the_answer_check_refuses_a_different_question_sharing_most_words(
        memory: SQLiteMemory, stored: str, different: str) -> None:
    model = Helpful()
    cached = checking(memory, model)
    await cached.run(ask(stored))
    refused = await cached.run(ask(different))
    assert found(refused)["hit"] is False and found(refused)["fit"] < 0, found(refused)
    assert found(refused)["score"] >= CHECKED_THRESHOLD and model.asked == [stored, different]
