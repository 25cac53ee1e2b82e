"""(m) Memory recall: how long ``recall`` takes over many items of one scope, and how fast items go in.

Vectors: ``ITEMS`` random 384-dimension unit vectors (numpy, fixed seed; a search's speed does not depend on
what the vectors mean), stored through the memories' bulk loader (``_add_vectors``: one transaction per batch of
``BATCH``, no embedder). Queries: ``QUERIES`` more random unit vectors, handed to ``recall`` by an embedder that
looks them up, so a recall's time is the memory's own: the thread hop, the search, reading the items.

- ``SQLiteMemory`` (a ``sqlite-vec`` ``vec0`` table partitioned by scope, exact KNN by cosine distance): the
  median recall time of the queries, k=5. Target: <= 100 ms over 100,000 items. Baseline, timed interleaved in the
  same run: brute force in numpy over the same vectors (a float32 matrix @ the query, ``argpartition`` for the top
  k, then sorting those). The top-k ids of both are compared: both are exact, so they must agree.
- Insert rate: microseconds per item through ``_add_vectors`` (the items row and the vector, in one transaction
  per batch), against the same rows written to a plain SQLite table (text and vector bytes, no vector index).
- With ``COGNITIVE_LOOP_TEST_POSTGRES`` set, ``PostgresMemory`` (exact cosine in SQL over ``real[]``, no vector
  extension) over ``PG_SIZES`` items, against numpy over the same count; informational.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from cognitive.memory._protocol import Scope
from cognitive.memory._sqlite import SQLiteMemory
from tests.benchmarks._harness import Figure, median
from tests.session.stores.pg_server import ENV as PG_ENV

DIMENSIONS = 384
K = 5
ITEMS = 100_000  # quick: 5,000
QUERIES = 9  # quick: 3; PostgreSQL uses the first 5
PG_SIZES = (10_000, 100_000)  # quick: 2,000
BATCH = 5_000
TARGET_MS = 100.0
SCOPE = Scope("bench-user", "bench")


class Lookup:
    """An embedder for prepared vectors: the text ``"q<i>"`` is the ``i``-th query."""

    def __init__(self, queries: Any) -> None:
        self.queries = queries

    async def embed(self, texts: Sequence[str], *, kind: str = "passage") -> list[Any]:
        return [self.queries[int(t[1:])] for t in texts]


def _vectors(count: int, seed: int) -> Any:
    import numpy

    rng = numpy.random.default_rng(seed)
    matrix = rng.standard_normal((count, DIMENSIONS)).astype(numpy.float32)
    matrix /= numpy.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix


def _numpy_top(matrix: Any, query: Any) -> list[int]:
    import numpy

    scores = matrix @ query
    top = numpy.argpartition(-scores, K)[:K]
    return [int(i) for i in top[numpy.argsort(-scores[top])]]


async def _load(memory: Any, matrix: Any, start: int = 0) -> tuple[float, list[str]]:
    """Seconds to store ``matrix``'s rows from ``start`` on, and the ids of all the rows stored."""
    ids: list[str] = []
    began = time.perf_counter()
    for at in range(start, len(matrix), BATCH):
        rows = matrix[at:at + BATCH]
        items = await memory._add_vectors(SCOPE, [f"item {at + i}" for i in range(len(rows))], list(rows))
        ids += [item.id for item in items]
    return time.perf_counter() - began, ids


async def _recall_vs_numpy(memory: Any, matrix: Any, queries: Any, ids: list[str]) -> tuple[float, float, int]:
    """Median seconds of a recall and of the numpy search, timed in turn, and how many queries disagreed."""
    ours: list[float] = []
    theirs: list[float] = []
    wrong = 0
    await memory.recall(SCOPE, "q0", k=K)  # warm-up: the file's pages, the connection, numpy's BLAS
    _numpy_top(matrix, queries[0])
    for j in range(len(queries)):
        began = time.perf_counter()
        found = await memory.recall(SCOPE, f"q{j}", k=K)
        ours.append(time.perf_counter() - began)
        began = time.perf_counter()
        top = _numpy_top(matrix, queries[j])
        theirs.append(time.perf_counter() - began)
        wrong += [r.item.id for r in found] != [ids[i] for i in top]
    return median(ours), median(theirs), wrong


def _plain_insert_seconds(path: Path, matrix: Any) -> float:
    import apsw

    conn = apsw.Connection(str(path))
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("CREATE TABLE rows (n INTEGER PRIMARY KEY, text TEXT, vector BLOB)")
        began = time.perf_counter()
        for at in range(0, len(matrix), BATCH):
            with conn:
                conn.executemany("INSERT INTO rows (text, vector) VALUES (?, ?)",
                                 ((f"item {at + i}", row.tobytes()) for i, row in enumerate(matrix[at:at + BATCH])))
        return time.perf_counter() - began
    finally:
        conn.close()


async def _sqlite(items: int, queries: Any, folder: Path) -> list[Figure]:
    matrix = _vectors(items, seed=1)
    async with SQLiteMemory(folder / "memory.db", Lookup(queries)) as memory:
        seconds, ids = await _load(memory, matrix)
        ours, numpy_time, wrong = await _recall_vs_numpy(memory, matrix, queries, ids)
    plain = _plain_insert_seconds(folder / "plain.db", matrix)
    size = f"{items:,} x {DIMENSIONS}"
    return [
        Figure("memory", f"SQLiteMemory recall, {size}, k={K} (p50)", ours * 1e3, "ms", numpy_time * 1e3,
               "numpy brute force", high=TARGET_MS, target_text=f"<= {TARGET_MS:g} ms",
               notes=(f"sqlite-vec KNN in one scope's partition, through recall (thread hop, items read); "
                      f"{len(queries)} queries; top-{K} ids differing from numpy's: {wrong}",)),
        Figure("memory", f"SQLiteMemory insert, {size}", seconds / items * 1e6, "µs/item", plain / items * 1e6,
               "plain SQLite rows", notes=(f"{items / seconds:,.0f} items/s, batches of {BATCH:,} per "
                                           "transaction, vec0 chunk and items row per item",)),
    ]


async def _postgres(url: str, sizes: Sequence[int], queries: Any) -> list[Figure]:
    from session.stores._postgres_memory import PostgresMemory
    from tests.session.stores.pg_server import admin

    schema = f"bench_mem_{uuid.uuid4().hex[:10]}"
    figures = []
    matrix = _vectors(max(sizes), seed=2)
    try:
        async with PostgresMemory(url, Lookup(queries), schema=schema) as memory:
            ids: list[str] = []
            for size in sizes:
                seconds, more = await _load(memory, matrix[:size], start=len(ids))
                ids += more
                ours, numpy_time, wrong = await _recall_vs_numpy(memory, matrix[:size], queries[:5], ids)
                figures.append(Figure(
                    "memory", f"PostgresMemory recall, {size:,} x {DIMENSIONS}, k={K} (p50)", ours * 1e3, "ms",
                    numpy_time * 1e3, "numpy brute force",
                    notes=(f"exact cosine in SQL over real[] (no vector extension); loaded at "
                           f"{len(more) / seconds:,.0f} items/s; top-{K} ids differing from numpy's: {wrong}",)))
    finally:
        with admin() as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return figures


def run(quick: bool = False) -> list[Figure]:
    items = 5_000 if quick else ITEMS
    queries = _vectors(3 if quick else QUERIES, seed=3)
    with tempfile.TemporaryDirectory() as folder:
        figures = anyio.run(_sqlite, items, queries, Path(folder), backend="asyncio")
    url = os.environ.get(PG_ENV, "").strip()
    if url:
        sizes = (2_000,) if quick else PG_SIZES
        figures += anyio.run(_postgres, url, sizes, queries, backend="asyncio")
    else:
        print(f"  memory: skipped PostgresMemory: {PG_ENV} is not set", flush=True)
    return figures

