"""Transforms shape the model's view, sync or async; a token counter tells them how much a view holds."""

from __future__ import annotations

import anyio
import pytest

from loop import Role, State, Step, Text, ToolCall, ToolResult, Turn, UsageError, approx_tokens
from provider import Scripted

HISTORY = (State().append(Role.USER, Text("first question")).append(Role.ASSISTANT, Text("first answer"))
           .append(Role.USER, Text("second question")))


def last_two(state: State) -> State:
    return State(state.turns[-2:], state.meta)


async def recall_note(state: State) -> State:
    await anyio.sleep(0)  # e.g. a look-up in a store
    return state.append(Role.SYSTEM, Text("note recalled"))


async def test_async_and_sync_transforms_compose_in_order_and_history_is_untouched() -> None:
    model = Scripted(["ok"])
    step = Step(model, transforms=[last_two, recall_note])
    state = await step.turn(HISTORY)
    seen = [t.text for t in model.requests[0].turns]
    assert seen == ["first answer", "second question", "note recalled"]
    assert [t.text for t in state.turns] == ["first question", "first answer", "second question", "ok"]
    assert [t.text for t in (await step.view(HISTORY)).turns] == seen


async def test_a_transform_returning_something_else_is_named() -> None:
    async def broken(state: State) -> State:
        return "oops"  # type: ignore[return-value]

    with pytest.raises(UsageError, match="returned 'oops', not a State"):
        await Step(Scripted([]), transforms=[broken]).turn(HISTORY)


def test_transforms_must_be_a_list_of_functions() -> None:
    with pytest.raises(UsageError, match="transforms must be a list"):
        Step(Scripted([]), transforms=last_two)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="a transform must be a function"):
        Step(Scripted([]), transforms=[42])  # type: ignore[list-item]


def test_approx_tokens_counts_every_kind_of_text_and_a_little_per_turn() -> None:
    turns = [Turn(Role.USER, (Text("x" * 40),)),
             Turn(Role.ASSISTANT, (ToolCall("c", "search", '{"q": "' + "y" * 20 + '"}'),)),
             Turn(Role.TOOL, (ToolResult("c", "search", "z" * 8),))]
    assert approx_tokens([]) == 0
    assert approx_tokens(turns[:1]) == 4 + 10
    assert approx_tokens(turns) == 3 * 4 + -(-(40 + 6 + 29 + 8) // 4)
    assert approx_tokens(turns) > approx_tokens(turns[:2]) > approx_tokens(turns[:1])
