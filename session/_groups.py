"""Exception groups at public boundaries: when one error caused a task group's exception group, callers get
that error, so ``except UsageError`` works and the traceback is the error's own."""

from __future__ import annotations

import asyncio
from typing import overload

import anyio


def errors_in(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The errors inside ``group`` and the groups nested in it, cancellations left out."""
    try:
        cancelled = anyio.get_cancelled_exc_class()
    except RuntimeError:  # no event loop: a group that reached the top of the program (asyncio was its backend)
        cancelled = asyncio.CancelledError
    errors: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            errors += errors_in(exc)
        elif not isinstance(exc, cancelled):
            errors.append(exc)
    return errors


@overload
def unwrap(group: ExceptionGroup[Exception]) -> Exception: ...
@overload
def unwrap(group: BaseExceptionGroup[BaseException]) -> BaseException: ...
def unwrap(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one error ``group`` holds, looking through nested groups and past cancellations; ``group`` itself
    when it holds several errors (or none but cancellations)."""
    errors = errors_in(group)
    return errors[0] if len(errors) == 1 else group
