"""No client can take every session: a quota of open sessions per token, over both APIs, and sessions that never
got a message closed long before the idle timeout."""

from __future__ import annotations

import anyio
import pytest

from cognitive import new_turn_processor, react_factory
from loop import UsageError
from provider import Function
from session import Manager, SessionLimit
from session._bearer import TokenQuota
from session.http import HTTPConduit
from tests.session.http.helpers import OTHER, TOKEN, in_process, key, wait_turns
from tests.session.models import echo

ASK = {"model": "agent", "messages": [{"role": "user", "content": "hi"}]}


async def test_one_token_cannot_take_every_session() -> None:
    async with in_process(Function(echo), max_sessions_per_token=3, rate_limit=None,
                          manager_options={"max_sessions": 5}) as served:
        greedy, other = served.client(TOKEN), served.client(OTHER)
        statuses = [(await greedy.post("/sessions")).status_code for _ in range(4)]
        assert statuses == [201, 201, 201, 429]
        refused = await greedy.post("/sessions")
        assert refused.json()["error"] == {
            "type": "session_quota",
            "message": "this token already holds 3 open sessions, the most one token may hold at once; close one "
                       "(or let an idle one close) and try again"}
        v1 = await greedy.post("/v1/chat/completions", json=ASK)
        assert v1.status_code == 429 and v1.json()["error"]["code"] == "session_quota"
        assert v1.json()["error"]["type"] == "requests"
        assert (await other.post("/sessions")).status_code == 201  # the server still has room for others
        assert (await other.post("/v1/chat/completions", json=ASK)).status_code == 200
        assert served.manager.open_sessions == 4


async def test_a_closed_session_frees_its_place() -> None:
    async with in_process(Function(echo), max_sessions_per_token=2, rate_limit=None) as served:
        client = served.client()
        first = (await client.post("/sessions")).json()["id"]
        await client.post(f"/sessions/{first}/messages", json={"text": "keep me"})
        await wait_turns(client, first, 2)
        assert (await client.post("/sessions")).status_code == 201
        assert (await client.post("/sessions")).status_code == 429
        assert (await client.delete(f"/sessions/{first}")).status_code == 204
        third = await client.post("/sessions")
        assert third.status_code == 201
        # Reopening the closed session (a message to it) needs a place again: there is none.
        reopen = await client.post(f"/sessions/{first}/messages", json={"text": "back"})
        assert reopen.status_code == 429 and reopen.json()["error"]["type"] == "session_quota"
        await client.delete(f"/sessions/{third.json()['id']}")
        assert (await client.post(f"/sessions/{first}/messages", json={"text": "back"})).status_code == 202


async def test_a_named_v1_session_counts_and_an_open_one_can_always_be_used() -> None:
    async with in_process(Function(echo), max_sessions_per_token=1, rate_limit=None) as served:
        client = served.client()
        kept = await client.post("/v1/chat/completions", json=ASK, headers={"x-session-id": "chat"})
        assert kept.status_code == 200
        again = await client.post("/v1/chat/completions", json=ASK, headers={"x-session-id": "chat"})
        assert again.status_code == 200  # already open: no new place needed
        assert (await client.post("/sessions")).status_code == 429
        assert (await client.post("/v1/chat/completions", json=ASK)).status_code == 429


async def test_no_quota_when_turned_off() -> None:
    async with in_process(Function(echo), max_sessions_per_token=None, rate_limit=None,
                          manager_options={"max_sessions": 3}) as served:
        client = served.client()
        statuses = [(await client.post("/sessions")).status_code for _ in range(4)]
    assert statuses == [201, 201, 201, 503]


async def test_the_quota_counts_sessions_being_opened() -> None:
    async with Manager(new_turn_processor(react_factory), provider=Function(echo)) as manager:
        quota = TokenQuota(manager, per_token=2)
        opened: list[str] = []
        refused: list[str] = []

        async def open_one(n: int) -> None:
            try:
                await quota.open("owner", f"owner:{n}")
                opened.append(f"owner:{n}")
            except SessionLimit:
                refused.append(f"owner:{n}")

        async with anyio.create_task_group() as group:
            for n in range(5):
                group.start_soon(open_one, n)
        assert (len(opened), len(refused)) == (2, 3)  # which two depends on the order tasks start (trio's is not)
        assert quota.held("owner") == 2 and quota.held("someone else") == 0
        await manager.close(opened[0])
        assert quota.held("owner") == 1


def test_quota_settings_must_make_sense() -> None:
    with pytest.raises(UsageError, match="max_sessions_per_token must be a positive integer, got 0"):
        HTTPConduit(token="t", max_sessions_per_token=0)
    assert HTTPConduit(token="t").max_sessions_per_token == 100


async def test_a_session_that_never_got_a_message_is_closed_sooner() -> None:
    async with in_process(Function(echo), manager_options={"idle_timeout": 30, "empty_timeout": 0.2}) as served:
        client = served.client()
        empty = (await client.post("/sessions")).json()["id"]
        talked = (await client.post("/sessions")).json()["id"]
        await client.post(f"/sessions/{talked}/messages", json={"text": "hello"})
        await wait_turns(client, talked, 2)
        with anyio.fail_after(5):
            while served.manager.get(key(empty)) is not None:
                await anyio.sleep(0.02)
        assert served.manager.get(key(talked)) is not None  # it has a conversation: the idle timeout applies


async def test_the_empty_timeout_is_documented_and_never_longer_than_the_idle_one() -> None:
    processor = new_turn_processor(react_factory)
    assert Manager(processor, provider=Function(echo)).empty_timeout == 60.0
    assert Manager(processor, provider=Function(echo), idle_timeout=10).empty_timeout == 10.0
    with pytest.raises(UsageError, match="empty_timeout"):
        Manager(processor, provider=Function(echo), empty_timeout=0)
