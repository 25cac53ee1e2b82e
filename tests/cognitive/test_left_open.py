"""Runs that leave tool calls for the caller (``loop.external_tools``): every pattern returns at once, every wrapper
passes the state on untouched, and running again from the caller's results goes on."""

from __future__ import annotations

import attrs

from cognitive import PatternKind
from cognitive import ReAct, SelfRefine, SingleShot, WithBudget, WithOutput, WithVerification, answer_value
from cognitive.everyday._chain import Chain, Stage
from cognitive._pattern import Pattern, left_open
from cognitive.everyday._router import Router
from loop import (Budget, Options, Role, State, Step, Text, ToolCall, ToolResult, ToolSpec, TurnKind, external_tools,
                  tool)
from provider import Scripted, tool_call
from verifier import FunctionVerifier, Result, failed, passed

START = State().append(Role.USER, Text("Should I take an umbrella in Oslo today?"))
WEATHER = ToolSpec("weather", "The weather in a city, from the caller's app.",
                   {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
CALL = tool_call("weather", {"city": "Oslo"}, id="w1")
RESULT = ToolResult("w1", "weather", "rain all day")


@attrs.frozen
class Advice:
    umbrella: bool


@tool
async def clock() -> str:
    """The time now."""
    return "09:00"


class Recorded:
    """A pattern that keeps every state its inner pattern returned, to tell whether a wrapper changed it."""

    def __init__(self, inner: Pattern) -> None:
        self.inner = inner
        self.returned: list[State] = []

    async def run(self, state: State) -> State:
        out = await self.inner.run(state)
        self.returned.append(out)
        return out


class Checked:
    """A verifier (or critic) that records the answers it was asked about."""

    def __init__(self, verdict: str = "pass") -> None:
        self.seen: list[str | None] = []
        self.verdicts = iter(verdict.split(","))
        self.verifier = FunctionVerifier(self.check, name="checked")

    def check(self, state: State) -> Result:
        self.seen.append(state.answer)
        return passed() if next(self.verdicts) == "pass" else failed("Say whether to take an umbrella.")


def answered(state: State) -> State:
    """``state`` with the caller's result for the weather call appended."""
    assert [c.id for c in state.pending_calls] == ["w1"]
    return state.append(Role.TOOL, RESULT)


def saw_result(request_turns: tuple[object, ...]) -> bool:
    return any(getattr(t, "tool_results", ()) == (RESULT,) for t in request_turns)


def assert_left_open(state: State) -> None:
    assert left_open(state)
    assert state.pending_calls == (ToolCall("w1", "weather", '{"city": "Oslo"}'),)
    assert state.outcome is not None and state.outcome.status == "pending"
    assert "left for the caller to answer: weather" in state.outcome.reason


# -- left_open ---------------------------------------------------------------------------------------------


async def test_left_open_needs_both_the_pending_outcome_and_open_calls() -> None:
    calling = START.append(Role.ASSISTANT, CALL)
    assert not left_open(START)
    assert not left_open(calling), "open calls without a pending outcome are a run cut short, not left open"
    assert left_open(calling.with_outcome("pending", "left for the caller to answer: weather"))
    assert not left_open(calling.append(Role.TOOL, RESULT).with_outcome("pending", "answered since"))
    assert not left_open(calling.with_outcome("degraded", "budget"))


async def test_a_turn_asked_not_to_run_tools_is_left_open_too() -> None:
    step = Step(Scripted([[CALL]]), tools=[clock])
    assert left_open(await step.turn(START, Options(run_tools=False)))


# -- ReAct and SingleShot -----------------------------------------------------------------------------------


async def test_react_returns_as_soon_as_a_turn_leaves_calls_open() -> None:
    script = Scripted([[tool_call("clock", {}, id="c1")], [Text("Let me look."), CALL], "never asked"])
    with external_tools([WEATHER]):
        state = await ReAct(Step(script, tools=[clock])).run(START)
    assert script.used == 2
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert_left_open(state)


async def test_react_runs_the_own_calls_of_the_turn_before_returning() -> None:
    script = Scripted([[tool_call("clock", {}, id="c1"), CALL], "never asked"])
    with external_tools([WEATHER]):
        state = await ReAct(Step(script, tools=[clock])).run(START)
    assert script.used == 1
    assert state[-1].tool_results == (ToolResult("c1", "clock", "09:00"),)
    assert_left_open(state)


async def test_react_goes_on_from_the_callers_results() -> None:
    script = Scripted([[CALL], "Take an umbrella: rain all day."])
    react = ReAct(Step(script))
    with external_tools([WEATHER]):
        left = await react.run(START)
        state = await react.run(answered(left))
    assert saw_result(script.requests[1].turns)
    assert state.answer == "Take an umbrella: rain all day."
    assert state.outcome is None and not left_open(state) and state.pending_calls == ()
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]


async def test_react_may_leave_calls_open_again_after_the_results() -> None:
    again = tool_call("weather", {"city": "Bergen"}, id="w2")
    script = Scripted([[CALL], [again], "never asked"])
    react = ReAct(Step(script))
    with external_tools([WEATHER]):
        state = await react.run(answered(await react.run(START)))
    assert script.used == 2 and left_open(state)
    assert [c.id for c in state.pending_calls] == ["w2"]


async def test_single_shot_writes_no_final_answer_while_calls_are_open() -> None:
    script = Scripted([[tool_call("clock", {}, id="c1"), CALL], "never asked"])
    with external_tools([WEATHER]):
        state = await SingleShot(Step(script, tools=[clock])).run(START)
    assert script.used == 1, "no tool-free final turn"
    assert_left_open(state)


async def test_single_shot_goes_on_from_the_callers_results() -> None:
    script = Scripted([[CALL], "Yes, take one."])
    shot = SingleShot(Step(script))
    with external_tools([WEATHER]):
        state = await shot.run(answered(await shot.run(START)))
    assert saw_result(script.requests[1].turns)
    assert state.answer == "Yes, take one." and state.outcome is None


# -- wrappers pass the state on ----------------------------------------------------------------------------


async def test_with_verification_runs_no_verifier_on_a_state_left_open() -> None:
    script = Scripted([[CALL], "Yes: rain all day."])
    step = Step(script)
    inner = Recorded(ReAct(step))
    checked = Checked("pass")
    wrapped = WithVerification(inner, step, verifiers=[checked.verifier])
    with external_tools([WEATHER]):
        left = await wrapped.run(START)
        assert checked.seen == []
        assert left is inner.returned[0], "returned untouched"
        assert_left_open(left)
        state = await wrapped.run(answered(left))
    assert checked.seen == ["Yes: rain all day."]
    assert saw_result(script.requests[1].turns)
    assert state.outcome is not None and state.outcome.ok
    assert state.outcome.data["WithVerification"] == {"retries": 0, "results": {"checked": "pass"}}


async def test_with_verification_returns_a_retry_that_leaves_calls_open() -> None:
    script = Scripted(["Maybe.", [CALL], "Yes: rain all day."])
    step = Step(script)
    checked = Checked("fail,pass")
    wrapped = WithVerification(ReAct(step), step, verifiers=[checked.verifier], max_retries=1)
    with external_tools([WEATHER]):
        left = await wrapped.run(START)
        assert checked.seen == ["Maybe."], "the retry left calls open: nothing more to verify"
        assert_left_open(left)
        assert left[2].kind == TurnKind.VERIFICATION
        state = await wrapped.run(answered(left))
    assert checked.seen == ["Maybe.", "Yes: rain all day."]
    assert state.answer == "Yes: rain all day." and state.outcome is not None and state.outcome.ok


async def test_with_output_asks_for_no_formatting_turn_while_calls_are_open() -> None:
    script = Scripted([[CALL], "Rain all day, so yes.", '{"umbrella": true}'])
    step = Step(script)
    inner = Recorded(ReAct(step))
    typed: WithOutput[Advice] = WithOutput(inner, step, Advice)
    with external_tools([WEATHER]):
        left = await typed.run(START)
        assert script.used == 1
        assert left is inner.returned[0]
        assert_left_open(left)
        assert not any(t.kind == TurnKind.OUTPUT_FORMAT for t in left)
        state = await typed.run(answered(left))
    assert saw_result(script.requests[1].turns)
    formatting = script.requests[2]
    assert formatting.turns[-1].kind == TurnKind.OUTPUT_FORMAT and formatting.options.tool_choice == "none"
    assert answer_value(state, Advice) == Advice(umbrella=True)


async def test_self_refine_asks_the_critic_nothing_while_calls_are_open() -> None:
    script = Scripted([[CALL], "Yes: rain all day."])
    step = Step(script)
    inner = Recorded(ReAct(step))
    critic = Checked("pass")
    refine = SelfRefine(inner, step, critic.verifier, max_iters=2)
    with external_tools([WEATHER]):
        left = await refine.run(START)
        assert critic.seen == []
        assert left is inner.returned[0]
        assert_left_open(left)
        state = await refine.run(answered(left))
    assert critic.seen == ["Yes: rain all day."]
    assert state.outcome is not None and state.outcome.data["SelfRefine"] == {
        "iterations": 1, "passed": True, "critic": "checked"}


async def test_self_refine_returns_a_revision_that_leaves_calls_open() -> None:
    script = Scripted(["Maybe.", [CALL], "Yes: rain all day."])
    step = Step(script)
    critic = Checked("fail,pass")
    refine = SelfRefine(ReAct(step), step, critic.verifier, max_iters=2)
    with external_tools([WEATHER]):
        left = await refine.run(START)
        assert critic.seen == ["Maybe."]
        assert_left_open(left)
        state = await refine.run(answered(left))
    assert critic.seen == ["Maybe.", "Yes: rain all day."]
    assert state.outcome is not None and state.outcome.ok


async def test_with_budget_writes_no_final_answer_and_keeps_the_calls_open() -> None:
    script = Scripted([[CALL], "Yes: rain all day."])
    step = Step(script)
    inner = Recorded(ReAct(step))
    budgeted = WithBudget(inner, Budget(max_turns=3))
    with external_tools([WEATHER]):
        left = await budgeted.run(START)
        assert script.used == 1
        assert left.turns == inner.returned[0].turns, "no turn added (the budget's report is kept in the outcome)"
        assert_left_open(left)
        assert left.outcome is not None and left.outcome.data["WithBudget"]["spent"] == {"turns": 1}
        state = await budgeted.run(answered(left))
    assert saw_result(script.requests[1].turns)
    assert state.answer == "Yes: rain all day." and state.outcome is not None and state.outcome.ok


async def test_with_budget_keeps_calls_open_when_a_call_of_that_turn_was_refused() -> None:
    script = Scripted([[tool_call("clock", {}, id="c1"), tool_call("clock", {}, id="c2"), CALL],
                       '{"umbrella": true}'])
    step = Step(script, tools=[clock])
    with external_tools([WEATHER]):
        state = await WithOutput(WithBudget(ReAct(step), Budget(max_tool_calls=1)), step, Advice).run(START)
    assert script.used == 1, "no formatting turn while the weather call is open"
    assert left_open(state)


async def test_chain_returns_when_its_last_stage_leaves_calls_open() -> None:
    script = Scripted({"Chain/notes": ["It is autumn."], "Chain/": [[CALL], "never asked"]})
    step = Step(script)
    last = Recorded(ReAct(step))
    chain = Chain(Stage("notes", "Note the season: {input}", step), Stage("advice", "Advise, knowing {notes}", last))
    with external_tools([WEATHER]):
        state = await chain.run(START)
    assert [r.path for r in script.requests] == ["Chain/notes/ReAct", "Chain/ReAct"]
    assert [[s.name for s in r.tools] for r in script.requests] == [[], ["weather"]], "the branch offered none"
    assert state.turns == last.returned[0].turns
    assert_left_open(state)
    # The outputs so far are kept on the answer, for the chain to go on from once the caller has answered.
    assert state.outcome is not None and state.outcome.data["Chain"]["outputs"] == {"notes": "It is autumn."}


async def test_chain_goes_on_from_the_callers_results() -> None:
    script = Scripted({"Chain/notes": ["It is autumn."], "Chain/ReAct": [[CALL], "Yes."]})
    step = Step(script)
    chain = Chain(Stage("notes", "Note the season: {input}", step), Stage("advice", "Advise, knowing {notes}", step))
    with external_tools([WEATHER]):
        state = await chain.run(answered(await chain.run(START)))
    (last,) = [r for r in script.requests if r.path == "Chain/ReAct" and saw_result(r.turns)]
    assert state.answer == "Yes." and state.outcome is not None and state.outcome.ok
    assert state.outcome.data["Chain"]["outputs"] == {"notes": "It is autumn.", "advice": "Yes."}
    assert last is script.requests[-1]


async def test_chain_continues_its_last_stage_without_running_earlier_stages_again() -> None:
    script = Scripted({"Chain/notes": ["It is autumn.", "It is spring."], "Chain/ReAct": [[CALL], "Yes."]})
    step = Step(script)
    chain = Chain(Stage("notes", "Note the season: {input}", step), Stage("advice", "Advise, knowing {notes}", step))
    with external_tools([WEATHER]):
        state = await chain.run(answered(await chain.run(START)))
    assert [r.path for r in script.requests].count("Chain/notes/ReAct") == 1
    assert len([t for t in state if t.kind == PatternKind.STAGE]) == 1


async def test_a_last_stage_without_history_is_a_branch_and_offers_no_external_tools() -> None:
    script = Scripted({"Chain/": ["No umbrella needed."]})
    chain = Chain(Stage("advice", "Advise on: {input}", Step(script), history=False))
    with external_tools([WEATHER]):
        state = await chain.run(START)
    assert [s.name for s in script.requests[0].tools] == []
    assert state.answer == "No umbrella needed." and not left_open(state)


async def test_a_stack_of_wrappers_passes_the_state_up_and_goes_on_from_the_results() -> None:
    script = Scripted([[tool_call("clock", {}, id="c1"), CALL], "Rain all day, so yes.", '{"umbrella": true}'])
    step = Step(script, tools=[clock])
    checked, critic = Checked("pass"), Checked("pass")
    refined = SelfRefine(WithBudget(ReAct(step), Budget(max_turns=5)), step, critic.verifier)
    stack: WithOutput[Advice] = WithOutput(WithVerification(refined, step, verifiers=[checked.verifier]), step, Advice)
    with external_tools([WEATHER]):
        left = await stack.run(START)
        assert (script.used, checked.seen, critic.seen) == (1, [], [])
        assert_left_open(left)
        assert [t.role for t in left] == [Role.USER, Role.ASSISTANT, Role.TOOL]
        state = await stack.run(answered(left))
    assert checked.seen == critic.seen == ["Rain all day, so yes."]
    assert answer_value(state, Advice) == Advice(umbrella=True)
    assert state.pending_calls == () and state.outcome is not None and state.outcome.ok


# -- Router ------------------------------------------------------------------------------------------------


def route(name: str) -> str:
    return f'{{"route": "{name}", "reason": "it fits"}}'


async def test_router_goes_on_down_the_route_it_took_without_routing_again() -> None:
    script = Scripted({"Router/route": [route("lookup")], "Router/lookup": [[CALL], "Take one."],
                       "Router/math": ["never"]})
    step = Step(script)
    router = Router({"math": SingleShot(step), "lookup": ReAct(step)}, step)
    with external_tools([WEATHER]):
        left = await router.run(START)
        assert_left_open(left)
        state = await router.run(answered(left))
    assert [r.path for r in script.requests] == ["Router/route", "Router/lookup/ReAct", "Router/lookup/ReAct"]
    assert saw_result(script.requests[-1].turns)
    assert state.answer == "Take one." and state.outcome is not None and state.outcome.ok
    assert state.outcome.data["Router"] == {"route": "lookup", "reason": "it fits"}


async def test_a_fallback_route_that_leaves_calls_open_stays_open_and_is_degraded_once_it_answers() -> None:
    script = Scripted({"Router/route": ["no idea", "still no idea"], "Router/lookup": [[CALL], "Take one."]})
    step = Step(script)
    router = Router({"math": SingleShot(step), "lookup": ReAct(step)}, step, default="lookup", max_retries=1)
    with external_tools([WEATHER]):
        left = await router.run(START)
        assert_left_open(left)
        state = await router.run(answered(left))
    assert state.answer == "Take one." and state.outcome is not None and state.outcome.status == "degraded"
    assert "default route 'lookup'" in state.outcome.reason
    assert [r.path for r in script.requests].count("Router/route") == 2
