"""Progress reports from inside a turn, for the layer that persists conversations.

A turn appends up to two turns (the assistant's, then the tool results). A step given a progress callback
(``Step.turn(..., progress=callback)``, or ``on_progress(callback)`` around the call) awaits ``callback(state)``
with the partial state as soon as an assistant turn that called tools completes (before the tools run), and
again, shielded from cancellation, if the turn is cancelled while its tools run (with "cancelled" results for
the calls still open). A session uses it to store the model's turn before slow tools run, and what happened
when no state is returned at all.

Only the outermost step reports: a step whose tools run another agent (a sub-agent with its own steps and its
own conversation) holds the callback while they run, so the inner steps never report their unrelated states.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar

from loop._state import State
from loop.errors import UsageError

ProgressCallback = Callable[[State], Awaitable[None]]


class _Claim:
    """The callback of one ``on_progress`` block, and whether a step running in it is reporting to it."""

    __slots__ = ("callback", "held")

    def __init__(self, callback: ProgressCallback) -> None:
        self.callback = callback
        self.held = False


_current: ContextVar[_Claim | None] = ContextVar("loop_progress", default=None)


class on_progress:  # noqa: N801 - used as a function; a class is a cheaper context manager than a generator
    """Within the block, a step reports partial states to ``callback``; an exception it raises fails the turn.

    For a step's own turn, not for steps its tools run (see the module notes)."""

    __slots__ = ("_callback", "_token")

    def __init__(self, callback: ProgressCallback) -> None:
        if not callable(callback):
            raise UsageError(f"on_progress needs an async callback taking a State, got {callback!r}")
        self._callback = callback

    def __enter__(self) -> None:
        self._token = _current.set(_Claim(self._callback))

    def __exit__(self, *exc_info: object) -> None:
        _current.reset(self._token)


def claim() -> _Claim | None:
    """For a step starting a turn: this context's progress claim, now held, or ``None`` when there is none or
    an outer step holds it. The step sets ``held = False`` when its turn ends."""
    found = _current.get()
    if found is None or found.held:
        return None
    found.held = True
    return found
