"""``FunctionVerifier``: a plain function as a verifier."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Union

import attrs

from loop import State, UsageError
from verifier._core import Result, Status

Check = Callable[[State], Union[Result, Status, bool, Awaitable[Union[Result, Status, bool]]]]


class FunctionVerifier:
    """Adapts ``fn(state)`` (sync or async) to the ``Verifier`` protocol.

    ``fn`` returns a ``Result`` (renamed to ``name``; see ``passed``/``failed``), a ``Status``,
    or a bool (True is PASS, False is FAIL); a FAIL or ERROR without a report gets a short one naming the check.
    A sync ``fn`` runs on the event loop, so it must be quick.
    """

    def __init__(self, fn: Check, *, name: str | None = None) -> None:
        if not callable(fn):
            raise UsageError(f"FunctionVerifier needs a function taking a State, got {fn!r}")
        if name is not None and not isinstance(name, str):
            raise UsageError(f"FunctionVerifier's name= must be a string, got {name!r}")
        name = name or getattr(fn, "__name__", None)
        if not isinstance(name, str) or not name or name == "<lambda>":
            raise UsageError("FunctionVerifier needs a name= (the function has none to borrow)")
        self.name = name
        self._fn = fn

    async def verify(self, state: State) -> Result:
        value = self._fn(state)
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, Result):
            result = value
        elif isinstance(value, Status):
            result = Result(self.name, value)
        elif isinstance(value, bool):
            result = Result(self.name, Status.PASS if value else Status.FAIL)
        else:
            return Result(self.name, Status.ERROR,
                          f"The check returned {value!r}; expected a Result, Status or bool.")
        if result.status is not Status.PASS and not result.report.strip():
            # A FAIL goes back to the model as its report; an empty one would tell it nothing.
            result = attrs.evolve(result, report=f"The check `{self.name}` reported {result.status.name}.")
        # The protocol promises a result named after the verifier; reports and retries are keyed by the name.
        return result if result.name == self.name else attrs.evolve(result, name=self.name)

    def __repr__(self) -> str:
        return f"FunctionVerifier(name={self.name!r})"
