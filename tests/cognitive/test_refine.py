"""SelfRefine: answer, critique, revise; the critic passing ends it, running out of iterations degrades it."""

from typing import Any

import pytest

from cognitive import ReAct, SingleShot, WithBudget
from cognitive.everyday._refine import SelfRefine
from loop import Budget, Request, Role, State, Step, Text, TurnKind, UsageError
from loop.errors import VerificationError
from provider import Function, Scripted
from verifier import FunctionVerifier, Result, failed, passed

START = State().append(Role.USER, Text("Write a haiku about rain."))


def wants_better(state: State) -> Result:
    return passed() if "better" in (state.answer or "") else failed("Too vague: name a sound the rain makes.")


def data(state: State) -> Any:
    assert state.outcome is not None
    return state.outcome.data["SelfRefine"]


async def test_the_critic_passing_on_the_second_iteration_ends_the_run() -> None:
    script = Scripted(["a draft", "a better draft"])
    step = Step(script)
    state = await SelfRefine(SingleShot(step), step, FunctionVerifier(wants_better)).run(START)
    assert state.answer == "a better draft"
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT, Role.SYSTEM, Role.ASSISTANT]
    feedback = state[2]
    assert feedback.kind == TurnKind.VERIFICATION and feedback.meta["attempt"] == 1
    assert "Too vague: name a sound the rain makes." in feedback.text and "revised answer" in feedback.text
    assert script.requests[1].turns[-1] == feedback, "the revision saw the draft and the critique"
    assert state.outcome is not None and state.outcome.ok
    assert data(state) == {"iterations": 2, "passed": True, "critic": "wants_better"}


async def test_a_critic_that_never_passes_degrades_the_last_answer_instead_of_raising() -> None:
    script = Scripted(["one", "two", "three", "never asked"])
    step = Step(script)
    state = await SelfRefine(SingleShot(step), step, FunctionVerifier(wants_better), max_iters=3).run(START)
    assert state.answer == "three" and state.degraded
    assert script.used == 3, "at most max_iters answers"
    assert len([t for t in state if t.kind == TurnKind.VERIFICATION]) == 2
    assert state.outcome is not None
    assert state.outcome.reason == "critic wants_better still not satisfied after 3 iterations"
    assert data(state) == {"iterations": 3, "passed": False, "critic": "wants_better",
                           "feedback": "Too vague: name a sound the rain makes."}


async def test_one_iteration_critiques_once() -> None:
    step = Step(Scripted(["one"]))
    state = await SelfRefine(SingleShot(step), step, FunctionVerifier(wants_better), max_iters=1).run(START)
    assert state.degraded and [t.role for t in state] == [Role.USER, Role.ASSISTANT]
    assert state.outcome is not None and state.outcome.reason.endswith("after 1 iteration")


async def test_a_critic_error_raises_at_once() -> None:
    script = Scripted(["draft", "never asked"])
    step = Step(script)

    def broken(state: State) -> Result:
        raise ConnectionError("the judge's endpoint is down")

    with pytest.raises(VerificationError, match="critic broken could not run.*endpoint is down") as caught:
        await SelfRefine(SingleShot(step), step, FunctionVerifier(broken)).run(START)
    assert script.used == 1 and caught.value.state.answer == "draft"


async def test_a_judge_critics_model_calls_stay_out_of_the_conversation() -> None:
    requests: list[Request] = []

    def model(request: Request) -> str:
        requests.append(request)
        if "verify:judge" in request.path:
            return "GOOD" if "second" in request.turns[-2].text else "BAD: too short"
        return "second answer" if any(t.role is Role.SYSTEM for t in request.turns) else "first answer"

    step = Step(Function(model))

    async def judge(state: State) -> Result:
        judged = await step.turn(state.append(Role.USER, Text("Judge the answer above: GOOD or BAD: why.")))
        verdict = judged.answer or ""
        return passed() if verdict.startswith("GOOD") else failed(verdict)

    state = await SelfRefine(ReAct(step), step, FunctionVerifier(judge)).run(START)
    assert state.answer == "second answer" and state.outcome is not None and state.outcome.ok
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT, Role.SYSTEM, Role.ASSISTANT]
    assert "BAD: too short" in state[2].text
    assert all("GOOD" not in t.text and "Judge the answer" not in t.text for t in state)
    assert [r.path for r in requests] == ["SelfRefine/ReAct", "SelfRefine/verify:judge", "SelfRefine/ReAct",
                                          "SelfRefine/verify:judge"]


async def test_a_budget_running_out_in_the_critic_ends_in_the_budgets_answer() -> None:
    def model(request: Request) -> str:
        return "budget answer" if request.options.tool_choice == "none" else "draft"

    step = Step(Function(model))

    async def judge(state: State) -> Result:
        await step.turn(state.append(Role.USER, Text("judge it")))  # refused: the budget allows one turn
        return passed()

    pattern = WithBudget(SelfRefine(SingleShot(step), step, FunctionVerifier(judge)), Budget(max_turns=1), step=step)
    state = await pattern.run(START)
    assert state.answer == "budget answer" and state.degraded
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT, Role.SYSTEM, Role.ASSISTANT]
    assert state[1].text == "draft", "the final answer was written from the main line's last state"


async def test_a_degraded_inner_run_stays_degraded_when_the_critic_passes() -> None:
    class Capped:
        async def run(self, state: State) -> State:
            return state.append(Role.ASSISTANT, Text("better, but capped")).degrade("cap reached")

    state = await SelfRefine(Capped(), Step(Scripted([])), FunctionVerifier(wants_better)).run(START)
    assert state.degraded and state.outcome is not None and state.outcome.reason == "cap reached"
    assert data(state)["passed"] is True


async def test_a_custom_prompt_carries_the_feedback() -> None:
    step = Step(Scripted(["draft", "better"]))
    state = await SelfRefine(SingleShot(step), step, FunctionVerifier(wants_better),
                             prompt="Fix this: {feedback}").run(START)
    assert state[2].text == "Fix this: Too vague: name a sound the rain makes."


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_iters": 0}, "max_iters"),
    ({"max_iters": True}, "max_iters"),
    ({"critic_timeout": 0}, "critic_timeout"),
    ({"prompt": "no placeholder"}, "prompt must contain {feedback}"),
    ({"prompt": "{feedback} {other}"}, "prompt may use only {feedback}"),
])
def test_bad_settings_are_refused(kwargs: dict[str, Any], message: str) -> None:
    step = Step(Scripted([]))
    with pytest.raises(UsageError, match=message):
        SelfRefine(SingleShot(step), step, FunctionVerifier(wants_better), **kwargs)


def test_wiring_is_checked() -> None:
    step = Step(Scripted([]))
    critic = FunctionVerifier(wants_better)
    with pytest.raises(UsageError, match="needs a Pattern to wrap"):
        SelfRefine(step, step, critic)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="TurnSubmitter"):
        SelfRefine(SingleShot(step), object(), critic)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="one Verifier"):
        SelfRefine(SingleShot(step), step, [critic])  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="must be a verifier.Verifier"):
        SelfRefine(SingleShot(step), step, object())  # type: ignore[arg-type]


def test_repr() -> None:
    step = Step(Scripted([]))
    pattern = SelfRefine(SingleShot(step), step, FunctionVerifier(wants_better), max_iters=2)
    assert repr(pattern) == f"SelfRefine({SingleShot(step)!r}, critic='wants_better', max_iters=2)"
