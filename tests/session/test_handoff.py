"""Handing a message to the worker that holds its conversation (``HandOffStore``), against a real PostgreSQL server
(see ``stores/pg_server``): the store's ``hand_off`` and ``hand_offs``, and two managers sharing one database, where
a message reaching the one that does not hold the conversation runs on the one that does, in order, once. Every
test runs on asyncio and on trio."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from cognitive import ReAct, new_turn_processor
from loop import Role, Text, Turn
from provider import Function
from session import Manager, SessionBusy
from session.stores._protocol import HandOffStore
from tests.session.stores.pg_server import pg_schema, pg_url, require_psycopg

require_psycopg("PostgresStore")

from session.stores._postgres import PostgresStore  # noqa: E402

__all__ = ["pg_schema", "pg_url"]  # fixtures, used by name

LONG = 60.0


def posted(message_id: str) -> Turn:
    return Turn(Role.USER, [Text(f"message {message_id}")], {"message_id": message_id})


async def next_within(following: Any, seconds: float = 10.0) -> Any:
    with anyio.fail_after(seconds):
        return await following.__anext__()


# The store.

async def test_a_message_is_handed_off_only_while_another_holds_a_live_lease(pg_url: str) -> None:
    async with PostgresStore(pg_url) as holder, PostgresStore(pg_url) as other:
        assert isinstance(holder, HandOffStore)
        assert await other.hand_off("s1", posted("m0"), limit=10) is None  # nobody holds it: nothing stored
        assert await holder.inbox("s1") == ()
        await holder.acquire("s1", "A", LONG)
        assert await other.hand_off("s1", posted("m1"), limit=10) == 0
        assert await other.hand_off("s1", posted("m2"), limit=10) == 1
        assert [t.meta["message_id"] for t in await holder.inbox("s1")] == ["m1", "m2"]
        assert await holder.waiting_ids("s1") == ("m1", "m2")
        assert await other.hand_off("s1", posted("m3"), limit=2) == 2  # two wait already: refused, not stored
        assert [t.meta["message_id"] for t in await holder.inbox("s1")] == ["m1", "m2"]
        await holder.release("s1", "A")
        assert await other.hand_off("s1", posted("m4"), limit=10) is None


async def test_the_holder_hears_of_each_message_handed_to_it_and_no_one_else_does(pg_url: str) -> None:
    async with PostgresStore(pg_url) as a, PostgresStore(pg_url) as b, PostgresStore(pg_url) as poster:
        following_a, following_b = a.hand_offs("A"), b.hand_offs("B")
        try:
            assert await next_within(following_a) is None  # listening begins: anything before may be missed
            assert await next_within(following_b) is None
            await a.acquire("s1", "A", LONG)
            await b.acquire("s2", "B", LONG)
            await poster.hand_off("s1", posted("m1"), limit=10)
            await poster.hand_off("s2", posted("m2"), limit=10)
            await poster.hand_off("s1", posted("m3"), limit=10)
            assert await next_within(following_a) == "s1"
            assert await next_within(following_b) == "s2"
            # Both messages for s1 came while A had not read: one wake-up for them.
            with anyio.move_on_after(0.5):
                extra = await following_a.__anext__()
                assert extra == "s1"  # or a second, later one: never another conversation
        finally:
            await following_a.aclose()
            await following_b.aclose()
        assert [e async for e in following_a] == []  # closed: it ends


# Two managers sharing the database.

async def slow(request: Any) -> str:
    await anyio.sleep(0.2)
    asked = next(t for t in reversed(request.turns) if t.role is Role.USER)
    return f"answer to {asked.text}"


@asynccontextmanager
async def worker(url: str, holder: str, queue_size: int = 64) -> AsyncIterator[Manager]:
    async with PostgresStore(url) as store, Manager(new_turn_processor(ReAct), provider=Function(slow), store=store,
                                                     holder=holder, lease_idle=30.0, queue_size=queue_size) as manager:
        yield manager


async def wait_for_answers(manager: Manager, session_id: str, count: int) -> list[str]:
    with anyio.fail_after(20):
        while True:
            state = await manager.store.load(session_id)
            texts = [t.text for t in (state or ()) if t.role is Role.ASSISTANT]
            if len(texts) >= count:
                return [t.text for t in state or () if t.role in (Role.USER, Role.ASSISTANT)]
            await anyio.sleep(0.05)


async def test_a_message_reaching_the_other_worker_runs_on_the_holder_in_order_once(pg_url: str) -> None:
    async with worker(pg_url, "A") as a, worker(pg_url, "B") as b:
        session = await a.open("chat")
        await session.post("one")
        handed = await b.hand_off("chat", "two")
        assert handed is not None and handed[1] == 1  # "one" runs or waits before it
        await session.post("three")  # posted on the holder after "two" was handed to it: it runs after
        handed = await b.hand_off("chat", "four")
        assert handed is not None
        assert await wait_for_answers(a, "chat", 4) == [
            "one", "answer to one", "two", "answer to two", "three", "answer to three", "four", "answer to four"]
        assert b.get("chat") is None  # the conversation never moved
        assert await a.store.inbox("chat") == ()


async def test_nothing_is_handed_off_when_the_conversation_is_free_or_open_here(pg_url: str) -> None:
    async with worker(pg_url, "A") as a, worker(pg_url, "B") as b:
        assert await b.hand_off("free", "hello") is None  # nobody holds it: B opens it itself
        session = await a.open("busy")
        assert await a.hand_off("busy", "hello") is None  # open here: posted to the session as usual
        await session.close()


async def test_a_handed_message_is_refused_when_the_queue_is_full(pg_url: str) -> None:
    # The worker a message reaches counts what waits in the inbox against its own queue_size (the same setting
    # on every worker, as a deployment runs them).
    async with worker(pg_url, "A") as a, worker(pg_url, "B", queue_size=1) as b:
        session = await a.open("chat")
        await session.post("one")
        await b.hand_off("chat", "two")
        with pytest.raises(SessionBusy, match="already has 1 messages waiting"):
            await b.hand_off("chat", "three")
        assert [t.text for t in await a.store.inbox("chat")] == ["one", "two"]
