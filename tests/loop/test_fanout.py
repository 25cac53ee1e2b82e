"""``fan_out`` and ``as_completed``: branches run concurrently under a per-call limit, one result per branch."""

import functools
from typing import Any

import anyio
import pytest

import loop
from loop import BranchResult, Outcome, Request, Role, Spent, State, Step, Text, Usage, UsageError
from provider import Function

START = State().append(Role.USER, Text("hi"))


def answered(text: str) -> State:
    return START.append(Role.ASSISTANT, Text(text))


async def test_one_result_per_job_in_job_order() -> None:
    async def job(delay: float, text: str) -> State:
        await anyio.sleep(delay)
        return answered(text)

    with loop.scope("Vote"):
        results = await loop.fan_out([functools.partial(job, 0.03, "a"), functools.partial(job, 0.0, "b"),
                                      functools.partial(job, 0.01, "c")], name="sample")
    assert all(isinstance(r, BranchResult) for r in results)
    assert [r.index for r in results] == [0, 1, 2]
    assert [r.path for r in results] == ["Vote/sample 1", "Vote/sample 2", "Vote/sample 3"]
    assert [r.state.answer for r in results] == ["a", "b", "c"]  # type: ignore[union-attr]
    assert all(r.error is None and r.ok and r.outcome == Outcome("ok") for r in results)
    assert all(r.spent == Spent() for r in results), "nothing was charged"


async def test_default_name_and_empty_jobs() -> None:
    async def job() -> State:
        return answered("x")

    assert [r.path for r in await loop.fan_out([job, job])] == ["branch 1", "branch 2"]
    assert await loop.fan_out([]) == ()


async def test_each_job_runs_in_a_branch_of_its_own() -> None:
    seen: dict[int, tuple[str, bool]] = {}

    async def job(index: int) -> State:
        here = loop.current_scope()
        seen[index] = (here.path, here.on_main_line)
        return answered(str(index))

    with loop.main_line("chat"):
        await loop.fan_out([functools.partial(job, i) for i in range(3)], name="try")
    assert seen == {0: ("chat/try 1", False), 1: ("chat/try 2", False), 2: ("chat/try 3", False)}


async def test_the_outcome_of_a_branch_is_its_answers() -> None:
    async def degraded() -> State:
        return answered("late").degrade("cap")

    (result,) = await loop.fan_out([degraded])
    assert result.outcome == Outcome("degraded", "cap") and not result.ok and result.error is None


async def test_a_job_that_raises_becomes_that_branchs_error() -> None:
    async def fine() -> State:
        return answered("fine")

    async def broken() -> State:
        raise ValueError("boom")

    results = await loop.fan_out([fine, broken, fine])
    assert [r.ok for r in results] == [True, False, True]
    bad = results[1]
    assert isinstance(bad.error, ValueError) and str(bad.error) == "boom"
    assert bad.state is None and bad.path == "branch 2"
    assert bad.outcome == Outcome("failed", "ValueError: boom")


async def test_a_job_returning_something_else_than_a_state_is_an_error() -> None:
    async def wrong() -> Any:
        return "an answer"

    (result,) = await loop.fan_out([wrong])
    assert isinstance(result.error, UsageError) and "not a State" in str(result.error)
    assert result.state is None and result.outcome.status == "failed"


@pytest.mark.parametrize("jobs", ["abc", 3, None, [1]])
async def test_bad_jobs_are_refused(jobs: Any) -> None:
    with pytest.raises(UsageError):
        await loop.fan_out(jobs)


@pytest.mark.parametrize("settings", [{"limit": 0}, {"limit": True}, {"limit": 1.5}, {"name": ""}, {"name": "a/b"}])
async def test_bad_limit_or_name_is_refused(settings: dict[str, Any]) -> None:
    async def job() -> State:
        return answered("x")

    with pytest.raises(UsageError):
        await loop.fan_out([job], **settings)
    with pytest.raises(UsageError):
        loop.as_completed([job], **settings)


async def test_the_limit_bounds_concurrency() -> None:
    active = 0
    peak = 0

    async def job() -> State:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await anyio.sleep(0.01)
        active -= 1
        return answered("x")

    results = await loop.fan_out([job] * 7, limit=2)
    assert peak == 2 and len(results) == 7 and all(r.ok for r in results)
    peak = 0
    await loop.fan_out([job] * 4)
    assert peak == 4, "no limit: every job at once"


async def test_the_limit_belongs_to_each_call_so_nested_fan_outs_do_not_deadlock() -> None:
    active = 0
    peak = 0

    async def leaf() -> State:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await anyio.sleep(0.005)
        active -= 1
        return answered("leaf")

    async def middle() -> State:
        inner = await loop.fan_out([leaf, leaf], limit=1, name="inner")
        assert [r.path for r in inner] == [f"{loop.run_path()}/inner 1", f"{loop.run_path()}/inner 2"]
        return inner[-1].state  # type: ignore[return-value]

    with anyio.fail_after(1):
        results = await loop.fan_out([middle, middle], limit=1, name="outer")
    assert [r.path for r in results] == ["outer 1", "outer 2"]
    assert all(r.ok and r.state.answer == "leaf" for r in results)  # type: ignore[union-attr]
    assert peak == 1


async def test_as_completed_yields_in_completion_order() -> None:
    gates = [anyio.Event() for _ in range(3)]

    async def job(index: int) -> State:
        await gates[index].wait()
        return answered(str(index))

    order = []
    async with loop.as_completed([functools.partial(job, i) for i in range(3)]) as results:
        gates[2].set()
        async for result in results:
            order.append((result.index, result.path, result.state.answer))  # type: ignore[union-attr]
            if result.index == 2:
                gates[0].set()
            elif result.index == 0:
                gates[1].set()
    assert order == [(2, "branch 3", "2"), (0, "branch 1", "0"), (1, "branch 2", "1")]


async def test_leaving_as_completed_early_cancels_the_rest() -> None:
    started = 0
    all_started = anyio.Event()
    cancelled: list[int] = []
    finished: list[int] = []

    async def job(index: int) -> State:
        nonlocal started
        started += 1
        if started == 3:
            all_started.set()
        if index == 0:
            return answered("first")
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append(index)
            raise
        finished.append(index)
        return answered("never")

    with anyio.fail_after(1):
        async with loop.as_completed([functools.partial(job, i) for i in range(3)]) as results:
            async for result in results:
                first = result
                await all_started.wait()
                break
    assert first.index == 0 and first.state.answer == "first"  # type: ignore[union-attr]
    assert sorted(cancelled) == [1, 2] and finished == []


async def test_leaving_as_completed_early_with_a_limit_cancels_the_rest_and_starts_no_more() -> None:
    ran: list[int] = []

    async def job(index: int) -> State:
        ran.append(index)
        if index == 0:
            return answered("quick")
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    with anyio.fail_after(1):
        async with loop.as_completed([functools.partial(job, i) for i in range(5)], limit=2) as results:
            async for result in results:
                assert result.index == 0
                break
    assert 4 not in ran and len(ran) <= 3


async def test_cancelling_a_fan_out_cancels_every_branch() -> None:
    cancelled = 0

    async def job() -> State:
        nonlocal cancelled
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled += 1
            raise
        raise AssertionError("unreachable")

    with anyio.move_on_after(0.05):
        await loop.fan_out([job] * 3)
    assert cancelled == 3


async def test_each_branch_reports_what_it_spent_by_model_calls() -> None:
    def answer(request: Request) -> Any:
        n = int(request.path.split()[-1])
        return [f"answer {n}", Usage(input_tokens=10 * n, output_tokens=n)]

    step = Step(Function(answer))
    results = await loop.fan_out([functools.partial(step.turn, START)] * 3, name="sample")
    assert [r.state.answer for r in results] == ["answer 1", "answer 2", "answer 3"]  # type: ignore[union-attr]
    assert [r.spent for r in results] == [Spent(turns=1, input_tokens=10 * n, output_tokens=n) for n in (1, 2, 3)]
