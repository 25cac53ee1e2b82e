"""``PostgresMemory``: a ``cognitive.Memory`` in a PostgreSQL database, for many server processes sharing what
their agents remember.

No vector extension is assumed (many servers have none): each item's vector is a ``real[]`` column, normalised
when stored, and a recall computes the exact cosine similarity of every item of its scope in SQL (the dot product
of two unit vectors, over ``unnest`` of both arrays) and keeps the best ``k``. The work grows with the items of one
scope, not of the table: an index on (namespace, user, space) finds the scope's rows. Measured against a server on
loopback on 2 cores (``tests/benchmarks/bench_memory_recall.py``), a recall over a scope of 10,000 384-dimension
items took about 0.4 s, over 100,000 about 4 s; a scope of many thousands wants a vector index (pgvector), which
this does not use.

Connecting, threads and errors are the ``PostgresStore``'s (``_postgres_pool``): calls run in worker threads on a
pool of connections made on the first call, errors become ``StoreError`` with the password scrubbed out.
"""

from __future__ import annotations

import array
import math
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from cognitive import MemoryItem, Recalled, Scope
from cognitive.memory.checks import (check_dimensions, check_embedder, check_ids, check_k, check_scope,
                                     check_source, check_text, check_user, embed, given_rows, load_meta,
                                     meta_text, pointless)
from loop import UsageError, tracing
from loop.checks import positive_int, positive_number
from provider import PASSAGE, QUERY, Embedder
from session.stores._postgres_pool import Connections
from session.stores._postgres_url import Conninfo
from session.stores._protocol import StoreError

Conn = psycopg.Connection[Any]
_log = tracing.logger("session.stores")
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_MIGRATION_LOCK = 0x636C5F6D656D6F72  # "cl_memor" in ASCII: two processes starting at once make the tables in turn
VERSION = 1
_ROW = ("id, namespace, user_id, space, text, source, created, meta, embedding, norm")
_COPY_TYPES = ["text", "text", "text", "text", "text", "text", "float8", "text", "float4[]", "float4"]


class PostgresMemory:
    """A ``Memory`` and ``Forgetting`` in the PostgreSQL database at ``url``
    (``postgresql://user[:password]@host[:port]/database``, as ``PostgresStore`` takes), which any number of
    processes may share; ``embedder`` turns texts into vectors.

    Its tables (``memory_items``, ``memory_settings``) go in ``schema`` (made if missing), or without one in the
    first schema of the connection's ``search_path``. Recall is exact (see the module's notes): the same answers
    as ``cognitive.SQLiteMemory``, with the same checks: the first vector stored fixes the dimension, a text the
    embedder turns into zeros is kept but never recalled. Like it, ``items(scope)`` lists what a scope holds,
    newest first, and ``count(scope)`` counts it.

    Nothing connects until the first call, which makes the tables and opens a pool of up to ``pool_size``
    connections; a call waits up to ``timeout`` seconds for one. A server that cannot be reached raises
    ``StoreError`` saying why; the password never shows. Whoever makes the memory closes it (``aclose``, or
    ``async with``); closing is final.
    """

    def __init__(self, url: str, embedder: Embedder, *, schema: str | None = None, pool_size: int = 4,
                 timeout: float = 30.0) -> None:
        conninfo = Conninfo(url)
        self.embedder = check_embedder("PostgresMemory", embedder)
        if schema is not None and (not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema)):
            raise UsageError(f"PostgresMemory schema must be a lower-case SQL name (letters, digits, _), got "
                             f"{schema!r}")
        self.url = conninfo.url  # shown without its password
        self.schema = schema
        self.pool_size = positive_int("pool_size", pool_size)
        self.timeout = float(positive_number("timeout", timeout, unit="seconds"))
        prefix = f'"{schema}".' if schema else ""
        self._items, self._settings = f"{prefix}memory_items", f"{prefix}memory_settings"
        self._dimensions: int | None = None
        self._db = Connections(self, conninfo, size=self.pool_size, timeout=self.timeout,
                               name="cognitive-loop-memory", prepare=self._migrate,
                               first="cannot make the memory's tables")

    # -- the protocols --------------------------------------------------------------------------------------

    async def remember(self, scope: Scope, text: str, *, source: str = "",
                       meta: Mapping[str, Any] | None = None) -> MemoryItem:
        """Embed ``text`` (a passage) and keep it for ``scope``; the item as stored."""
        check_scope("PostgresMemory.remember", scope)
        check_text("PostgresMemory.remember", text)
        check_source("PostgresMemory.remember", source)
        meta_json = meta_text("PostgresMemory.remember", meta)
        self._db.check_open()
        (vector,) = await embed(str(self), self.embedder, [text], PASSAGE)
        (item,) = await self._db.call(self._insert, scope, [(text, source, meta_json, vector)])
        return item

    async def recall(self, scope: Scope, query: str, *, k: int = 5) -> list[Recalled]:
        """The at most ``k`` items of ``scope`` closest to ``query`` (embedded as a query), best first."""
        check_scope("PostgresMemory.recall", scope)
        check_text("PostgresMemory.recall", query, what="query")
        k = check_k("PostgresMemory.recall", k)
        self._db.check_open()
        if await self._db.call(self._held) is None:
            return []  # nothing stored yet: no need to embed the query
        (vector,) = await embed(str(self), self.embedder, [query], QUERY)
        if pointless(vector):
            return []
        return await self._db.call(self._recall, scope, vector, k)

    async def forget(self, scope: Scope, *ids: str) -> int:
        """Delete the items of ``scope`` with these ids (ids of other scopes are left alone); how many went."""
        check_scope("PostgresMemory.forget", scope)
        wanted = check_ids("PostgresMemory.forget", ids)
        if not wanted:
            return 0
        return await self._db.call(self._delete, "namespace = %s AND user_id = %s AND space = %s AND id = ANY(%s)",
                                   (scope.namespace, scope.user, scope.space, wanted))

    async def erase(self, user: str, namespace: str = "") -> int:
        """Delete everything kept for ``user`` in ``namespace``, in every space; how many items went."""
        check_user("PostgresMemory.erase", user, namespace)
        return await self._db.call(self._delete, "namespace = %s AND user_id = %s", (namespace, user))

    # -- listing --------------------------------------------------------------------------------------------

    async def items(self, scope: Scope, *, limit: int = 100) -> list[MemoryItem]:
        """The items of ``scope``, newest first, at most ``limit`` of them."""
        check_scope("PostgresMemory.items", scope)
        limit = positive_int("PostgresMemory.items limit", limit)
        return await self._db.call(self._list, scope, limit)

    async def count(self, scope: Scope) -> int:
        """How many items ``scope`` holds."""
        check_scope("PostgresMemory.count", scope)
        return await self._db.call(self._count, scope)

    async def _add_vectors(self, scope: Scope, texts: Sequence[str], vectors: Sequence[Any]) -> list[MemoryItem]:
        """Keep ``texts`` for ``scope`` with ``vectors`` already made (no embedder), in one transaction: for
        loading many items at once, and for benchmarks."""
        check_scope("PostgresMemory", scope)
        rows = given_rows(str(self), texts, vectors)
        return await self._db.call(self._insert, scope, rows) if rows else []

    # -- lifetime -------------------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the pool's connections; later calls raise ``UsageError``. Closing twice is fine."""
        await self._db.aclose()

    async def __aenter__(self) -> PostgresMemory:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- in a worker thread ---------------------------------------------------------------------------------

    def _migrate(self, conn: Conn) -> None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            if self.schema:
                conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
            made = conn.execute("SELECT to_regclass(%s)", (self._settings,)).fetchone()
            if made is not None and made[0] is not None:
                row = conn.execute(f"SELECT value FROM {self._settings} WHERE key = 'version'").fetchone()
                if row is not None and int(row[0]) > VERSION:
                    raise StoreError(f"{self} was written with memory schema {row[0]}; this version reads up to "
                                     f"{VERSION}")
                return
            conn.execute(f"CREATE TABLE {self._settings} (key text PRIMARY KEY, value text NOT NULL)")
            conn.execute(f"""CREATE TABLE {self._items} (
                n          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                id         text NOT NULL UNIQUE,
                namespace  text NOT NULL,
                user_id    text NOT NULL,
                space      text NOT NULL,
                text       text NOT NULL,
                source     text NOT NULL,
                created    double precision NOT NULL,
                meta       text NOT NULL,
                embedding  real[] NOT NULL,
                norm       real NOT NULL)""")
            # A vector of 384 floats makes a row pass the 2 kB at which PostgreSQL moves values out of line;
            # a recall reads every vector of a scope, so they stay in the row (MAIN) unless it cannot fit a page.
            conn.execute(f"ALTER TABLE {self._items} ALTER COLUMN embedding SET STORAGE MAIN")
            conn.execute(f"CREATE INDEX memory_items_scope ON {self._items} (namespace, user_id, space, created)")
            conn.execute(f"INSERT INTO {self._settings} (key, value) VALUES ('version', %s)", (str(VERSION),))
        _log.info("made the memory's tables", memory=self.url, schema=self.schema)

    def _held(self, conn: Conn) -> int | None:
        if self._dimensions is None:
            row = conn.execute(f"SELECT value FROM {self._settings} WHERE key = 'dimensions'").fetchone()
            self._dimensions = None if row is None else int(row[0])
        return self._dimensions

    def _insert(self, conn: Conn, scope: Scope,
                rows: list[tuple[str, str, str, array.array[float]]]) -> list[MemoryItem]:
        given = len(rows[0][3])
        now = time.time()
        key = (scope.namespace, scope.user, scope.space)
        items: list[MemoryItem] = []
        with conn.transaction():
            # The first vector fixes the dimension: the row is locked (or made) before anything is written, so two
            # first writers with different dimensions cannot both win.
            conn.execute(f"INSERT INTO {self._settings} (key, value) VALUES ('dimensions', %s) "
                         "ON CONFLICT (key) DO NOTHING", (str(given),))
            row = conn.execute(f"SELECT value FROM {self._settings} WHERE key = 'dimensions' FOR SHARE").fetchone()
            assert row is not None  # made above, or by another transaction that committed
            check_dimensions(str(self), int(row[0]), given)
            with conn.cursor() as cur:
                with cur.copy(f"COPY {self._items} ({_ROW}) FROM STDIN (FORMAT BINARY)") as copy:
                    copy.set_types(_COPY_TYPES)
                    for text, source, meta, vector in rows:
                        item_id = uuid.uuid4().hex
                        norm = math.sqrt(math.fsum(x * x for x in vector))
                        unit = [x / norm for x in vector] if norm else vector.tolist()
                        copy.write_row((item_id, *key, text, source, now, meta, unit, norm))
                        items.append(MemoryItem(item_id, scope, text, source, now, load_meta(meta)))
        self._dimensions = given
        return items

    def _recall(self, conn: Conn, scope: Scope, vector: array.array[float], k: int) -> list[Recalled]:
        held = self._held(conn)
        if held is None:
            return []
        check_dimensions(str(self), held, len(vector))
        norm = math.sqrt(math.fsum(x * x for x in vector))
        rows = conn.execute(
            f"SELECT id, text, source, created, meta, score FROM ("
            f"SELECT n, id, text, source, created, meta, "
            f"(SELECT sum(a * b) FROM unnest(embedding, %s::real[]) AS t (a, b)) AS score "
            f"FROM {self._items} WHERE namespace = %s AND user_id = %s AND space = %s AND norm > 0) AS scored "
            "ORDER BY score DESC, n DESC LIMIT %s",
            ([x / norm for x in vector], scope.namespace, scope.user, scope.space, k)).fetchall()
        return [Recalled(MemoryItem(item_id, scope, text, source, created, load_meta(meta)), float(score))
                for item_id, text, source, created, meta, score in rows]

    def _delete(self, conn: Conn, where: str, args: tuple[Any, ...]) -> int:
        with conn.transaction():
            return conn.execute(f"DELETE FROM {self._items} WHERE {where}", args).rowcount

    def _list(self, conn: Conn, scope: Scope, limit: int) -> list[MemoryItem]:
        rows = conn.execute(f"SELECT id, text, source, created, meta FROM {self._items} "
                            "WHERE namespace = %s AND user_id = %s AND space = %s ORDER BY created DESC, n DESC "
                            "LIMIT %s", (scope.namespace, scope.user, scope.space, limit)).fetchall()
        return [MemoryItem(item_id, scope, text, source, created, load_meta(meta))
                for item_id, text, source, created, meta in rows]

    def _count(self, conn: Conn, scope: Scope) -> int:
        row = conn.execute(f"SELECT count(*) FROM {self._items} WHERE namespace = %s AND user_id = %s "
                           "AND space = %s", (scope.namespace, scope.user, scope.space)).fetchone()
        return int(row[0]) if row is not None else 0

    def __str__(self) -> str:
        return f"the PostgreSQL memory {self.url!r}"

    def __repr__(self) -> str:
        return f"PostgresMemory({self.url!r}, {self.embedder!r})"
