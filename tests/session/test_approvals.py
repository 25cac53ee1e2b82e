"""Approval in a session: kept calls stored and answered later (after a restart too), live ones answered at once,
a timeout that denies, and the caller and dependencies every run sees."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from cognitive import new_turn_processor, react_factory
from loop import (ApprovalMismatch, Caller, Decision, Request, Role, RunContext, State, Text, TextDelta, Turn,
                  UsageError, awaiting_approval, branch, tool)
from provider import Function, tool_call
from session import (ApprovalAnswered, ApprovalRequested, Interrupted, Manager, MessageFailed, MessageFinished,
                     SQLiteStore, step_factory)

paid: list[tuple[str, int]] = []
seen_contexts: list[RunContext[Any]] = []


@tool(needs_approval=True)
async def pay(to: str, amount: int) -> str:
    """Pay someone."""
    paid.append((to, amount))
    return f"paid {to} {amount}"


@tool
async def whoami(context: RunContext[dict[str, str]]) -> str:
    """Who is asking, and the app's settings."""
    seen_contexts.append(context)
    caller = "nobody" if context.caller is None else context.caller.id
    return f"{caller} on {(context.deps or {}).get('db', 'no db')}"


def model(request: Request) -> Any:
    """Pays when asked to, then reports what the tool said; asks whoami when asked who."""
    last = request.turns[-1]
    if last.role.value == "tool":
        return f"result: {last.parts[0].content}"  # type: ignore[union-attr]
    text = last.text
    if "who" in text:
        return tool_call("whoami", {}, id="w1")
    return [tool_call("pay", {"to": "Ada", "amount": 250}, id="p1"), tool_call("pay", {"to": "Bob", "amount": 5},
                                                                                id="p2")]


def manager(store: Any = None, **settings: Any) -> Manager:
    return Manager(new_turn_processor(react_factory), provider=Function(model),
                   make_step=step_factory([pay, whoami]), store=store, **settings)


@pytest.fixture(autouse=True)
def fresh() -> None:
    paid.clear()
    seen_contexts.clear()


async def until(events: AsyncIterator[Any], kind: type, count: int = 1) -> list[Any]:
    seen: list[Any] = []
    with anyio.fail_after(5):
        async for event in events:
            seen.append(event)
            if sum(isinstance(e, kind) for e in seen) >= count:
                return seen
    raise AssertionError(f"no {kind.__name__}")


async def test_calls_needing_approval_stop_the_run_and_an_answer_resumes_it() -> None:
    async with manager() as m:
        session = await m.open("s1")
        with session.events.subscribe() as events:
            waiting = await session.ask("pay them")
            seen = await until(events, ApprovalRequested)
        assert paid == [] and waiting.outcome is not None and waiting.outcome.status == "pending"
        (request,) = [e for e in seen if isinstance(e, ApprovalRequested)]
        assert [c.id for c in request.calls] == ["p1", "p2"] and not request.live
        assert request.deadline > time.time() + 3000, "an hour by default"
        assert session.pending_approvals() == (ApprovalRequested(None, request.calls, request.deadline),)
        with session.events.subscribe() as events:
            final = await session.decide([Decision.approve("p1"), Decision.deny("p2", "not Bob")],
                                         caller=Caller("grace"))
            answered = [e for e in await until(events, MessageFinished) if isinstance(e, ApprovalAnswered)]
    assert paid == [("Ada", 250)]
    assert [(a.call_id, a.approved, a.reason, a.by) for a in answered] == [("p1", True, "", "grace"),
                                                                            ("p2", False, "not Bob", "grace")]
    tool_turn = final[-2]
    assert [r.content for r in tool_turn.tool_results] == ["paid Ada 250", "error: the user denied this call: not Bob"]
    assert tool_turn.meta["approvals"]["p2"] == {"approved": False, "reason": "not Bob", "by": "grace"}
    assert final.answer == "result: paid Ada 250" and session.pending_approvals() == ()


async def test_an_approval_survives_a_restart(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "s.db") as store:
        async with manager(store) as m:
            waiting = await (await m.open("s1")).ask("pay them")
        assert [c.id for c in awaiting_approval(waiting)] == ["p1", "p2"]
    async with SQLiteStore(tmp_path / "s.db") as store:
        async with manager(store) as m:
            session = await m.open("s1")
            assert [c.id for c in session.pending_approvals()[0].calls] == ["p1", "p2"], "kept, not 'interrupted'"
            final = await session.decide([Decision.approve("p1"), Decision.approve("p2")])
    assert sorted(paid) == [("Ada", 250), ("Bob", 5)] and final.answer == "result: paid Ada 250"


async def test_no_answer_in_time_denies_the_calls_and_the_run_goes_on() -> None:
    async with manager(approval_timeout=0.2) as m:
        session = await m.open("s1")
        with session.events.subscribe() as events:
            session.send("pay them")
            seen = await until(events, MessageFinished, 2)
    assert paid == []
    answered = [e for e in seen if isinstance(e, ApprovalAnswered)]
    assert [(a.approved, a.reason, a.by) for a in answered] == [(False, "no answer within 0.2 seconds", None)] * 2
    assert session.state.answer == "result: error: the user denied this call: no answer within 0.2 seconds"


async def test_a_deadline_that_passed_while_the_session_was_closed_denies_when_it_reopens(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "s.db") as store:
        async with manager(store, approval_timeout=0.5) as m:
            await (await m.open("s1")).ask("pay them")
        await anyio.sleep(0.6)
        async with manager(store, approval_timeout=0.5) as m:
            session = await m.open("s1")
            with anyio.fail_after(5):
                while session.state.answer is None or not session.state.answer.startswith("result"):
                    await anyio.sleep(0.01)
    assert paid == [] and "no answer within 0.5 seconds" in session.state.answer


async def test_decisions_for_other_calls_fail_the_message_and_keep_the_calls_waiting() -> None:
    async with manager() as m:
        session = await m.open("s1")
        await session.ask("pay them")
        with pytest.raises(ApprovalMismatch, match="the calls waiting for approval are: p1, p2"):
            await session.decide([Decision.approve("p1")])
        assert [c.id for c in session.pending_approvals()[0].calls] == ["p1", "p2"]
        with pytest.raises(UsageError, match="approve takes loop.Decision"):
            session.approve(["p1"])  # type: ignore[list-item]
        with pytest.raises(UsageError, match="caller takes a loop.Caller"):
            session.approve([Decision.approve("p1")], caller="grace")  # type: ignore[arg-type]
    assert paid == []


async def test_a_call_a_branch_makes_waits_live_and_is_answered_at_once() -> None:
    async def side_run(step: Any, state: State) -> State:
        with branch("side"):
            await step.turn(state)  # the pay calls of a branch cannot be kept in the conversation
        return state

    async with Manager(side_run, provider=Function(model), make_step=step_factory([pay])) as m:
        session = await m.open("s1")
        with session.events.subscribe() as events:
            session.send("pay them")
            (request,) = [e for e in await until(events, ApprovalRequested) if isinstance(e, ApprovalRequested)]
            assert request.live and session.pending_approvals()[0].live
            assert session.approve([Decision.approve("p1"), Decision.deny("p2")]) is None, "no message to queue"
            await until(events, MessageFinished)
    assert paid == [("Ada", 250)]


async def test_a_live_call_nobody_answers_is_denied_in_time() -> None:
    results: list[str] = []

    async def side_run(step: Any, state: State) -> State:
        with branch("side"):
            after = await step.turn(state)
        results.extend(r.content for r in after[-1].tool_results)
        return state

    async with Manager(side_run, provider=Function(model), make_step=step_factory([pay]),
                       approval_timeout=0.1) as m:
        await (await m.open("s1")).ask("pay them")
    assert results == ["error: the user denied this call: no answer within 0.1 seconds"] * 2


async def test_a_tool_reads_the_caller_and_the_dependencies() -> None:
    async with manager(deps={"db": "main"}) as m:
        session = await m.open("s1")
        first = await session.ask("who am I?", caller=Caller("ada", "team-a"))
        second = await session.ask("who now?", caller=Caller("bob", "team-b"), deps={"db": "replica"})
        third = await session.ask("who is it?")
    assert [first.answer, second.answer, third.answer] == ["result: ada on main", "result: bob on replica",
                                                           "result: nobody on main"]
    assert seen_contexts[0].caller == Caller("ada", "team-a")


async def test_a_posted_message_keeps_its_caller_across_a_restart(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "s.db") as store:
        await store.post("s1", Turn(Role.USER, (Text("who?"),), {"message_id": "m1",
                                                                 "caller": Caller("ada", "a").to_dict()}))
        async with manager(store) as m:
            session = await m.open("s1")
            with anyio.fail_after(5):
                while session.state.answer is None:
                    await anyio.sleep(0.01)
    assert session.state.answer == "result: ada on no db"


async def test_the_approved_call_runs_for_the_caller_who_asked_and_records_who_decided() -> None:
    @tool(needs_approval=True)
    async def whoami_gated(context: RunContext[Any]) -> str:
        """Who is asking, once approved."""
        return "nobody" if context.caller is None else context.caller.id

    def asks(request: Request) -> Any:
        last = request.turns[-1]
        if last.role.value == "tool":
            return f"result: {last.parts[0].content}"  # type: ignore[union-attr]
        return tool_call("whoami_gated", {}, id="g1")

    async with Manager(new_turn_processor(react_factory), provider=Function(asks),
                       make_step=step_factory([whoami_gated])) as m:
        session = await m.open("s1")
        await session.ask("who am I?", caller=Caller("ada", "shop"))
        final = await session.decide([Decision.approve("g1")], caller=Caller("grace", "shop"))
    assert final.answer == "result: ada", "an approver's rights never leak into the run they approve"
    assert final[-2].meta["approvals"]["g1"]["by"] == "grace"


async def test_a_message_without_approval_needs_publishes_no_request() -> None:
    async with manager() as m:
        session = await m.open("s1")
        with session.events.subscribe() as events:
            await session.ask("who?")
            seen = await until(events, MessageFinished)
    assert not [e for e in seen if isinstance(e, (ApprovalRequested, MessageFailed))]
    assert [e for e in seen if isinstance(e, TextDelta)]


async def test_an_interrupt_stops_a_run_waiting_live_and_the_request_goes_away() -> None:
    async def side_run(step: Any, state: State) -> State:
        with branch("side"):
            await step.turn(state)
        return state

    async with Manager(side_run, provider=Function(model), make_step=step_factory([pay])) as m:
        session = await m.open("s1")
        with session.events.subscribe() as events:
            session.send("pay them")
            await until(events, ApprovalRequested)
            assert session.interrupt() == 0
            seen = await until(events, Interrupted)
        assert session.pending_approvals() == () and not session.busy
    assert paid == [] and not [e for e in seen if isinstance(e, MessageFinished)]
