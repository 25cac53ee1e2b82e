"""Stores' inboxes (``InboxStore``): the conformance check catches a broken one, and SQLite's inbox table."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from loop import Role, Text, Turn, UsageError
from session import DeletingStore, MemoryStore, SQLiteStore, Store
from session.stores._protocol import InboxStore
from session.testing import ConformanceError, check_store
from tests.session.stores.conftest import ASYNCIO_ONLY


def posted(text: str, message_id: str) -> Turn:
    return Turn(Role.USER, [Text(text)], {"message_id": message_id})


def test_the_built_in_stores_have_an_inbox(tmp_path: Path) -> None:
    for store in (MemoryStore(), SQLiteStore(tmp_path / "c.db")):
        assert isinstance(store, InboxStore) and isinstance(store, DeletingStore) and isinstance(store, Store)
    assert not isinstance(object(), InboxStore)


class BackwardsInbox(MemoryStore):
    """Hands waiting messages out newest first."""

    async def inbox(self, session_id: str) -> tuple[Turn, ...]:
        return tuple(reversed(await super().inbox(session_id)))


class ForgetfulInbox(MemoryStore):
    """Marks every message of a conversation done when one is."""

    async def done(self, session_id: str, message_id: str) -> None:
        for message in await super().inbox(session_id):
            await super().done(session_id, message.meta["message_id"])


@pytest.mark.parametrize(("store", "rule"), [(BackwardsInbox, "in the order they were posted"),
                                             (ForgetfulInbox, "done takes one message out")])
async def test_the_conformance_check_catches_a_broken_inbox(store: type[MemoryStore], rule: str) -> None:
    with pytest.raises(ConformanceError, match=rule):
        await check_store(store)


@pytest.mark.parametrize("bad", [Turn(Role.USER, [Text("no id")]), Turn(Role.USER, [Text("x")], {"message_id": 7}),
                                 Turn(Role.ASSISTANT, [Text("x")], {"message_id": "m"}), "text"])
async def test_a_message_that_cannot_be_posted_is_refused(bad: object, tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "c.db") as store:
        for inbox in (MemoryStore(), store):
            with pytest.raises(UsageError):
                await inbox.post("s", bad)  # type: ignore[arg-type]
            assert await inbox.inbox("s") == ()


async def test_a_schema_2_file_gains_an_inbox_and_keeps_its_conversations(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    async with SQLiteStore(path) as store:
        await store.append("s", 0, [posted("kept", "m1")], {"title": "t"})
    conn = sqlite3.connect(path)
    try:
        with conn:  # as a version without the inbox left it
            conn.execute("DROP TABLE inbox")
            conn.execute("PRAGMA user_version = 2")
    finally:
        conn.close()
    async with SQLiteStore(path) as store:
        state = await store.load("s")
        assert state is not None and [t.text for t in state] == ["kept"] and state.meta == {"title": "t"}
        await store.post("s", posted("next", "m2"))
        assert [t.text for t in await store.inbox("s")] == ["next"]
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
    finally:
        conn.close()


@ASYNCIO_ONLY
async def test_posts_appends_and_dones_share_transactions_in_the_order_called(tmp_path: Path) -> None:
    import anyio

    async with SQLiteStore(tmp_path / "c.db") as store:
        async with anyio.create_task_group() as group:
            for n in range(30):
                group.start_soon(store.post, f"s{n % 3}", posted(f"{n}", f"m{n}"))
                if n % 2:
                    group.start_soon(store.done, f"s{n % 3}", f"m{n}")
                group.start_soon(store.append, f"s{n % 3}", n // 3, [posted(f"{n}", f"m{n}")], {})
        for s in range(3):
            waiting = [t.text for t in await store.inbox(f"s{s}")]
            assert waiting == [str(n) for n in range(30) if n % 3 == s and not n % 2]
            state = await store.load(f"s{s}")
            assert state is not None and [t.text for t in state] == [str(n) for n in range(30) if n % 3 == s]
        await store.delete("s0")
        assert await store.inboxes() == ("s1", "s2")
