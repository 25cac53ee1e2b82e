"""The numeric checks: one wording per kind, ``bool`` and non-numbers refused, ``None`` only when optional."""

import math
from typing import Any

import pytest

from loop import Budget, EventBus, Options, ToolPipeline, UsageError, tool
from loop.checks import int_at_least, non_negative_int, positive_int, positive_number

NOT_NUMBERS = [True, False, "3", b"3", [3], None, object()]


@pytest.mark.parametrize("value", [1, 2, 10**30])
def test_positive_int_returns_the_value(value: int) -> None:
    assert positive_int("size", value) == value
    assert type(positive_int("size", value)) is int


@pytest.mark.parametrize("value", [0, -1, 1.0, 2.5, math.nan, *NOT_NUMBERS])
def test_positive_int_refuses(value: Any) -> None:
    with pytest.raises(UsageError) as raised:
        positive_int("size", value)
    assert str(raised.value) == f"size must be a positive integer, got {value!r}"


@pytest.mark.parametrize("value", [0, 1, 7])
def test_non_negative_int_returns_the_value(value: int) -> None:
    assert non_negative_int("max_retries", value) == value


@pytest.mark.parametrize("value", [-1, 0.0, 1.5, *NOT_NUMBERS])
def test_non_negative_int_refuses(value: Any) -> None:
    with pytest.raises(UsageError) as raised:
        non_negative_int("max_retries", value)
    assert str(raised.value) == f"max_retries must be an integer >= 0, got {value!r}"


def test_int_at_least_names_its_minimum() -> None:
    assert int_at_least("max_result_bytes", 1024, 1024) == 1024
    for value in (1023, 2048.0, True, "2048", None):
        with pytest.raises(UsageError) as raised:
            int_at_least("max_result_bytes", value, 1024)
        assert str(raised.value) == f"max_result_bytes must be an integer >= 1024, got {value!r}"


def test_int_at_least_one_and_zero_word_as_the_named_checks() -> None:
    with pytest.raises(UsageError, match="^n must be a positive integer, got 0$"):
        int_at_least("n", 0, 1)
    with pytest.raises(UsageError, match=r"^n must be an integer >= 0, got -1$"):
        int_at_least("n", -1, 0)


@pytest.mark.parametrize(("value", "expected"), [(1, 1.0), (0.5, 0.5), (1e-9, 1e-9), (math.inf, math.inf)])
def test_positive_number_returns_a_float(value: float, expected: float) -> None:
    got = positive_number("timeout", value, unit="seconds")
    assert got == expected and type(got) is float


@pytest.mark.parametrize("value", [0, 0.0, -1, -0.5, math.nan, *NOT_NUMBERS])
def test_positive_number_refuses(value: Any) -> None:
    with pytest.raises(UsageError) as raised:
        positive_number("timeout", value, unit="seconds")
    assert str(raised.value) == f"timeout must be a positive number of seconds, got {value!r}"
    with pytest.raises(UsageError) as raised:
        positive_number("per_second", value)
    assert str(raised.value) == f"per_second must be a positive number, got {value!r}"


def test_optional_lets_none_through_and_says_so() -> None:
    assert positive_int("limit", None, optional=True) is None
    assert non_negative_int("limit", None, optional=True) is None
    assert int_at_least("limit", None, 5, optional=True) is None
    assert positive_number("timeout", None, unit="seconds", optional=True) is None
    assert positive_int("limit", 3, optional=True) == 3
    assert positive_number("timeout", 2, optional=True) == 2.0
    with pytest.raises(UsageError, match=r"^limit must be a positive integer or None, got True$"):
        positive_int("limit", True, optional=True)
    with pytest.raises(UsageError, match=r"^retries must be an integer >= 0 or None, got -1$"):
        non_negative_int("retries", -1, optional=True)
    with pytest.raises(UsageError, match=r"^timeout must be a positive number of seconds or None, got '1'$"):
        positive_number("timeout", "1", unit="seconds", optional=True)


def test_none_is_refused_unless_optional() -> None:
    for check in (positive_int, non_negative_int):
        with pytest.raises(UsageError, match=r"must be .*, got None$"):
            check("n", None)
    with pytest.raises(UsageError, match=r"^timeout must be a positive number of seconds, got None$"):
        positive_number("timeout", None, unit="seconds")


def _sum(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@pytest.mark.parametrize("make", [
    lambda: ToolPipeline(max_result_chars=True),
    lambda: ToolPipeline(timeout=True),
    lambda: tool(timeout=True)(_sum),
    lambda: tool(timeout="5")(_sum),
    lambda: EventBus().subscribe(buffer=True),
    lambda: Budget(max_turns=True),
    lambda: Budget(deadline=False),
    lambda: Options(max_tokens=True),
])
def test_loop_settings_refuse_bools_and_strings(make: Any) -> None:
    with pytest.raises(UsageError, match="must be a positive"):
        make()
