"""ReAct's loop detection: a repeated call is pointed out once, then the run stops degraded."""

import pytest

from cognitive import ReAct
from cognitive.context._exchanges import call_key
from loop import Role, State, Step, Text, ToolCall, UsageError, tool
from provider import Scripted, tool_call

calls: list[str] = []


@tool
async def search(query: str) -> str:
    """Search."""
    calls.append(query)
    return f"results for {query}"


def ask() -> State:
    return State().append(Role.USER, Text("find it"))


async def test_a_repeat_gets_a_note_and_a_further_repeat_stops_the_run_degraded() -> None:
    script = Scripted([tool_call("search", {"query": "cats"}), tool_call("search", {"query": " CATS "}),
                       tool_call("search", {"query": "cats"}), "cats are cats"])
    state = await ReAct(Step(script, tools=[search]), detect_loops=True).run(ask())
    results = [r for t in state for r in t.tool_results]
    assert results[1].content == "results for  CATS "  # the result is never rewritten
    notes = [t for t in state if t.role is Role.SYSTEM]
    assert len(notes) == 1 and notes[0].meta["kind"] == "loop_note" and "already made the exact call" in notes[0].text
    assert state.turns.index(notes[0]) == 5, "the note follows the repeated call's results"
    assert state.answer == "cats are cats" and state.degraded
    assert "search was called 3 times" in state.outcome.reason
    assert script.requests[-1].options.tool_choice == "none"
    # the model saw the note after the result of the repeated call
    assert "already made the exact call" in script.requests[2].turns[-1].text


async def test_without_detection_repeats_run_on() -> None:
    script = Scripted([tool_call("search", {"query": "a"})] * 3 + ["done"])
    state = await ReAct(Step(script, tools=[search])).run(ask())
    assert state.answer == "done" and not state.degraded
    assert not any(t.role is Role.SYSTEM for t in state)


async def test_different_calls_and_calls_of_earlier_messages_do_not_count() -> None:
    step = Step(Scripted([tool_call("search", {"query": "a"}), "first",
                          tool_call("search", {"query": "a"}), tool_call("search", {"query": "b"}), "second"]),
                tools=[search])
    react = ReAct(step, detect_loops=True)
    state = await react.run(ask())
    state = await react.run(state.append(Role.USER, Text("again")))
    assert state.answer == "second" and not state.degraded
    assert not any("already made" in r.content for t in state for r in t.tool_results)


def test_call_keys_ignore_key_order_case_and_whitespace_but_not_values() -> None:
    a = ToolCall("1", "f", '{"x": "Hello  World", "y": 1}')
    b = ToolCall("2", "f", '{"y": 1, "x": "hello world"}')
    c = ToolCall("3", "f", '{"y": 2, "x": "hello world"}')
    assert call_key(a, loose=True) == call_key(b, loose=True) != call_key(c, loose=True)
    assert call_key(a) != call_key(b), "exact keys (the ledger's, result reuse's) keep case and spacing"
    assert call_key(ToolCall("4", "f", "{not json"), loose=True) == call_key(ToolCall("5", "f", "{not   json"), loose=True)
    assert call_key(ToolCall("6", "g", '{"y": 1, "x": "hello world"}'), loose=True) != call_key(b, loose=True)


def test_detect_loops_must_be_a_bool() -> None:
    with pytest.raises(UsageError, match="detect_loops"):
        ReAct(Step(Scripted([])), detect_loops="yes")  # type: ignore[arg-type]
