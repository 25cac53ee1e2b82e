"""``GET /sessions``: a token's stored conversations, newest first, and nobody else's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loop import State
from provider import Function
from session import MemoryStore, SQLiteStore
from tests.session.http.helpers import OTHER, TOKEN, in_process, wait_turns
from tests.session.models import echo


class Unlisted:
    """A store without the listing ability."""

    def __init__(self) -> None:
        self.inner = MemoryStore()

    async def load(self, session_id: str) -> State | None:
        return await self.inner.load(session_id)

    async def append(self, session_id: str, start: int, turns: Any, meta: Any) -> None:
        await self.inner.append(session_id, start, turns, meta)


async def _converse(client: Any, text: str) -> str:
    session_id = (await client.post("/sessions")).json()["id"]
    assert (await client.post(f"/sessions/{session_id}/messages", json={"text": text})).status_code == 202
    await wait_turns(client, session_id, 2)
    return str(session_id)


@pytest.mark.parametrize("durable", [False, True])
async def test_a_token_lists_its_own_conversations_newest_first(durable: bool, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db") if durable else MemoryStore()
    async with in_process(Function(echo), store=store) as served:
        mine, theirs = served.client(TOKEN), served.client(OTHER)
        first = await _converse(mine, "first question")
        second = await _converse(mine, "a second\n  question  " + "x" * 300)
        other = await _converse(theirs, "not yours")
        await mine.post("/sessions")  # nothing sent to it: nothing stored, not listed
        listed = (await mine.get("/sessions")).json()["sessions"]
        assert [s["id"] for s in listed] == [second, first]
        assert listed[1]["title"] == "first question" and listed[1]["turns"] == 2
        assert listed[0]["title"].startswith("a second question xxx") and len(listed[0]["title"]) == 120
        assert listed[0]["updated"] >= listed[1]["updated"] > 1.7e9
        assert [s["id"] for s in (await theirs.get("/sessions")).json()["sessions"]] == [other]
        assert [s["id"] for s in (await mine.get("/sessions?limit=1")).json()["sessions"]] == [second]
    if durable:
        await store.aclose()


@pytest.mark.parametrize("limit", ["0", "-1", "x", "1001", ""])
async def test_a_bad_limit_is_400(limit: str) -> None:
    async with in_process(Function(echo)) as served:
        response = await served.client().get(f"/sessions?limit={limit}")
    assert response.status_code == 400 and response.json()["error"]["type"] == "bad_query"


async def test_a_store_that_cannot_list_says_so() -> None:
    async with in_process(Function(echo), store=Unlisted()) as served:  # type: ignore[arg-type]
        response = await served.client().get("/sessions")
    assert response.status_code == 501
    assert response.json()["error"]["type"] == "not_supported" and "Unlisted" in response.json()["error"]["message"]


async def test_listing_needs_the_token() -> None:
    async with in_process(Function(echo)) as served:
        assert (await served.client(None).get("/sessions")).status_code == 401
