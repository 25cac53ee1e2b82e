"""Progress reports from inside a turn, for the layer that persists conversations.

A turn appends up to two turns (the assistant's, then the tool results). A step given a progress callback
(``Step.turn(..., progress=callback)``, or ``on_progress(callback)`` around the call) awaits ``callback(state)``
with the partial state as soon as an assistant turn that called tools completes (before the tools run), and
again, shielded from cancellation, if the turn is cancelled while its tools run (with "cancelled" results for
the calls still open). A session uses it to store the model's turn before slow tools run, and what happened
when no state is returned at all.

A callback reaches the steps run in the block, and not the steps *they* run: a turn hides the enclosing
callback from everything it runs (its provider, its tools, and any agent a tool runs, with its own steps and
its own conversation), so inner steps never report their unrelated states into it. Steps run side by side in
the block (in tasks of their own) each report.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar, Token

from loop._state import State
from loop.errors import UsageError

ProgressCallback = Callable[[State], Awaitable[None]]
_callback: ContextVar[ProgressCallback | None] = ContextVar("loop_progress", default=None)


class on_progress:  # noqa: N801 - used as a function; a class is a cheaper context manager than a generator
    """Within the block, steps report partial states to ``callback``; an exception it raises fails the turn.

    For the turns of the steps run in the block, not for steps those turns run (see the module notes)."""

    __slots__ = ("_callback", "_token")

    def __init__(self, callback: ProgressCallback) -> None:
        if not callable(callback):
            raise UsageError(f"on_progress needs an async callback taking a State, got {callback!r}")
        self._callback = callback

    def __enter__(self) -> None:
        self._token = _callback.set(self._callback)

    def __exit__(self, *exc_info: object) -> None:
        _callback.reset(self._token)


def begin_turn(progress: ProgressCallback | None) -> tuple[ProgressCallback | None, Token[ProgressCallback | None] | None]:
    """For a step starting a turn: the callback it reports to (``progress``, else the enclosing one), and a
    token for ``end_turn`` when an enclosing callback was hidden from the rest of the turn."""
    enclosing = _callback.get()
    if enclosing is None:
        return progress, None  # the usual case costs one lookup
    return (enclosing if progress is None else progress), _callback.set(None)


def end_turn(token: Token[ProgressCallback | None] | None) -> None:
    """Undo ``begin_turn`` (in the same task, as the turn ends)."""
    if token is not None:
        _callback.reset(token)
