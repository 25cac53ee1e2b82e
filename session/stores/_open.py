"""``open_store``: the store a URL names, as the command line's ``--store`` gives it."""

from __future__ import annotations

from pathlib import Path

from loop import UsageError
from session.stores._memory import MemoryStore
from session.stores._protocol import Store
from session.stores._sqlite import SQLiteStore

URLS = ("memory:// or sqlite:///path/to/file.db (relative to the working directory; sqlite:////path for an "
        "absolute one)")


def open_store(url: str) -> Store:
    """The store a URL names: ``memory://``, ``sqlite:///relative/path.db`` (relative to the working directory)
    or ``sqlite:////absolute/path.db``. The file is made on first use, but not its folder: a folder that does
    not exist raises ``UsageError`` (a mistyped path would otherwise start an empty store somewhere new)."""
    if url == "memory://":
        return MemoryStore()
    if not isinstance(url, str) or not url.startswith("sqlite:///") or len(url) == len("sqlite:///") or "?" in url:
        raise UsageError(f"unknown store URL {url!r}; use {URLS}")
    path = Path(url[len("sqlite:///"):])
    folder = path.parent
    if not folder.exists():
        where = "" if path.is_absolute() else f" (in the working directory {str(Path.cwd())!r})"
        raise UsageError(f"the folder {str(folder)!r} for {url!r}{where} does not exist; create it first")
    if not folder.is_dir():
        raise UsageError(f"{str(folder)!r} in {url!r} is not a folder")
    return SQLiteStore(path)
