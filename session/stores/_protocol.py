"""The ``Store`` protocol every store implements, its errors, and the checks every store makes on its input."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from loop import LoopError, State, Turn, UsageError, non_negative_int


class StoreError(LoopError):
    """Raised when a store cannot read or write; nothing was half-written."""


class StoreConflict(StoreError):
    """Raised when an append would leave a gap: it starts after the end of the stored conversation."""


@runtime_checkable
class Store(Protocol):
    """Durable conversations, written turn by turn and never rewritten in place.

    ``append`` makes conversation ``session_id`` the first ``start`` stored turns followed by ``turns``, and
    replaces its meta with ``meta``, all or nothing. Usually ``start`` is the stored length (a plain append;
    0 creates the conversation). A smaller ``start`` moves to a branch: the turns after it stop being part of
    the conversation (a store may keep them for audit, but ``load`` no longer returns them). A ``start``
    past the stored length raises ``StoreConflict`` and writes nothing. Once ``append`` returns, the turns
    survive the process being killed. ``load`` returns the stored ``State``, or ``None`` for an unknown id.
    One writer per conversation at a time (a ``Manager`` ensures it within a process). Failures raise
    ``StoreError``.
    """

    async def load(self, session_id: str) -> State | None: ...

    async def append(self, session_id: str, start: int, turns: Sequence[Turn], meta: Mapping[str, Any]) -> None: ...


@runtime_checkable
class DeletingStore(Store, Protocol):
    """The optional ability to forget a conversation: ``delete`` returns whether it existed. ``MemoryStore`` and
    ``SQLiteStore`` have it; the OpenAI-compatible API uses it to drop per-request conversations."""

    async def delete(self, session_id: str) -> bool: ...


MAX_SESSION_ID = 256  # room for a client's name of up to 200 characters in a namespace (see HTTPConduit)


def check_session_id(session_id: Any) -> str:
    if not isinstance(session_id, str) or not session_id or len(session_id) > MAX_SESSION_ID:
        raise UsageError(f"a session id is a non-empty string of at most {MAX_SESSION_ID} characters, "
                         f"got {session_id!r}"[:400])
    return session_id


def check_append(session_id: str, stored: int, start: Any, turns: Sequence[Turn]) -> None:
    """Raise what a store must raise for a bad append, before anything is written."""
    non_negative_int("start (a turn index)", start)
    if start > stored:
        raise StoreConflict(f"session {session_id!r} holds {stored} turns; an append starting at turn {start} "
                            "would leave a gap")
    for turn in turns:
        if not isinstance(turn, Turn):
            raise UsageError(f"a store holds Turn values, got {turn!r}")
