"""PostgresMemory against a real server (see ``pg_server``): the conformance check, the same ranking as
SQLiteMemory, scopes, forgetting and erasure, the dimension fixed, memories sharing a database, a named schema,
bad input, many tasks at once and cancellation. Every test runs on asyncio and on trio."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import anyio
import pytest

from cognitive.memory._check import check_memory
from cognitive.memory._protocol import Forgetting, Memory, Scope
from cognitive.memory._sqlite import SQLiteMemory
from loop import UsageError
from provider._embedder import HashingEmbedder
from tests.cognitive.memory.test_sqlite_memory import ANN, CORPUS
from tests.session.stores.pg_server import admin, pg_schema, pg_url, require_psycopg, server_url

require_psycopg("PostgresMemory")

from session.stores._postgres_memory import PostgresMemory  # noqa: E402
from session.stores._protocol import StoreError  # noqa: E402

__all__ = ["pg_schema", "pg_url"]  # fixtures, used by name



@pytest.fixture
async def memory(pg_url: str) -> AsyncIterator[PostgresMemory]:
    async with PostgresMemory(pg_url, HashingEmbedder()) as memory:
        yield memory


async def test_conforms(pg_url: str) -> None:
    await check_memory(lambda: PostgresMemory(pg_url, HashingEmbedder()))


async def test_ranks_as_sqlite_memory_does(memory: PostgresMemory) -> None:
    assert isinstance(memory, Memory) and isinstance(memory, Forgetting)
    async with SQLiteMemory(":memory:", HashingEmbedder()) as local:
        for text in CORPUS:
            await memory.remember(ANN, text)
            await local.remember(ANN, text)
        for query in ("red fox jumps over the lazy dog", "a whale in the ocean", "sleeps all day"):
            there = await memory.recall(ANN, query, k=4)
            here = await local.recall(ANN, query, k=4)
            assert [r.item.text for r in there] == [r.item.text for r in here]
            assert [r.score for r in there] == pytest.approx([r.score for r in here], abs=1e-5)


async def test_items_round_trip_and_list_newest_first(memory: PostgresMemory) -> None:
    made = await memory.remember(ANN, "tea with lemon", source="chat-7", meta={"why": "asked", "n": [1, 2]})
    later = await memory.remember(ANN, "coffee, black")
    (found,) = await memory.recall(ANN, "tea with lemon", k=1)
    assert found.item == made and found.score == pytest.approx(1.0, abs=1e-5)
    assert [i.id for i in await memory.items(ANN)] == [later.id, made.id]
    assert [i.id for i in await memory.items(ANN, limit=1)] == [later.id]
    assert await memory.count(ANN) == 2


async def test_forget_and_erase(memory: PostgresMemory) -> None:
    bob, elsewhere = Scope("bob", "acme"), Scope("ann", "other")
    mine = [await memory.remember(space, CORPUS[0]) for space in (ANN, ANN.with_space("cache"))]
    theirs = await memory.remember(bob, CORPUS[0])
    kept = await memory.remember(elsewhere, CORPUS[0])
    assert await memory.forget(ANN, theirs.id, mine[1].id) == 0  # neither is in ANN
    assert await memory.forget(ANN, mine[0].id) == 1
    assert await memory.recall(ANN, CORPUS[0]) == []
    assert await memory.erase("ann", "acme") == 1  # the cache space's item
    assert await memory.count(ANN.with_space("cache")) == 0
    assert [r.item.id for r in await memory.recall(bob, CORPUS[0])] == [theirs.id]
    assert [r.item.id for r in await memory.recall(elsewhere, CORPUS[0])] == [kept.id]


async def test_the_first_vector_fixes_the_dimension(pg_url: str) -> None:
    async with PostgresMemory(pg_url, HashingEmbedder(256)) as memory:
        assert await memory.recall(ANN, "nothing yet") == []
        await memory.remember(ANN, CORPUS[0])
    async with PostgresMemory(pg_url, HashingEmbedder(64)) as other:
        with pytest.raises(UsageError, match="holds 256-dimension vectors; the embedder gave 64"):
            await other.remember(ANN, CORPUS[1])
        with pytest.raises(UsageError, match="holds 256-dimension vectors; the embedder gave 64"):
            await other.recall(ANN, CORPUS[0])
        assert await other.count(ANN) == 1


async def test_memories_share_a_database(pg_url: str) -> None:
    async with PostgresMemory(pg_url, HashingEmbedder()) as one, PostgresMemory(pg_url, HashingEmbedder()) as two:
        item = await one.remember(ANN, CORPUS[0])
        assert [r.item.id for r in await two.recall(ANN, CORPUS[0])] == [item.id]
        assert await two.erase("ann", "acme") == 1
        assert await one.recall(ANN, CORPUS[0]) == []


async def test_a_named_schema_is_made() -> None:
    schema = f"test_mem_{uuid.uuid4().hex[:10]}"
    try:
        async with PostgresMemory(server_url(), HashingEmbedder(), schema=schema) as memory:
            await memory.remember(ANN, CORPUS[0])
        with admin() as conn:
            tables = {r[0] for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,))}
        assert tables == {"memory_items", "memory_settings"}
    finally:
        with admin() as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


async def test_a_text_with_no_direction_is_kept_but_never_recalled(memory: PostgresMemory) -> None:
    await memory.remember(ANN, CORPUS[0])
    await memory.remember(ANN, "!!!")
    assert [r.item.text for r in await memory.recall(ANN, CORPUS[0], k=5)] == [CORPUS[0]]
    assert await memory.recall(ANN, "???") == []
    assert await memory.count(ANN) == 2


async def test_bad_input(memory: PostgresMemory) -> None:
    await memory.remember(ANN, "something")
    for call, message in (
        (lambda: memory.recall(ANN, "q", k=0), "k must be a positive integer"),
        (lambda: memory.recall(ANN, 7), "query must be a string"),  # type: ignore[arg-type]
        (lambda: memory.remember(ANN, None), "text must be a string"),  # type: ignore[arg-type]
        (lambda: memory.recall(("ann", "acme"), "q"), "takes a cognitive Scope"),  # type: ignore[arg-type]
        (lambda: memory.forget(ANN, 1), "ids must be strings"),  # type: ignore[arg-type]
        (lambda: memory.erase(1), "user must be a string"),  # type: ignore[arg-type]
    ):
        with pytest.raises(UsageError, match=message):
            await call()
    assert await memory.count(ANN) == 1


def test_bad_construction() -> None:
    with pytest.raises(UsageError, match="starts with postgresql://"):
        PostgresMemory("sqlite:///x.db", HashingEmbedder())
    with pytest.raises(UsageError, match="schema must be a lower-case SQL name"):
        PostgresMemory("postgresql://u@127.0.0.1/db", HashingEmbedder(), schema='x"; DROP TABLE y; --')
    with pytest.raises(UsageError, match="needs an Embedder"):
        PostgresMemory("postgresql://u@127.0.0.1/db", None)  # type: ignore[arg-type]


async def test_an_unreachable_server_is_a_store_error() -> None:
    async with PostgresMemory("postgresql://nobody:secret@127.0.0.1:1/db", HashingEmbedder()) as memory:
        with pytest.raises(StoreError) as caught:
            await memory.remember(ANN, "x")
    assert "secret" not in str(caught.value) and "cannot connect" in str(caught.value)


async def test_many_tasks_and_a_cancelled_recall(memory: PostgresMemory) -> None:
    async def user(n: int) -> None:
        scope = Scope(f"user-{n}", "acme")
        for text in CORPUS[:3]:
            await memory.remember(scope, f"{text} {n}")
        (found,) = await memory.recall(scope, f"{CORPUS[1]} {n}", k=1)
        assert found.item.text == f"{CORPUS[1]} {n}"

    async with anyio.create_task_group() as group:
        for n in range(12):
            group.start_soon(user, n)
    for delay in (0.0, 0.001, 0.003, 0.01):
        with anyio.move_on_after(delay):
            await memory.recall(Scope("user-3", "acme"), CORPUS[0], k=2)
    assert [r.item.text for r in await memory.recall(Scope("user-3", "acme"), CORPUS[0], k=1)] == [f"{CORPUS[0]} 3"]
    assert await memory.count(Scope("user-11", "acme")) == 3
    await memory.aclose()
    with pytest.raises(UsageError, match="is closed"):
        await memory.recall(ANN, "x")
