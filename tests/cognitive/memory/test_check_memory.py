"""check_memory: SQLiteMemory and a plain list-backed memory pass; memories that each break one rule fail, named."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import pytest

from cognitive.memory._check import check_memory
from cognitive.memory._protocol import MemoryItem, Recalled, Scope
from cognitive.memory._sqlite import SQLiteMemory
from cognitive.memory.checks import check_k, check_scope, check_text
from loop import UsageError
from loop.errors import ConformanceError
from provider._embedder import HashingEmbedder, cosine


class ListMemory:
    """A memory in a list, searched by brute force; each ``broken`` name breaks one rule of the contract."""

    def __init__(self, *broken: str) -> None:
        self.broken = set(broken)
        self.embedder = HashingEmbedder()
        self.kept: list[tuple[MemoryItem, Any]] = []

    async def remember(self, scope: Scope, text: str, *, source: str = "",
                       meta: Mapping[str, Any] | None = None) -> MemoryItem:
        check_scope("ListMemory", scope)
        check_text("ListMemory", text)
        item = MemoryItem(uuid.uuid4().hex, scope, text, "" if "source" in self.broken else source, meta=meta)
        self.kept.append((item, self.embedder.vector(text)))
        return item

    def _same(self, a: Scope, b: Scope) -> bool:
        if "user" in self.broken:
            return (a.namespace, a.space) == (b.namespace, b.space)
        if "space" in self.broken:
            return (a.user, a.namespace) == (b.user, b.namespace)
        return a == b

    async def recall(self, scope: Scope, query: str, *, k: int = 5) -> list[Recalled]:
        check_scope("ListMemory", scope)
        check_text("ListMemory", query, what="query")
        check_k("ListMemory", k)
        q = self.embedder.vector(query)
        found = [Recalled(item if "user" not in self.broken else MemoryItem(item.id, scope, item.text, item.source,
                                                                             item.created, item.meta),
                          cosine(q, v)) for item, v in self.kept if self._same(item.scope, scope)]
        found.sort(key=lambda r: r.score, reverse="worst-first" not in self.broken)
        return found if "ignores-k" in self.broken else found[:k]

    async def forget(self, scope: Scope, *ids: str) -> int:
        before = len(self.kept)
        self.kept = [(i, v) for i, v in self.kept
                     if not (i.id in ids and (i.scope == scope or "forget-anywhere" in self.broken))]
        return before - len(self.kept)

    async def erase(self, user: str, namespace: str = "") -> int:
        before = len(self.kept)
        self.kept = [(i, v) for i, v in self.kept if not (i.scope.user == user and i.scope.namespace == namespace
                                                          and ("erase-one-space" not in self.broken
                                                               or i.scope.space == "memory"))]
        return before - len(self.kept)


class Lenient(ListMemory):
    async def recall(self, scope: Scope, query: str, *, k: int = 5) -> list[Recalled]:
        try:
            return await super().recall(scope, query, k=k)
        except UsageError:
            return []


async def test_a_sqlite_memory_conforms() -> None:
    await check_memory(lambda: SQLiteMemory(":memory:", HashingEmbedder()))


async def test_a_correct_list_memory_conforms_and_an_async_factory_works() -> None:
    async def make() -> ListMemory:
        return ListMemory()

    await check_memory(make)
    await check_memory(ListMemory)


@pytest.mark.parametrize(("broken", "rule"), [
    ("source", r"remember returns the item.*source"),
    ("worst-first", r"recall finds the item by its own text"),
    ("ignores-k", r"at most k=1"),
    ("user", r"scopes are kept apart.*returns its own item only, got 3 items"),
    ("space", r"scopes are kept apart.*recall returns items of exactly its scope"),
    ("forget-anywhere", r"forget only in scope.*another scope's id deletes nothing"),
    ("erase-one-space", r"erase across spaces.*every space"),
])
async def test_a_broken_memory_is_named(broken: str, rule: str) -> None:
    with pytest.raises(ConformanceError, match=rule):
        await check_memory(lambda: ListMemory(broken))


async def test_bad_input_must_be_refused() -> None:
    with pytest.raises(ConformanceError, match="recall with k=0 raised nothing"):
        await check_memory(Lenient)


async def test_a_factory_that_makes_no_memory() -> None:
    with pytest.raises(ConformanceError, match="no remember and recall methods"):
        await check_memory(lambda: object())  # type: ignore[arg-type,return-value]


async def test_a_memory_that_hangs_fails_in_time() -> None:
    class Hanging(ListMemory):
        async def recall(self, scope: Scope, query: str, *, k: int = 5) -> list[Recalled]:
            import anyio

            await anyio.sleep_forever()
            raise AssertionError("unreachable")

    with pytest.raises(ConformanceError, match="no answer within 0.2 seconds"):
        await check_memory(Hanging, timeout=0.2)
