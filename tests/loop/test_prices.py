"""``loop.Price`` with prompt caching: reads and writes each at its rate, the list rates in ``PRICES``, a budget
charged for cached input, and the span attributes a response's usage becomes."""

from collections.abc import AsyncIterator
from typing import Any

import pytest

from loop import (PRICES, Budget, Finish, Options, Price, Request, Role, State, Step, Text, TextDelta, Usage,
                  UsageDelta, UsageError)
from loop import tracing
from loop._budget import price_of
from loop._scope import charging
from loop._spend import Spend
from provider import Function

START = State().append(Role.USER, Text("hi"))


def test_cache_reads_and_writes_are_each_charged_at_their_price() -> None:
    price = Price(3.00, 15.00, cached_input=0.30, cache_write=3.75)
    # 10,000 input tokens: 8,000 read from the cache, 1,500 written to it, 500 plain; 200 output.
    usage = Usage(10_000, 200, cache_read_tokens=8_000, cache_write_tokens=1_500)
    assert price.cost(usage) == pytest.approx((500 * 3.00 + 8_000 * 0.30 + 1_500 * 3.75 + 200 * 15.00) / 1e6)
    assert Price(3.00, 15.00, 0.30, 3.75) == price, "the write price is the fourth, after the read price"


def test_without_a_write_price_writes_cost_as_plain_input() -> None:
    usage = Usage(10_000, 0, cache_read_tokens=8_000, cache_write_tokens=1_500)
    assert Price(2.00, 8.00, 0.50).cost(usage) == pytest.approx((2_000 * 2.00 + 8_000 * 0.50) / 1e6)
    assert Price(2.00, 8.00).cost(usage) == pytest.approx(10_000 * 2.00 / 1e6)


def test_cache_counts_above_the_input_are_capped_reads_first() -> None:
    price = Price(1.00, 0, cached_input=0.10, cache_write=1.25)
    assert price.cost(Usage(1_000, 0, cache_read_tokens=800, cache_write_tokens=800)) == pytest.approx(
        (800 * 0.10 + 200 * 1.25) / 1e6)
    assert price.cost(Usage(100, 0, cache_write_tokens=400)) == pytest.approx(100 * 1.25 / 1e6)


@pytest.mark.parametrize("value", [-1, "3.75", True])
def test_a_bad_write_price_is_refused(value: Any) -> None:
    with pytest.raises(UsageError, match="cache_write"):
        Price(3.00, 15.00, 0.30, value)


def test_listed_anthropic_models_write_at_1_25x_and_read_at_0_1x_and_openai_has_no_write_charge() -> None:
    for name, price in PRICES.items():
        if name.startswith("claude"):
            assert price.cache_write == pytest.approx(price.input * 1.25), name
            assert price.cached_input == pytest.approx(price.input * 0.1), name
        else:
            assert price.cache_write is None, name  # OpenAI charges writes as plain input: nothing extra


def test_newer_claude_models_find_their_own_prices_not_their_elders() -> None:
    assert price_of("claude-opus-4-5-20251101", PRICES) == Price(5.00, 25.00, 0.50, 6.25)
    assert price_of("claude-opus-4-1-20250805", PRICES) is PRICES["claude-opus-4"]
    assert price_of("claude-haiku-4-5", PRICES) == Price(1.00, 5.00, 0.10, 1.25)
    assert price_of("claude-sonnet-4-5", PRICES) is PRICES["claude-sonnet-4"]


def answering(model: str, usage: Usage) -> Function:
    async def stream(request: Request) -> AsyncIterator[Any]:
        yield TextDelta("done")
        yield UsageDelta(usage, model=model)
        yield Finish("stop")

    return Function(stream)


async def test_a_budget_charges_cached_input_at_the_models_cache_prices() -> None:
    usage = Usage(10_000, 100, cache_read_tokens=6_000, cache_write_tokens=3_000)
    spend = Spend(Budget(max_cost=1.0))
    with charging(spend):
        await Step(answering("claude-sonnet-4-5", usage), options=Options(model="claude-sonnet-4-5")).turn(START)
    expected = (1_000 * 3.00 + 6_000 * 0.30 + 3_000 * 3.75 + 100 * 15.00) / 1e6
    assert spend.spent.cost == pytest.approx(expected)
    assert spend.spent.cached_tokens == 6_000 and spend.spent.input_tokens == 10_000
    assert spend.report()["spent"]["cost"] == pytest.approx(expected)


def test_usage_becomes_genai_span_attributes_with_the_cache_counts_and_the_cost() -> None:
    usage = Usage(10_000, 100, cache_read_tokens=6_000, cache_write_tokens=3_000)
    assert tracing.usage_attributes(usage, 0.0165) == {
        "gen_ai.usage.input_tokens": 10_000,
        "gen_ai.usage.output_tokens": 100,
        "gen_ai.usage.cache_read.input_tokens": 6_000,
        "gen_ai.usage.cache_creation.input_tokens": 3_000,
        "cognitive_loop.usage.cost": 0.0165,
    }
    # No cache counts and no known cost: only the token counts.
    assert tracing.usage_attributes(Usage(11, 7)) == {"gen_ai.usage.input_tokens": 11,
                                                      "gen_ai.usage.output_tokens": 7}
