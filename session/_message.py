"""A user message: what a session accepts as one, and how it waits in the session's queue."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

from loop import LoopError, Part, State, Text, UsageError, Wake

Message = Union[str, Part, Sequence[Part]]


class SessionBusy(LoopError):
    """Raised when a session's queue of waiting messages is full."""


class SessionClosed(LoopError):
    """Raised when a message is sent to a session that has been closed."""


class Queued:
    """A message in a session's queue. Its ``done`` wake-up is made only when someone waits for it (``ask``)."""

    __slots__ = ("id", "parts", "result", "finished", "posted", "writing", "_done")

    def __init__(self, message_id: str, parts: tuple[Part, ...], *, posted: bool = False) -> None:
        self.id = message_id
        self.parts = parts
        self.result: State | BaseException | None = None
        self.finished = False
        self.posted = posted  # it waits in the store's inbox until it is marked done
        self.writing = False  # it is being posted: the worker does not take it before it is stored
        self._done: Wake | None = None

    @property
    def done(self) -> Wake:
        """Set once the message is finished (answered, failed or dropped); one task may wait on it."""
        if self._done is None:
            self._done = Wake()
            if self.finished:
                self._done.set()
        return self._done

    def finish(self, result: State | BaseException | None) -> None:
        if not self.finished:
            self.finished = True
            self.result = result
            if self._done is not None:
                self._done.set()


def message_parts(message: Message) -> tuple[Part, ...]:
    """The parts of a user message; ``UsageError`` for what cannot be one."""
    if isinstance(message, str):
        if not message.strip():
            raise UsageError("a message must not be empty")
        return (Text(message),)
    if isinstance(message, (list, tuple)):
        parts = tuple(message)
    else:
        parts = (message,)
    if not parts or not all(isinstance(p, Text) for p in parts):
        raise UsageError(f"a user message is a string or Text parts, got {message!r}")
    return parts
