"""Managed: a ReAct tool loop whose model sees the task and a ledger of facts, not the whole transcript."""

import pytest

from cognitive import AutoContext, Ledger, Managed, SingleShot
from loop import Request, Role, State, Step, Text, UsageError, tool
from provider import Function, tool_call


@tool
async def hop(node: int) -> str:
    """Follow an edge of the chain."""
    return f"node {node} points to node {node + 1}; " + "padding " * 300


def walker(last: int):
    seen: list[Request] = []

    def model(request: Request):
        seen.append(request)
        results = [r for t in request.turns for r in t.tool_results]
        facts = sum(t.text.count("hop(") for t in request.turns if t.role is Role.SYSTEM)
        done = len(results) + facts
        return tool_call("hop", {"node": done}) if done < last else f"the chain ends at node {last}"

    return model, seen


async def test_a_long_chain_is_walked_with_a_flat_prompt_and_the_whole_history_stored() -> None:
    model, seen = walker(10)
    step = Step(Function(model), tools=[hop])
    state = await Managed(step, max_turns=15).run(State().append(Role.USER, Text("Walk the chain.")))
    assert state.answer == "the chain ends at node 10" and not state.degraded
    assert sum(1 for t in state if t.role is Role.TOOL) == 10  # stored history keeps every exchange
    ledgers = [t for r in seen for t in r.turns if t.role is Role.SYSTEM]
    assert ledgers, "the model was shown a ledger"
    sizes = [sum(len(t.text) + sum(len(p.content) for p in t.tool_results) for t in r.turns) for r in seen]
    full = sum(len(t.text) + sum(len(p.content) for p in t.tool_results) for t in state)
    assert max(sizes) < full / 3  # the view is a fraction of the transcript: long results are excerpted


async def test_managed_detects_loops_by_default_and_takes_a_ledger() -> None:
    calls = []

    def model(request: Request):
        calls.append(request)
        return tool_call("hop", {"node": 1}) if len(calls) < 4 else "stuck"

    step = Step(Function(model), tools=[hop])
    state = await Managed(step, view=Ledger(max_result_chars=50)).run(State().append(Role.USER, Text("go")))
    assert state.degraded and "tool loop" in state.outcome.reason


def test_managed_needs_a_step_it_can_derive() -> None:
    with pytest.raises(UsageError, match="Managed needs a loop.Executor"):
        Managed(SingleShot(Step(Function(lambda r: "x"))))
    with pytest.raises(UsageError, match="view must be a transform"):
        Managed(Step(Function(lambda r: "x")), view=object())  # type: ignore[arg-type]


async def test_managed_takes_any_view() -> None:
    model, seen = walker(3)
    step = Step(Function(model), tools=[hop])
    state = await Managed(step, view=AutoContext(max_tool_results=1)).run(State().append(Role.USER, Text("Walk.")))
    assert state.answer == "the chain ends at node 3"
    assert any(t.role is Role.SYSTEM for t in seen[-1].turns)  # past one result, AutoContext showed the ledger
