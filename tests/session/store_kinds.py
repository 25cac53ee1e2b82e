"""The stores a session test can run on, opened and closed for one test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from session import MemoryStore, SQLiteStore, Store


@asynccontextmanager
async def opened_store(kind: str, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh store of ``kind`` (``memory`` or ``sqlite``, in ``tmp_path``), closed when the block ends."""
    if kind == "memory":
        yield MemoryStore()
        return
    async with SQLiteStore(tmp_path / "conversations.db") as store:
        yield store
