"""``SQLiteMemory``: a ``Memory`` in one SQLite file, with the vectors in a ``sqlite-vec`` table, so memories
outlive the process and recall is a nearest-neighbour search inside SQLite.

SQLite is reached through ``apsw`` with the ``sqlite-vec`` extension loaded: the standard library's ``sqlite3``
of many Python builds cannot load extensions. Every statement runs in a worker thread (``anyio.to_thread``), one
call at a time on one connection; a call whose task is cancelled finishes its statement first, so a transaction
is never left half done.

The file holds three tables: ``items`` (each item's id, scope, text, source, time and meta as JSON),
``vectors`` (a ``vec0`` table with cosine distance, partitioned by namespace, user and space, so a recall scans
exactly one scope's vectors) and ``settings`` (the vectors' dimension, fixed by the first vector stored). Rows of
``items`` and ``vectors`` share their rowid and are written and deleted in one transaction.
"""

from __future__ import annotations

import array
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.to_thread

from loop import UsageError
from loop.checks import positive_int
from loop.files import create_private
from loop.errors import LoopError
from cognitive.memory._protocol import MemoryItem, Recalled, Scope
from cognitive.memory.checks import (check_dimensions, check_embedder, check_ids, check_k, check_scope,
                                     check_source, check_text, check_user, embed, given_rows, load_meta,
                                     meta_text, pointless)
from provider import PASSAGE, QUERY, Embedder

if TYPE_CHECKING:
    import apsw

T = TypeVar("T")
INSTALL = "pip install 'cognitive-loop[memory]'"
# A recall reads every vector of its scope: through memory-mapped pages rather than copies into SQLite's page cache
# it took half the time (100,000 x 384 floats on 2 cores: 42 ms against 80 ms). Address space, not memory.
MMAP_SIZE = 1 << 30
# Vectors per vec0 chunk. Every scope takes at least one chunk: 32 x 384 floats is 48 kB, where sqlite-vec's
# default of 1,024 would be 1.5 MB for each user's first memory; recall over 100,000 items was no slower.
CHUNK_SIZE = 32
_SCHEMA = """
CREATE TABLE IF NOT EXISTS settings (
    key    TEXT PRIMARY KEY,
    value  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS items (
    n          INTEGER PRIMARY KEY,
    id         TEXT NOT NULL UNIQUE,
    namespace  TEXT NOT NULL,
    user       TEXT NOT NULL,
    space      TEXT NOT NULL,
    text       TEXT NOT NULL,
    source     TEXT NOT NULL,
    created    REAL NOT NULL,
    meta       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS items_scope ON items (namespace, user, space, created);
"""
_VECTORS = ("CREATE VIRTUAL TABLE IF NOT EXISTS vectors USING vec0(namespace text partition key, "
            "user text partition key, space text partition key, embedding float[{d}] distance_metric=cosine, "
            f"chunk_size={CHUNK_SIZE})")
_RECALL = """
WITH nearest AS (
    SELECT rowid, distance FROM vectors
    WHERE embedding MATCH ? AND k = ? AND namespace = ? AND user = ? AND space = ?
)
SELECT items.id, items.text, items.source, items.created, items.meta, nearest.distance
FROM nearest JOIN items ON items.n = nearest.rowid
ORDER BY nearest.distance, items.n DESC
"""
_IN_SCOPE = "namespace = ? AND user = ? AND space = ?"


class MemoryStoreError(LoopError):
    """Raised when a memory's database fails (the file cannot be opened or written, the disk is full)."""


def _apsw() -> Any:
    try:
        import apsw
        import sqlite_vec  # type: ignore[import-untyped]
    except ImportError as exc:
        raise UsageError(f"SQLiteMemory needs apsw and sqlite-vec ({exc.name} is missing): {INSTALL}") from None
    return apsw, sqlite_vec


class SQLiteMemory:
    """A ``Memory`` and ``Forgetting`` in the SQLite file at ``path`` (made, with its folder, readable by its
    owner only), or in memory for ``":memory:"``; ``embedder`` turns texts into vectors.

    ``remember`` embeds as a passage, ``recall`` as a query; a recall is an exact nearest-neighbour search over
    the vectors of exactly its scope, by cosine similarity (the ``score``, 1 at best). The first vector stored fixes
    the dimension: a vector of another length (another embedder, or a file made with one) raises ``UsageError``.
    A text the embedder turns into zeros is kept but never recalled. With the WAL journal and
    ``synchronous="NORMAL"`` (the default) a remembered item survives the process being killed; ``"FULL"`` also
    survives a power cut, at the cost of an fsync per write.

    Besides the protocols, ``items(scope)`` lists what is kept for a scope, newest first, and ``count(scope)``
    counts it: for an application showing a user what is remembered, or proving an erasure. The file opens on first
    use and stays open until ``aclose`` (or the end of ``async with``); closing is final. Needs the ``memory`` extra
    (``pip install 'cognitive-loop[memory]'``).
    """

    def __init__(self, path: str | os.PathLike[str], embedder: Embedder, *, synchronous: str = "NORMAL") -> None:
        _apsw()
        if not isinstance(path, (str, os.PathLike)) or not str(path):
            raise UsageError(f"SQLiteMemory needs the path of its database file (or ':memory:'), got {path!r}")
        if synchronous not in ("NORMAL", "FULL"):
            raise UsageError(f"synchronous must be 'NORMAL' or 'FULL', got {synchronous!r}")
        self.path = str(path) if str(path) == ":memory:" else Path(path)
        self.embedder = check_embedder("SQLiteMemory", embedder)
        self._synchronous = synchronous
        self._conn: apsw.Connection | None = None
        self._dimensions: int | None = None
        self._closed = False
        self._limiter = anyio.CapacityLimiter(1)  # calls queue here rather than each holding a thread
        self._lock = threading.Lock()  # and one statement at a time on the connection, whatever thread runs it

    # -- the protocols --------------------------------------------------------------------------------------

    async def remember(self, scope: Scope, text: str, *, source: str = "",
                       meta: Mapping[str, Any] | None = None) -> MemoryItem:
        """Embed ``text`` (a passage) and keep it for ``scope``; the item as stored."""
        check_scope("SQLiteMemory.remember", scope)
        check_text("SQLiteMemory.remember", text)
        check_source("SQLiteMemory.remember", source)
        meta_json = meta_text("SQLiteMemory.remember", meta)
        self._check_open()
        (vector,) = await embed(str(self), self.embedder, [text], PASSAGE)
        (item,) = await self._run(self._insert, scope, [(text, source, meta_json, vector)])
        return item

    async def recall(self, scope: Scope, query: str, *, k: int = 5) -> list[Recalled]:
        """The at most ``k`` items of ``scope`` closest to ``query`` (embedded as a query), best first."""
        check_scope("SQLiteMemory.recall", scope)
        check_text("SQLiteMemory.recall", query, what="query")
        k = check_k("SQLiteMemory.recall", k)
        self._check_open()
        if await self._run(self._held) is None:
            return []  # nothing stored yet: no need to embed the query
        (vector,) = await embed(str(self), self.embedder, [query], QUERY)
        if pointless(vector):
            return []
        return await self._run(self._recall, scope, vector, k)

    async def forget(self, scope: Scope, *ids: str) -> int:
        """Delete the items of ``scope`` with these ids (ids of other scopes are left alone); how many went."""
        check_scope("SQLiteMemory.forget", scope)
        wanted = check_ids("SQLiteMemory.forget", ids)
        if not wanted:
            return 0
        self._check_open()
        where = f"{_IN_SCOPE} AND id IN ({','.join('?' * len(wanted))})"
        return await self._run(self._delete, where, (scope.namespace, scope.user, scope.space, *wanted))

    async def erase(self, user: str, namespace: str = "") -> int:
        """Delete everything kept for ``user`` in ``namespace``, in every space; how many items went."""
        check_user("SQLiteMemory.erase", user, namespace)
        self._check_open()
        return await self._run(self._delete, "namespace = ? AND user = ?", (namespace, user))

    # -- listing --------------------------------------------------------------------------------------------

    async def items(self, scope: Scope, *, limit: int = 100) -> list[MemoryItem]:
        """The items of ``scope``, newest first, at most ``limit`` of them."""
        check_scope("SQLiteMemory.items", scope)
        limit = positive_int("SQLiteMemory.items limit", limit)
        self._check_open()
        return await self._run(self._items, scope, limit)

    async def count(self, scope: Scope) -> int:
        """How many items ``scope`` holds."""
        check_scope("SQLiteMemory.count", scope)
        self._check_open()
        return await self._run(self._count, scope)

    async def _add_vectors(self, scope: Scope, texts: Sequence[str], vectors: Sequence[Any]) -> list[MemoryItem]:
        """Keep ``texts`` for ``scope`` with ``vectors`` already made (no embedder), in one transaction: for
        loading many items at once, and for benchmarks."""
        check_scope("SQLiteMemory", scope)
        rows = given_rows(str(self), texts, vectors)
        return await self._run(self._insert, scope, rows) if rows else []

    # -- lifetime -------------------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the file; later calls raise ``UsageError``. Closing twice is fine."""
        self._closed = True
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._close, limiter=self._limiter)

    def _close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()

    async def __aenter__(self) -> SQLiteMemory:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"{self!r} is closed; make a new SQLiteMemory to use the file again")

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        self._check_open()
        lib, _ = _apsw()
        try:
            return await anyio.to_thread.run_sync(self._alone, fn, *args, limiter=self._limiter)
        except lib.Error as exc:
            raise MemoryStoreError(f"{self}: {type(exc).__name__}: {exc}") from exc

    def _alone(self, fn: Callable[..., T], *args: Any) -> T:
        with self._lock:
            return fn(self._connect(), *args)

    # -- in a worker thread ---------------------------------------------------------------------------------

    def _connect(self) -> apsw.Connection:
        if self._conn is not None:
            return self._conn
        self._check_open()  # a call cancelled natively may get here after aclose: it must not reopen the file
        lib, vec = _apsw()
        if isinstance(self.path, Path):
            create_private(self.path)  # what a user said is for its owner's eyes only
        conn: apsw.Connection = lib.Connection(str(self.path))
        try:
            conn.enable_load_extension(True)
            conn.load_extension(vec.loadable_path())
            conn.enable_load_extension(False)
            conn.set_busy_timeout(5000)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.execute(f"PRAGMA mmap_size = {MMAP_SIZE}")
            conn.execute(_SCHEMA)
            row = conn.execute("SELECT value FROM settings WHERE key = 'dimensions'").fetchone()
            self._dimensions = None if row is None else int(row[0])
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _held(self, conn: apsw.Connection) -> int | None:
        if self._dimensions is None:  # another process may have stored the first vector since
            row = conn.execute("SELECT value FROM settings WHERE key = 'dimensions'").fetchone()
            self._dimensions = None if row is None else int(row[0])
        return self._dimensions

    def _insert(self, conn: apsw.Connection, scope: Scope,
                rows: list[tuple[str, str, str, array.array[float]]]) -> list[MemoryItem]:
        given = len(rows[0][3])
        now = time.time()
        items: list[MemoryItem] = []
        conn.execute("BEGIN IMMEDIATE")
        try:
            held = self._held(conn)
            if held is None:
                conn.execute("INSERT INTO settings (key, value) VALUES ('dimensions', ?)", (str(given),))
                conn.execute(_VECTORS.format(d=given))
            else:
                check_dimensions(str(self), held, given)
            key = (scope.namespace, scope.user, scope.space)
            for text, source, meta, vector in rows:
                item_id = uuid.uuid4().hex
                conn.execute("INSERT INTO items (id, namespace, user, space, text, source, created, meta) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (item_id, *key, text, source, now, meta))
                if not pointless(vector):
                    conn.execute("INSERT INTO vectors (rowid, namespace, user, space, embedding) "
                                 "VALUES (last_insert_rowid(), ?, ?, ?, ?)", (*key, vector.tobytes()))
                items.append(MemoryItem(item_id, scope, text, source, now, load_meta(meta)))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            self._dimensions = None  # read again: the settings row may have been rolled back
            raise
        self._dimensions = given
        return items

    def _recall(self, conn: apsw.Connection, scope: Scope, vector: array.array[float], k: int) -> list[Recalled]:
        held = self._held(conn)
        if held is None:
            return []
        check_dimensions(str(self), held, len(vector))
        rows: list[Any] = conn.execute(_RECALL, (vector.tobytes(), k, scope.namespace, scope.user, scope.space)).fetchall()
        return [Recalled(MemoryItem(item_id, scope, text, source, created, load_meta(meta)), 1.0 - distance)
                for item_id, text, source, created, meta, distance in rows]

    def _delete(self, conn: apsw.Connection, where: str, args: tuple[str, ...]) -> int:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if self._held(conn) is not None:
                conn.execute(f"DELETE FROM vectors WHERE rowid IN (SELECT n FROM items WHERE {where})", args)
            conn.execute(f"DELETE FROM items WHERE {where}", args)
            deleted = conn.changes()
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return deleted

    def _items(self, conn: apsw.Connection, scope: Scope, limit: int) -> list[MemoryItem]:
        rows: list[Any] = conn.execute(f"SELECT id, text, source, created, meta FROM items WHERE {_IN_SCOPE} "
                            "ORDER BY created DESC, n DESC LIMIT ?",
                            (scope.namespace, scope.user, scope.space, limit)).fetchall()
        return [MemoryItem(item_id, scope, text, source, created, load_meta(meta))
                for item_id, text, source, created, meta in rows]

    def _count(self, conn: apsw.Connection, scope: Scope) -> int:
        row: Any = conn.execute(f"SELECT count(*) FROM items WHERE {_IN_SCOPE}",
                                (scope.namespace, scope.user, scope.space)).fetchone()
        return int(row[0])

    def __str__(self) -> str:
        return f"the memory {str(self.path)!r}"

    def __repr__(self) -> str:
        return f"SQLiteMemory({str(self.path)!r}, {self.embedder!r})"
