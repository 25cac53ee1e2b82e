"""RecallMemory: what is remembered about the caller reaches the model as one system turn just before the message it
answers, on every model turn of a run, and is never stored; scoped by caller, cut by k and min_score, recalled once
per message, and a failing store does not stop the turn."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from cognitive import ReAct, SingleShot
from cognitive.memory._protocol import MemoryItem, Recalled, Scope
from cognitive.memory._recall import HEADER, MEMORY_KIND, RecallMemory, is_memory_turn
from cognitive.memory._sqlite import SQLiteMemory
from loop import Caller, Request, Role, State, Step, Text, Turn, UsageError, run_context, tool
from provider import Function, tool_call
from provider._embedder import HashingEmbedder

ANN = Caller("ann", "acme")
BOB = Caller("bob", "acme")


@pytest.fixture
async def memory() -> AsyncIterator[SQLiteMemory]:
    async with SQLiteMemory(":memory:", HashingEmbedder()) as store:
        yield store


class Fixed:
    """A memory that recalls the items it was given, with their scores, and counts the recalls."""

    def __init__(self, *found: tuple[str, float]) -> None:
        self.found = [Recalled(MemoryItem(f"id{i}", Scope("ann", "acme"), text), score)
                      for i, (text, score) in enumerate(found)]
        self.recalls: list[tuple[Scope, str, int]] = []

    async def remember(self, scope: Scope, text: str, *, source: str = "",
                       meta: Mapping[str, Any] | None = None) -> MemoryItem:
        raise AssertionError("a view never remembers")

    async def recall(self, scope: Scope, query: str, *, k: int = 5) -> list[Recalled]:
        self.recalls.append((scope, query, k))
        return self.found[:k]


class Broken(Fixed):
    async def recall(self, scope: Scope, query: str, *, k: int = 5) -> list[Recalled]:
        raise OSError("the disk is gone")


class Model:
    """Answers with a lookup first when it has tools, then "done"; keeps every request."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    def __call__(self, request: Request) -> Any:
        self.requests.append(request)
        since = request.turns[max(i for i, t in enumerate(request.turns) if t.role is Role.USER):]
        if request.tools and not any(t.role is Role.TOOL for t in since):
            return tool_call("lookup", {"key": "weather"})
        return "done"


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"{key}: sunny"


def conversation() -> State:
    return (State().append(Role.SYSTEM, Text("You are helpful."))
            .append(Role.USER, Text("Hello"))
            .append(Role.ASSISTANT, Text("Hi!"))
            .append(Role.USER, Text("Where do I live and what is the weather?")))


def memory_turns(turns: tuple[Turn, ...]) -> list[int]:
    return [i for i, t in enumerate(turns) if t.kind == MEMORY_KIND]


async def test_the_recalled_items_are_one_system_turn_just_before_the_message_on_every_model_turn(
        memory: SQLiteMemory) -> None:
    fact = await memory.remember(Scope("ann", "acme"), "I live in Oslo")
    model = Model()
    step = Step(Function(model), tools=[lookup], transforms=[RecallMemory(memory)])
    start = conversation()
    with run_context(caller=ANN):
        done = await ReAct(step).run(start)
    assert len(model.requests) == 2  # the lookup, then the answer
    for request in model.requests:
        turns = request.turns
        assert memory_turns(turns) == [3]  # one memory turn, right before the newest user message
        shown = turns[3]
        assert shown.role is Role.SYSTEM and turns[4].role is Role.USER
        assert shown.text == f"{HEADER}\n- I live in Oslo"
        assert shown.meta["items"] == [fact.id]
        assert list(turns[:3]) == list(start.turns[:3])  # nothing before it changes
        assert list(turns[4:]) == list(done.turns[3:3 + len(turns) - 4])  # nor after it: the run's own turns
    assert not memory_turns(done.turns)  # a view: the conversation never holds it
    assert done.turns[:4] == start.turns and done.answer == "done"


async def test_the_view_leaves_the_state_it_is_given_as_it_was(memory: SQLiteMemory) -> None:
    await memory.remember(Scope("ann", "acme"), "I live in Oslo")
    start = conversation()
    with run_context(caller=ANN):
        view = await RecallMemory(memory)(start)
        again = await RecallMemory(memory)(view)
    assert len(view) == len(start) + 1 and memory_turns(view.turns) == [3]
    assert again is view  # shown twice, it changes nothing
    assert not memory_turns(start.turns) and len(start) == 4
    assert view.meta == start.meta


async def test_each_caller_sees_only_their_own_memories(memory: SQLiteMemory) -> None:
    await memory.remember(Scope("ann", "acme"), "I live in Oslo")
    await memory.remember(Scope("bob", "acme"), "I live in Lima")
    await memory.remember(Scope("ann", "other"), "I live in Rome")  # the same id in another namespace
    recall = RecallMemory(memory)
    start = conversation()
    shown = {}
    for caller in (ANN, BOB, Caller("ann", "other"), None):
        with run_context(caller=caller):
            view = await recall(start)
        shown[caller.namespace + "/" + caller.id if caller else "nobody"] = [
            t.text.splitlines()[1:] for t in view if is_memory_turn(t)]
    assert shown == {"acme/ann": [["- I live in Oslo"]], "acme/bob": [["- I live in Lima"]],
                     "other/ann": [["- I live in Rome"]], "nobody": []}


async def test_k_items_best_first(memory: SQLiteMemory) -> None:
    ann = Scope("ann", "acme")
    for text in ("I live in Oslo", "I work as a nurse", "I like tea", "my dog is called Rex", "I live near a lake"):
        await memory.remember(ann, text)
    with run_context(caller=ANN):
        view = await RecallMemory(memory, k=2)(State().append(Role.USER, Text("where do I live")))
    lines = view[0].text.splitlines()[1:]
    assert lines == ["- I live in Oslo", "- I live near a lake"]
    assert len(view[0].meta["items"]) == 2


async def test_items_below_min_score_are_left_out_and_none_left_shows_nothing() -> None:
    fixed = Fixed(("I live in Oslo", 0.8), ("I like tea", 0.3), ("I have a dog", 0.1))
    start = State().append(Role.USER, Text("where do I live"))
    with run_context(caller=ANN):
        view = await RecallMemory(fixed, min_score=0.3)(start)
        nothing = await RecallMemory(fixed, min_score=0.9)(start)
    assert view[0].text.splitlines()[1:] == ["- I live in Oslo", "- I like tea"]
    assert view[0].meta["items"] == ["id0", "id1"]
    assert nothing is start


async def test_no_user_message_or_nothing_remembered_leaves_the_state_unchanged(memory: SQLiteMemory) -> None:
    recall = RecallMemory(memory)
    instructions = State().append(Role.SYSTEM, Text("You are helpful."))
    blank = State().append(Role.USER, Text("   "))
    asked = State().append(Role.USER, Text("where do I live"))
    with run_context(caller=ANN):
        assert await recall(instructions) is instructions
        assert await recall(blank) is blank
        assert await recall(asked) is asked  # nothing remembered yet


async def test_a_run_recalls_once_per_message_and_caller() -> None:
    fixed = Fixed(("I live in Oslo", 0.8))
    model = Model()
    step = Step(Function(model), tools=[lookup], transforms=[RecallMemory(fixed, k=3)])
    start = conversation()
    with run_context(caller=ANN):
        done = await ReAct(step).run(start)
    assert len(model.requests) == 2 and len(fixed.recalls) == 1
    assert fixed.recalls == [(Scope("ann", "acme"), "Where do I live and what is the weather?", 3)]
    with run_context(caller=BOB):  # the same message object, another caller: recalled for that caller
        await ReAct(step).run(start)
    assert [s.user for s, _, _ in fixed.recalls] == ["ann", "bob"]
    with run_context(caller=ANN):  # a new message with the same words: a new recall
        await SingleShot(step).run(done.append(Role.USER, Text("Where do I live and what is the weather?")))
    assert len(fixed.recalls) == 3
    # a conversation read back from a store holds new turn objects: recalled afresh
    with run_context(caller=ANN):
        await SingleShot(step).run(State.from_json(start.to_json()))
    assert len(fixed.recalls) == 4


async def test_a_failing_recall_lets_the_turn_go_on_without_memories() -> None:
    model = Model()
    step = Step(Function(model), transforms=[RecallMemory(Broken())])
    with run_context(caller=ANN):
        done = await SingleShot(step).run(conversation())
    assert done.answer == "done"
    assert not memory_turns(model.requests[0].turns)


@pytest.mark.parametrize("settings, wrong", [
    ({"k": 0}, "k must be a positive integer"),
    ({"k": True}, "k must be a positive integer"),
    ({"min_score": 2}, "min_score must be a number from -1 to 1"),
    ({"min_score": "high"}, "min_score must be a number from -1 to 1"),
    ({"space": ""}, "space must be a non-empty string"),
    ({"header": " "}, "header must be a non-empty string"),
])
def test_bad_settings_are_refused(settings: dict[str, Any], wrong: str) -> None:
    with pytest.raises(UsageError, match=wrong):
        RecallMemory(Fixed(), **settings)


def test_something_that_cannot_recall_is_refused() -> None:
    with pytest.raises(UsageError, match="RecallMemory needs a Memory"):
        RecallMemory(object())  # type: ignore[arg-type]
