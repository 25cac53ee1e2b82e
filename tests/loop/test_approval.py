"""Approval: gated tools' calls wait for a person, left open on the main line or asked of the run's approver."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from cognitive import ReAct
from loop import (ApprovalMismatch, Caller, Decision, RunContext, Role, State, Step, Text, ToolCall, ToolDenied,
                  ToolPipeline, UsageError, answer_approvals, approving, awaiting_approval, branch, main_line,
                  require_approval, run_context, tool)
from provider import Scripted, tool_call

START = State().append(Role.USER, Text("Pay Ada 250 and tell me the time."))
paid: list[tuple[str, int]] = []


@tool(needs_approval=True)
async def pay(to: str, amount: int) -> str:
    """Pay someone."""
    paid.append((to, amount))
    return f"paid {to} {amount}"


@tool
async def clock() -> str:
    """The time."""
    return "12:00"


def large(context: RunContext[Any], name: str, arguments: Mapping[str, Any]) -> bool:
    """Payments over 100 need approval, except for an admin."""
    caller = context.caller
    return arguments["amount"] > 100 and not (caller is not None and caller.claims.get("role") == "admin")


@tool(needs_approval=large)
async def pay_some(to: str, amount: int) -> str:
    """Pay someone, asking first when it is a lot."""
    paid.append((to, amount))
    return f"paid {to} {amount}"


def pay_call(id: str = "p1", amount: int = 250, name: str = "pay") -> ToolCall:
    return tool_call(name, {"to": "Ada", "amount": amount}, id=id)


@pytest.fixture(autouse=True)
def fresh() -> None:
    paid.clear()


async def test_a_scripts_main_line_leaves_a_gated_call_open_and_runs_the_others() -> None:
    script = Scripted([[pay_call(), tool_call("clock", {}, id="c1")]])
    state = await Step(script, tools=[pay, clock]).turn(START)
    assert paid == [], "nothing is paid before a person says so"
    assert [c.id for c in awaiting_approval(state)] == ["p1"]
    assert [(r.call_id, r.content) for r in state[-1].tool_results] == [("c1", "12:00")]
    assert state.outcome is not None and state.outcome.status == "pending"
    assert state.outcome.reason == "waiting for approval: pay"
    assert state.outcome.data["approval"]["calls"] == ["p1"]
    assert isinstance(state.outcome.data["approval"]["asked_at"], float)


async def test_an_approved_call_runs_and_the_pattern_goes_on_from_its_result() -> None:
    script = Scripted([[pay_call()], "Done: Ada has 250."])
    step = Step(script, tools=[pay])
    agent = ReAct(step)
    waiting = await agent.run(START)
    assert [c.name for c in awaiting_approval(waiting)] == ["pay"]
    with run_context(caller=Caller("grace")):
        answered = await answer_approvals(step, waiting, [Decision.approve("p1")])
    assert paid == [("Ada", 250)]
    assert answered[-1].role is Role.TOOL and answered[-1].tool_results[0].content == "paid Ada 250"
    assert answered[-1].meta["approvals"] == {"p1": {"approved": True, "reason": "", "by": "grace"}}
    assert awaiting_approval(answered) == ()
    final = await agent.run(answered)
    assert final.answer == "Done: Ada has 250." and (final.outcome is None or final.outcome.ok)


async def test_a_denied_call_is_an_error_result_the_model_reads() -> None:
    script = Scripted([[pay_call()], "I could not pay."])
    step = Step(script, tools=[pay])
    waiting = await ReAct(step).run(START)
    answered = await answer_approvals(step, waiting, [Decision.deny("p1", "too much")])
    final = await ReAct(step).run(answered)
    assert paid == []
    result = answered[-1].tool_results[0]
    assert result.is_error and result.content == "error: the user denied this call: too much"
    assert "the user denied this call: too much" in str(script.requests[-1].turns[-1].parts[0])
    assert final.answer == "I could not pay."


async def test_decisions_must_answer_exactly_the_waiting_calls() -> None:
    script = Scripted([[pay_call("p1"), pay_call("p2", 300)]])
    step = Step(script, tools=[pay])
    waiting = await step.turn(START)
    assert [c.id for c in awaiting_approval(waiting)] == ["p1", "p2"], "calls of one turn are asked together"
    with pytest.raises(ApprovalMismatch, match="the calls waiting for approval are: p1, p2"):
        await answer_approvals(step, waiting, [Decision.approve("p1")])
    with pytest.raises(ApprovalMismatch, match="decided twice"):
        await answer_approvals(step, waiting, [Decision.approve("p1"), Decision.deny("p1"), Decision.deny("p2")])
    with pytest.raises(ApprovalMismatch, match="no tool call of this conversation is waiting"):
        await answer_approvals(step, START, [Decision.approve("p1")])
    with pytest.raises(UsageError, match="loop.Decision"):
        await answer_approvals(step, waiting, ["p1"])  # type: ignore[list-item]
    assert paid == []


async def test_a_policy_decides_per_call_from_the_caller_and_the_arguments() -> None:
    small = Scripted([[pay_call(amount=20, name="pay_some")]])
    state = await Step(small, tools=[pay_some]).turn(START)
    assert awaiting_approval(state) == () and paid == [("Ada", 20)], "a small payment runs at once"
    big = Scripted([[pay_call(amount=500, name="pay_some")]])
    state = await Step(big, tools=[pay_some]).turn(START)
    assert [c.id for c in awaiting_approval(state)] == ["p1"] and paid == [("Ada", 20)]
    admin = Scripted([[pay_call(amount=500, name="pay_some")]])
    with run_context(caller=Caller("root", claims={"role": "admin"})):
        state = await Step(admin, tools=[pay_some]).turn(START)
    assert awaiting_approval(state) == () and paid[-1] == ("Ada", 500), "the policy sees who is asking"


async def test_a_policy_that_raises_counts_as_needing_approval() -> None:
    def broken(context: RunContext[Any], name: str, arguments: Mapping[str, Any]) -> bool:
        raise RuntimeError("cannot tell")

    gated = require_approval(clock, when=broken)
    state = await Step(Scripted([[tool_call("clock", {}, id="c1")]]), tools=gated).turn(START)
    assert [c.id for c in awaiting_approval(state)] == ["c1"]


async def test_require_approval_gates_any_tool_and_keeps_what_it_is() -> None:
    @tool(timeout=3)
    async def erase(path: str) -> str:
        """Erase a file."""
        return f"erased {path}"

    gated = require_approval([erase, clock])
    assert [t.spec for t in gated] == [erase.spec, clock.spec]
    assert ToolPipeline(gated)._timeouts["erase"] == 3, "the tool's own time limit is kept"
    state = await Step(Scripted([[tool_call("erase", {"path": "/tmp/x"}, id="e1")]]), tools=gated).turn(START)
    assert [c.name for c in awaiting_approval(state)] == ["erase"]


async def test_an_approver_decides_live_where_it_is_given() -> None:
    asked: list[tuple[str, ...]] = []

    async def person(calls: tuple[ToolCall, ...]) -> list[Decision]:
        asked.append(tuple(c.id for c in calls))
        return [Decision.approve(c.id) if c.id == "p1" else Decision.deny(c.id, "no") for c in calls]

    script = Scripted([[pay_call("p1"), pay_call("p2", 300), tool_call("clock", {}, id="c1")]])
    with approving(person):
        state = await Step(script, tools=[pay, clock]).turn(START)
    assert asked == [("p1", "p2")], "the waiting calls are asked together, once"
    assert paid == [("Ada", 250)] and awaiting_approval(state) == ()
    assert [(r.call_id, r.is_error) for r in state[-1].tool_results] == [("p1", False), ("p2", True), ("c1", False)]
    assert state[-1].tool_results[1].content == "error: the user denied this call: no"


async def test_a_recorded_main_line_leaves_calls_open_even_with_an_approver() -> None:
    recorded: list[State] = []

    async def record(state: State) -> None:
        recorded.append(state)

    async def person(calls: tuple[ToolCall, ...]) -> list[Decision]:
        raise AssertionError("a session's conversation keeps its calls open for a durable answer")

    with approving(person), main_line(recorder=record):
        state = await Step(Scripted([[pay_call()]]), tools=[pay]).turn(START)
    assert [c.id for c in awaiting_approval(state)] == ["p1"]
    assert awaiting_approval(recorded[-1]) != (), "the store is handed the state that waits"


async def test_a_branch_with_nobody_to_ask_is_denied() -> None:
    with branch("sample 1"):
        state = await Step(Scripted([[pay_call()]]), tools=[pay]).turn(START)
    result = state[-1].tool_results[0]
    assert result.is_error and "nobody can be asked here" in result.content and paid == []


async def test_a_value_wanted_itself_raises_when_denied() -> None:
    pipeline = ToolPipeline([pay])
    call = pay_call()
    with pytest.raises(ToolDenied, match="pay: the user denied this call: this call needs approval"):
        await pipeline.invoke(call, {"to": "Ada", "amount": 250})

    async def yes(calls: tuple[ToolCall, ...]) -> list[Decision]:
        return [Decision.approve(c.id) for c in calls]

    with approving(yes):
        assert await pipeline.invoke(call, {"to": "Ada", "amount": 250}) == "paid Ada 250"
    assert paid == [("Ada", 250)]


async def test_a_call_with_bad_arguments_is_answered_not_put_to_a_person() -> None:
    bad = tool_call("pay", {"to": "Ada"}, id="p1")  # no amount
    state = await Step(Scripted([[bad]]), tools=[pay]).turn(START)
    assert awaiting_approval(state) == () and state[-1].tool_results[0].is_error


def test_bad_gates_are_refused_with_a_clear_error() -> None:
    with pytest.raises(UsageError, match="needs_approval takes True, False, or a function"):
        tool(needs_approval="yes")(clock.__wrapped__)  # type: ignore[call-overload]
    with pytest.raises(UsageError, match="needs_approval takes True, False, or a function"):
        require_approval(clock, when=3)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="approving takes an async function"):
        with approving(42):  # type: ignore[arg-type]
            pass
    with pytest.raises(UsageError, match="non-empty string"):
        Decision("", True)
    with pytest.raises(UsageError, match="approved must be True or False, got 'yes'"):
        Decision("p1", "yes")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="reason must be a string, got 3"):
        Decision("p1", False, 3)  # type: ignore[arg-type]
