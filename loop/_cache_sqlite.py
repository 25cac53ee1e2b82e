"""``SQLiteCache``: a ``ResponseCache`` store in one SQLite file, so answers outlive the process.

The standard library's ``sqlite3`` blocks, so every statement runs in a worker thread (``anyio.to_thread``),
one at a time on one connection. Each response is one row: its key, its deltas as JSON (``loop.codec``), when
it was stored and when it was last used (the least recently used rows go first when the file holds too many).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from loop import tracing
from loop._cache import check_clock, check_limits
from loop._protocols import Delta
from loop.codec import delta_from_dict, delta_to_dict
from loop.errors import UsageError
from loop.files import create_private

if TYPE_CHECKING:  # imported where the file is first opened: ``import loop`` need not load SQLite
    import sqlite3

_log = tracing.logger("loop.cache")
_SCHEMA = """CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    deltas TEXT NOT NULL,
    stored REAL NOT NULL,
    used REAL NOT NULL
)"""


class SQLiteCache:
    """Responses in the SQLite file at ``path`` (made, with its folder, on first use), at most ``max_entries``
    of them (the least recently used go first) and none older than ``max_age`` seconds (``None``: no limit).

    Ages are wall-clock seconds (``clock``, ``time.time`` unless replaced), since rows outlive the process.
    Several stores, in one process or several, may share a file. Close it with ``aclose()`` (or use it as an
    async context manager); a closed store opens the file again when used."""

    def __init__(self, path: str | os.PathLike[str], *, max_entries: int | None = 10_000,
                 max_age: float | None = None, clock: Callable[[], float] = time.time) -> None:
        if not isinstance(path, (str, os.PathLike)) or not str(path):
            raise UsageError(f"SQLiteCache needs the path of its database file, got {path!r}")
        self.path = Path(path)
        self.max_entries, self.max_age = check_limits("SQLiteCache", max_entries, max_age)
        self._clock = check_clock(clock)
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # one statement at a time on the connection, whichever thread runs it

    async def get(self, key: str) -> tuple[Delta, ...] | None:
        text = await anyio.to_thread.run_sync(self._get, key)
        if text is None:
            return None
        try:
            return tuple(delta_from_dict(item, where=f"{self.path}: response {key[:12]}") for item in json.loads(text))
        except (ValueError, TypeError, UsageError) as exc:  # a row this version cannot read: a miss, replaced
            _log.warning("a stored response could not be read; asking the model", path=str(self.path),
                         error=str(exc))
            return None

    async def put(self, key: str, deltas: tuple[Delta, ...]) -> None:
        text = json.dumps([delta_to_dict(d) for d in deltas], ensure_ascii=False, separators=(",", ":"))
        await anyio.to_thread.run_sync(self._put, key, text)

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self.close)

    def close(self) -> None:
        """Close the file (it opens again when the store is next used)."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    async def __aenter__(self) -> SQLiteCache:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def count(self) -> int:
        """How many responses the file holds (expired ones included until they are next looked up or
        pruned)."""
        return int(await anyio.to_thread.run_sync(self._count))

    # -- in a worker thread ---------------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        if self._connection is None:
            import sqlite3

            if str(self.path) != ":memory:":  # responses hold what users said: for the file's owner only
                create_private(self.path)
            connection = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            try:
                connection.execute("PRAGMA journal_mode=WAL")  # readers in other processes never block a write
                # Commits reach the file without waiting for the disk: a crash of the machine may lose the last
                # responses stored, which costs only the model calls that store them again.
                connection.execute("PRAGMA synchronous=NORMAL")
                connection.execute(_SCHEMA)
            except BaseException:
                connection.close()
                raise
            self._connection = connection
        return self._connection

    def _get(self, key: str) -> str | None:
        with self._lock:
            db = self._open()
            row: Any = db.execute("SELECT deltas, stored FROM responses WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            now = self._clock()
            if self.max_age is not None and now - row[1] > self.max_age:
                db.execute("DELETE FROM responses WHERE key = ?", (key,))
                return None
            db.execute("UPDATE responses SET used = ? WHERE key = ?", (now, key))
            return str(row[0])

    def _put(self, key: str, text: str) -> None:
        with self._lock:
            db = self._open()
            now = self._clock()
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("INSERT OR REPLACE INTO responses (key, deltas, stored, used) VALUES (?, ?, ?, ?)",
                           (key, text, now, now))
                if self.max_age is not None:
                    db.execute("DELETE FROM responses WHERE stored < ?", (now - self.max_age,))
                if self.max_entries is not None:
                    # Every row past the newest max_entries by last use; the one just written is the newest.
                    db.execute("DELETE FROM responses WHERE key IN (SELECT key FROM responses "
                               "ORDER BY used DESC, rowid DESC LIMIT -1 OFFSET ?)", (self.max_entries,))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def _count(self) -> int:
        with self._lock:
            return int(self._open().execute("SELECT count(*) FROM responses").fetchone()[0])

    def __repr__(self) -> str:
        return f"SQLiteCache({str(self.path)!r}, max_entries={self.max_entries}, max_age={self.max_age})"
