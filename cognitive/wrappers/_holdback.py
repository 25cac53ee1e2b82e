"""``AnswerHold``: the answer a guarded run streams, kept back from the people watching until its checks pass.

A streaming conduit shows text as the model writes it; output checks run on the answer once it is written. So a
guarded run holds its answer on the event bus (``loop.EventBus.hold``) from the first text of a model turn, and
the conduits, which read the bus, see it only once the checks passed, in order and whole, as it was streamed. A
trip drops it: no text of the answer ever reaches them.

The store is held too (``answers_unrecorded``): a session stores each main-line turn as it completes, and a
client reading the stored conversation must not read the answer before its checks pass either.

Held back rather than streamed and retracted: a retraction reaches only the clients that understand it (an
OpenAI client keeps every ``content`` delta it got; a terminal cannot take printed text back), and until it
arrives the person has read the answer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

from loop import (Hold, Publisher, ReasoningDelta, Role, Stamped, State, TextDelta, ToolCallDelta, Turn,
                  current_scope, has, recording)


@runtime_checkable
class _CarriesTurn(Protocol):
    """An event carrying a turn: ``TurnCompleted``, and a session's ``TurnStored`` and ``TurnUpdated``."""

    turn: Turn


def shows_text(event: Any) -> bool:
    """Whether ``event`` shows what the model wrote: a text or reasoning delta, or an event carrying one of its
    turns (``TurnCompleted``, and a session's ``TurnStored`` and ``TurnUpdated``)."""
    if isinstance(event, (TextDelta, ReasoningDelta, ToolCallDelta)):
        return True
    return isinstance(event, _CarriesTurn) and isinstance(event.turn, Turn) and event.turn.role is Role.ASSISTANT


class AnswerHold:
    """Keeps back what the main line of the run at the current run path publishes on ``events``, from the
    first text of a model turn until that turn calls a tool (its text is not the answer, and goes out then)
    or the run ends: ``end(passed=True)`` sends everything on as it was published, ``end(passed=False)`` drops
    whatever shows the model's words (``shows_text``) and sends the rest (usage, finish reasons, reports).

    What streams before the first text (reasoning, tool calls, tool results) goes out at once, and so does
    whatever branches publish (they are not the answer, and streaming conduits show the main line only). Made
    per run; ``with`` ends it as failed unless ``end`` ended it first.
    """

    __slots__ = ("_path", "_prefix", "_holding", "_hold", "_ended")

    def __init__(self, events: Any) -> None:
        self._path = current_scope().path
        self._prefix = self._path + "/" if self._path else ""
        self._holding = False
        self._ended = False
        self._hold: Hold = events.hold(self._keeps)

    @classmethod
    def on(cls, executor: object) -> AnswerHold | None:
        """A hold on ``executor``'s event bus; ``None`` when it publishes none."""
        return cls(executor.events) if has(executor, Publisher) else None  # type: ignore[attr-defined]

    def _keeps(self, stamped: Stamped) -> bool:
        if not stamped.main:
            return False
        path = stamped.path
        if path != self._path and not path.startswith(self._prefix):
            return False
        event = stamped.event
        if self._holding:
            if type(event) is ToolCallDelta:  # a turn that calls a tool: what it wrote is not the answer
                self._holding = False
                self._hold.release()
                return False
            return True
        if type(event) is TextDelta and event.text:
            self._holding = True
            return True
        return False

    @property
    def holding(self) -> bool:
        """Whether an answer is being held now."""
        return self._holding

    def end(self, *, passed: bool) -> None:
        """Send on what is held (``passed``), or drop what of it shows the model's words; the hold comes off."""
        if self._ended:
            return
        self._ended = True
        self._holding = False
        self._hold.release(None if passed else shows_text)
        self._hold.close()

    def __enter__(self) -> AnswerHold:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.end(passed=False)


@contextlib.contextmanager
def answers_unrecorded() -> Iterator[None]:
    """Keep the answers the block's main line writes out of its recorder (a session's store) until the block
    has ended: turns that call tools, their results and turns submitted (a repair's report) are recorded as they
    complete, as ever; an answer is recorded with whatever is recorded next, or with the run's result, which
    the session stores when the run returns. Outside a recorded main line it does nothing."""
    outer = current_scope().main_recorder
    if outer is None:
        yield
        return

    async def record(state: State) -> None:
        last = state.last
        if last is not None and last.role is Role.ASSISTANT and not last.tool_calls:
            return  # an answer: not for anyone's eyes before its checks passed
        await outer(state)

    with recording(record):
        yield
