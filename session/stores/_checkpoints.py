"""``StoreCheckpoints``: a store's checkpoints (``CheckpointStore``) as the ``cognitive.Checkpoints`` a search
saves its progress to, so that its progress is kept where the conversations are."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loop import UsageError
from session.stores._protocol import CheckpointStore


class StoreCheckpoints:
    """``cognitive.Checkpoints`` kept in ``store`` (a ``CheckpointStore``: ``MemoryStore``, ``SQLiteStore``), so
    that a search (``TreeOfThoughts``, ``MCTS``, ``GraphOfThoughts``) given ``checkpoints=StoreCheckpoints(store)``
    saves its progress beside the conversations: in an ``SQLiteStore``, a search stopped by its budget, an
    interrupt or a killed process goes on where it stopped when it runs again on the same conversation, in
    this process or the next. ``Manager.checkpoints`` is its store's.

    Keys are the pattern's (``cognitive.checkpoint_key``: its settings and the conversation it was given), so
    two conversations that are alike to the letter share a checkpoint, as they would share the search.
    """

    __slots__ = ("store",)

    def __init__(self, store: CheckpointStore) -> None:
        if not isinstance(store, CheckpointStore):
            raise UsageError(f"StoreCheckpoints needs a store that keeps checkpoints (a CheckpointStore, as "
                             f"MemoryStore and SQLiteStore are), got {store!r}; for another store, keep them in "
                             "files with cognitive.FileCheckpoints(directory)")
        self.store = store

    async def save(self, key: str, data: Mapping[str, Any]) -> None:
        """Keep ``data`` under ``key``, replacing what it held."""
        await self.store.save_checkpoint(key, data)

    async def load(self, key: str) -> Mapping[str, Any] | None:
        """What ``key`` holds, or ``None``."""
        return await self.store.load_checkpoint(key)

    async def drop(self, key: str) -> None:
        """Forget what ``key`` holds."""
        await self.store.drop_checkpoint(key)

    def __repr__(self) -> str:
        return f"StoreCheckpoints({self.store!r})"
