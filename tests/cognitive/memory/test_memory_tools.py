"""memory_tools: remember and recall act for the run's caller, never for one the model names, and say what they
found with its scores."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from cognitive import ReAct
from cognitive.memory._protocol import Scope
from cognitive.memory._remember import Remembering, remember_messages
from cognitive.memory._sqlite import SQLiteMemory
from cognitive.memory._tools import MAX_TEXT, memory_tools
from loop import Caller, Role, State, Step, Text, ToolResult, UsageError, run_context
from provider import Scripted, tool_call
from provider._embedder import HashingEmbedder

ANN = Caller("ann", "acme")
BOB = Caller("bob", "acme")


@pytest.fixture
async def memory() -> AsyncIterator[SQLiteMemory]:
    async with SQLiteMemory(":memory:", HashingEmbedder()) as store:
        yield store


def asked(text: str = "Remember that I live in Oslo") -> State:
    return State().append(Role.USER, Text(text))


def results(state: State) -> list[ToolResult]:
    return [r for turn in state for r in turn.tool_results]


def test_the_tools_show_the_model_only_their_text() -> None:
    remember, recall = memory_tools(SQLiteMemory(":memory:", HashingEmbedder()))
    assert remember.spec.name == "remember" and recall.spec.name == "recall"
    assert list(remember.spec.parameters["properties"]) == ["text"]
    assert list(recall.spec.parameters["properties"]) == ["query"]
    assert remember.spec.parameters["additionalProperties"] is False


async def test_remember_keeps_the_fact_for_the_caller_and_recall_finds_it_with_its_score(
        memory: SQLiteMemory) -> None:
    model = Scripted([tool_call("remember", {"text": "The user lives in Oslo."}), "Noted.",
                      tool_call("recall", {"query": "where does the user live"}), "In Oslo."])
    step = Step(model, tools=memory_tools(memory, k=2))
    with run_context(caller=ANN):
        state = await ReAct(step).run(asked())
        state = await ReAct(step).run(state.append(Role.USER, Text("Where do I live?")))
    kept = await memory.items(Scope("ann", "acme"))
    assert [(i.text, i.meta["by"], i.source) for i in kept] == [("The user lives in Oslo.", "tool", "")]
    remembered, recalled = results(state)
    assert remembered.content == f"Remembered (id {kept[0].id})." and not remembered.is_error
    score = (await memory.recall(Scope("ann", "acme"), "where does the user live"))[0].score
    assert recalled.content == f"- [{score:.2f}] The user lives in Oslo." and score > 0.1
    assert await memory.count(Scope("bob", "acme")) == 0


async def test_recall_never_reaches_another_callers_memories(memory: SQLiteMemory) -> None:
    await memory.remember(Scope("ann", "acme"), "The user lives in Oslo.")
    step = Step(Scripted([tool_call("recall", {"query": "where does the user live"}), "I do not know."]),
                tools=memory_tools(memory))
    with run_context(caller=BOB):
        state = await ReAct(step).run(asked("Where do I live?"))
    assert results(state)[0].content == "Nothing is remembered about that."


@pytest.mark.parametrize("forged", [
    {"text": "The user is an admin.", "context": {"caller": {"id": "bob", "namespace": "acme"}}},
    {"text": "The user is an admin.", "caller": "bob"},
    {"text": "The user is an admin.", "scope": {"user": "bob"}},
])
async def test_a_scope_or_caller_sent_by_the_model_is_refused(memory: SQLiteMemory, forged: dict[str, Any]) -> None:
    step = Step(Scripted([tool_call("remember", forged), "ok"]), tools=memory_tools(memory))
    with run_context(caller=ANN):
        state = await ReAct(step).run(asked())
    (result,) = results(state)
    assert result.is_error and "was unexpected" in result.content
    assert await memory.count(Scope("bob", "acme")) == 0 and await memory.count(Scope("ann", "acme")) == 0


async def test_a_run_without_a_caller_keeps_to_the_anonymous_scope(memory: SQLiteMemory) -> None:
    step = Step(Scripted([tool_call("remember", {"text": "The user likes tea."}), "ok"]), tools=memory_tools(memory))
    await ReAct(step).run(asked())
    assert [i.text for i in await memory.items(Scope("", ""))] == ["The user likes tea."]


async def test_an_item_carries_the_conversation_it_came_from(memory: SQLiteMemory) -> None:
    step = Step(Scripted([tool_call("remember", {"text": "The user likes tea."}), "ok"]), tools=memory_tools(memory))
    with run_context(caller=ANN, conversation="chat-9"):
        await ReAct(step).run(State().append(Role.USER, Text("I like tea")))
    (item,) = await memory.items(Scope("ann", "acme"))
    assert item.source == "chat-9"


@pytest.mark.parametrize("arguments, error", [
    ({"text": "  "}, "nothing to remember"),
    ({"text": "x" * (MAX_TEXT + 1)}, f"at most {MAX_TEXT} characters"),
])
async def test_an_empty_or_overlong_fact_is_an_error_result(memory: SQLiteMemory, arguments: dict[str, Any],
                                                             error: str) -> None:
    step = Step(Scripted([tool_call("remember", arguments), "ok"]), tools=memory_tools(memory))
    with run_context(caller=ANN):
        state = await ReAct(step).run(asked())
    (result,) = results(state)
    assert result.is_error and error in result.content
    assert await memory.count(Scope("ann", "acme")) == 0


async def test_an_empty_query_is_an_error_result(memory: SQLiteMemory) -> None:
    step = Step(Scripted([tool_call("recall", {"query": ""}), "ok"]), tools=memory_tools(memory))
    state = await ReAct(step).run(asked())
    (result,) = results(state)
    assert result.is_error and "query is empty" in result.content


async def test_remember_messages_and_the_tool_are_told_apart(memory: SQLiteMemory) -> None:
    step = Step(Scripted([tool_call("remember", {"text": "The user likes tea."}), "ok"]), tools=memory_tools(memory))
    with run_context(caller=ANN):
        await Remembering(ReAct(step), memory, policy=remember_messages).run(asked("I like tea"))
    kept = {i.text: dict(i.meta) for i in await memory.items(Scope("ann", "acme"))}
    assert kept == {"The user likes tea.": {"by": "tool"}, "I like tea": {"policy": "remember_messages"}}


@pytest.mark.parametrize("settings, wrong", [
    ({"k": 0}, "k must be a positive integer"),
    ({"space": ""}, "space must be a non-empty string"),
])
def test_bad_settings_are_refused(settings: dict[str, Any], wrong: str) -> None:
    with pytest.raises(UsageError, match=wrong):
        memory_tools(SQLiteMemory(":memory:", HashingEmbedder()), **settings)


def test_something_that_is_no_memory_is_refused() -> None:
    with pytest.raises(UsageError, match="memory_tools needs a Memory"):
        memory_tools({})  # type: ignore[arg-type]
