"""``external_tools``: main-line turns offer the caller's tools beside the step's own, and leave their calls open."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import loop
from loop import (Options, Role, State, Step, Text, ToolCall, ToolResult, ToolSpec, UsageError, branch,
                  external_tools, main_line, tool)
from provider import Function, Scripted, tool_call

START = State().append(Role.USER, Text("What is the weather in Oslo, and what is 2 + 3?"))
WEATHER = ToolSpec("weather", "The weather in a city, as the caller's app sees it.",
                   {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
CALENDAR = ToolSpec("calendar", "The user's next meeting.", {"type": "object", "properties": {}})
added: list[tuple[int, int]] = []


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    added.append((a, b))
    return a + b


def names(specs: tuple[ToolSpec, ...]) -> list[str]:
    return [s.name for s in specs]


def weather_call(id: str = "w1") -> ToolCall:
    return tool_call("weather", {"city": "Oslo"}, id=id)


def add_call(id: str = "a1") -> ToolCall:
    return tool_call("add", {"a": 2, "b": 3}, id=id)


# -- what the model is offered ----------------------------------------------------------------------------


async def test_a_main_line_turn_offers_the_external_tools_after_the_steps_own() -> None:
    script = Scripted(["no tools needed"])
    with external_tools([WEATHER, CALENDAR]):
        state = await Step(script, tools=[add]).turn(START)
    assert names(script.requests[0].tools) == ["add", "weather", "calendar"]
    assert script.requests[0].tools[1] == WEATHER, "the spec is offered as the caller gave it"
    assert state.answer == "no tools needed" and state.outcome is None, "a turn that calls none is a plain turn"


async def test_outside_the_block_only_the_steps_own_tools_are_offered() -> None:
    script = Scripted(["inside", "outside"])
    step = Step(script, tools=[add])
    with external_tools([WEATHER]):
        await step.turn(START)
    await step.turn(START)
    assert [names(r.tools) for r in script.requests] == [["add", "weather"], ["add"]]


async def test_a_single_spec_and_any_iterable_are_accepted() -> None:
    script = Scripted(["one", "two"])
    step = Step(script)
    single: Any = WEATHER  # typed Iterable[ToolSpec], but a lone spec is accepted at run time
    with external_tools(single):
        await step.turn(START)
    with external_tools(spec for spec in (CALENDAR, WEATHER)):
        await step.turn(START)
    assert [names(r.tools) for r in script.requests] == [["weather"], ["calendar", "weather"]]


async def test_an_inner_block_replaces_the_outer_ones_tools_and_an_empty_one_offers_none() -> None:
    script = Scripted(["a", "b", "c"])
    step = Step(script)
    with external_tools([WEATHER]):
        with external_tools([CALENDAR]):
            await step.turn(START)
        with external_tools([]):
            await step.turn(START)
        await step.turn(START)
    assert [names(r.tools) for r in script.requests] == [["calendar"], [], ["weather"]]


async def test_scopes_opened_inside_keep_the_tools_and_a_new_main_line_inherits_them() -> None:
    script = Scripted(["a", "b"])
    step = Step(script)
    with external_tools([WEATHER]):
        with loop.scope("Outer"), loop.turn_options(Options(temperature=0.1)):
            await step.turn(START)
        with main_line("Session"):
            await step.turn(START)
    assert [names(r.tools) for r in script.requests] == [["weather"], ["weather"]]
    assert script.requests[0].path == "Outer" and script.requests[0].options.temperature == 0.1


# -- calls left for the caller ------------------------------------------------------------------------------


async def test_an_external_call_is_left_open_with_the_outcome_pending() -> None:
    script = Scripted([[Text("Let me check."), weather_call()]])
    with external_tools([WEATHER]):
        state = await Step(script).turn(START)
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT], "no tool turn: nothing was run"
    assert state.pending_calls == (ToolCall("w1", "weather", '{"city": "Oslo"}'),)
    assert state.outcome is not None and state.outcome.status == "pending"
    assert state.outcome.reason == "left for the caller to answer: weather"
    assert state.answer == "Let me check."


async def test_the_steps_own_calls_of_that_turn_run_and_only_the_external_ones_stay_open() -> None:
    added.clear()
    script = Scripted([[add_call("a1"), weather_call("w1"), tool_call("add", {"a": 4, "b": 5}, id="a2")]])
    with external_tools([WEATHER]):
        state = await Step(script, tools=[add]).turn(START)
    assert sorted(added) == [(2, 3), (4, 5)]  # concurrently, in any order
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    tool_turn = state[2]
    assert [(r.call_id, r.content, r.is_error) for r in tool_turn.tool_results] == [("a1", "5", False),
                                                                                     ("a2", "9", False)]
    assert [c.id for c in state.pending_calls] == ["w1"]
    assert state.outcome is not None and state.outcome.status == "pending"
    assert state.outcome.reason == "left for the caller to answer: weather"
    assert state[1].meta["outcome"]["status"] == "pending", "the outcome is on the answer turn, not the tool turn"


async def test_every_external_tool_called_is_named_in_the_reason() -> None:
    script = Scripted([[weather_call("w1"), tool_call("calendar", {}, id="c1")]])
    with external_tools([WEATHER, CALENDAR]):
        state = await Step(script).turn(START)
    assert [c.id for c in state.pending_calls] == ["w1", "c1"]
    assert state.outcome is not None and state.outcome.reason == "left for the caller to answer: weather, calendar"


async def test_an_unknown_tool_called_beside_an_external_one_gets_an_error_result() -> None:
    script = Scripted([[weather_call("w1"), tool_call("teleport", {}, id="t1")]])
    with external_tools([WEATHER]):
        state = await Step(script, tools=[add]).turn(START)
    (result,) = state[-1].tool_results
    assert result.call_id == "t1" and result.is_error
    assert "unknown tool 'teleport'" in result.content and "add" in result.content
    assert [c.id for c in state.pending_calls] == ["w1"]


async def test_answering_the_open_calls_lets_the_model_see_the_results() -> None:
    script = Scripted([[weather_call("w1")], "It is 12 degrees in Oslo."])
    step = Step(script)
    with external_tools([WEATHER]):
        left = await step.turn(START)
        answered = left.append(Role.TOOL, ToolResult("w1", "weather", "12 degrees, cloudy"))
        assert answered.pending_calls == ()
        state = await step.turn(answered)
    seen = script.requests[1].turns
    assert seen[-1].tool_results == (ToolResult("w1", "weather", "12 degrees, cloudy"),)
    assert seen[-2].tool_calls == (ToolCall("w1", "weather", '{"city": "Oslo"}'),)
    assert state.answer == "It is 12 degrees in Oslo." and state.outcome is None


async def test_calls_to_the_steps_own_tools_alone_run_as_usual() -> None:
    added.clear()
    script = Scripted([[add_call()]])
    with external_tools([WEATHER]):
        state = await Step(script, tools=[add]).turn(START)
    assert added == [(2, 3)]
    assert state.pending_calls == () and state.outcome is None
    assert state[-1].tool_results == (ToolResult("a1", "add", "5"),)


async def test_with_tools_turned_off_the_calls_get_the_disabled_error_and_are_not_left_open() -> None:
    added.clear()
    script = Scripted([[weather_call("w1"), add_call("a1")]])
    with external_tools([WEATHER]):
        state = await Step(script, tools=[add]).turn(START, Options(tool_choice="none"))
    assert added == []
    assert state.pending_calls == () and state.outcome is None
    results = state[-1].tool_results
    assert [r.call_id for r in results] == ["w1", "a1"]
    assert all(r.is_error and "tools are disabled for this turn" in r.content for r in results)


async def test_a_turn_asked_not_to_run_tools_leaves_every_call_pending_as_before() -> None:
    added.clear()
    script = Scripted([[weather_call("w1"), add_call("a1")]])
    with external_tools([WEATHER]):
        state = await Step(script, tools=[add]).turn(START, Options(run_tools=False))
    assert added == []
    assert [c.id for c in state.pending_calls] == ["w1", "a1"]
    assert state.outcome is not None and state.outcome.status == "pending"
    assert "the turn was asked not to run tools" in state.outcome.reason


# -- branches never offer them ---------------------------------------------------------------------------


async def test_a_branch_offers_only_the_steps_own_tools_and_an_external_name_there_is_unknown() -> None:
    script = Scripted([[weather_call("w1")]])
    with external_tools([WEATHER]):
        with branch("draft"):
            state = await Step(script, tools=[add]).turn(START)
    assert names(script.requests[0].tools) == ["add"]
    assert state.pending_calls == () and state.outcome is None
    (result,) = state[-1].tool_results
    assert result.is_error and "unknown tool 'weather'" in result.content


async def test_a_branch_may_hold_a_tool_of_the_same_name_as_an_external_one() -> None:
    @tool(name="weather")
    async def own_weather(city: str) -> str:
        """The weather, from the step's own service."""
        return f"sunny in {city}"

    script = Scripted([[weather_call("w1")]])
    with external_tools([WEATHER]), branch("helper"):
        state = await Step(script, tools=[own_weather]).turn(START)
    assert state[-1].tool_results == (ToolResult("w1", "weather", "sunny in Oslo"),)


async def test_samples_run_one_by_one_are_branches_and_offer_no_external_tools() -> None:
    asked: list[list[str]] = []

    def model(request: loop.Request) -> str:
        asked.append(names(request.tools))
        return "an answer"

    with external_tools([WEATHER]):
        fanned = await Step(_NoChoices(model), tools=[add]).sample(START, 2)
    assert [s.answer for s in fanned] == ["an answer", "an answer"]
    assert asked == [["add"], ["add"]]


class _NoChoices:
    """A provider without several choices per request, so ``sample`` runs one turn per sample."""

    def __init__(self, fn: Any) -> None:
        self._inner = Function(fn)

    def stream(self, request: loop.Request) -> loop.DeltaStream:
        return self._inner.stream(request)


async def test_the_native_sample_request_offers_no_external_tools() -> None:
    script = Scripted(["x", "y"])
    with external_tools([WEATHER]):
        await Step(script, tools=[add]).sample(START, 2)
    assert [names(r.tools) for r in script.requests] == [["add"]]
    assert script.requests[0].options.n == 2


async def test_an_agent_run_inside_a_tool_is_not_offered_them() -> None:
    inner_script = Scripted(["inner answer"])
    inner = Step(inner_script)

    @tool
    async def consult(question: str) -> str:
        """Ask a helper agent."""
        state = await inner.turn(State().append(Role.USER, Text(question)))
        return state.answer or ""

    script = Scripted([[tool_call("consult", {"question": "why?"}, id="q1")], "done"])
    step = Step(script, tools=[consult])
    with external_tools([WEATHER]):
        state = await step.turn(START)
    assert names(script.requests[0].tools) == ["consult", "weather"]
    assert names(inner_script.requests[0].tools) == [], "the tool's agent runs in a branch"
    assert state[-1].tool_results == (ToolResult("q1", "consult", "inner answer"),)


async def test_a_task_the_main_line_does_not_own_is_a_branch() -> None:
    script = Scripted(["owner", "other task"])
    step = Step(script)
    with main_line(), external_tools([WEATHER]):
        await step.turn(START)
        async with anyio.create_task_group() as group:
            group.start_soon(step.turn, START)
    assert [names(r.tools) for r in script.requests] == [["weather"], []]


# -- misuse -----------------------------------------------------------------------------------------------


async def test_a_name_shared_with_a_steps_own_tool_raises_when_the_turn_runs() -> None:
    clash = ToolSpec("add", "The caller's own adder.", {"type": "object"})
    script = Scripted(["never sent"])
    block = external_tools([clash, WEATHER])  # nothing is checked against a step yet
    with block:
        with pytest.raises(UsageError, match=r"share names with this step's own tools: 'add'"):
            await Step(script, tools=[add]).turn(START)
    assert script.used == 0 and script.requests == [], "the model was never asked"


async def test_a_name_clash_does_not_matter_in_a_branch_or_for_a_step_without_that_tool() -> None:
    clash = ToolSpec("add", "The caller's own adder.", {"type": "object"})
    script = Scripted(["branch", "derived"])
    step = Step(script, tools=[add])
    with external_tools([clash]):
        with branch("b"):
            await step.turn(START)
        await step.derive(tools=[]).turn(START)
    assert [names(r.tools) for r in script.requests] == [["add"], ["add"]]


def test_a_name_given_twice_is_refused_when_the_block_is_made() -> None:
    other = ToolSpec("weather", "Another weather tool.", {"type": "object"})
    with pytest.raises(UsageError, match=r"'weather' is given twice"):
        external_tools([WEATHER, CALENDAR, other])


@pytest.mark.parametrize("bad", ["weather", {"weather": WEATHER}, [WEATHER, "calendar"], [add]],
                         ids=["string", "mapping", "mixed", "tool"])
def test_values_that_are_not_tool_specs_are_refused(bad: Any) -> None:
    with pytest.raises(UsageError, match="external_tools takes loop.ToolSpec values"):
        external_tools(bad)
    assert loop.current_scope().external == (), "a refused block leaves the scope as it was"


@pytest.mark.parametrize("bad", [5, None], ids=["int", "none"])
def test_a_value_that_is_not_iterable_is_refused_as_misuse(bad: Any) -> None:
    with pytest.raises(UsageError, match="external_tools takes loop.ToolSpec values"):
        external_tools(bad)
