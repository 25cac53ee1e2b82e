"""``loop.Budget``, prices and spend, and how a step charges the budgets of its run scope.

``cognitive.WithBudget`` opens a spend per run (see ``tests/cognitive/test_budget.py``); here the spends are
made by hand, so these tests hold the ``loop`` side of the contract alone: what a step and ``loop.charge``
charge, which limits are hard and which soft.
"""

from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest

import loop
from loop import (
    PRICES,
    Budget,
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
    TurnFailed,
    Usage,
    UsageDelta,
    UsageError,
    tool,
)
from loop._budget import price_of
from loop._spend import Spend
from loop._scope import charging
from loop.errors import BudgetExhausted
from provider import Function, tool_call

START = State().append(Role.USER, Text("hi"))


def answering(model: str | None, usage: Usage, text: str = "done") -> Function:
    """A provider whose every response names the model that answered and its usage."""

    async def stream(request: Request) -> AsyncIterator[Any]:
        yield TextDelta(text)
        yield UsageDelta(usage, model=model)
        yield Finish("stop")

    return Function(stream)


# -- values ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("settings", [
    {"max_turns": 0}, {"max_turns": 1.5}, {"max_turns": True}, {"max_turns": "3"},
    {"max_tool_calls": -1}, {"max_input_tokens": 0}, {"max_output_tokens": 2.0},
    {"max_cost": 0}, {"max_cost": -0.5}, {"max_cost": "1"}, {"deadline": 0}, {"deadline": -1}, {"deadline": False},
    {"prices": {"m": (1, 2)}}, {"prices": [("m", Price(1, 2))]}, {"prices": {3: Price(1, 2)}},
])
def test_bad_budgets_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        Budget(**settings)


def test_budget_defaults_and_values() -> None:
    assert Budget() == Budget(None, None, None, None, None, None)
    assert Budget().name == "budget"
    budget = Budget(max_turns=3, max_tool_calls=2, max_input_tokens=100, max_output_tokens=50, max_cost=0.5,
                    deadline=1.5, name="research")
    assert (budget.max_turns, budget.max_tool_calls, budget.max_cost, budget.deadline) == (3, 2, 0.5, 1.5)
    with pytest.raises(AttributeError):
        budget.max_turns = 4  # type: ignore[misc]


@pytest.mark.parametrize("args", [(-1, 1), (1, "x"), (1, 1, -0.1), (True, 1)])
def test_bad_prices_are_refused(args: tuple[Any, ...]) -> None:
    with pytest.raises(UsageError):
        Price(*args)


@pytest.mark.parametrize("args", [(None, 1), (1, None), (None, None)])
def test_input_and_output_prices_are_required(args: tuple[Any, ...]) -> None:
    with pytest.raises(UsageError):
        Price(*args)


def test_a_free_model_can_be_priced_at_zero() -> None:
    free = Price(0.0, 0, cached_input=0)
    assert free.cost(Usage(1000, 1000, cache_read_tokens=500)) == 0.0


async def test_max_cost_works_with_a_free_model() -> None:
    spend = Spend(Budget(max_cost=0.01, prices={"local": Price(0, 0)}))
    step = Step(answering("local", Usage(10_000, 10_000)), options=Options(model="local"))
    with charging(spend):
        await step.turn(await step.turn(START))
    assert spend.spent.cost == 0.0 and spend.exhausted is None and spend.spent.turns == 2


def test_cost_in_dollars_per_million_tokens_with_cached_input() -> None:
    price = Price(2.50, 10.00, 1.25)
    assert price.cost(Usage(input_tokens=1_000_000)) == pytest.approx(2.50)
    assert price.cost(Usage(output_tokens=1_000_000)) == pytest.approx(10.00)
    # 600 plain input, 400 read from the cache at the cached price, 100 output.
    expected = (600 * 2.5 + 400 * 1.25 + 100 * 10) / 1e6
    assert price.cost(Usage(1000, 100, cache_read_tokens=400)) == pytest.approx(expected)
    # Without a cached price, cached input costs as plain input; a cache count above the input is capped.
    assert Price(2.0, 8.0).cost(Usage(1000, 0, cache_read_tokens=400)) == pytest.approx(1000 * 2.0 / 1e6)
    assert price.cost(Usage(100, 0, cache_read_tokens=400)) == pytest.approx(100 * 1.25 / 1e6)


def test_prices_are_found_by_exact_name_or_longest_prefix() -> None:
    assert price_of("gpt-4o", PRICES) is PRICES["gpt-4o"]
    assert price_of("gpt-4o-mini-2024-07-18", PRICES) is PRICES["gpt-4o-mini"], "longest listed prefix wins"
    assert price_of("gpt-4o-2024-08-06", PRICES) is PRICES["gpt-4o"]
    assert price_of("my-local-model", PRICES) is None and price_of(None, PRICES) is None
    custom = Budget(prices={"my-local-model": Price(1, 1), "gpt-4o": Price(9, 9)})
    assert custom.price("my-local-model") == Price(1, 1)
    assert custom.price("gpt-4o") == Price(9, 9), "prices= overrides the published list"
    assert custom.price("gpt-4.1") is PRICES["gpt-4.1"], "and adds to it"
    with pytest.raises(TypeError):
        PRICES["x"] = Price(1, 1)  # type: ignore[index]


def test_spent_adds_up_and_drops_zeros_in_json() -> None:
    total = Spent(turns=1, input_tokens=10) + Spent(turns=2, tool_calls=1, cost=0.5)
    assert total == Spent(turns=3, tool_calls=1, input_tokens=10, cost=0.5)
    assert total.to_dict() == {"turns": 3, "tool_calls": 1, "input_tokens": 10, "cost": 0.5}
    assert Spent().to_dict() == {}


async def test_a_spend_hands_out_read_only_values_and_frozen_snapshots() -> None:
    spend = Spend(Budget(name="b"), start=START)
    step = Step(answering("gpt-4o", Usage(100, 10)))
    with charging(spend):
        await step.turn(START)
    spent, by_path = spend.spent, spend.by_path
    for name in ("budget", "exhausted", "refused", "tip", "runner", "best", "unpriced", "closed"):
        with pytest.raises(AttributeError):
            setattr(spend, name, None)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        spent.turns = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        by_path["x"] = Spent()  # type: ignore[index]
    with charging(spend):
        await step.turn(START)
    assert (spent.turns, by_path[""].turns) == (1, 1), "a snapshot does not follow later charges"
    assert spend.spent.turns == 2 and spend.tip is not None and len(spend.tip) == 2 and spend.runner is step
    with pytest.raises(UsageError, match="Budget"):
        Spend("budget")  # type: ignore[arg-type]


# -- what a step charges ---------------------------------------------------------------------------------------


async def test_a_turn_is_charged_to_every_enclosing_budget_under_its_path() -> None:
    outer, inner = Spend(Budget(name="outer")), Spend(Budget(name="inner"))
    step = Step(answering("gpt-4o", Usage(100, 10)))
    with loop.scope("A"), charging(outer), loop.scope("B"), charging(inner):
        await step.turn(START)
    expected = Spent(turns=1, input_tokens=100, output_tokens=10, cost=(100 * 2.5 + 10 * 10) / 1e6)
    assert outer.spent == inner.spent == expected
    assert dict(outer.by_path) == dict(inner.by_path) == {"A/B": expected}


async def test_the_turn_limit_is_hard() -> None:
    spend = Spend(Budget(max_turns=2, name="tight"))
    asked: list[Request] = []

    def answer(request: Request) -> str:
        asked.append(request)
        return "ok"

    step = Step(Function(answer))
    state = START
    with charging(spend), step.events.subscribe(buffer=None) as sub:
        state = await step.turn(state)
        state = await step.turn(state)
        with pytest.raises(BudgetExhausted, match="budget 'tight' ran out: max_turns=2 reached") as caught:
            await step.turn(state)
        events = sub.drain()
    assert len(asked) == 2, "the call that would pass the limit is never made"
    assert caught.value.state is state and caught.value.budget is spend.budget
    assert spend.spent.turns == 2 and spend.exhausted == "max_turns=2 reached"
    assert isinstance(events[-1], TurnFailed) and events[-1].error is caught.value


async def test_token_limits_are_soft_and_a_passing_responses_calls_are_not_run() -> None:
    spend = Spend(Budget(max_output_tokens=10))
    replies = iter([[tool_call("look", {}, id="a"), Usage(5, 8)], [tool_call("look", {}, id="b"), Usage(5, 8)]])
    ran: list[str] = []

    @tool
    async def look() -> str:
        """Look."""
        ran.append("look")
        return "seen"

    step = Step(Function(lambda request: next(replies)), tools=[look])
    with charging(spend):
        state = await step.turn(START)
        assert spend.exhausted is None and ran == ["look"]
        state = await step.turn(state)
        # The second response passed the limit: it is kept and charged (the overshoot), its call answered.
        assert spend.spent.output_tokens == 16 > 10
        assert spend.exhausted == "max_output_tokens=10 passed (16 spent)"
        assert ran == ["look"]
        result = state.last.tool_results[0]  # type: ignore[union-attr]
        assert result.is_error and result.content.startswith("error: not run: budget 'budget' ran out")
        assert state.pending_calls == ()
        with pytest.raises(BudgetExhausted):
            await step.turn(state)  # the run stops at its next model call


async def test_input_token_limit_is_soft() -> None:
    spend = Spend(Budget(max_input_tokens=50))
    step = Step(answering(None, Usage(40, 1)))
    with charging(spend):
        state = await step.turn(await step.turn(START))
        assert state.answer == "done" and spend.spent.input_tokens == 80
        assert spend.exhausted == "max_input_tokens=50 passed (80 spent)"


async def test_cost_is_priced_by_the_model_that_answered() -> None:
    spend = Spend(Budget(max_cost=1.0))
    # Asked for gpt-4o; the response says gpt-4o-mini answered, with 400 of 1000 input tokens from the cache.
    step = Step(answering("gpt-4o-mini-2024-07-18", Usage(1000, 100, cache_read_tokens=400)),
                options=Options(model="gpt-4o"))
    with charging(spend):
        state = await step.turn(START)
    assert state.last.meta["model"] == "gpt-4o-mini-2024-07-18"  # type: ignore[union-attr]
    mini = PRICES["gpt-4o-mini"]
    assert spend.spent.cost == pytest.approx((600 * mini.input + 400 * mini.cached_input + 100 * mini.output) / 1e6)
    assert spend.spent.cached_tokens == 400 and spend.spent.input_tokens == 1000


async def test_custom_prices_are_used() -> None:
    spend = Spend(Budget(max_cost=0.001, prices={"house-model": Price(1.0, 2.0)}))
    step = Step(answering("house-model", Usage(600, 300)), options=Options(model="house-model"))
    with charging(spend):
        state = await step.turn(START)
        assert spend.spent.cost == pytest.approx((600 * 1.0 + 300 * 2.0) / 1e6)
        assert spend.exhausted is not None and spend.exhausted.startswith("max_cost=0.001 passed")
        with pytest.raises(BudgetExhausted, match="max_cost"):
            await step.turn(state)


async def test_max_cost_with_an_unpriced_requested_model_is_a_usage_error_before_the_call() -> None:
    asked: list[Request] = []

    def answer(request: Request) -> str:
        asked.append(request)
        return "x"

    step = Step(Function(answer), options=Options(model="my-local-model"))
    with charging(Spend(Budget(max_cost=1.0))), pytest.raises(
            UsageError, match=r"Budget\(prices=\{'my-local-model': loop.Price\(input, output\)\}\)"):
        await step.turn(START)
    unnamed = Step(Function(answer))  # neither the options nor the provider name a model
    with charging(Spend(Budget(max_cost=1.0))), pytest.raises(UsageError, match="names no model"):
        await unnamed.turn(START)
    assert asked == []


async def test_an_unpriced_answering_model_is_charged_as_unknown_and_its_answer_kept() -> None:
    step = Step(answering("surprise-model", Usage(10, 10)), options=Options(model="gpt-4o"))
    spend = Spend(Budget(max_cost=1.0))
    with charging(spend):
        state = await step.turn(START)
    assert state.answer is not None
    assert spend.unpriced == ("surprise-model",) and spend.report()["unpriced"] == ["surprise-model"]
    assert spend.spent.cost == 0 and spend.spent.input_tokens == 10


@pytest.mark.parametrize("model", ["gpt-4o-2024-08-06", "openai/gpt-4o", "openrouter/openai/gpt-4o-2024-11-20"])
def test_dated_and_prefixed_model_names_are_priced_as_their_family(model: str) -> None:
    assert Budget(max_cost=1.0).price(model) == loop.PRICES["gpt-4o"]
    assert Budget().price("gpt-4o-mini-2024-07-18") == loop.PRICES["gpt-4o-mini"]


async def test_without_max_cost_an_unpriced_model_costs_nothing() -> None:
    spend = Spend(Budget(max_turns=5))
    with charging(spend):
        await Step(answering("my-local-model", Usage(10, 10))).turn(START)
    assert spend.spent == Spent(turns=1, input_tokens=10, output_tokens=10)


async def test_without_budgets_nothing_is_charged_or_refused() -> None:
    state = START
    step = Step(answering("unpriced", Usage(10, 10)))
    for _ in range(3):
        state = await step.turn(state)
    assert loop.current_scope().budgets == ()


# -- loop.charge ------------------------------------------------------------------------------------------------


def test_charge_outside_any_budget_does_nothing() -> None:
    loop.charge(turns=5, tool_calls=5, usage=Usage(10, 10), model="unpriced")


def test_charge_outside_a_step_reaches_every_budget_under_the_current_path() -> None:
    outer, inner = Spend(Budget(max_turns=3)), Spend(Budget(max_tool_calls=1, name="inner"))
    with loop.scope("Retry"), charging(outer), charging(inner):
        loop.charge(turns=1, tool_calls=1, usage=Usage(1000, 0, cache_read_tokens=1000), model="gpt-4o")
        expected = Spent(turns=1, tool_calls=1, input_tokens=1000, cached_tokens=1000, cost=1000 * 1.25 / 1e6)
        assert outer.spent == inner.spent == expected
        assert dict(inner.by_path) == {"Retry": expected}
        with pytest.raises(BudgetExhausted, match="budget 'inner' ran out: max_tool_calls=1 reached") as caught:
            loop.charge(tool_calls=1)
    assert caught.value.budget is inner.budget and caught.value.state is None
    assert outer.spent.tool_calls == 1, "a refused call is reserved in no budget"


def test_a_spend_past_exhaustion_or_without_a_budget_counts_and_never_refuses() -> None:
    closed, tally = Spend(Budget(max_turns=1, max_tool_calls=1, name="closed")), Spend(None)
    with charging(closed), charging(tally):
        loop.charge(turns=1, tool_calls=1)
        with pytest.raises(BudgetExhausted, match="max_turns=1 reached"):
            loop.charge(turns=1)
        closed.close()  # the final answer: charged past the limits, refused nothing
        loop.charge(turns=2, tool_calls=2)
    assert closed.spent.turns == tally.spent.turns == 3 and closed.spent.tool_calls == tally.spent.tool_calls == 3
    assert closed.exhausted == "max_turns=1 reached" and tally.exhausted is None


async def test_every_provider_attempt_is_charged_retries_included() -> None:
    from loop.errors import ServerError
    from provider import Retry

    attempts = 0

    def flaky(request: Request) -> Any:
        nonlocal attempts
        attempts += 1
        return ServerError("overloaded, try again") if attempts == 1 else "answered on the second try"

    async def no_wait(seconds: float) -> None:
        return None

    spend = Spend(Budget(max_turns=5))
    step = Step(Retry(Function(flaky), sleep=no_wait))
    with charging(spend):
        state = await step.turn(START)
    assert state.answer == "answered on the second try" and attempts == 2
    assert spend.spent.turns == 2
