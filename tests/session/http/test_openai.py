"""The HTTP conduit also answers the OpenAI-compatible API, behind the same tokens."""

import httpx
import openai
import pytest

from provider import Function
from session import MemoryStore
from tests.session.http.helpers import OTHER, TOKEN, in_process, key
from tests.session.models import echo


def client(served, token: str) -> openai.AsyncOpenAI:  # type: ignore[no-untyped-def]
    http = httpx.AsyncClient(transport=served.transport_or_url, base_url="http://127.0.0.1")
    served.stack.append(http)
    return openai.AsyncOpenAI(base_url="http://127.0.0.1/v1", api_key=token, http_client=http, max_retries=0)


async def test_one_server_answers_sessions_and_chat_completions() -> None:
    async with in_process(Function(echo)) as served:
        answer = await client(served, TOKEN).chat.completions.create(
            model="agent", messages=[{"role": "user", "content": "hello"}])
        models = await client(served, TOKEN).models.list()
        created = await served.client().post("/sessions")
    assert answer.choices[0].message.content == "HELLO"
    assert [m.id for m in models.data] == ["agent"]
    assert created.status_code == 201


async def test_the_openai_api_needs_a_token() -> None:
    async with in_process(Function(echo)) as served:
        with pytest.raises(openai.AuthenticationError):
            await client(served, "wrong").chat.completions.create(
                model="agent", messages=[{"role": "user", "content": "hello"}])


async def test_each_token_names_sessions_in_a_namespace_of_its_own() -> None:
    store = MemoryStore()
    async with in_process(Function(echo), store=store) as served:
        mine, theirs = client(served, TOKEN), client(served, OTHER)
        first = await mine.chat.completions.with_raw_response.create(
            model="agent", messages=[{"role": "user", "content": "one"}], extra_headers={"X-Session-Id": "shared-name"})
        assert first.headers["x-session-id"] == "shared-name"
        # Another token naming the same session gets a conversation of its own, and cannot tell the first exists.
        other = await theirs.chat.completions.create(model="agent", messages=[{"role": "user", "content": "two"}],
                                                     extra_headers={"X-Session-Id": "shared-name"})
        assert other.choices[0].message.content == "TWO"
        created = (await served.client().post("/sessions")).json()["id"]
        await theirs.chat.completions.create(model="agent", messages=[{"role": "user", "content": "three"}],
                                             extra_headers={"X-Session-Id": created})
        assert (await served.client().get(f"/sessions/{created}/turns")).json()["turns"] == []
        again = await mine.chat.completions.create(model="agent", messages=[{"role": "user", "content": "four"}],
                                                   extra_headers={"X-Session-Id": "shared-name"})
        await mine.chat.completions.create(model="agent", messages=[{"role": "user", "content": "five"}],
                                           extra_headers={"X-Session-Id": created})
        turns = (await served.client().get(f"/sessions/{created}/turns")).json()["turns"]
    assert again.choices[0].message.content == "FOUR"
    assert [t["parts"][0]["text"] for t in turns] == ["five", "FIVE"]
    mine_stored = await store.load(key("shared-name", TOKEN))
    theirs_stored = await store.load(key("shared-name", OTHER))
    assert mine_stored is not None and [t.text for t in mine_stored] == ["one", "ONE", "four", "FOUR"]
    assert theirs_stored is not None and [t.text for t in theirs_stored] == ["two", "TWO"]


async def test_session_names_of_up_to_200_characters_work_and_longer_ones_are_refused_clearly() -> None:
    async with in_process(Function(echo)) as served:
        longest = "n" * 200
        answer = await client(served, TOKEN).chat.completions.create(
            model="agent", messages=[{"role": "user", "content": "hi"}], extra_headers={"X-Session-Id": longest})
        assert answer.choices[0].message.content == "HI"
        assert (await served.client().get(f"/sessions/{longest}/turns")).status_code == 200
        with pytest.raises(openai.BadRequestError, match="1 to 200 characters"):
            await client(served, TOKEN).chat.completions.create(
                model="agent", messages=[{"role": "user", "content": "hi"}], extra_headers={"X-Session-Id": "n" * 201})
        assert (await served.client().get(f"/sessions/{'n' * 201}/turns")).status_code == 404


async def test_the_openai_api_can_be_turned_off() -> None:
    async with in_process(Function(echo), openai_model=None) as served:
        response = await served.client().post("/v1/chat/completions", json={"messages": []})
    assert response.status_code == 404
