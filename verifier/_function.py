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

    ``fn`` returns a ``Result`` (an empty name is replaced by ``name``; see ``passed``/``failed``), a ``Status``,
    or a bool (True is PASS, False is FAIL). A sync ``fn`` runs on the event loop, so it must be quick.
    """

    def __init__(self, fn: Check, *, name: str | None = None) -> None:
        if not callable(fn):
            raise UsageError(f"FunctionVerifier needs a function taking a State, got {fn!r}")
        name = name or getattr(fn, "__name__", None)
        if not name or name == "<lambda>":
            raise UsageError("FunctionVerifier needs a name= (the function has none to borrow)")
        self.name = name
        self._fn = fn

    async def verify(self, state: State) -> Result:
        value = self._fn(state)
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, Result):
            return value if value.name else attrs.evolve(value, name=self.name)
        if isinstance(value, Status):
            return Result(self.name, value)
        if isinstance(value, bool):
            return Result(self.name, Status.PASS if value else Status.FAIL)
        return Result(self.name, Status.ERROR, f"the check returned {value!r}; expected a Result, Status or bool")

    def __repr__(self) -> str:
        return f"FunctionVerifier(name={self.name!r})"
