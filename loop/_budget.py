"""Budgets: frozen limits (``Budget``), prices (``Price``), and what was spent (``Spent``); the live spend
charged against them is ``loop._spend``'s.

Every provider attempt and every tool call is charged to every budget of the run scope it happens in (see
``loop._scope``). Turns and tool calls are reserved before the call, so those limits are hard: the call that
would pass one is never made. Tokens and cost are known only once a response is complete, so those limits
are soft: calls already in flight when one is passed still finish and are charged, so the spend may
overshoot by what those calls used (at most one response per concurrent branch).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import attrs

from loop import tracing
from loop.checks import field_check, positive_int, positive_number
from loop._parts import Usage
from loop.errors import UsageError

if TYPE_CHECKING:
    pass


_log = tracing.logger("loop.budget")

# A budget's limits; None is no limit.
_count = field_check(positive_int, optional=True)
_dollars = field_check(positive_number, unit="US dollars", optional=True)
_seconds = field_check(positive_number, unit="seconds", optional=True)


def _price(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise UsageError(f"{attribute.name} must be a price >= 0 (US dollars per million tokens), got {value!r}")


def _required_price(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        raise UsageError(f"{attribute.name} must be a price >= 0 (US dollars per million tokens), got None")
    _price(instance, attribute, value)


@attrs.frozen
class Price:
    """What a model charges, in US dollars per million tokens (0 for a free or local model).

    ``cached_input`` is the price of input read from the provider's prompt cache (``Usage.cache_read_tokens``),
    and ``cache_write`` the price of input written to it (``Usage.cache_write_tokens``: Anthropic charges 1.25
    times the input price for its 5-minute cache; OpenAI charges nothing extra); ``None`` charges either as
    plain input. Both counts are within ``Usage.input_tokens``, which counts every input token."""

    input: float = attrs.field(validator=_required_price)
    output: float = attrs.field(validator=_required_price)
    cached_input: float | None = attrs.field(default=None, validator=_price)
    cache_write: float | None = attrs.field(default=None, validator=_price)

    def cost(self, usage: Usage) -> float:
        """US dollars for ``usage``: plain input, cache reads, cache writes and output, each at its price (cache
        counts above the input are capped to it, reads first)."""
        read = min(usage.cache_read_tokens, usage.input_tokens)
        written = min(usage.cache_write_tokens, usage.input_tokens - read)
        read_price = self.input if self.cached_input is None else self.cached_input
        write_price = self.input if self.cache_write is None else self.cache_write
        return ((usage.input_tokens - read - written) * self.input + read * read_price + written * write_price
                + usage.output_tokens * self.output) / 1_000_000


# Published list prices of a few widely used models (USD per million tokens: input, output, cache reads,
# cache writes). Pass ``Budget(prices=...)`` for any other model, or to correct one: a model is matched by its
# name or by the longest listed name it starts with (so dated snapshots like ``gpt-4o-mini-2024-07-18`` find
# ``gpt-4o-mini``, and ``claude-opus-4-1`` finds ``claude-opus-4``). OpenAI charges nothing for cache writes;
# Anthropic's are its 5-minute cache's (1.25 times input; reads 0.1 times).
PRICES: Mapping[str, Price] = MappingProxyType({
    "gpt-4o": Price(2.50, 10.00, 1.25),
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "gpt-4.1": Price(2.00, 8.00, 0.50),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "claude-3-5-haiku": Price(0.80, 4.00, 0.08, 1.00),
    "claude-3-5-sonnet": Price(3.00, 15.00, 0.30, 3.75),
    "claude-3-7-sonnet": Price(3.00, 15.00, 0.30, 3.75),
    "claude-sonnet-4": Price(3.00, 15.00, 0.30, 3.75),
    "claude-opus-4": Price(15.00, 75.00, 1.50, 18.75),
    "claude-opus-4-5": Price(5.00, 25.00, 0.50, 6.25),
    "claude-opus-4-6": Price(5.00, 25.00, 0.50, 6.25),
    "claude-haiku-4-5": Price(1.00, 5.00, 0.10, 1.25),
})


def price_of(model: str | None, prices: Mapping[str, Price]) -> Price | None:
    """The price of ``model`` in ``prices``: by exact name, else by the longest name it starts with (its family:
    ``gpt-4o-2024-08-06`` is priced as ``gpt-4o``); a name with a router's prefix (``openai/gpt-4o``) is also
    looked up without it."""
    if not model:
        return None
    found = prices.get(model)
    if found is not None:
        return found
    best = ""
    for name in prices:
        if len(name) > len(best) and model.startswith(name):
            best = name
    if best:
        return prices[best]
    return price_of(model.rsplit("/", 1)[1], prices) if "/" in model else None


def _prices(value: Mapping[str, Price] | None) -> Mapping[str, Price] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, Price) for k, v in value.items()):
        raise UsageError(f"prices must map model names to loop.Price values, got {value!r}")
    return MappingProxyType(dict(value))


@attrs.frozen
class Budget:
    """Limits for one run: provider attempts (``max_turns``), tool calls, input and output tokens, cost in US
    dollars (``max_cost``, priced by the model that answered; see ``PRICES``), and a ``deadline`` in seconds
    from the start of the run. ``None`` means no limit. ``prices`` adds to or overrides ``PRICES``.

    Turn and tool-call limits are hard (reserved before the call); token and cost limits are soft (checked
    after each response, so concurrent calls in flight may overshoot them). Open a spend for a run with
    ``cognitive.WithBudget``.
    """

    max_turns: int | None = attrs.field(default=None, validator=_count)
    max_tool_calls: int | None = attrs.field(default=None, validator=_count)
    max_input_tokens: int | None = attrs.field(default=None, validator=_count)
    max_output_tokens: int | None = attrs.field(default=None, validator=_count)
    max_cost: float | None = attrs.field(default=None, validator=_dollars)
    deadline: float | None = attrs.field(default=None, validator=_seconds)
    name: str = attrs.field(default="budget", kw_only=True)
    prices: Mapping[str, Price] | None = attrs.field(default=None, converter=_prices, kw_only=True, eq=False)

    def price(self, model: str | None) -> Price | None:
        if self.prices is not None:
            found = price_of(model, self.prices)
            if found is not None:
                return found
        return price_of(model, PRICES)


@attrs.frozen
class Spent:
    """What was spent: provider attempts, tool calls, tokens (``cached_tokens`` read from a prompt cache,
    counted within ``input_tokens``) and cost in US dollars (0 for models with no known price)."""

    turns: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0

    def __add__(self, other: Spent) -> Spent:
        if not isinstance(other, Spent):
            return NotImplemented
        return Spent(*(a + b for a, b in zip(attrs.astuple(self), attrs.astuple(other))))

    def to_dict(self) -> dict[str, Any]:
        """The non-zero fields, as JSON data."""
        return _row_dict(attrs.astuple(self))


_FIELDS = ("turns", "tool_calls", "input_tokens", "output_tokens", "cached_tokens", "cost")


def _row_dict(row: Any) -> dict[str, Any]:
    return {name: value for name, value in zip(_FIELDS, row) if value}
