"""Progress reports from inside a turn, for the layer that persists conversations.

A turn appends up to two turns (the assistant's, then the tool results). ``on_progress(callback)`` makes
every step running in this context await ``callback(state)`` with the partial state as soon as an assistant
turn that called tools completes (before the tools run), and again, shielded from cancellation, if the turn
is cancelled while its tools run (with "cancelled" results for the calls still open). A session uses it to
store the model's turn before slow tools run, and what happened when no state is returned at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar

from loop._state import State

ProgressCallback = Callable[[State], Awaitable[None]]
_callback: ContextVar[ProgressCallback | None] = ContextVar("loop_progress", default=None)


class on_progress:  # noqa: N801 - used as a function; a class is a cheaper context manager than a generator
    """Within the block, steps report partial states to ``callback``; an exception it raises fails the turn."""

    __slots__ = ("_callback", "_token")

    def __init__(self, callback: ProgressCallback) -> None:
        self._callback = callback

    def __enter__(self) -> None:
        self._token = _callback.set(self._callback)

    def __exit__(self, *exc_info: object) -> None:
        _callback.reset(self._token)


async def report(state: State) -> None:
    """Tell the current progress callback, if any, about ``state``."""
    callback = _callback.get()
    if callback is not None:
        await callback(state)


def reporting() -> bool:
    """Whether a progress callback is set in this context."""
    return _callback.get() is not None
