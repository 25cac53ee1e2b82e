"""Conformance checks for stores of your own: ``await check_store(make_store)`` runs the ``Store`` contract, and
the optional abilities' (``DeletingStore``, ``InboxStore``, ``CheckpointStore``, ``ListingStore``) when the store
has them; ``await check_lease_store(make_store)`` runs the ``LeaseStore`` contract, with stores that share one
database acting as workers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from loop import File, Image, Reasoning, Role, Text, ToolCall, ToolResult, Turn, Usage, UsageError
from loop.errors import ConformanceError
from session.stores._protocol import (CheckpointStore, DeletingStore, InboxStore, Lease, LeaseLost, LeaseStore,
                                     ListingStore, Store, StoreConflict)

__all__ = ["ConformanceError", "check_lease_store", "check_store"]


def _require(ok: bool, rule: str) -> None:
    if not ok:
        raise ConformanceError(f"store breaks the contract: {rule}")


SAMPLE = (
    Turn(Role.SYSTEM, [Text("be brief")]),
    Turn(Role.USER, [Text("héllo ✓")]),
    Turn(Role.ASSISTANT, [Reasoning("think", "sig"), Text("calling"), ToolCall("c1", "add", '{"a": 1}'),
                          Usage(3, 4)], {"finish_reason": "tool_calls"}),
    Turn(Role.TOOL, [ToolResult("c1", "add", "error: boom", is_error=True)]),
)
_PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
MEDIA = (
    Turn(Role.USER, [Text("what is this?"), Image(data=_PNG), Image("https://example.com/cat.png"),
                     File(data=b"notes\n", media_type="text/plain", name="notes.txt")]),
    Turn(Role.ASSISTANT, [ToolCall("c2", "screenshot", "{}")]),
    Turn(Role.TOOL, [ToolResult("c2", "screenshot", "the screen", attachments=(Image(data=_PNG),))]),
)


async def check_store(make_store: Callable[[], Store | Awaitable[Store]]) -> None:
    """Run the ``Store`` contract against a fresh store from ``make_store`` (and the ``InboxStore`` contract if
    it has that ability); raises ``ConformanceError``."""
    made = make_store()
    store = await made if isinstance(made, Awaitable) else made
    _require(await store.load("absent") is None, "load of an unknown id returns None")

    await store.append("s1", 0, SAMPLE[:2], {"k": 1})
    loaded = await store.load("s1")
    _require(loaded is not None and loaded.turns == SAMPLE[:2], "load returns the appended turns in order")
    _require(loaded is not None and dict(loaded.meta) == {"k": 1}, "load returns the meta of the last append")

    await store.append("s1", 2, SAMPLE[2:], {"k": 2, "nested": {"a": [1, 2]}})
    loaded = await store.load("s1")
    _require(loaded is not None and loaded.turns == SAMPLE, "every part type round-trips")
    _require(loaded is not None and [t.meta for t in loaded] == [t.meta for t in SAMPLE], "turn meta round-trips")
    _require(loaded is not None and dict(loaded.meta) == {"k": 2, "nested": {"a": [1, 2]}}, "meta is replaced")

    for gap in (5, 9):
        try:
            await store.append("s1", gap, SAMPLE[:1], {})
        except StoreConflict:
            pass
        else:
            raise ConformanceError(f"store breaks the contract: an append at {gap} to 4 turns must conflict")
    after = await store.load("s1")
    _require(after is not None and after.turns == SAMPLE, "a conflicting append writes nothing")

    await store.append("s1", 4, (), {"k": 3})
    after = await store.load("s1")
    _require(after is not None and len(after) == 4 and after.meta["k"] == 3, "an empty append updates meta only")

    branch = Turn(Role.USER, [Text("a branch")])
    await store.append("s1", 2, (branch,), {"k": 4})
    after = await store.load("s1")
    _require(after is not None and after.turns == (*SAMPLE[:2], branch), "a smaller start moves to a branch")
    await store.append("s1", 3, SAMPLE[2:], {"k": 5})
    after = await store.load("s1")
    _require(after is not None and after.turns == (*SAMPLE[:2], branch, *SAMPLE[2:]),
             "appending after a branch continues the branch")
    await store.append("s1", 0, SAMPLE[:1], {})
    after = await store.load("s1")
    _require(after is not None and after.turns == SAMPLE[:1], "a branch can start at the first turn")

    async def writer(n: int) -> None:
        for i in range(5):
            await store.append(f"c{n}", i, (Turn(Role.USER, [Text(f"{n}-{i}")]),), {"n": n})

    async with anyio.create_task_group() as group:
        for n in range(5):
            group.start_soon(writer, n)
    for n in range(5):
        got = await store.load(f"c{n}")
        _require(got is not None and [t.text for t in got] == [f"{n}-{i}" for i in range(5)],
                 "concurrent writers to different sessions do not interfere")
    await _check_media(store)
    if isinstance(store, InboxStore):
        await _check_inbox(store)
    if isinstance(store, CheckpointStore):
        await _check_checkpoints(store)
    if isinstance(store, ListingStore):
        await _check_listing(store)


async def _check_media(store: Store) -> None:
    await store.append("media", 0, MEDIA, {})
    await store.append("media", 3, MEDIA[:1], {})  # the same bytes again, in a later append
    loaded = await store.load("media")
    _require(loaded is not None and loaded.turns == (*MEDIA, MEDIA[0]),
             "images, files and a tool result's attachments round-trip byte for byte")
    if isinstance(store, DeletingStore):
        await store.append("media-too", 0, MEDIA[:1], {})
        await store.delete("media-too")
        kept = await store.load("media")
        _require(kept is not None and kept.turns == (*MEDIA, MEDIA[0]),
                 "deleting a conversation keeps the images another conversation shows")
        await store.delete("media")


async def _check_listing(store: ListingStore) -> None:
    await store.append("list:a", 0, SAMPLE, {})
    await anyio.sleep(0.01)  # a store may keep times to the millisecond
    await store.append("list:b", 0, [Turn(Role.USER, [Text("  second\n question  ")])], {})
    await store.append("list-other", 0, SAMPLE, {})
    listed = await store.list_sessions("list:")
    _require([s.id for s in listed] == ["list:b", "list:a"],
             "a listing holds the ids under its prefix, most recently updated first")
    _require([s.title for s in listed] == ["second question", "héllo ✓"] and [s.turns for s in listed] == [1, 4],
             "a listed conversation's title is its first user message on one line, and turns its length")
    _require(listed[0].updated >= listed[1].updated > 0, "a listing says when each conversation was updated")
    await store.append("list:a", 2, SAMPLE[:1], {})  # a branch: it is the newest now, three turns long
    again = await store.list_sessions("list:", limit=1)
    _require([(s.id, s.turns) for s in again] == [("list:a", 3)], "a listing keeps to its limit and sees branches")
    try:
        await store.list_sessions("list:", limit=0)
    except UsageError:
        pass
    else:
        _require(False, "a listing with a limit below 1 raises UsageError")


async def _check_checkpoints(store: CheckpointStore) -> None:
    _require(await store.load_checkpoint("search") is None, "a checkpoint never saved loads as None")
    await store.save_checkpoint("search", {"format": 1, "nodes": [{"thought": "é ✓", "score": 0.5}]})
    await store.save_checkpoint("search", {"format": 1, "rollouts": 2})
    _require(await store.load_checkpoint("search") == {"format": 1, "rollouts": 2},
             "a checkpoint saved again replaces the one before, and loads back equal")
    await store.drop_checkpoint("search")
    await store.drop_checkpoint("search")  # dropping what is gone is harmless
    _require(await store.load_checkpoint("search") is None, "a dropped checkpoint is gone")


def _posted(n: int, text: str | None = None) -> Turn:
    return Turn(Role.USER, [Text(text or f"message {n} ✓")], {"message_id": f"m{n}"})


async def _concurrently_in_order(*calls: tuple[Any, ...]) -> None:
    """Make each call (a function and its arguments) in its own task, each task reaching the store before the
    next starts, and wait for them all: concurrent calls made in a known order, on any backend (trio, unlike
    asyncio, does not start tasks in the order they were spawned)."""
    async with anyio.create_task_group() as group:
        for fn, *args in calls:
            reached = anyio.Event()

            async def call(fn: Any = fn, args: list[Any] = args, reached: anyio.Event = reached) -> None:
                reached.set()  # this task goes on into the call until it first waits; then the next starts
                await fn(*args)

            group.start_soon(call)
            await reached.wait()


async def _check_inbox(store: InboxStore) -> None:
    _require(await store.inbox("box") == () and await store.inboxes() == (), "an inbox starts empty")
    for n in range(3):
        await store.post("box", _posted(n))
    await store.post("other", _posted(9))
    _require(await store.inbox("box") == (_posted(0), _posted(1), _posted(2)),
             "posted messages wait in the order they were posted, meta included")
    _require(await store.inboxes() == ("box", "other"), "inboxes names the conversations with messages waiting")
    _require(await store.load("box") is None, "posting does not create the conversation")
    await store.post("box", _posted(1, "posted again"))
    _require(await store.inbox("box") == (_posted(0), _posted(1), _posted(2)),
             "posting an id already waiting changes nothing")
    await store.append("box", 0, (_posted(0),), {})
    _require(len(await store.inbox("box")) == 3, "an append takes no message out of the inbox")
    await store.done("box", "m1")
    await store.done("box", "absent")
    await store.done("nowhere", "m0")
    _require(await store.inbox("box") == (_posted(0), _posted(2)), "done takes one message out; others stay")
    await store.done("box", "m0")
    await store.done("box", "m2")
    _require(await store.inbox("box") == () and await store.inboxes() == ("other",),
             "a conversation whose messages are all done has none waiting")
    await _concurrently_in_order((store.post, "box", _posted(3)), (store.done, "box", "m3"),
                                 (store.post, "box", _posted(4)))
    _require(await store.inbox("box") == (_posted(4),), "posts and dones take effect in the order they were called")
    try:
        await store.post("box", Turn(Role.ASSISTANT, [Text("not a user's")], {"message_id": "m5"}))
    except UsageError:
        pass
    else:
        raise ConformanceError("store breaks the contract: posting what is not a user turn must raise UsageError")
    if isinstance(store, DeletingStore):
        await store.delete("box")
        _require(await store.inbox("box") == (), "deleting a conversation forgets its inbox")


# Leases.

LONG = 60.0  # a lease that stays live for as long as the check runs
SHORT = 0.2  # a lease the check lets lapse: it waits WAIT seconds, never asks whether it is live yet
WAIT = SHORT + 0.1


async def _refused(call: Awaitable[Any], error: type[Exception], rule: str) -> None:
    try:
        await call
    except error:
        return
    raise ConformanceError(f"store breaks the contract: {rule}")


async def _allowed(call: Awaitable[Any], rule: str) -> None:
    try:
        await call
    except LeaseLost as exc:
        raise ConformanceError(f"store breaks the contract: {rule} (it raised {exc!r})"[:600]) from exc


def _given(lease: Lease | None, rule: str) -> Lease:
    _require(isinstance(lease, Lease), rule)
    assert lease is not None  # for the type checker: _require raised otherwise
    return lease


async def check_lease_store(make_store: Callable[[], LeaseStore | Awaitable[LeaseStore]]) -> None:
    """Run the ``LeaseStore`` contract against stores from ``make_store``, which all share one fresh database:
    each store is one worker. Some leases are given a fraction of a second and waited out, so the check takes
    about a second. It checks the inbox's part (``post`` unfenced, ``lapsed``) when the stores are
    ``InboxStore``s and ``delete`` when they are ``DeletingStore``s; raises ``ConformanceError``."""
    made = [make_store() for _ in range(3)]
    a, b, plain = [await m if isinstance(m, Awaitable) else m for m in made]  # plain takes no lease until the race
    for bad in (("", "worker-a", LONG), ("lease:x", "", LONG), ("lease:x", 7, LONG), ("lease:x", "worker-a", 0),
                ("lease:x", "worker-a", -1.0)):
        await _refused(a.acquire(*bad), UsageError, f"acquire{bad!r} must raise UsageError (a bad id, holder or ttl)")
    for call, args in ((a.renew, ("", LONG)), (a.renew, ("worker-a", 0)), (a.release, ("", "worker-a")),
                       (a.release, ("lease:x", ""))):
        await _refused(call(*args), UsageError, f"{call.__name__}{args!r} must raise UsageError")
    first = _given(await a.acquire("lease:1", "worker-a", LONG), "acquire of a free lease gives it to the holder")
    _require((first.session_id, first.holder) == ("lease:1", "worker-a") and isinstance(first.epoch, int),
             "a lease names its conversation, its holder and its epoch")
    _require(await b.acquire("lease:1", "worker-b", LONG) is None, "acquire of a live lease another holds is None")
    again = await a.acquire("lease:1", "worker-a", LONG)
    _require(again is not None and again.epoch == first.epoch and again.expires >= first.expires,
             "its holder acquiring a lease again renews it, with the same epoch")
    await a.append("lease:1", 0, SAMPLE[:2], {})
    await _check_fenced(b, "lease:1", 2, "a store holding no lease may not write while another's lease is live")
    loaded = await plain.load("lease:1")
    _require(loaded is not None and loaded.turns == SAMPLE[:2], "a write fenced off writes nothing")
    await a.acquire("lease:2", "worker-a", LONG)
    _require(await a.renew("worker-a", LONG) == ("lease:1", "lease:2") and await b.renew("worker-b", LONG) == (),
             "renew returns the ids of the leases the holder holds, sorted")
    await _check_takeover(a, b, plain)
    await _check_race(a, b, plain)
    await _check_lapsed(a, b)


async def _check_fenced(store: LeaseStore, session_id: str, start: int, rule: str) -> None:
    """Every write of ``store`` to ``session_id`` raises ``LeaseLost``, and a post does not."""
    await _refused(store.append(session_id, start, SAMPLE[:1], {}), LeaseLost, f"append: {rule}")
    if isinstance(store, InboxStore):
        await store.post(session_id, _posted(1))
        _require(_posted(1) in await store.inbox(session_id), "post is never fenced")
        await _refused(store.done(session_id, "m1"), LeaseLost, f"done: {rule}")
        _require(_posted(1) in await store.inbox(session_id), "a done fenced off leaves the message waiting")
    if isinstance(store, DeletingStore):
        await _refused(store.delete(session_id), LeaseLost, f"delete: {rule}")


async def _check_takeover(a: LeaseStore, b: LeaseStore, plain: LeaseStore) -> None:
    short = _given(await a.acquire("lease:3", "worker-a", SHORT), "acquire of a free lease gives it to the holder")
    await a.append("lease:3", 0, SAMPLE[:1], {})
    await a.acquire("lease:4", "worker-r", SHORT)
    await anyio.sleep(WAIT)
    await _allowed(a.append("lease:3", 1, SAMPLE[1:2], {}), "a lapsed lease nobody took still lets its holder write")
    _require(await a.renew("worker-r", LONG) == ("lease:4",) and await b.acquire("lease:4", "worker-b", LONG) is None,
             "renew extends a lapsed lease nobody took")
    again = await a.acquire("lease:3", "worker-a", SHORT)
    _require(again is not None and again.epoch == short.epoch,
             "its holder acquiring a lapsed lease nobody took gets it back, with the same epoch")
    await anyio.sleep(WAIT)
    taken = _given(await b.acquire("lease:3", "worker-b", LONG), "a lapsed lease goes to another holder who asks")
    _require(taken.epoch > short.epoch, "a lease that changes hands gets a higher epoch")
    await _check_fenced(a, "lease:3", 2, "the holder of a lease taken over may not write")
    loaded = await plain.load("lease:3")
    _require(loaded is not None and loaded.turns == SAMPLE[:2], "a write fenced off writes nothing")
    _require(await a.acquire("lease:3", "worker-a", LONG) is None, "a deposed holder cannot take a live lease back")
    _require("lease:3" not in await a.renew("worker-a", LONG), "renew leaves out a lease taken over")
    await _allowed(b.append("lease:3", 2, SAMPLE[2:], {}), "a lease's new holder may write")
    await a.release("lease:3", "worker-a")
    _require(await a.acquire("lease:3", "worker-a", LONG) is None,
             "releasing a lease one does not hold changes nothing")
    await b.release("lease:3", "worker-b")
    _require("lease:3" not in await b.renew("worker-b", LONG), "renew leaves out a released lease")
    back = _given(await a.acquire("lease:3", "worker-a", LONG), "a released lease is free at once")
    _require(back.epoch > taken.epoch, "a lease that changes hands gets a higher epoch (never an old one)")
    await _refused(b.append("lease:3", 4, SAMPLE[:1], {}), LeaseLost,
                   "append: a store whose lease was released may not write while another's lease is live")
    await a.release("lease:3", "worker-a")
    loaded = await plain.load("lease:3")  # a writer loads what others wrote before it writes
    _require(loaded is not None and loaded.turns == SAMPLE, "the holder's writes are stored")
    await _allowed(plain.append("lease:3", 4, SAMPLE[:1], {}), "a conversation nobody leases may be written")
    loaded = await plain.load("lease:3")
    _require(loaded is not None and loaded.turns == (*SAMPLE, SAMPLE[0]),
             "a conversation whose lease is released is written as if it had none")


async def _check_race(a: LeaseStore, b: LeaseStore, plain: LeaseStore) -> None:
    lapsing = _given(await a.acquire("lease:race", "worker-a", SHORT), "acquire of a free lease gives it")
    await anyio.sleep(WAIT)
    won: list[Lease] = []

    async def take(store: LeaseStore, n: int) -> None:
        lease = await store.acquire("lease:race", f"racer-{n}", LONG)
        if lease is not None:
            won.append(lease)

    async with anyio.create_task_group() as group:
        for n in range(12):
            group.start_soon(take, (a, b, plain)[n % 3], n)
    _require(len(won) == 1, f"of workers racing for a lapsed lease exactly one wins ({len(won)} did)")
    _require(won[0].epoch > lapsing.epoch, "a lease won in a race has a higher epoch")
    _require(await a.acquire("lease:race", "worker-a", LONG) is None, "the race's winner holds the lease")


async def _check_lapsed(a: LeaseStore, b: LeaseStore) -> None:
    if not (isinstance(a, InboxStore) and isinstance(b, InboxStore)):
        return
    await b.post("lease:idle", _posted(2))  # never leased
    _require(await a.lapsed() == ("lease:3", "lease:idle"),  # lease:1's holder is live; lease:3 was released
             "lapsed names the conversations with messages waiting whose lease is free or lapsed")
    await a.release("lease:1", "worker-a")
    await b.acquire("lease:idle", "worker-b", SHORT)
    await b.acquire("lease:3", "worker-b", LONG)
    await anyio.sleep(WAIT)
    _require(await a.lapsed() == ("lease:1", "lease:idle"),
             "lapsed names conversations whose lease was released or lapsed, not those leased")
