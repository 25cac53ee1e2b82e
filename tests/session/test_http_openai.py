"""The HTTP conduit also answers the OpenAI-compatible API, behind the same tokens."""

import httpx
import openai
import pytest

from provider import Function
from tests.session.http_helpers import OTHER, TOKEN, echo, in_process


def client(served, token: str) -> openai.AsyncOpenAI:  # type: ignore[no-untyped-def]
    http = httpx.AsyncClient(transport=served.transport_or_url, base_url="http://testserver")
    served.stack.append(http)
    return openai.AsyncOpenAI(base_url="http://testserver/v1", api_key=token, http_client=http, max_retries=0)


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


async def test_a_named_conversation_belongs_to_the_token_that_named_it() -> None:
    async with in_process(Function(echo)) as served:
        mine = client(served, TOKEN)
        await mine.chat.completions.create(model="agent", messages=[{"role": "user", "content": "one"}],
                                           extra_headers={"X-Session-Id": "shared-name"})
        with pytest.raises(openai.NotFoundError):
            await client(served, OTHER).chat.completions.create(
                model="agent", messages=[{"role": "user", "content": "two"}],
                extra_headers={"X-Session-Id": "shared-name"})
        created = (await served.client().post("/sessions")).json()["id"]
        with pytest.raises(openai.NotFoundError):
            await client(served, OTHER).chat.completions.create(
                model="agent", messages=[{"role": "user", "content": "three"}],
                extra_headers={"X-Session-Id": created})
        again = await mine.chat.completions.create(model="agent", messages=[{"role": "user", "content": "four"}],
                                                   extra_headers={"X-Session-Id": "shared-name"})
    assert again.choices[0].message.content == "FOUR"


async def test_the_openai_api_can_be_turned_off() -> None:
    async with in_process(Function(echo), openai_model=None) as served:
        response = await served.client().post("/v1/chat/completions", json={"messages": []})
    assert response.status_code == 404
