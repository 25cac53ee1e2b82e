"""``WithBudget``: a run within limits, which still ends in a written answer when they run out."""

import functools
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest

import loop
from cognitive import ReAct, WithBudget, WithVerification
from loop import (
    Budget,
    BudgetReport,
    Delta,
    Finish,
    Options,
    Price,
    Request,
    Role,
    Spent,
    State,
    Step,
    Text,
    TextDelta,
    ToolCallDelta,
    Usage,
    UsageDelta,
    UsageError,
    tool,
)
from loop.errors import BudgetExhausted
from provider import Function, tool_call
from verifier import FunctionVerifier

START = State().append(Role.USER, Text("find out"))


def final(request: Request) -> bool:
    """Whether this is a request for a tool-free answer (ReAct's cap, WithBudget's final answer)."""
    return request.options.tool_choice == "none"


class Model:
    """A ``Function`` provider's function that keeps every request and answers by ``reply(request, number)``."""

    def __init__(self, reply: Callable[[Request, int], Any]) -> None:
        self.requests: list[Request] = []
        self._reply = reply

    def __call__(self, request: Request) -> Any:
        self.requests.append(request)
        return self._reply(request, len(self.requests))


def always_looking(request: Request, number: int) -> Any:
    """Calls ``look`` every turn until asked for a final answer."""
    if final(request):
        return f"final answer after {number - 1} turns"
    return [tool_call("look", {}, id=f"c{number}")]


class Looker:
    """The ``look`` tool, counting how often it really ran."""

    def __init__(self, delay: float = 0.0) -> None:
        self.ran = 0
        self.cancelled = 0
        looker = self

        @tool
        async def look() -> str:
            """Look around."""
            try:
                await anyio.sleep(delay)
            except anyio.get_cancelled_exc_class():
                looker.cancelled += 1
                raise
            looker.ran += 1
            return "seen"

        self.tool = look


def agent(reply: Callable[[Request, int], Any] = always_looking, *, delay: float = 0.0,
          **settings: Any) -> tuple[Step, Model, Looker]:
    model = Model(reply)
    looker = Looker(delay)
    return Step(Function(model), tools=[looker.tool], **settings), model, looker


def reports(step: Step) -> Any:
    return step.events.subscribe(buffer=None)


def budget_reports(sub: loop.Subscription) -> list[BudgetReport]:
    return [e for e in sub.drain() if isinstance(e, BudgetReport)]


# -- wiring ------------------------------------------------------------------------------------------------------


def test_bad_wiring_is_refused() -> None:
    step, _, _ = agent()
    with pytest.raises(UsageError, match="Pattern"):
        WithBudget(step, Budget())
    with pytest.raises(UsageError, match="Budget"):
        WithBudget(ReAct(step), {"max_turns": 3})  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="TurnRunner"):
        WithBudget(ReAct(step), Budget(), step=object())


async def test_run_refuses_what_is_not_a_state() -> None:
    step, _, _ = agent()
    with pytest.raises(UsageError):
        await WithBudget(ReAct(step), Budget()).run([])  # type: ignore[arg-type]


# -- within budget -------------------------------------------------------------------------------------------------


async def test_a_run_within_budget_keeps_its_outcome_and_records_the_spend() -> None:
    step, model, looker = agent(lambda request, n: [tool_call("look", {}, id="c1"), Usage(10, 2)] if n == 1
                                else ["done", Usage(15, 3)])
    with reports(step) as sub:
        state = await WithBudget(ReAct(step), Budget(max_turns=5, name="research")).run(START)
        (report,) = budget_reports(sub)
    assert state.answer == "done" and len(model.requests) == 2 and looker.ran == 1
    spent = Spent(turns=2, tool_calls=1, input_tokens=25, output_tokens=5)
    assert report == BudgetReport("research", spent, report.by_path, None)
    assert dict(report.by_path) == {"WithBudget/ReAct": spent}, "tool calls are charged to the path that made them"
    outcome = state.outcome
    assert outcome is not None and outcome.ok
    assert dict(outcome.data) == {"WithBudget": {
        "spent": {"turns": 2, "tool_calls": 1, "input_tokens": 25, "output_tokens": 5},
        "by_path": {"WithBudget/ReAct": {"turns": 2, "tool_calls": 1, "input_tokens": 25, "output_tokens": 5}},
        "budget": "research"}}


async def test_an_inner_degraded_run_stays_degraded() -> None:
    step, _, _ = agent()
    state = await WithBudget(ReAct(step, max_turns=2), Budget(max_turns=10)).run(START)
    assert state.degraded and "ReAct reached max_turns=2" in state.outcome.reason  # type: ignore[union-attr]
    assert state.outcome.data["WithBudget"]["spent"]["turns"] == 3  # type: ignore[union-attr]


# -- hard limits ---------------------------------------------------------------------------------------------------


async def test_max_turns_is_hard_and_the_run_ends_in_a_degraded_final_answer() -> None:
    step, model, looker = agent()
    state = await WithBudget(ReAct(step, max_turns=50), Budget(max_turns=3, name="tight")).run(START)
    assert len(model.requests) == 4, "exactly max_turns calls, then the final answer"
    assert [final(r) for r in model.requests] == [False, False, False, True]
    assert model.requests[-1].path == "WithBudget"
    assert looker.ran == 3 and state.pending_calls == ()
    assert state.answer == "final answer after 3 turns"
    note = state[-2]
    assert note.role is Role.SYSTEM and note.meta["kind"] == "budget"
    assert "max_turns=3 reached" in note.text and "No more tools" in note.text
    outcome = state.outcome
    assert outcome is not None and outcome.degraded
    assert outcome.reason.startswith("budget 'tight' ran out (max_turns=3 reached)")
    data = outcome.data["WithBudget"]
    assert data["exhausted"] == "max_turns=3 reached" and data["budget"] == "tight"
    assert data["spent"]["turns"] == 4, "the final answer is charged, past the limit"


async def test_max_tool_calls_is_hard_and_a_refused_call_says_the_budget_ran_out() -> None:
    def two_calls(request: Request, number: int) -> Any:
        if final(request):
            return "final without tools"
        return [tool_call("look", {}, id=f"t{number}a"), tool_call("look", {}, id=f"t{number}b")]

    step, model, looker = agent(two_calls)
    with reports(step) as sub:
        state = await WithBudget(ReAct(step, max_turns=50), Budget(max_tool_calls=3)).run(START)
        (report,) = budget_reports(sub)
    assert looker.ran == 3
    results = [r for t in state if t.role is Role.TOOL for r in t.tool_results]
    # The second turn's two calls run concurrently: whichever asks second is refused.
    assert [r.is_error for r in results[:2]] == [False, False] and sorted(r.is_error for r in results[2:]) == [False, True]
    (refused,) = [r for r in results if r.is_error]
    assert refused.content == "error: not run: budget 'budget' ran out: max_tool_calls=3 reached"
    # The next model call is refused; the final answer is written without tools and sees the refusal.
    assert len(model.requests) == 3 and final(model.requests[-1])
    assert any(r.is_error for t in model.requests[-1].turns for r in t.tool_results)
    assert state.answer == "final without tools" and state.degraded
    assert "max_tool_calls=3 reached" in state.outcome.reason  # type: ignore[union-attr]
    assert report.spent.tool_calls == 3 and report.exhausted == "max_tool_calls=3 reached"


# -- soft limits ---------------------------------------------------------------------------------------------------


async def test_token_limits_are_soft_and_overshoot_by_the_response_in_flight() -> None:
    def reply(request: Request, number: int) -> Any:
        if final(request):
            return ["final", Usage(1, 1)]
        return [tool_call("look", {}, id=f"c{number}"), Usage(5, 8)]

    step, model, looker = agent(reply)
    state = await WithBudget(ReAct(step, max_turns=50), Budget(max_output_tokens=10)).run(START)
    # Turn 1: 8 tokens, its call runs. Turn 2: 16 > 10, kept and charged, its call answered not run.
    assert looker.ran == 1 and len(model.requests) == 3
    refused = state[4].tool_results[0]
    assert refused.is_error and "max_output_tokens=10 passed (16 spent)" in refused.content
    data = state.outcome.data["WithBudget"]  # type: ignore[union-attr]
    assert data["spent"]["output_tokens"] == 17 > 10
    assert state.degraded and "max_output_tokens=10 passed" in state.outcome.reason  # type: ignore[union-attr]


async def test_a_soft_limit_passed_by_the_answer_keeps_that_answer() -> None:
    step, model, _ = agent(lambda request, n: ["the answer", Usage(100, 100)])
    state = await WithBudget(ReAct(step), Budget(max_output_tokens=10)).run(START)
    assert len(model.requests) == 1 and state.answer == "the answer"
    assert not state.degraded
    data = state.outcome.data["WithBudget"]  # type: ignore[union-attr]
    assert data["exhausted"] == "max_output_tokens=10 passed (100 spent)"


def priced_stream(model_name: str, usage: Usage, requests: list[Request]) -> Any:
    """A provider function streaming its own deltas: a ``look`` call (or text when asked for a final answer)
    and a ``UsageDelta`` naming the model that answered."""

    async def stream(request: Request) -> AsyncIterator[Delta]:
        requests.append(request)
        if final(request):
            yield TextDelta("priced final")
        else:
            yield ToolCallDelta(0, f"c{len(requests)}", "look", "{}")
        yield UsageDelta(usage, model=model_name)
        yield Finish("stop")

    return stream


async def test_max_cost_is_priced_by_the_answering_model_with_cached_input() -> None:
    requests: list[Request] = []
    looker = Looker()
    step = Step(Function(priced_stream("gpt-4o-2024-08-06", Usage(1000, 100, cache_read_tokens=400), requests)),
                tools=[looker.tool], options=Options(model="gpt-4o-mini"))
    state = await WithBudget(ReAct(step, max_turns=50), Budget(max_cost=0.005)).run(START)
    # gpt-4o: 600 * 2.50 + 400 * 1.25 + 100 * 10.00 per million = $0.003 a turn; the second passes $0.005.
    assert len(requests) == 3 and looker.ran == 1
    data = state.outcome.data["WithBudget"]  # type: ignore[union-attr]
    assert data["spent"]["cost"] == pytest.approx(0.009)
    assert data["spent"]["cached_tokens"] == 1200
    assert state.degraded and "max_cost=0.005 passed (0.006 spent)" in state.outcome.reason  # type: ignore[union-attr]


async def test_custom_prices() -> None:
    requests: list[Request] = []
    looker = Looker()
    step = Step(Function(priced_stream("house", Usage(500, 500), requests)), tools=[looker.tool],
                options=Options(model="house"))
    budget = Budget(max_cost=0.002, prices={"house": Price(1.0, 2.0)})
    state = await WithBudget(ReAct(step, max_turns=50), budget).run(START)
    assert len(requests) == 3 and looker.ran == 1
    assert state.outcome.data["WithBudget"]["spent"]["cost"] == pytest.approx(3 * 0.0015)  # type: ignore[union-attr]


async def test_max_cost_with_an_unpriced_model_is_a_usage_error() -> None:
    step, model, _ = agent(lambda request, n: "x", options=Options(model="my-local-model"))
    with pytest.raises(UsageError, match="my-local-model"):
        await WithBudget(ReAct(step), Budget(max_cost=1.0)).run(START)
    assert model.requests == []


async def test_an_unpriced_answering_model_keeps_its_answer_and_the_outcome_says_its_cost_is_unknown() -> None:
    requests: list[Request] = []
    step = Step(Function(priced_stream("mystery", Usage(1, 1), requests)), options=Options(model="gpt-4o"))
    state = await WithBudget(ReAct(step), Budget(max_cost=1.0)).run(START)
    assert state.answer == "priced final", "the paid answers are kept"
    assert state.outcome is not None and state.outcome.data["WithBudget"]["unpriced"] == ["mystery"]


# -- deadline ------------------------------------------------------------------------------------------------------


async def test_a_budget_hit_mid_tool_call_cancels_the_tool_and_still_answers() -> None:
    def reply(request: Request, number: int) -> Any:
        if final(request):
            return "answer written after the deadline"
        return [tool_call("look", {}, id="slow1"), tool_call("look", {}, id="slow2")]

    step, model, looker = agent(reply, delay=10)
    with anyio.fail_after(1):
        state = await WithBudget(ReAct(step), Budget(deadline=0.2)).run(START)
    assert looker.cancelled == 2 and looker.ran == 0
    tool_turn = state[2]
    assert tool_turn.role is Role.TOOL
    assert [(r.call_id, r.is_error) for r in tool_turn.tool_results] == [("slow1", True), ("slow2", True)]
    assert all("cancelled" in r.content for r in tool_turn.tool_results)
    assert state.pending_calls == ()
    assert len(model.requests) == 2 and final(model.requests[-1])
    assert state.answer == "answer written after the deadline"
    outcome = state.outcome
    assert outcome is not None and outcome.degraded
    assert "deadline=0.2s passed" in outcome.reason
    assert outcome.data["WithBudget"]["exhausted"] == "deadline=0.2s passed"


async def test_calls_left_open_when_the_budget_runs_out_are_answered_before_the_final_answer() -> None:
    step, model, looker = agent()

    class AwaitingApproval:
        async def run(self, state: State) -> State:
            async def approval(partial: State) -> None:
                await anyio.sleep(10)  # nobody approves in time

            with loop.scope("Approval"), loop.recording(approval):
                return await step.turn(state)

    with anyio.fail_after(1):
        state = await WithBudget(AwaitingApproval(), Budget(deadline=0.1)).run(START)
    assert looker.ran == 0 and len(model.requests) == 2
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.SYSTEM, Role.ASSISTANT]
    (result,) = state[2].tool_results
    assert result.call_id == "c1" and result.is_error and "the budget ran out" in result.content
    assert state.pending_calls == () and state.degraded
    assert state.answer == "final answer after 1 turns"


async def test_a_deadline_with_no_step_known_raises() -> None:
    class Idle:
        async def run(self, state: State) -> State:
            await anyio.sleep(10)
            return state

    with anyio.fail_after(1), pytest.raises(BudgetExhausted, match="deadline=0.05s passed") as caught:
        await WithBudget(Idle(), Budget(deadline=0.05, name="clock")).run(START)
    assert caught.value.budget == Budget(deadline=0.05, name="clock")
    assert caught.value.state is START


# -- nesting -------------------------------------------------------------------------------------------------------


async def test_nested_budgets_are_both_charged() -> None:
    step, _, _ = agent(lambda request, n: [tool_call("look", {}, id="c1"), Usage(3, 1)] if n == 1 else "done")
    pattern = WithBudget(WithBudget(ReAct(step), Budget(name="inner")), Budget(name="outer"))
    with reports(step) as sub:
        state = await pattern.run(START)
        found = budget_reports(sub)
    assert [r.budget for r in found] == ["inner", "outer"]
    assert found[0].spent == found[1].spent == Spent(turns=2, tool_calls=1, input_tokens=3, output_tokens=1)
    assert dict(found[0].by_path) == dict(found[1].by_path)
    assert set(found[0].by_path) == {"WithBudget/WithBudget/ReAct"}
    data = state.outcome.data  # type: ignore[union-attr]
    assert set(data) == {"WithBudget", "WithBudget/WithBudget"}
    assert data["WithBudget"]["budget"] == "outer" and data["WithBudget/WithBudget"]["budget"] == "inner"


async def test_an_inner_budget_running_out_is_answered_inside_and_charged_outside() -> None:
    step, model, _ = agent()
    pattern = WithBudget(WithBudget(ReAct(step, max_turns=50), Budget(max_turns=2, name="inner")),
                         Budget(max_turns=10, name="outer"))
    state = await pattern.run(START)
    assert len(model.requests) == 3 and model.requests[-1].path == "WithBudget/WithBudget"
    outcome = state.outcome
    assert outcome.degraded and "budget 'inner' ran out" in outcome.reason  # type: ignore[union-attr]
    assert outcome.data["WithBudget"]["spent"]["turns"] == 3  # type: ignore[union-attr]
    assert "exhausted" not in outcome.data["WithBudget"]  # type: ignore[union-attr]


async def test_an_outer_budget_running_out_is_answered_by_the_outer_wrapper() -> None:
    step, model, _ = agent()
    pattern = WithBudget(WithBudget(ReAct(step, max_turns=50), Budget(max_turns=10, name="inner")),
                         Budget(max_turns=2, name="outer"))
    state = await pattern.run(START)
    assert len(model.requests) == 3 and model.requests[-1].path == "WithBudget"
    assert state.degraded
    assert "budget 'outer' ran out (max_turns=2 reached)" in state.outcome.reason  # type: ignore[union-attr]


# -- raising -------------------------------------------------------------------------------------------------------


async def test_raise_on_exhausted_raises_naming_the_budget_with_the_state() -> None:
    step, model, _ = agent()
    with reports(step) as sub:
        with pytest.raises(BudgetExhausted, match="budget 'tight' ran out: max_turns=2 reached") as caught:
            await WithBudget(ReAct(step, max_turns=50), Budget(max_turns=2, name="tight"),
                             raise_on_exhausted=True).run(START)
        (report,) = budget_reports(sub)
    assert len(model.requests) == 2, "no final answer is asked for"
    error = caught.value
    assert error.budget == Budget(max_turns=2, name="tight")
    assert error.state is not None and len(error.state) == 5
    assert error.state.last.role is Role.TOOL  # type: ignore[union-attr]
    assert report.exhausted == "max_turns=2 reached"


async def test_without_a_step_known_the_exhaustion_is_raised() -> None:
    class Charging:
        async def run(self, state: State) -> State:
            with loop.scope("Charging"):
                for _ in range(5):
                    loop.charge(turns=1)
                    await anyio.sleep(0)
            raise AssertionError("unreachable")

    with pytest.raises(BudgetExhausted, match="max_turns=2 reached") as caught:
        await WithBudget(Charging(), Budget(max_turns=2)).run(START)
    assert caught.value.state is START


async def test_charge_outside_a_step_is_counted_and_a_given_step_writes_the_answer() -> None:
    step, model, _ = agent(lambda request, n: "written by the given step")

    class Charging:
        async def run(self, state: State) -> State:
            with loop.scope("Charging"):
                loop.charge(usage=Usage(1000, 0), model="gpt-4o")
                loop.charge(tool_calls=1)
                loop.charge(tool_calls=1)
            raise AssertionError("unreachable")

    state = await WithBudget(Charging(), Budget(max_tool_calls=1), step=step).run(START)
    assert state.answer == "written by the given step" and state.degraded
    assert [t.role for t in state] == [Role.USER, Role.SYSTEM, Role.ASSISTANT]
    by_path = state.outcome.data["WithBudget"]["by_path"]  # type: ignore[union-attr]
    assert by_path["WithBudget/Charging"] == {"tool_calls": 1, "input_tokens": 1000, "cost": pytest.approx(0.0025)}
    assert by_path["WithBudget"] == {"turns": 1}


# -- fresh per run -------------------------------------------------------------------------------------------------


async def test_inside_with_verification_each_retry_starts_afresh() -> None:
    step, model, _ = agent(lambda request, n: f"attempt {n}")
    checks = 0

    def good_enough(state: State) -> bool:
        nonlocal checks
        checks += 1
        return checks > 1

    pattern = WithVerification(WithBudget(ReAct(step), Budget(max_turns=1)), step,
                               verifiers=[FunctionVerifier(good_enough)])
    state = await pattern.run(START)
    assert len(model.requests) == 2 and state.answer == "attempt 2"
    outcome = state.outcome
    assert outcome is not None and outcome.ok, "the retry was not charged to the first run's spend"
    assert outcome.data["WithVerification/WithBudget"]["spent"] == {"turns": 1}


async def test_the_same_wrapper_serves_runs_one_after_another() -> None:
    step, model, _ = agent(lambda request, n: "hi")
    pattern = WithBudget(ReAct(step), Budget(max_turns=1))
    first = await pattern.run(START)
    second = await pattern.run(first.append(Role.USER, Text("again")))
    assert not first.degraded and not second.degraded and len(model.requests) == 2


# -- branches ------------------------------------------------------------------------------------------------------


class Fan:
    """Runs ``make(index)`` for five branches of the same state; the first branch's state is its answer."""

    def __init__(self, jobs: int, make: Callable[[int], Any]) -> None:
        self.jobs = jobs
        self.make = make
        self.results: tuple[loop.BranchResult, ...] = ()

    async def run(self, state: State) -> State:
        with loop.scope("Fan"):
            self.results = await loop.fan_out([functools.partial(self.make(i).run, state) for i in range(self.jobs)])
            return self.results[0].state  # type: ignore[return-value]


def branch_number(request: Request) -> int:
    return int(request.path.split("branch ")[1].split("/")[0])


async def test_five_concurrent_branches_total_equals_the_sum_of_per_path_spend() -> None:
    def reply(request: Request, number: int) -> Any:
        n = branch_number(request)
        if any(t.role is Role.TOOL for t in request.turns):
            return [f"branch {n} done", Usage(10 * n, n)]
        return [tool_call("look", {}, id=f"b{n}"), Usage(n, 1)]

    step, model, looker = agent(reply)
    fan = Fan(5, lambda i: ReAct(step))
    with reports(step) as sub:
        state = await WithBudget(fan, Budget(max_turns=20), step=step).run(START)
        (report,) = budget_reports(sub)
    assert len(model.requests) == 10 and looker.ran == 5
    assert state.answer == "branch 1 done" and state.outcome.ok  # type: ignore[union-attr]
    assert set(report.by_path) == {f"WithBudget/Fan/branch {n}/ReAct" for n in range(1, 6)}
    assert report.spent == sum(report.by_path.values(), Spent())
    assert report.spent == sum((r.spent for r in fan.results), Spent())
    assert report.spent == Spent(turns=10, tool_calls=5, input_tokens=11 * 15, output_tokens=5 + 15)
    assert [r.spent for r in fan.results] == [Spent(2, 1, 11 * n, 1 + n) for n in range(1, 6)]


async def test_a_budget_hit_inside_one_branch_is_that_branchs_degraded_answer() -> None:
    def reply(request: Request, number: int) -> Any:
        n = branch_number(request)
        if final(request):
            return f"branch {n} gave up"
        if n == 2:
            return [tool_call("look", {}, id=f"x{number}")]
        return f"branch {n} answered"

    step, model, _ = agent(reply)
    fan = Fan(3, lambda i: WithBudget(ReAct(step, max_turns=50), Budget(max_turns=2, name=f"b{i + 1}")))
    state = await fan.run(START)
    assert state.answer == "branch 1 answered"
    first, second, third = fan.results
    assert first.ok and third.ok and first.error is None and second.error is None
    assert second.outcome.degraded and "budget 'b2' ran out (max_turns=2 reached)" in second.outcome.reason
    assert second.state.answer == "branch 2 gave up"  # type: ignore[union-attr]
    assert second.spent.turns == 3
    assert [r.path for r in model.requests if final(r)] == ["Fan/branch 2/WithBudget"]


async def test_an_outer_budget_running_out_while_branches_run_writes_its_final_answer() -> None:
    def reply(request: Request, number: int) -> Any:
        if final(request):
            return "the outer budget's answer"
        return [tool_call("look", {}, id=f"c{number}")]

    step, model, looker = agent(reply, delay=0.001)
    fan = Fan(3, lambda i: ReAct(step, max_turns=50))
    with anyio.fail_after(1):
        state = await WithBudget(fan, Budget(max_turns=4, name="outer"), step=step).run(START)
    assert state.answer == "the outer budget's answer" and state.degraded
    assert "budget 'outer' ran out (max_turns=4 reached)" in state.outcome.reason  # type: ignore[union-attr]
    assert [r.path for r in model.requests].count("WithBudget") == 1 and final(model.requests[-1])
    assert len(model.requests) == 5, "four branch turns, then the final answer"
    # No main-line turn ran: the final answer starts from the run's start.
    assert [t.role for t in state] == [Role.USER, Role.SYSTEM, Role.ASSISTANT]
    by_path = state.outcome.data["WithBudget"]["by_path"]  # type: ignore[union-attr]
    assert sum(s.get("turns", 0) for p, s in by_path.items() if "/branch " in p) == 4, "discarded branches included"


async def test_native_samples_under_a_budget_are_charged_once() -> None:
    calls = 0

    def answer(request: Request) -> Any:
        nonlocal calls
        calls += 1
        return [f"sample {calls}", Usage(50, 5)] if calls == 1 else f"sample {calls}"

    step = Step(Function(answer))

    class Sampling:
        async def run(self, state: State) -> State:
            with loop.scope("Sampling"):
                samples = await step.sample(state, 5)
                assert [s.answer for s in samples] == [f"sample {i}" for i in range(1, 6)]
                return samples[0]

    with reports(step) as sub:
        state = await WithBudget(Sampling(), Budget(max_turns=1), step=step).run(START)
        (report,) = budget_reports(sub)
    assert report.spent == Spent(turns=1, input_tokens=50, output_tokens=5)
    assert dict(report.by_path) == {"WithBudget/Sampling/samples": report.spent}
    assert state.outcome.ok  # type: ignore[union-attr]


async def test_a_budget_report_is_published_when_only_branches_made_model_calls() -> None:
    step, _, _ = agent(lambda request, n: "branch answer")
    with reports(step) as sub:
        state = await WithBudget(Fan(2, lambda i: ReAct(step)), Budget(max_turns=5)).run(START)
        found = budget_reports(sub)
    assert state.outcome.data["WithBudget"]["spent"]["turns"] == 2  # type: ignore[union-attr]
    assert len(found) == 1 and found[0].spent.turns == 2


async def test_spend_of_branches_cancelled_by_an_early_stop_is_kept() -> None:
    async def model(request: Request) -> AsyncIterator[Delta]:
        if not request.path.endswith("branch 1"):
            await anyio.sleep(10)  # slow branches: cancelled once branch 1 has answered
        yield TextDelta(f"from {request.path}")
        yield UsageDelta(Usage(7, 1))
        yield Finish("stop")

    step = Step(Function(model))

    class FirstAnswer:
        async def run(self, state: State) -> State:
            with loop.scope("First"):
                async with loop.as_completed([functools.partial(step.turn, state)] * 3) as results:
                    async for result in results:
                        return result.state  # type: ignore[return-value]
            raise AssertionError("unreachable")

    with anyio.fail_after(1):
        state = await WithBudget(FirstAnswer(), Budget(max_turns=5)).run(START)
    assert state.answer == "from WithBudget/First/branch 1"
    by_path = state.outcome.data["WithBudget"]["by_path"]  # type: ignore[union-attr]
    # One row per pattern level: the three branches (the two cancelled ones too) add up.
    assert by_path == {"WithBudget/First/branch *": {"turns": 3, "input_tokens": 7, "output_tokens": 1, "paths": 3}}


async def test_what_a_budget_records_on_the_answer_does_not_grow_with_the_number_of_branches() -> None:
    step = Step(Function(lambda request: "leaf"))

    class Grid:
        def __init__(self, width: int) -> None:
            self.width = width

        async def row(self, state: State) -> State:
            await loop.fan_out([functools.partial(step.turn, state)] * self.width, name="cell")
            return state

        async def run(self, state: State) -> State:
            with loop.scope("Grid"):
                await loop.fan_out([functools.partial(self.row, state)] * self.width, name="row")
                return await step.turn(state)

    small = await WithBudget(Grid(3), Budget(max_turns=10_000)).run(START)
    large = await WithBudget(Grid(30), Budget(max_turns=10_000)).run(START)
    recorded = [s.outcome.data["WithBudget"] for s in (small, large)]  # type: ignore[union-attr]
    assert recorded[0]["by_path"].keys() == recorded[1]["by_path"].keys() == {"WithBudget/Grid",
                                                                               "WithBudget/Grid/row */cell *"}
    assert recorded[1]["by_path"]["WithBudget/Grid/row */cell *"] == {"turns": 900, "paths": 900}
    assert len(json.dumps(recorded[1])) < 4_000


async def test_an_exhausted_search_answers_with_the_best_candidate_its_branches_offered() -> None:
    step = Step(Function(lambda request: f"idea from {request.path}"))

    class Search:
        """Tries ideas in branches one round after another, offering each with a score, until stopped."""

        async def idea(self, state: State, score: float) -> State:
            found = await step.turn(state)
            loop.offer(found, score)
            return found

        async def run(self, state: State) -> State:
            with loop.scope("Search"):
                for round_ in range(100):
                    await loop.fan_out([functools.partial(self.idea, state, round_ * 10 + i) for i in range(3)],
                                       name=f"round{round_}")
            raise AssertionError("the budget stops the search first")

    state = await WithBudget(Search(), Budget(max_turns=7, name="search")).run(START)
    assert state.answer == "idea from WithBudget/Search/round1 3"  # the best score offered: 12 (of round 1)
    assert state.outcome is not None and state.outcome.degraded
    assert "best candidate" in state.outcome.reason and "search" in state.outcome.reason
    assert state.prefix(len(START)) == START and len(state) == len(START) + 1


async def test_a_candidate_from_another_conversation_is_not_taken_for_the_answer() -> None:
    step, _, _ = agent()

    class Stray:
        async def run(self, state: State) -> State:
            loop.offer(State().append(Role.USER, Text("elsewhere")).append(Role.ASSISTANT, Text("not ours")))
            with loop.scope("Stray"):
                return await ReAct(step, max_turns=50).run(state)

    state = await WithBudget(Stray(), Budget(max_turns=2)).run(START)
    assert state.answer != "not ours" and state.prefix(len(START)) == START


def test_offer_refuses_what_is_not_a_candidate() -> None:
    with pytest.raises(UsageError, match="offer takes the candidate's loop.State, got str"):
        loop.offer("the answer")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="score must be a number or None, got 'high'"):
        loop.offer(START, "high")  # type: ignore[arg-type]


async def test_a_candidate_the_conversation_has_moved_past_is_not_taken_for_the_answer() -> None:
    """A pattern that offered a candidate from its branches and then wrote to the conversation (notes before its
    answer stage, say) must not have that written turn replaced by the candidate when the budget runs out."""
    step = Step(Function(lambda request: f"turn at {request.path}"))

    class NotesThenAnswer:
        async def run(self, state: State) -> State:
            with loop.scope("Work"):
                with loop.branch("work"):
                    loop.offer(await step.turn(state))
                state = await step.submit(state, Role.SYSTEM, Text("notes"))
                while True:
                    state = await step.turn(state)

    recorded: list[State] = []

    async def record(state: State) -> None:
        recorded.append(state)

    with loop.main_line(recorder=record):
        state = await WithBudget(NotesThenAnswer(), Budget(max_turns=3, name="small")).run(START)
    assert state.outcome is not None and state.outcome.degraded
    assert "best candidate" not in state.outcome.reason
    assert [t.text for t in state.turns[len(START):len(START) + 1]] == ["notes"]  # the recorded turn is kept
    for earlier in recorded:
        assert state.prefix(len(earlier)).common_prefix(earlier, meta=False) == len(earlier)
