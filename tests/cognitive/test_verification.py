"""WithVerification: PASS returns, FAIL retries with the report as a system turn, ERROR stops at once."""

import anyio
import pytest

from cognitive import ReAct, SingleShot, WithVerification
from loop import Role, State, Step, Text, TurnCompleted, UsageError
from loop.errors import VerificationError, VerificationFailed
from provider import Scripted
from verifier import FunctionVerifier, Result, Status, failed, passed


def ask() -> State:
    return State().append(Role.USER, Text("What is 6 * 7?"))


def says_42(state: State) -> Result:
    return passed() if state.answer and "42" in state.answer else failed("The answer must be 42.")


async def test_all_pass_returns_the_inner_state_with_a_summary() -> None:
    step = Step(Scripted(["It is 42."]))
    state = await WithVerification(ReAct(step), step, verifiers=[FunctionVerifier(says_42)]).run(ask())
    assert state.answer == "It is 42."
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT]
    assert state.outcome.data["WithVerification"] == {"retries": 0, "results": {"says_42": "pass"}}


async def test_a_failure_is_reported_as_a_system_turn_and_the_model_fixes_it() -> None:
    script = Scripted(["It is 48.", "Sorry: it is 42."])
    step = Step(script)
    seen = step.events.subscribe(buffer=None)
    state = await WithVerification(SingleShot(step), step, verifiers=[FunctionVerifier(says_42)]).run(ask())
    assert state.answer == "Sorry: it is 42."
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT, Role.SYSTEM, Role.ASSISTANT]
    report = state[2]
    assert "## says_42: FAIL" in report.text and "The answer must be 42." in report.text
    assert report.meta == {"kind": "verification", "attempt": 1}
    # The model saw the report on its second call, and the report was published like any turn.
    assert script.requests[1].turns[-1] == report
    assert report in [e.turn for e in seen.drain() if isinstance(e, TurnCompleted)]
    assert state.outcome.data["WithVerification"] == {"retries": 1, "results": {"says_42": "pass"}}


async def test_still_failing_after_max_retries_raises_with_the_final_state_and_results() -> None:
    script = Scripted(["48", "47", "46"])
    step = Step(script)
    agent = WithVerification(SingleShot(step), step, verifiers=[FunctionVerifier(says_42)], max_retries=2)
    with pytest.raises(VerificationFailed, match="says_42 still failing after 2 retries") as caught:
        await agent.run(ask())
    assert caught.value.state.answer == "46"
    assert len([t for t in caught.value.state if t.role is Role.SYSTEM]) == 2
    assert [r.status for r in caught.value.results] == [Status.FAIL]
    assert script.remaining == 0


async def test_max_retries_zero_verifies_once_without_retrying() -> None:
    step = Step(Scripted(["48"]))
    agent = WithVerification(SingleShot(step), step, verifiers=[FunctionVerifier(says_42)], max_retries=0)
    with pytest.raises(VerificationFailed, match="after 0 retries"):
        await agent.run(ask())


async def test_an_error_stops_at_once_without_retrying() -> None:
    script = Scripted(["48", "never used"])
    step = Step(script)

    def broken(state: State) -> Result:
        raise OSError("the test database is down")

    agent = WithVerification(SingleShot(step), step,
                             verifiers=[FunctionVerifier(says_42), FunctionVerifier(broken)])
    with pytest.raises(VerificationError, match="the test database is down") as caught:
        await agent.run(ask())
    assert script.used == 1
    assert {r.name: r.status for r in caught.value.results} == {"broken": Status.ERROR, "says_42": Status.FAIL}
    assert caught.value.state.answer == "48"


async def test_a_verifier_that_times_out_is_a_fail_the_model_can_fix() -> None:
    step = Step(Scripted(["loops forever", "finishes"]))

    async def hangs_on_loops(state: State) -> bool:
        if "forever" in (state.answer or ""):
            await anyio.sleep_forever()
        return True

    agent = WithVerification(SingleShot(step), step, verifiers=[FunctionVerifier(hangs_on_loops)],
                             verifier_timeout=0.05)
    state = await agent.run(ask())
    assert state.answer == "finishes"
    report = next(t for t in state if t.role is Role.SYSTEM)
    assert "did not finish within 0.05 seconds" in report.text


async def test_verifiers_run_on_every_attempt_and_all_must_pass() -> None:
    step = Step(Scripted(["42 but short", "42, and long enough to pass both checks"]))
    calls: list[str] = []

    def long_enough(state: State) -> bool:
        calls.append(state.answer or "")
        return len(state.answer or "") > 20

    agent = WithVerification(SingleShot(step), step,
                             verifiers=[FunctionVerifier(says_42), FunctionVerifier(long_enough)])
    state = await agent.run(ask())
    assert calls == ["42 but short", "42, and long enough to pass both checks"]
    assert state.outcome.data["WithVerification"]["results"] == {"long_enough": "pass", "says_42": "pass"}


async def test_wrappers_nest() -> None:
    step = Step(Scripted(["41", "42", "42!"]))

    def excited(state: State) -> bool:
        return (state.answer or "").endswith("!")

    inner = WithVerification(SingleShot(step), step, verifiers=[FunctionVerifier(says_42)])
    outer = WithVerification(inner, step, verifiers=[FunctionVerifier(excited)])
    state = await outer.run(ask())
    assert state.answer == "42!"
    assert [t.text.splitlines()[0] for t in state if t.role is Role.SYSTEM] == [
        "# Verification: 1 of 1 checks did not pass"] * 2


def test_a_gate_without_verifiers_is_refused() -> None:
    step = Step(Scripted([]))
    with pytest.raises(UsageError, match="at least one verifier"):
        WithVerification(SingleShot(step), step, verifiers=[])
    with pytest.raises(TypeError, match="verifiers"):
        WithVerification(SingleShot(step), step)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_retries": -1}, "max_retries"),
        ({"max_retries": 1.5}, "max_retries"),
        ({"verifiers": [object()]}, "not a Verifier"),
        ({"verifiers": [FunctionVerifier(says_42), FunctionVerifier(says_42)]}, "unique"),
    ],
)
def test_bad_settings_are_rejected(kwargs: dict, message: str) -> None:
    step = Step(Scripted([]))
    with pytest.raises(UsageError, match=message):
        WithVerification(SingleShot(step), step, **{"verifiers": FunctionVerifier(says_42), **kwargs})


def test_inner_and_submitter_are_checked() -> None:
    step = Step(Scripted([]))
    with pytest.raises(UsageError, match="needs a Pattern to wrap"):
        WithVerification(step, step, verifiers=FunctionVerifier(says_42))  # a step is not a pattern
    with pytest.raises(UsageError, match="TurnSubmitter"):
        WithVerification(SingleShot(step), object(), verifiers=FunctionVerifier(says_42))  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, -1, True, "300"])
def test_a_bad_verifier_timeout_is_refused_at_construction(value: object) -> None:
    step = Step(Scripted([]))
    with pytest.raises(UsageError, match="verifier_timeout must be a positive number of seconds or None"):
        WithVerification(SingleShot(step), step, verifiers=FunctionVerifier(says_42),
                         verifier_timeout=value)  # type: ignore[arg-type]


async def test_a_judge_stopped_by_the_budget_ends_in_the_budgets_degraded_answer_not_a_verification_error() -> None:
    from cognitive import SingleShot, WithBudget
    from loop import Budget
    from verifier import JudgeVerifier

    script = Scripted(["the answer", "final answer within budget"])
    step = Step(script)
    judged = WithVerification(SingleShot(step), step, verifiers=[JudgeVerifier(step, criteria="be right")])
    state = await WithBudget(judged, Budget(max_turns=1)).run(State().append(Role.USER, Text("q")))
    assert state.answer == "final answer within budget"
    assert state.degraded and "turns" in state.outcome.reason
