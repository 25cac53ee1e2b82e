"""``check_memory``: a conformance check any ``Memory`` implementation can run (in the spirit of
``trio.testing.check_one_way_stream``): what ``remember`` returns, recall best first and at most ``k``, scopes kept
apart by user, namespace and space, and, for a ``Forgetting`` memory, ``forget`` only in its scope and ``erase``
across spaces."""

from __future__ import annotations

import inspect
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, cast

import anyio

from loop import Closable, UsageError, has
from loop.checks import positive_number
from loop.errors import ConformanceError
from cognitive.memory._protocol import Forgetting, Memory, MemoryItem, Recalled, Scope

# Texts whose order for the query is clear by word overlap alone (HashingEmbedder), and by meaning too.
CORPUS = (
    "the red fox jumps over the lazy dog",
    "the red fox sleeps in its den",
    "a blue whale swims in the cold ocean",
    "bread and butter for breakfast",
    "the lazy dog sleeps all day",
)
QUERY = "the red fox jumps over the lazy dog"
_SLACK = 5.0  # seconds a store's clock may differ from this process's (a database server's)


async def check_memory(make_memory: Callable[[], Memory | Awaitable[Memory]], *, timeout: float = 10.0) -> None:
    """Check that the memories ``make_memory`` makes keep the ``cognitive.Memory`` contract (and the
    ``Forgetting`` one, when they have it).

    ``make_memory()`` (sync or async) returns a memory whose embedder is a ``provider.HashingEmbedder`` (or any
    embedder for which a text's own words make it closest to itself). Each part of the check uses a fresh memory
    and scopes under a namespace of its own, so memories sharing one database pass too; a memory with ``aclose``
    is closed after its part. Every part is bounded by ``timeout`` seconds, so a memory that hangs fails the
    check instead of stalling the test run.

    Raises ``ConformanceError`` naming the first breach; returns ``None`` when the memory conforms.
    """
    positive_number("timeout", timeout, unit="seconds")
    for part in (_check_remember, _check_recall, _check_scopes, _check_bad_input, _check_forget, _check_erase):
        memory = await _make(make_memory)
        try:
            with anyio.fail_after(timeout):
                await part(memory, uuid.uuid4().hex)
        except TimeoutError:
            raise ConformanceError(f"{part.__doc__}: no answer within {timeout:g} seconds") from None
        finally:
            if has(memory, Closable):
                with anyio.CancelScope(shield=True):
                    await cast(Closable, memory).aclose()


def _require(ok: bool, what: str, rule: str) -> None:
    if not ok:
        raise ConformanceError(f"memory breaks the contract ({what}): {rule}")


async def _make(make_memory: Callable[[], Any]) -> Any:
    memory = make_memory()
    if inspect.isawaitable(memory):
        memory = await memory
    if not isinstance(memory, Memory):
        raise ConformanceError(f"make_memory() returned {memory!r}, which has no remember and recall methods")
    return memory


async def _remember_all(memory: Any, scope: Scope, texts: tuple[str, ...]) -> list[MemoryItem]:
    return [await memory.remember(scope, text) for text in texts]


async def _recall(memory: Any, scope: Scope, query: str, k: int, what: str) -> list[Recalled]:
    found: Any = await memory.recall(scope, query, k=k)
    _require(isinstance(found, list) and all(isinstance(r, Recalled) for r in found), what,
             f"recall returns a list of Recalled, got {found!r}"[:300])
    _require(len(found) <= k, what, f"recall returns at most k={k} items, got {len(found)}")
    _require(all(r.item.scope == scope for r in found), what, "recall returns items of exactly its scope")
    scores = [r.score for r in found]
    _require(scores == sorted(scores, reverse=True), what, f"recall returns the best first, got scores {scores}")
    return list(found)


async def _check_remember(memory: Any, namespace: str) -> None:
    """remember returns the item"""
    what = "remember returns the item"
    scope = Scope("ann", namespace)
    before = time.time()
    item = await memory.remember(scope, CORPUS[0], source="conversation-1", meta={"topic": "fox", "n": [1, 2]})
    after = time.time()
    _require(isinstance(item, MemoryItem), what, f"remember returns a MemoryItem, got {item!r}")
    _require(isinstance(item.id, str) and bool(item.id), what, "the item has a non-empty string id")
    _require(item.scope == scope and item.text == CORPUS[0], what, "the item has the scope and text remembered")
    _require(item.source == "conversation-1", what, "the item has the source remembered")
    _require(dict(item.meta) == {"topic": "fox", "n": [1, 2]}, what, "the item has the meta remembered")
    _require(before - _SLACK <= item.created <= after + _SLACK, what,
             f"the item's created time is when it was remembered (Unix seconds), got {item.created!r}")
    other = await memory.remember(scope, CORPUS[1])
    _require(other.id != item.id, what, "each item gets an id of its own")
    _require(other.source == "" and dict(other.meta) == {}, what, "source and meta default to '' and {}")
    found = await _recall(memory, scope, CORPUS[0], 1, what)
    _require(len(found) == 1 and found[0].item.id == item.id, what, "recall finds the item by its own text")
    got = found[0].item
    _require((got.text, got.source, dict(got.meta)) == (item.text, item.source, dict(item.meta)), what,
             "a recalled item has the text, source and meta remembered")
    _require(abs(got.created - item.created) < 1.0, what, "a recalled item has the created time remembered")


async def _check_recall(memory: Any, namespace: str) -> None:
    """recall best first, at most k"""
    what = "recall best first, at most k"
    scope = Scope("ann", namespace)
    _require(await _recall(memory, scope, QUERY, 3, what) == [], what, "recall in an empty scope returns []")
    items = await _remember_all(memory, scope, CORPUS)
    found = await _recall(memory, scope, QUERY, 3, what)
    _require(len(found) >= 1 and found[0].item.id == items[0].id, what,
             "the item with the query's own text comes first")
    _require(found[0].score > 0.99, what, f"an item's score for its own text is about 1, got {found[0].score}")
    everything = await _recall(memory, scope, QUERY, 50, what)
    ranked = [r.item.id for r in everything]
    _require(items[1].id in ranked and (items[3].id not in ranked or ranked.index(items[1].id)
                                        < ranked.index(items[3].id)), what,
             "an item sharing most of the query's words ranks above one sharing none")
    _require(len(await _recall(memory, scope, QUERY, 1, what)) == 1, what, "recall with k=1 returns one item")


async def _check_scopes(memory: Any, namespace: str) -> None:
    """scopes are kept apart"""
    what = "scopes are kept apart"
    scopes = {
        "the scope": Scope("ann", namespace),
        "another user": Scope("bob", namespace),
        "another namespace": Scope("ann", namespace + "-other"),
        "another space": Scope("ann", namespace, "cache"),
        "the namespace's shared user": Scope("", namespace),
    }
    mine = {name: (await memory.remember(scope, f"{QUERY} {name}")).id for name, scope in scopes.items()}
    for name, scope in scopes.items():
        found = await _recall(memory, scope, QUERY, 10, what)
        ids = [r.item.id for r in found]
        _require(ids == [mine[name]], what, f"a recall in {name} returns its own item only, got {len(ids)} items")


async def _check_bad_input(memory: Any, namespace: str) -> None:
    """bad input raises UsageError"""
    what = "bad input raises UsageError"
    scope = Scope("ann", namespace)
    await memory.remember(scope, CORPUS[0])
    cases: tuple[tuple[str, Callable[[], Awaitable[Any]]], ...] = (
        ("recall with k=0", lambda: memory.recall(scope, QUERY, k=0)),
        ("recall with a query that is not a string", lambda: memory.recall(scope, 42)),
        ("remember of a text that is not a string", lambda: memory.remember(scope, b"bytes")),
        ("recall with a scope that is not a Scope", lambda: memory.recall(("ann", namespace), QUERY)),
    )
    for case, call in cases:
        try:
            await call()
        except UsageError:
            continue
        except Exception as exc:
            raise ConformanceError(f"memory breaks the contract ({what}): {case} raised {exc!r}") from exc
        raise ConformanceError(f"memory breaks the contract ({what}): {case} raised nothing")


async def _check_forget(memory: Any, namespace: str) -> None:
    """forget only in scope"""
    forgets = isinstance(memory, Forgetting)  # kept apart: the test would narrow ``memory`` to Forgetting
    if not forgets:
        return
    what = "forget only in scope"
    scope, other = Scope("ann", namespace), Scope("bob", namespace)
    items = await _remember_all(memory, scope, CORPUS[:2])
    theirs = await memory.remember(other, CORPUS[0])
    _require(await memory.forget(scope, theirs.id) == 0, what, "forget of another scope's id deletes nothing")
    _require([r.item.id for r in await _recall(memory, other, CORPUS[0], 5, what)] == [theirs.id], what,
             "forget of an id from another scope leaves that item in its scope")
    _require(await memory.forget(scope, items[0].id, "no-such-id") == 1, what,
             "forget returns how many items it deleted (unknown ids count nothing)")
    left = [r.item.id for r in await _recall(memory, scope, CORPUS[0], 5, what)]
    _require(left == [items[1].id], what, "a forgotten item is not recalled; the others are")
    _require(await memory.forget(scope, items[0].id) == 0, what, "forgetting an item twice deletes it once")


async def _check_erase(memory: Any, namespace: str) -> None:
    """erase across spaces"""
    forgets = isinstance(memory, Forgetting)
    if not forgets:
        return
    what = "erase across spaces"
    kept = {"another user": Scope("bob", namespace), "another namespace": Scope("ann", namespace + "-other")}
    erased = [Scope("ann", namespace), Scope("ann", namespace, "cache"), Scope("ann", namespace, "notes")]
    for scope in erased:
        await _remember_all(memory, scope, CORPUS[:2])
    left = {name: (await memory.remember(scope, CORPUS[0])).id for name, scope in kept.items()}
    _require(await memory.erase("ann", namespace) == 2 * len(erased), what,
             "erase returns how many items it deleted, from every space of the user")
    for scope in erased:
        _require(await _recall(memory, scope, CORPUS[0], 5, what) == [], what,
                 f"nothing of an erased user is recalled, in any space ({scope.space!r} still has items)")
    for name, scope in kept.items():
        _require([r.item.id for r in await _recall(memory, scope, CORPUS[0], 5, what)] == [left[name]], what,
                 f"erase leaves {name}'s items alone")
    _require(await memory.erase("ann", namespace) == 0, what, "erasing again deletes nothing")
