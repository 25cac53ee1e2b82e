"""Every error the HTTP conduit answers under ``/v1`` is in OpenAI's format, so OpenAI clients map it to their own
exceptions; the session routes keep their own format."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import openai
import pytest

from provider import Function
from session.http import RateLimit
from tests.session.http.helpers import TOKEN, Served, in_process
from tests.session.models import echo

ASK = [{"role": "user", "content": "hello"}]


def openai_error(response: httpx.Response, status: int, *, type: str, code: str | None) -> str:
    """The message of ``response``, once it is checked to be OpenAI's error format with this status, type and code."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(response.json()) == {"error"} and set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"], error["code"]) == (type, None, code)
    assert isinstance(error["message"], str) and error["message"]
    return str(error["message"])


@asynccontextmanager
async def sdk(served: Served, *, token: str = TOKEN, path: str = "/v1", **options: Any
              ) -> AsyncIterator[openai.AsyncOpenAI]:
    """The official client for the conduit, talking to it in process."""
    options.setdefault("max_retries", 0)
    async with httpx.AsyncClient(transport=served.transport_or_url, base_url="http://127.0.0.1") as http:
        yield openai.AsyncOpenAI(base_url=f"http://127.0.0.1{path}", api_key=token, http_client=http, **options)


@pytest.mark.parametrize(("header", "code"), [(None, "missing_api_key"), ("Bearer wrong", "invalid_api_key"),
                                              ("Basic abc", "missing_api_key")])
async def test_a_refused_token_is_401_in_openais_format(header: str | None, code: str) -> None:
    async with in_process(Function(echo)) as served:
        client = served.client(None)
        headers = {"authorization": header} if header else {}
        for method, path in [("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("GET", "/v1"),
                             ("GET", "/v1/nope")]:
            response = await client.request(method, path, headers=headers)
            message = openai_error(response, 401, type="invalid_request_error", code=code)
            assert "API key" in message
            assert response.headers["www-authenticate"] == 'Bearer realm="session"'
        session_api = await client.post("/sessions", headers=headers)
    assert session_api.status_code == 401 and session_api.json()["error"]["type"] == "unauthorized"


async def test_posts_beyond_the_rate_limit_are_429_in_openais_format_with_retry_after() -> None:
    async with in_process(Function(echo), rate_limit=RateLimit(per_second=0.5, burst=1)) as served:
        client = served.client()
        assert (await client.post("/v1/models")).status_code == 405  # takes the one request of the burst
        limited = await client.post("/v1/chat/completions", json={"model": "agent", "messages": ASK})
    message = openai_error(limited, 429, type="requests", code="rate_limit_exceeded")
    assert limited.headers["retry-after"] == "2"  # one request every 2 s
    assert "at most 0.5 a second (bursts of 1) per token; retry in 2 s" in message


async def test_a_body_over_the_limit_is_413_in_openais_format() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(30):
            yield b" " * 10

    async with in_process(Function(echo), max_body_bytes=100) as served:
        client = served.client()
        declared = await client.post("/v1/chat/completions", content=b"x" * 101)
        streamed = await client.post("/v1/chat/completions", content=chunks())
    assert "content-length" not in streamed.request.headers
    for response in (declared, streamed):
        message = openai_error(response, 413, type="invalid_request_error", code="request_too_large")
        assert "larger than 100 bytes" in message


async def test_a_bad_content_length_is_400_in_openais_format() -> None:
    async with in_process(Function(echo)) as served:
        response = await served.client().post("/v1/chat/completions", headers={"content-length": "lots"})
    assert "invalid Content-Length 'lots'" in openai_error(response, 400, type="invalid_request_error",
                                                           code="bad_request")


async def test_an_unknown_url_is_404_and_a_wrong_method_405_in_openais_format() -> None:
    async with in_process(Function(echo)) as served:
        client = served.client()
        nope = await client.post("/v1/nope", json={})
        root = await client.get("/v1")
        wrong = await client.get("/v1/chat/completions")
    assert openai_error(nope, 404, type="invalid_request_error", code="unknown_url") == \
        "Unknown request URL: POST /v1/nope."
    assert openai_error(root, 404, type="invalid_request_error", code="unknown_url") == "Unknown request URL: GET /v1."
    assert openai_error(wrong, 405, type="invalid_request_error", code="method_not_allowed") == \
        "Method not allowed: GET /v1/chat/completions."
    assert wrong.headers["allow"] == "POST"


async def test_the_session_routes_keep_their_own_format() -> None:
    async with in_process(Function(echo), max_body_bytes=100, rate_limit=RateLimit(per_second=0.5, burst=1)) as served:
        client = served.client()
        nowhere = await client.get("/nowhere")
        beside = await client.get("/v1x/models")  # a prefix counts by whole path segments
        large = await client.post("/sessions", content=b"x" * 101)
        limited = await client.post("/sessions")
    assert nowhere.status_code == 404 and nowhere.json() == {"error": {"type": "not_found",
                                                                       "message": "no route /nowhere"}}
    assert beside.status_code == 404 and beside.json()["error"] == {"type": "not_found",
                                                                    "message": "no route /v1x/models"}
    assert large.status_code == 413 and large.json()["error"]["type"] == "payload_too_large"
    assert limited.status_code == 429 and set(limited.json()["error"]) == {"type", "message"}


async def test_the_openai_client_maps_each_error_to_its_exception() -> None:
    async with in_process(Function(echo), max_body_bytes=1000, rate_limit=RateLimit(per_second=0.5, burst=1)
                          ) as served:
        async with sdk(served, token="wrong") as wrong:
            with pytest.raises(openai.AuthenticationError) as unauthorized:
                await wrong.models.list()
        async with sdk(served, path="/v1/nope") as lost:
            with pytest.raises(openai.NotFoundError) as unknown:
                await lost.models.list()
        async with sdk(served) as ai:
            with pytest.raises(openai.APIStatusError) as too_large:
                await ai.chat.completions.create(model="agent", messages=[{"role": "user", "content": "x" * 1000}])
            with pytest.raises(openai.RateLimitError) as limited:
                await ai.chat.completions.create(model="agent", messages=ASK)
    assert (unauthorized.value.status_code, unauthorized.value.code) == (401, "invalid_api_key")
    assert (unknown.value.status_code, unknown.value.code) == (404, "unknown_url")
    assert "Unknown request URL: GET /v1/nope/models." in unknown.value.message
    assert (too_large.value.status_code, too_large.value.code) == (413, "request_too_large")
    assert type(too_large.value) is openai.APIStatusError  # the client has no class of its own for 413
    assert (limited.value.status_code, limited.value.code) == (429, "rate_limit_exceeded")
    assert limited.value.response.headers["retry-after"] == "2"
