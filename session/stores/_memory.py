"""``MemoryStore``: a ``Store`` in this process's memory."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from loop import State, Turn
from session.stores._protocol import (StoredSession, check_append, check_checkpoint_key, check_listing, check_posted,
                                     check_session_id, checkpoint_text, read_checkpoint, title_of)


class MemoryStore:
    """A ``Store`` in this process's memory: fast, and gone when the process ends. It has the optional
    abilities ``DeletingStore``, ``InboxStore``, ``CheckpointStore`` and ``ListingStore`` (its inbox and its checkpoints are as
    durable as the rest: not at all). It keeps the turns themselves, never their JSON: the bytes of their images
    and files are the ones it was given, never copied."""

    def __init__(self) -> None:
        # Turns are kept in a plain list per conversation (an append adds no linked nodes or states for the
        # garbage collector to track), and the meta apart; a load builds the State, exactly.
        self._turns: dict[str, list[Turn]] = {}
        self._meta: dict[str, Mapping[str, Any]] = {}
        self._updated: dict[str, float] = {}  # when each conversation was last appended to (for listings)
        self._inboxes: dict[str, dict[str, Turn]] = {}  # waiting messages by id, in the order posted
        self._checkpoints: dict[str, str] = {}  # JSON text by key: a load gives a new copy, as a file's would

    async def load(self, session_id: str) -> State | None:
        turns = self._turns.get(check_session_id(session_id))
        return None if turns is None else State(turns).with_meta(self._meta[session_id])

    async def append(self, session_id: str, start: int, turns: Sequence[Turn], meta: Mapping[str, Any]) -> None:
        self.append_now(session_id, start, turns, meta)

    def append_now(self, session_id: str, start: int, turns: Sequence[Turn], meta: Mapping[str, Any]) -> None:
        """``append``, done before it returns: no IO, so no await. A ``Session`` on a memory store writes through
        this, without a coroutine per write (and without shielding: a write that never suspends cannot be
        interrupted)."""
        stored = self._turns.get(session_id) if type(session_id) is str else None
        usual = stored is not None and type(start) is int and 0 <= start <= len(stored)
        if usual:  # a conversation held already, an index within it: the turns are all there is to check
            for turn in turns:
                if type(turn) is not Turn:
                    usual = False
                    break
        if not usual:
            check_session_id(session_id)
            check_append(session_id, 0 if stored is None else len(stored), start, turns)
        if stored is None:
            self._turns[session_id] = stored = []
        elif start < len(stored):
            del stored[start:]
        stored.extend(turns)
        # A copy, as a file's would be: ``dict(meta)``, but a state's read-only meta copies itself five times faster.
        copied = meta.copy() if type(meta) is MappingProxyType else None
        self._meta[session_id] = copied if type(copied) is dict else dict(meta)
        self._updated[session_id] = time.time()

    async def delete(self, session_id: str) -> bool:
        """Forget a conversation; whether it existed."""
        self._meta.pop(check_session_id(session_id), None)
        self._updated.pop(session_id, None)
        self._inboxes.pop(session_id, None)
        return self._turns.pop(session_id, None) is not None

    # Like ``append``, the inbox never suspends.

    async def post(self, session_id: str, message: Turn) -> None:
        """Queue ``message`` in the conversation's inbox (see ``InboxStore``)."""
        message_id = check_posted(message)
        self._inboxes.setdefault(check_session_id(session_id), {}).setdefault(message_id, message)

    async def inbox(self, session_id: str) -> tuple[Turn, ...]:
        """The messages waiting in the conversation's inbox, oldest first."""
        return tuple(self._inboxes.get(check_session_id(session_id), {}).values())

    async def inboxes(self) -> tuple[str, ...]:
        """The ids of the conversations with messages waiting, sorted."""
        return tuple(sorted(self._inboxes))

    async def done(self, session_id: str, message_id: str) -> None:
        """Take a message out of the inbox for good."""
        waiting = self._inboxes.get(check_session_id(session_id))
        if waiting is not None and waiting.pop(message_id, None) is not None and not waiting:
            del self._inboxes[session_id]

    # Checkpoints never suspend either.

    async def save_checkpoint(self, key: str, data: Mapping[str, Any]) -> None:
        """Keep ``data`` under ``key``, replacing what it held (see ``CheckpointStore``)."""
        self._checkpoints[check_checkpoint_key(key)] = checkpoint_text(key, data)

    async def load_checkpoint(self, key: str) -> Mapping[str, Any] | None:
        """What ``key`` holds, or ``None``."""
        text = self._checkpoints.get(check_checkpoint_key(key))
        return None if text is None else read_checkpoint(key, text, "a MemoryStore")

    async def drop_checkpoint(self, key: str) -> None:
        """Forget what ``key`` holds."""
        self._checkpoints.pop(check_checkpoint_key(key), None)

    async def sessions(self) -> list[str]:
        """The ids of every stored conversation, sorted."""
        return sorted(self._turns)

    async def list_sessions(self, prefix: str = "", *, limit: int = 100) -> tuple[StoredSession, ...]:
        """The conversations whose id starts with ``prefix``, most recently updated first, at most ``limit``."""
        check_listing(prefix, limit)
        ids = sorted((i for i in self._turns if i.startswith(prefix)), key=lambda i: (-self._updated[i], i))[:limit]
        return tuple(StoredSession(i, title_of(self._turns[i]), len(self._turns[i]), self._updated[i]) for i in ids)

