"""``open_store``: the store a URL names, as the command line's ``--store`` gives it."""

from __future__ import annotations

from loop import UsageError
from session.stores._memory import MemoryStore
from session.stores._protocol import Store
from session.stores._sqlite import SQLiteStore


def open_store(url: str) -> Store:
    """The store a URL names: ``memory://``, ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db``."""
    if url == "memory://":
        return MemoryStore()
    if url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
        return SQLiteStore(url[len("sqlite:///"):])
    raise UsageError(f"unknown store URL {url!r}; use memory:// or sqlite:///path/to/file.db")
