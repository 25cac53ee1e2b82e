"""ReAct, SingleShot, react_factory and new_turn_processor."""

import functools

import pytest

from cognitive import Pattern, ReAct, SingleShot, new_turn_processor, react_factory
from loop import Options, Role, State, Step, Text, UsageError, tool
from provider import Scripted, tool_call


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def ask(text: str = "question") -> State:
    return State().append(Role.USER, Text(text))


async def test_react_runs_until_the_model_answers_without_tools() -> None:
    script = Scripted([tool_call("lookup", {"key": "a"}), tool_call("lookup", {"key": "b"}), "a and b found"])
    state = await ReAct(Step(script, tools=[lookup])).run(ask())
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT, Role.TOOL,
                                       Role.ASSISTANT]
    assert state.answer == "a and b found"
    assert [r.content for t in state for r in t.tool_results] == ["value of a", "value of b"]
    assert not state.degraded and script.remaining == 0


async def test_react_at_the_cap_forces_a_tool_free_answer_and_marks_the_run_degraded() -> None:
    script = Scripted([tool_call("lookup", {"key": "x"})] * 3 + ["best effort answer"])
    state = await ReAct(Step(script, tools=[lookup]), max_turns=3).run(ask())
    assert state.answer == "best effort answer"
    assert state.degraded
    assert "max_turns=3" in state.outcome.reason
    assert [r.options.tool_choice for r in script.requests] == [None, None, None, "none"]


async def test_a_tool_call_in_the_forced_final_turn_is_answered_with_an_error() -> None:
    script = Scripted([tool_call("lookup", {"key": "x"}), tool_call("lookup", {"key": "y"})])
    state = await ReAct(Step(script, tools=[lookup]), max_turns=1).run(ask())
    final = state.last
    assert final is not None and final.role is Role.TOOL
    (result,) = final.tool_results
    assert result.is_error and "disabled" in result.content
    assert state.degraded and not state.pending_calls


async def test_single_shot_runs_one_turn() -> None:
    script = Scripted(["the answer", "never asked for"])
    state = await SingleShot(Step(script, tools=[lookup])).run(ask())
    assert len(script.requests) == 1
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT] and state.answer == "the answer"


async def test_single_shot_writes_the_answer_with_tools_off_after_a_turn_that_called_them() -> None:
    script = Scripted([tool_call("lookup", {"key": "k"}), "k has a value", "never asked for"])
    state = await SingleShot(Step(script, tools=[lookup])).run(ask())
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert state.answer == "k has a value" and not state.degraded
    assert [r.options.tool_choice for r in script.requests] == [None, "none"]


async def test_patterns_satisfy_the_protocol() -> None:
    step = Step(Scripted([]))
    assert isinstance(ReAct(step), Pattern)
    assert isinstance(SingleShot(step), Pattern)


@pytest.mark.parametrize("max_turns", [0, -1, 1.5, True, "3"])
def test_react_rejects_a_bad_max_turns(max_turns: object) -> None:
    with pytest.raises(UsageError, match="max_turns"):
        ReAct(Step(Scripted([])), max_turns=max_turns)  # type: ignore[arg-type]


@pytest.mark.parametrize("pattern", [ReAct, SingleShot])
def test_patterns_reject_something_that_is_not_a_turn_runner(pattern: type) -> None:
    with pytest.raises(UsageError, match="TurnRunner"):
        pattern(object())


async def test_turn_processor_runs_the_factory_pattern_for_each_message() -> None:
    step = Step(Scripted(["first answer", tool_call("lookup", {"key": "z"}), "second answer"]), tools=[lookup])
    process = new_turn_processor(react_factory)
    state = await process(step, ask("one"))
    assert state.answer == "first answer"
    state = await process(step, state.append(Role.USER, Text("two")))
    assert state.answer == "second answer"
    assert [t.text for t in state if t.role is Role.USER] == ["one", "two"]


async def test_react_factory_settings_bind_with_partial() -> None:
    pattern = functools.partial(react_factory, max_turns=2)(Step(Scripted([])))
    assert isinstance(pattern, ReAct) and pattern.max_turns == 2


async def test_turn_processor_rejects_a_factory_that_returns_no_pattern() -> None:
    process = new_turn_processor(lambda executor: "not a pattern")
    with pytest.raises(UsageError, match="not a Pattern"):
        await process(Step(Scripted([])), ask())


def test_new_turn_processor_rejects_a_non_callable() -> None:
    with pytest.raises(UsageError, match="factory"):
        new_turn_processor("react")  # type: ignore[arg-type]


async def test_react_stops_at_calls_deliberately_left_pending() -> None:
    ran: list[str] = []

    @tool
    async def delete(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return "deleted"

    model = Scripted([tool_call("delete", {"path": "b.txt"})])
    state = await ReAct(Step(model, tools=[delete], options=Options(run_tools=False))).run(
        State().append(Role.USER, Text("delete b.txt")))
    assert ran == [] and len(model.requests) == 1 and len(state.pending_calls) == 1
    assert state.outcome is not None and state.outcome.status == "pending"
