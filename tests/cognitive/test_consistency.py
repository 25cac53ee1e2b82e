"""SelfConsistency: samples as branches, a majority vote over normalised answers, one sample's turns kept."""

import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest

from cognitive import ReAct, SingleShot, WithBudget
from cognitive.everyday._consistency import SelfConsistency, normalise_answer
from loop import Budget, Delta, Options, Request, Role, State, Step, Text, Usage, UsageError, tool
from loop._spend import Spend
from loop._scope import charging
from loop.errors import BudgetExhausted, ServerError
from provider import Function, tool_call

START = State().append(Role.USER, Text("What is 6 * 7?"))


def sample_number(request: Request) -> int:
    found = re.search(r"sample (\d+)", request.path)
    assert found is not None, request.path
    return int(found.group(1))


class Model:
    """A ``Function`` provider's function answering sample ``i`` (from its run path) with ``answers[i - 1]``,
    keeping every request."""

    def __init__(self, answers: list[Any] | Callable[[Request], Any]) -> None:
        self.requests: list[Request] = []
        self._answers = answers

    def __call__(self, request: Request) -> Any:
        self.requests.append(request)
        if callable(self._answers):
            return self._answers(request)
        return self._answers[sample_number(request) - 1]


class OneChoice:
    """A provider that says nothing of itself (one choice per request): one answer per request."""

    def __init__(self, fn: Callable[[Request], Any]) -> None:
        self._inner = Function(fn)

    def stream(self, request: Request) -> AsyncIterator[Delta]:
        return self._inner.stream(request)


def data(state: State) -> Any:
    assert state.outcome is not None
    (found,) = [d for path, d in state.outcome.data.items() if path.endswith("SelfConsistency")]
    return found


# -- the vote -----------------------------------------------------------------------------------------------------


def test_the_default_normaliser() -> None:
    assert normalise_answer("  The Answer\n is   42. ") == "the answer is 42"
    assert normalise_answer("42!?") == normalise_answer("42") == "42"
    assert normalise_answer("Straße") == normalise_answer("STRASSE")


async def test_the_majority_wins_with_its_share_as_confidence() -> None:
    model = Model(["42", "It is 41.", " 42. ", "42!", "41"])
    state = await SelfConsistency(ReAct(Step(Function(model))), n=5).run(START)
    assert state.answer == "42"
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT]
    assert state.outcome is not None and state.outcome.ok
    assert data(state) == {"answer": "42", "votes": {"42": 3, "it is 41": 1, "41": 1}, "confidence": 0.6, "n": 5,
                           "answered": 5, "failed": 0, "tie": False, "sample": 1, "native": False,
                           "written": {"42": "42", "it is 41": "It is 41.", "41": "41"}}
    assert sorted(r.path for r in model.requests) == [f"SelfConsistency/sample {i}/ReAct" for i in range(1, 6)]
    assert {r.options.temperature for r in model.requests} == {0.7}


async def test_a_tie_goes_to_the_answer_the_lowest_sample_gave_whatever_order_they_finish_in() -> None:
    async def slow_first(request: Request) -> str:
        number = sample_number(request)
        await anyio.sleep(0.002 * (5 - number))  # sample 1 finishes last
        return ["blue", "green", "green", "blue", "red"][number - 1]

    for _ in range(2):
        state = await SelfConsistency(SingleShot(Step(OneChoice(slow_first))), n=5).run(START)
        assert state.answer == "blue"
        found = data(state)
        assert found["tie"] is True and found["tied"] == ["blue", "green"]
        assert found["votes"] == {"blue": 2, "green": 2, "red": 1} and found["confidence"] == 0.4
        assert found["sample"] == 1
        assert state.outcome is not None and state.outcome.ok, "a tie is reported, not degraded"


async def test_a_custom_normaliser_decides_which_answers_agree() -> None:
    def number_only(text: str) -> str:
        return "".join(re.findall(r"\d+", text))

    model = Model(["It is 41", "Forty-two, i.e. 42", "42", "The product is 42."])
    state = await SelfConsistency(ReAct(Step(Function(model))), n=4, normalise=number_only).run(START)
    assert state.answer == "Forty-two, i.e. 42", "the first sample with the winning answer is kept, as written"
    assert data(state)["votes"] == {"42": 3, "41": 1} and data(state)["confidence"] == 0.75


async def test_min_share_degrades_a_weak_majority() -> None:
    model = Model(["a", "b", "a", "c", "d"])
    state = await SelfConsistency(ReAct(Step(Function(model))), n=5, min_share=0.5).run(START)
    assert state.answer == "a" and state.degraded
    assert state.outcome is not None and "2 of 5 votes (40%), below min_share=0.5" in state.outcome.reason


async def test_a_clean_sample_is_kept_over_a_degraded_one_with_the_same_answer() -> None:
    @tool
    async def look() -> str:
        """Look."""
        return "seen"

    def answer(request: Request) -> Any:
        if sample_number(request) == 1 and request.options.tool_choice != "none":
            return tool_call("look", {})  # sample 1 hits ReAct's cap, then answers degraded
        return "42"

    state = await SelfConsistency(ReAct(Step(Function(answer), tools=[look]), max_turns=1), n=3).run(START)
    assert data(state)["sample"] == 2 and data(state)["votes"] == {"42": 3}
    assert state.outcome is not None and state.outcome.ok
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT]


# -- sampling -----------------------------------------------------------------------------------------------------


async def test_a_single_shot_on_a_provider_with_choices_is_asked_once() -> None:
    requests: list[Request] = []
    answers = iter(["42", "42", "41", "42", "40"])

    def answer(request: Request) -> Any:
        requests.append(request)
        return [next(answers), Usage(100, 2)]

    step = Step(Function(answer))
    state = await WithBudget(SelfConsistency(SingleShot(step), n=5), Budget(max_turns=1)).run(START)
    assert len({id(r) for r in requests}) == 1, "one request for all five samples"
    (request,) = {id(r): r for r in requests}.values()
    assert request.options.n == 5 and request.options.temperature == 0.7
    assert request.path == "WithBudget/SelfConsistency/samples"
    assert state.answer == "42" and state.outcome is not None and state.outcome.ok
    assert data(state)["native"] is True and data(state)["confidence"] == 0.6
    spent = state.outcome.data["WithBudget"]["spent"]
    assert spent["turns"] == 1, "the prompt was paid and charged once"


async def test_without_choices_each_sample_is_its_own_turn_with_its_own_seed() -> None:
    requests: list[Request] = []

    def answer(request: Request) -> str:
        requests.append(request)
        return "same"

    step = Step(OneChoice(answer))
    state = await SelfConsistency(SingleShot(step), n=3, temperature=0.9, seed=10).run(START)
    assert state.answer == "same" and data(state)["native"] is False
    assert sorted((r.path, r.options.seed, r.options.temperature) for r in requests) == [
        (f"SelfConsistency/sample {i}/SingleShot", 9 + i, 0.9) for i in range(1, 4)]


async def test_temperature_none_leaves_the_steps_own() -> None:
    model = Model(["x", "x"])
    step = Step(Function(model), options=Options(temperature=0.2))
    await SelfConsistency(ReAct(step), n=2, temperature=None).run(START)
    assert {r.options.temperature for r in model.requests} == {0.2}


async def test_around_react_with_tools_the_winners_tool_exchange_is_kept() -> None:
    looked: list[str] = []

    @tool
    async def lookup(key: str) -> str:
        """Look a key up."""
        looked.append(key)
        return f"value of {key}"

    def answer(request: Request) -> Any:
        number = sample_number(request)
        if request.turns[-1].role is Role.TOOL:
            return "answer A" if number != 2 else "answer B"
        return tool_call("lookup", {"key": f"k{number}"}, id=f"call{number}")

    state = await SelfConsistency(ReAct(Step(Function(answer), tools=[lookup])), n=3).run(START)
    assert sorted(looked) == ["k1", "k2", "k3"], "every sample ran its tools"
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert [c.id for c in state[1].tool_calls] == ["call1"]
    assert [r.content for r in state[2].tool_results] == ["value of k1"]
    assert state.answer == "answer A" and not state.pending_calls
    text = " ".join(t.text + " ".join(r.content for r in t.tool_results) for t in state)
    assert "k2" not in text and "k3" not in text and "answer B" not in text, "no other sample's turns"


async def test_the_kept_sample_extends_the_callers_state() -> None:
    earlier = START.append(Role.ASSISTANT, Text("6 * 7 = 42")).append(Role.USER, Text("And 6 * 8?"))
    state = await SelfConsistency(ReAct(Step(Function(Model(["48", "48"])))), n=2).run(earlier)
    assert state.turns[:3] == earlier.turns and len(state) == 4 and state.answer == "48"


# -- failures and budgets -----------------------------------------------------------------------------------------


async def test_failed_samples_degrade_the_vote_and_are_counted() -> None:
    def answer(request: Request) -> Any:
        if sample_number(request) in (1, 4):
            raise ServerError("the model is down")
        return "42"

    state = await SelfConsistency(ReAct(Step(Function(answer))), n=5).run(START)
    assert state.answer == "42" and state.degraded
    assert data(state)["failed"] == 2 and data(state)["answered"] == 3 and data(state)["sample"] == 2
    assert data(state)["confidence"] == 0.6, "a failed sample counts against the winner"
    assert state.outcome is not None
    assert "2 of 5 samples failed (sample 1: ServerError: the model is down); the vote is over the other 3" \
        in state.outcome.reason


async def test_every_sample_failing_raises_the_first_error() -> None:
    def answer(request: Request) -> Any:
        raise ServerError(f"down for sample {sample_number(request)}")

    with pytest.raises(ServerError, match="down for sample 1") as caught:
        await SelfConsistency(ReAct(Step(Function(answer))), n=3).run(START)
    assert any("all 3 samples failed" in note for note in caught.value.__notes__)


async def test_a_provider_error_in_native_sampling_is_every_samples_error() -> None:
    def answer(request: Request) -> Any:
        raise ServerError("down")

    with pytest.raises(ServerError, match="down"):
        await SelfConsistency(SingleShot(Step(Function(answer))), n=3).run(START)


async def test_a_budget_hit_during_sampling_ends_in_the_budgets_degraded_answer() -> None:
    @tool
    async def look() -> str:
        """Look."""
        await anyio.sleep(0.001)
        return "seen"

    def answer(request: Request) -> Any:
        if request.options.tool_choice == "none":
            return "what I have so far"
        if request.turns[-1].role is Role.TOOL:
            return "42"
        return tool_call("look", {})

    model = Model(answer)
    step = Step(Function(model), tools=[look])
    pattern = WithBudget(SelfConsistency(ReAct(step), n=5), Budget(max_turns=3, name="shared"), step=step)
    with anyio.fail_after(2):
        state = await pattern.run(START)
    assert state.answer == "what I have so far" and state.degraded
    assert state.outcome is not None and "budget 'shared' ran out (max_turns=3 reached)" in state.outcome.reason
    assert [t.role for t in state] == [Role.USER, Role.SYSTEM, Role.ASSISTANT], "no sample reached the conversation"
    assert len(model.requests) == 4, "three sample turns, then the final answer"
    assert model.requests[-1].path == "WithBudget"


async def test_a_callers_budget_running_out_is_raised_not_voted_over() -> None:
    spend = Spend(Budget(max_turns=2))
    with charging(spend), pytest.raises(BudgetExhausted):
        await SelfConsistency(ReAct(Step(Function(Model(["a"] * 5)))), n=5, limit=1).run(START)


# -- settings -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"n": 0}, "n must be a positive integer"),
    ({"n": 2.5}, "n must be"),
    ({"temperature": 3}, "temperature"),
    ({"seed": "1"}, "seed"),
    ({"normalise": "casefold"}, "normalise"),
    ({"min_share": 0}, "min_share"),
    ({"min_share": 1.5}, "min_share"),
    ({"limit": 0}, "limit"),
])
def test_bad_settings_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        SelfConsistency(ReAct(Step(Function(lambda r: "x"))), **kwargs)


def test_inner_must_be_a_pattern_and_settings_are_keyword_only() -> None:
    step = Step(Function(lambda r: "x"))
    with pytest.raises(UsageError, match="needs a Pattern to wrap"):
        SelfConsistency(step)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        SelfConsistency(ReAct(step), 3)  # type: ignore[misc]


def test_repr_shows_the_settings() -> None:
    step = Step(Function(lambda r: "x"))
    assert repr(SelfConsistency(ReAct(step), n=3, seed=1, min_share=0.5)) == (
        f"SelfConsistency({ReAct(step)!r}, n=3, temperature=0.7, seed=1, min_share=0.5)")


async def test_a_normaliser_returning_something_else_is_a_usage_error() -> None:
    pattern = SelfConsistency(ReAct(Step(Function(lambda r: "x"))), n=2, normalise=len)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="must return a str"):
        await pattern.run(START)


async def test_the_run_is_traced(spans: Any) -> None:
    await SelfConsistency(ReAct(Step(Function(Model(["a", "a", "b"])))), n=3).run(START)
    (span,) = [s for s in spans.get_finished_spans() if s.name == "invoke_agent SelfConsistency"]
    assert span.attributes["self_consistency.n"] == 3
    assert span.attributes["self_consistency.confidence"] == pytest.approx(2 / 3)
