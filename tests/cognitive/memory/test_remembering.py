"""Remembering: once a message is answered, its policy decides what to remember, for the run's caller, with the
message's source and time; ExtractFacts asks the model as a charged, visible sub-run; a failing policy never loses
the answer, and a cancelled run leaves nothing of its message remembered."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import pytest

from cognitive import ReAct, SingleShot, WithBudget
from cognitive._pattern import left_open
from cognitive.memory._protocol import MemoryItem, Recalled, Scope
from cognitive.memory._recall import MEMORY_KIND, RecallMemory
from cognitive.memory._remember import EXTRACT_PROMPT, ExtractFacts, Remembering, facts_in, remember_messages
from cognitive.memory._sqlite import SQLiteMemory
from loop import (Budget, Caller, Request, Role, Stamped, State, Step, Text, ToolResult, ToolSpec, TurnCompleted,
                  UsageError, external_tools, run_context)
from provider import Function, Scripted, tool_call
from provider._embedder import HashingEmbedder

ANN = Caller("ann", "acme")
ANN_SCOPE = Scope("ann", "acme")


@pytest.fixture
async def memory() -> AsyncIterator[SQLiteMemory]:
    async with SQLiteMemory(":memory:", HashingEmbedder()) as store:
        yield store


def message(text: str, message_id: str = "msg_ab_1") -> State:
    return State().append(Role.USER, Text(text), meta={"message_id": message_id})


class Model:
    """The chat model answers "Nice to meet you."; asked for facts (its system turn is the extraction prompt), it
    writes ``facts``. Keeps every request."""

    def __init__(self, facts: str = "- The user lives in Oslo.\n- The user has a dog named Rex.") -> None:
        self.facts = facts
        self.requests: list[Request] = []

    def __call__(self, request: Request) -> Any:
        self.requests.append(request)
        if request.turns[0].role is Role.SYSTEM and "durable facts" in request.turns[0].text:
            return self.facts
        return "Nice to meet you."


async def test_remember_messages_keeps_the_message_for_the_caller_with_its_source_and_time(
        memory: SQLiteMemory) -> None:
    agent = Remembering(SingleShot(Step(Scripted(["Nice to meet you."]))), memory, policy=remember_messages)
    before = time.time()
    with run_context(caller=ANN, conversation="chat-7"):
        state = await agent.run(message("I live in Oslo and have a dog named Rex."))
    assert state.answer == "Nice to meet you."
    (item,) = await memory.items(ANN_SCOPE)
    assert item.text == "I live in Oslo and have a dog named Rex." and item.source == "chat-7"
    assert before - 1 <= item.created <= time.time() + 1
    assert dict(item.meta) == {"policy": "remember_messages", "message": "msg_ab_1"}
    assert state.outcome is not None and state.outcome.status == "ok"
    assert state.outcome.data["Remembering"] == {"remembered": [item.id]}
    assert await memory.count(Scope("", "")) == 0


async def test_a_message_already_remembered_word_for_word_is_kept_once(memory: SQLiteMemory) -> None:
    agent = Remembering(SingleShot(Step(Scripted(["Hi."] * 3))), memory, policy=remember_messages)
    with run_context(caller=ANN):
        await agent.run(message("I like tea"))
        second = await agent.run(message("i like  TEA"))
        await agent.run(message("I like coffee"))
    assert sorted(i.text for i in await memory.items(ANN_SCOPE)) == ["I like coffee", "I like tea"]
    assert second.outcome is not None and second.outcome.data["Remembering"] == {"remembered": []}


async def test_extract_facts_asks_the_model_in_a_charged_sub_run_and_remembers_each_fact(
        memory: SQLiteMemory) -> None:
    model = Model()
    step = Step(Function(model), transforms=[RecallMemory(memory)])
    agent = WithBudget(Remembering(SingleShot(step), memory, policy=ExtractFacts(step)), Budget(max_turns=5))
    stamped = step.events.subscribe(stamped=True)
    with run_context(caller=ANN):
        state = await agent.run(message("Hi! I'm in Oslo with my dog Rex."))
    assert state.answer == "Nice to meet you."
    assert sorted(i.text for i in await memory.items(ANN_SCOPE)) == ["The user has a dog named Rex.",
                                                                      "The user lives in Oslo."]
    chat, extraction = model.requests
    assert chat.path == "WithBudget/Remembering/SingleShot"
    assert extraction.path == "WithBudget/Remembering/ExtractFacts"
    assert extraction.options.tool_choice == "none" and extraction.tools == ()
    assert not any(t.kind == MEMORY_KIND for t in extraction.turns)  # asked without the memory view
    assert "Hi! I'm in Oslo with my dog Rex." in extraction.turns[1].text
    assert "Nice to meet you." in extraction.turns[1].text
    assert state.outcome is not None
    assert state.outcome.data["WithBudget"]["spent"]["turns"] == 2  # the extraction is charged too
    paths = [(e.path, e.main) for e in stamped.drain() if isinstance(e, Stamped) and isinstance(e.event, TurnCompleted)]
    assert ("WithBudget/Remembering/ExtractFacts", False) in paths  # published, as a branch
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT]  # never taken for the conversation


async def test_extract_facts_reads_json_and_none(memory: SQLiteMemory) -> None:
    model = Model('```json\n["The user is a nurse.", "The user works nights."]\n```')
    step = Step(Function(model))
    agent = Remembering(SingleShot(step), memory, policy=ExtractFacts(step, max_facts=1))
    with run_context(caller=ANN):
        await agent.run(message("I'm a nurse on nights this week."))
        model.facts = "NONE"
        state = await agent.run(message("What's 2 + 2?"))
    assert [i.text for i in await memory.items(ANN_SCOPE)] == ["The user is a nurse."]  # max_facts=1
    assert state.outcome is not None and state.outcome.data["Remembering"] == {"remembered": []}


@pytest.mark.parametrize("written, facts", [
    ("- The user likes tea.\n* The user is 40.\n1. The user has a cat.", ["The user likes tea.", "The user is 40.",
                                                                         "The user has a cat."]),
    ('["a", "a", " ", "b"]', ["a", "b"]),
    ("NONE", []),
    ("", []),
    ("[not json", ["[not json"]),
])
def test_facts_are_read_from_json_or_lines(written: str, facts: list[str]) -> None:
    assert facts_in(written) == facts


async def test_a_failing_policy_keeps_the_answer_and_says_why(memory: SQLiteMemory) -> None:
    def broken(message: str, answer: str) -> list[str]:
        raise RuntimeError("the extraction model is down")

    agent = Remembering(SingleShot(Step(Scripted(["Hi."]))), memory, policy=broken)
    with run_context(caller=ANN):
        state = await agent.run(message("I like tea"))
    assert state.answer == "Hi." and state.outcome is not None and state.outcome.status == "ok"
    assert state.outcome.data["Remembering"] == {"remember_failed": "RuntimeError: the extraction model is down"}
    assert await memory.count(ANN_SCOPE) == 0


async def test_a_policy_returning_no_list_is_a_failure_not_a_lost_answer(memory: SQLiteMemory) -> None:
    agent = Remembering(SingleShot(Step(Scripted(["Hi."]))), memory, policy=lambda message, answer: message)
    with run_context(caller=ANN):
        state = await agent.run(message("I like tea"))
    assert state.answer == "Hi." and state.outcome is not None
    assert "not a list of texts" in state.outcome.data["Remembering"]["remember_failed"]


class Flaky:
    """A memory over ``inner`` whose ``fail_at``-th remember raises (after the earlier ones were kept)."""

    def __init__(self, inner: SQLiteMemory, fail_at: int) -> None:
        self.inner = inner
        self.fail_at = fail_at
        self.calls = 0

    async def remember(self, scope: Scope, text: str, *, source: str = "",
                       meta: Mapping[str, Any] | None = None) -> MemoryItem:
        self.calls += 1
        if self.calls == self.fail_at:
            raise OSError("disk full")
        return await self.inner.remember(scope, text, source=source, meta=meta)

    async def recall(self, scope: Scope, query: str, *, k: int = 5) -> list[Recalled]:
        return await self.inner.recall(scope, query, k=k)

    async def forget(self, scope: Scope, *ids: str) -> int:
        return await self.inner.forget(scope, *ids)

    async def erase(self, user: str, namespace: str = "") -> int:
        return await self.inner.erase(user, namespace)


async def test_a_memory_failing_part_way_forgets_what_the_message_had_kept(memory: SQLiteMemory) -> None:
    flaky = Flaky(memory, fail_at=2)
    policy = ExtractFacts(Step(Function(Model())))
    agent = Remembering(SingleShot(Step(Scripted(["Hi."]))), flaky, policy=policy)
    with run_context(caller=ANN):
        state = await agent.run(message("I'm in Oslo with Rex."))
    assert flaky.calls == 2 and await memory.count(ANN_SCOPE) == 0
    assert state.answer == "Hi." and state.outcome is not None
    assert state.outcome.data["Remembering"] == {"remember_failed": "OSError: disk full"}


async def test_misuse_inside_the_policy_is_raised(memory: SQLiteMemory) -> None:
    def misused(message: str, answer: str) -> list[str]:
        raise UsageError("wired wrong")

    agent = Remembering(SingleShot(Step(Scripted(["Hi."]))), memory, policy=misused)
    with pytest.raises(UsageError, match="wired wrong"):
        await agent.run(message("I like tea"))


class Slow(Flaky):
    """A memory whose second remember takes a while, and says when it started."""

    def __init__(self, inner: SQLiteMemory) -> None:
        super().__init__(inner, fail_at=0)
        self.second = anyio.Event()

    async def remember(self, scope: Scope, text: str, *, source: str = "",
                       meta: Mapping[str, Any] | None = None) -> MemoryItem:
        self.calls += 1
        if self.calls == 2:
            self.second.set()
            await anyio.sleep(0.05)
        return await self.inner.remember(scope, text, source=source, meta=meta)


async def test_cancelled_while_remembering_leaves_nothing_of_the_message(memory: SQLiteMemory) -> None:
    slow = Slow(memory)
    agent = Remembering(SingleShot(Step(Scripted(["Hi."]))), slow, policy=ExtractFacts(Step(Function(Model()))))
    done: list[State] = []
    with run_context(caller=ANN):
        async with anyio.create_task_group() as group:
            async def run() -> None:
                done.append(await agent.run(message("I'm in Oslo with Rex.")))

            group.start_soon(run)
            await slow.second.wait()
            group.cancel_scope.cancel()
    assert group.cancel_scope.cancelled_caught and not done
    assert slow.calls == 2  # the second remember ran to its end, and both were forgotten
    assert await memory.count(ANN_SCOPE) == 0


async def test_cancelled_while_extracting_or_answering_remembers_nothing(memory: SQLiteMemory) -> None:
    asked = anyio.Event()

    async def hanging(request: Request) -> str:
        asked.set()
        await anyio.sleep_forever()
        raise AssertionError("never answers")

    for chat, facts in ((hanging, Model()), (Model(), hanging)):
        asked = anyio.Event()
        agent = Remembering(SingleShot(Step(Function(chat))), memory, policy=ExtractFacts(Step(Function(facts))))
        with run_context(caller=ANN):
            with anyio.move_on_after(5) as scope:
                async with anyio.create_task_group() as group:
                    group.start_soon(agent.run, message("I'm in Oslo with Rex."))
                    await asked.wait()
                    group.cancel_scope.cancel()
        assert not scope.cancelled_caught
        assert await memory.count(ANN_SCOPE) == 0


async def test_a_run_left_open_remembers_once_its_calls_are_answered(memory: SQLiteMemory) -> None:
    weather = ToolSpec("weather", "The weather in a city.", {"type": "object", "properties": {}})
    script = Scripted([[tool_call("weather", {}, id="w1")], "Take an umbrella."])
    agent = Remembering(ReAct(Step(script)), memory, policy=remember_messages)
    with run_context(caller=ANN), external_tools([weather]):
        left = await agent.run(message("I'm in Oslo; do I need an umbrella?"))
        assert left_open(left) and await memory.count(ANN_SCOPE) == 0
        state = await agent.run(left.append(Role.TOOL, ToolResult("w1", "weather", "rain")))
    assert state.answer == "Take an umbrella."
    assert [i.text for i in await memory.items(ANN_SCOPE)] == ["I'm in Oslo; do I need an umbrella?"]


@pytest.mark.parametrize("build, wrong", [
    (lambda m: Remembering(object(), m, policy=remember_messages), "Remembering needs a Pattern"),  # type: ignore[arg-type]
    (lambda m: Remembering(SingleShot(Step(Scripted([]))), object(), policy=remember_messages),  # type: ignore[arg-type]
     "Remembering needs a Memory"),
    (lambda m: Remembering(SingleShot(Step(Scripted([]))), m, policy="messages"), "policy must be a function"),  # type: ignore[arg-type]
    (lambda m: Remembering(SingleShot(Step(Scripted([]))), m, policy=remember_messages, space=""),
     "space must be a non-empty string"),
    (lambda m: ExtractFacts(object()), "ExtractFacts needs a TurnRunner"),  # type: ignore[arg-type]
    (lambda m: ExtractFacts(Step(Scripted([])), max_facts=0), "max_facts must be a positive integer"),
    (lambda m: ExtractFacts(Step(Scripted([])), prompt=""), "prompt must be a non-empty string"),
    (lambda m: ExtractFacts(Step(Scripted([])), prompt="{max_facts} {other}"), "may use only {max_facts}"),
])
def test_bad_wiring_is_refused(build: Any, wrong: str) -> None:
    with pytest.raises(UsageError, match=wrong):
        build(SQLiteMemory(":memory:", HashingEmbedder()))


def test_the_default_prompt_names_its_cap() -> None:
    assert "{max_facts}" in EXTRACT_PROMPT
