"""Checks for numeric settings, with one wording per kind, for anyone validating a constructor's arguments.

Each check returns the value it accepts (a number as a ``float``) and otherwise raises ``UsageError`` naming
the argument and showing the value. ``bool`` is refused everywhere: Python counts ``True`` as the ``int`` 1, but a
caller who passes it meant something else. With ``optional=True``, ``None`` passes too (usually "no limit" or
"not set") and the message says so.
"""

from __future__ import annotations

import math

from collections.abc import Callable
from typing import Any, Literal, overload

import attrs

from loop.errors import UsageError

__all__ = ["field_check", "int_at_least", "non_negative_int", "positive_int", "positive_number"]


@overload
def int_at_least(name: str, value: object, minimum: int, *, optional: Literal[False] = ...) -> int: ...
@overload
def int_at_least(name: str, value: object, minimum: int, *, optional: bool) -> int | None: ...
def int_at_least(name: str, value: object, minimum: int, *, optional: bool = False) -> int | None:
    """``value`` if it is an ``int`` of at least ``minimum``; ``None`` too when ``optional``.

    Raises ``UsageError``: "{name} must be a positive integer, got …" when ``minimum`` is 1, and
    "{name} must be an integer >= {minimum}, got …" otherwise ("… or None, got …" when ``optional``).
    """
    if value is None and optional:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
        return value
    kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    raise UsageError(f"{name} must be {kind}{' or None' if optional else ''}, got {value!r}")


@overload
def positive_int(name: str, value: object, *, optional: Literal[False] = ...) -> int: ...
@overload
def positive_int(name: str, value: object, *, optional: bool) -> int | None: ...
def positive_int(name: str, value: object, *, optional: bool = False) -> int | None:
    """``value`` if it is an ``int`` of at least 1 (a count, a size, a limit); ``None`` too when ``optional``."""
    return int_at_least(name, value, 1, optional=optional)


@overload
def non_negative_int(name: str, value: object, *, optional: Literal[False] = ...) -> int: ...
@overload
def non_negative_int(name: str, value: object, *, optional: bool) -> int | None: ...
def non_negative_int(name: str, value: object, *, optional: bool = False) -> int | None:
    """``value`` if it is an ``int`` of at least 0 (retries, an index); ``None`` too when ``optional``."""
    return int_at_least(name, value, 0, optional=optional)


@overload
def positive_number(name: str, value: object, *, unit: str | None = ...,
                    optional: Literal[False] = ...) -> float: ...
@overload
def positive_number(name: str, value: object, *, unit: str | None = ..., optional: bool) -> float | None: ...
def positive_number(name: str, value: object, *, unit: str | None = None, optional: bool = False) -> float | None:
    """``value`` as a ``float`` if it is an ``int`` or ``float`` above 0 (NaN is not); ``None`` too when ``optional``.

    Raises ``UsageError``: "{name} must be a positive number of {unit}, got …" ("… a positive number, got …"
    without a ``unit``; "… or None, got …" when ``optional``). Durations pass ``unit="seconds"``.
    """
    if value is None and optional:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    kind = f"a positive number of {unit}" if unit else "a positive number"
    raise UsageError(f"{name} must be {kind}{' or None' if optional else ''}, got {value!r}")


def non_negative_number(name: str, value: object, *, unit: str | None = None) -> float:
    """``value`` as a ``float`` if it is a finite ``int`` or ``float`` of 0 or more; else ``UsageError``: "{name} must
    be a number of {unit}, 0 or more, got …". Durations pass ``unit="seconds"``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < math.inf:
        return float(value)
    raise UsageError(f"{name} must be {f'a number of {unit}' if unit else 'a number'}, 0 or more, got {value!r}")


def field_check(check: Callable[..., object], **settings: Any) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """An attrs validator that runs ``check(field name, value, **settings)``."""
    def validate(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        check(attribute.name, value, **settings)
    return validate
