"""Limits on what one token can make the server hold or do: history read a page at a time, large pages encoded
off the event loop, a cap on a conversation's message text, and a rate limit on reads."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest

from loop import Role, Text, Turn, UsageError
from provider import Function
from session import MemoryStore
from session.http import HTTPConduit, RateLimit
from session.http import _routes as routes
from session.http._guards import RateLimited
from session.http._history import page_chunks
from tests.session.http.helpers import OTHER, TOKEN, in_process, key, on_socket, wait_turns
from tests.session.models import echo

MiB = 1024 * 1024


async def _stored(session_id: str, texts: list[str], token: str = TOKEN) -> MemoryStore:
    """A memory store holding ``token``'s conversation ``session_id``: user and assistant turns alternating."""
    store = MemoryStore()
    turns = [Turn(Role.USER if i % 2 == 0 else Role.ASSISTANT, (Text(t),)) for i, t in enumerate(texts)]
    await store.append(key(session_id, token), 0, turns, {})
    return store


# -- pages ---------------------------------------------------------------------------------------------------


async def test_history_is_read_a_page_at_a_time() -> None:
    store = await _stored("long", [f"t{i}" for i in range(250)])
    async with in_process(Function(echo), store=store) as served:
        client = served.client()
        first = (await client.get("/sessions/long/turns")).json()
        assert (first["id"], len(first["turns"]), first["next"]) == ("long", 100, 99)
        second = (await client.get("/sessions/long/turns", params={"after": first["next"]})).json()
        assert [t["parts"][0]["text"] for t in second["turns"]] == [f"t{i}" for i in range(100, 200)]
        last = (await client.get("/sessions/long/turns", params={"after": second["next"]})).json()
        assert (len(last["turns"]), last["next"]) == (50, None)
        assert (await client.get("/sessions/long/turns", params={"limit": 1000})).json()["next"] is None
        small = (await client.get("/sessions/long/turns", params={"after": 5, "limit": 2})).json()
        assert ([t["parts"][0]["text"] for t in small["turns"]], small["next"]) == (["t6", "t7"], 7)
        beyond = (await client.get("/sessions/long/turns", params={"after": 10**6})).json()
        assert (beyond["turns"], beyond["next"]) == ([], None)


async def test_a_short_conversation_is_one_page_as_before() -> None:
    async with in_process(Function(echo)) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        assert (await client.get(f"/sessions/{session_id}/turns")).json() == {"id": session_id, "turns": [],
                                                                             "next": None}
        await client.post(f"/sessions/{session_id}/messages", json={"text": "hi"})
        await wait_turns(client, session_id, 2)
        page = (await client.get(f"/sessions/{session_id}/turns")).json()
    assert [t["parts"][0]["text"] for t in page["turns"]] == ["hi", "HI"] and page["next"] is None


@pytest.mark.parametrize(("name", "value"), [("limit", "0"), ("limit", "1001"), ("limit", "ten"), ("limit", ""),
                                             ("after", "-1"), ("after", "1.5"), ("after", "x" * 300),
                                             ("after", "9" * 19)])
async def test_a_bad_page_parameter_is_400_naming_it(name: str, value: str) -> None:
    store = await _stored("s", ["a", "b"])
    async with in_process(Function(echo), store=store) as served:
        response = await served.client().get("/sessions/s/turns", params={name: value})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "bad_query" and f"'{name}'" in error["message"] and len(error["message"]) < 300


async def test_reading_large_turns_leaves_the_event_loop_free(monkeypatch: pytest.MonkeyPatch) -> None:
    """Six turns of 4 MiB each, a page of four (24 MiB of JSON): it is encoded in a worker thread, off the event
    loop, and /healthz keeps answering while the pages are read."""
    encoded_on: list[bool] = []  # per large page: whether it was encoded on the event loop's own thread

    def recording(*args: Any) -> Any:
        encoded_on.append(threading.current_thread() is threading.main_thread())
        return page_chunks(*args)

    monkeypatch.setattr(routes, "page_chunks", recording)
    store = await _stored("big", [("é" if i % 2 else "x") * (4 * MiB) for i in range(6)])
    async with on_socket(Function(echo), store=store) as served:
        reader, prober = served.client(), served.client()
        await prober.get("/healthz")  # connected
        probes = 0
        sizes: list[int] = []

        async def read() -> None:
            for _ in range(3):
                response = await reader.get("/sessions/big/turns")
                assert response.status_code == 200
                sizes.append(len(response.content))  # not parsed here: that would stall this loop itself

        async with anyio.create_task_group() as group:
            group.start_soon(read)
            while len(sizes) < 3:
                assert (await prober.get("/healthz")).status_code == 200
                probes += 1
                await anyio.sleep(0.005)
    assert min(sizes) > 24 * MiB and probes >= 1
    assert encoded_on == [False, False, False], "every large page was encoded in a worker thread"


async def test_a_page_of_large_turns_ends_early() -> None:
    store = await _stored("big", ["x" * (4 * MiB)] * 6)
    async with in_process(Function(echo), store=store) as served:
        client = served.client()
        first = await client.get("/sessions/big/turns")
        second = await client.get("/sessions/big/turns", params={"after": first.json()["next"]})
        alone = await client.get("/sessions/big/turns", params={"after": 0, "limit": 1})
    assert (len(first.json()["turns"]), first.json()["next"]) == (4, 3)  # 16 MiB of text at most, then next
    assert int(first.headers["content-length"]) == len(first.content)
    assert (len(second.json()["turns"]), second.json()["next"]) == (2, None)
    assert (len(alone.json()["turns"]), alone.json()["next"]) == (1, 1)


# -- the size of a conversation ------------------------------------------------------------------------------


async def test_a_message_past_the_conversation_limit_is_413_naming_it() -> None:
    async with in_process(Function(echo), max_conversation_bytes=1000) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        assert (await client.post(f"/sessions/{session_id}/messages", json={"text": "x" * 400})).status_code == 202
        await wait_turns(client, session_id, 2)
        refused = await client.post(f"/sessions/{session_id}/messages", json={"text": "y" * 300})
        assert refused.status_code == 413, refused.text
        error = refused.json()["error"]
        assert error["type"] == "conversation_too_large" and "1000 bytes" in error["message"]
        # What it counts is UTF-8: 150 'é' are 300 bytes.
        assert (await client.post(f"/sessions/{session_id}/messages", json={"text": "é" * 150})).status_code == 413
        assert (await client.post(f"/sessions/{session_id}/messages", json={"text": "z" * 150})).status_code == 202
        await wait_turns(client, session_id, 4)
        other = (await client.post("/sessions")).json()["id"]  # another conversation has its own
        assert (await client.post(f"/sessions/{other}/messages", json={"text": "x" * 900})).status_code == 202


async def test_a_conversation_from_the_store_counts_what_it_holds() -> None:
    store = await _stored("old", ["a" * 450, "A" * 450])
    async with in_process(Function(echo), store=store, max_conversation_bytes=1000) as served:
        client = served.client()
        refused = await client.post("/sessions/old/messages", json={"text": "b" * 101})
        assert refused.status_code == 413 and refused.json()["error"]["type"] == "conversation_too_large"
        assert (await client.post("/sessions/old/messages", json={"text": "b" * 100})).status_code == 202


async def test_a_conversation_past_the_limit_is_413_in_openais_shape_under_v1() -> None:
    store = await _stored("kept", ["a" * 600, "A" * 600])
    ask = {"model": "agent", "messages": [{"role": "user", "content": "more"}]}
    async with in_process(Function(echo), store=store, max_conversation_bytes=1000) as served:
        client = served.client()
        refused = await client.post("/v1/chat/completions", json=ask, headers={"x-session-id": "kept"})
        fresh = await client.post("/v1/chat/completions", json=ask)
    assert refused.status_code == 413, refused.text
    error = refused.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == "conversation_too_large"
    assert "1000 bytes" in error["message"]
    assert fresh.status_code == 200


async def test_no_conversation_limit_when_turned_off() -> None:
    store = await _stored("old", ["a" * 5000])
    async with in_process(Function(echo), store=store, max_conversation_bytes=None) as served:
        response = await served.client().post("/sessions/old/messages", json={"text": "b" * 5000})
    assert response.status_code == 202


def test_the_conversation_limit_must_make_sense() -> None:
    assert HTTPConduit(token="t").max_conversation_bytes == 64 * MiB
    with pytest.raises(UsageError, match="max_conversation_bytes"):
        HTTPConduit(token="t", max_conversation_bytes=0)


# -- reads are rate-limited too --------------------------------------------------------------------------------


async def test_reads_beyond_their_own_budget_are_429_per_token() -> None:
    limit = RateLimit(per_second=0.01, burst=2, reads_per_second=0.01, read_burst=3)
    async with in_process(Function(echo), rate_limit=limit) as served:
        mine, theirs = served.client(TOKEN), served.client(OTHER)
        session_id = (await mine.post("/sessions")).json()["id"]
        statuses = [(await mine.get(f"/sessions/{session_id}/turns")).status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        limited = await mine.get(f"/sessions/{session_id}/turns")
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        assert limited.json()["error"]["type"] == "rate_limited" and "3" in limited.json()["error"]["message"]
        models = await mine.get("/v1/models")
        assert models.status_code == 429 and models.json()["error"]["code"] == "rate_limit_exceeded"
        for _ in range(10):  # never limited
            assert (await mine.get("/healthz")).status_code == 200
            assert (await mine.get("/openapi.json")).status_code == 200
        assert (await mine.post("/sessions")).status_code == 201  # posts have their own budget
        assert (await theirs.get("/v1/models")).status_code == 200  # and each token its own


async def test_the_default_read_budget_stops_a_flood_of_reads() -> None:
    async with in_process(Function(echo)) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        statuses = [(await client.get(f"/sessions/{session_id}/turns")).status_code for _ in range(260)]
    assert 429 in statuses and statuses[:150] == [200] * 150


async def test_an_event_stream_counts_once_however_long_it_runs() -> None:
    calls: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        calls.append(scope["path"])
        for _ in range(10):  # a long stream: many sends, one request
            await send({"type": "http.response.body", "body": b"x", "more_body": True})

    async def sent(message: Any) -> None:
        pass

    limited = RateLimited(app, limit=RateLimit(reads_per_second=0.01, read_burst=2), clock=lambda: 0.0)
    scope = {"type": "http", "method": "GET", "path": "/sessions/s/events", "state": {"owner": "o"}}
    for _ in range(3):
        await limited(scope, None, sent)
    assert len(calls) == 2


def test_the_default_read_budget() -> None:
    assert RateLimit() == RateLimit(per_second=20, burst=100, reads_per_second=100, read_burst=200)
    with pytest.raises(UsageError, match="reads_per_second"):
        RateLimit(reads_per_second=0)
    with pytest.raises(UsageError, match="read_burst"):
        RateLimit(read_burst=0)
