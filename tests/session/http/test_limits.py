"""The HTTP conduit's limits and its self-description: body size, rate limit, OpenAPI, logs and spans."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import openai
import pytest
import structlog
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.routing import Route

from loop import UsageError
from provider import Function
from session.http import HTTPConduit, RateLimit
from session._serving import DEFAULT_MAX_BODY_BYTES
from session.http._openapi import OPENAPI
from tests.session.http.helpers import OTHER, TOKEN, Served, in_process, on_socket, wait_turns
from tests.session.http.test_timeouts import connect, read_all, read_response
from tests.session.models import echo


async def test_a_body_over_the_limit_is_413_by_its_content_length() -> None:
    async with in_process(Function(echo), max_body_bytes=100) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        fits = await client.post(f"/sessions/{session_id}/messages", json={"text": "x" * 50})
        assert fits.status_code == 202
        await wait_turns(client, session_id, 2)
        response = await client.post(f"/sessions/{session_id}/messages", json={"text": "x" * 200})
        assert response.status_code == 413
        assert response.json()["error"] == {"type": "payload_too_large",
                                             "message": "the request body is larger than 100 bytes"}
        declared = await client.post(f"/sessions/{session_id}/messages", content=b'{"text": "small"}',
                                     headers={"content-length": "101"})  # refused on the header alone
        assert declared.status_code == 413
        turns = (await client.get(f"/sessions/{session_id}/turns")).json()["turns"]
    assert len(turns) == 2


async def test_a_streamed_body_over_the_limit_is_413_by_counting() -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b'{"text": "'
        for _ in range(20):
            yield b"y" * 10
        yield b'"}'

    async with in_process(Function(echo), max_body_bytes=100) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        response = await client.post(f"/sessions/{session_id}/messages", content=body())
        assert "content-length" not in response.request.headers
        assert response.status_code == 413 and response.json()["error"]["type"] == "payload_too_large"
        assert not served.session(session_id).busy
        assert (await client.get(f"/sessions/{session_id}/turns")).json()["turns"] == []


async def test_a_bad_content_length_is_400() -> None:
    async with in_process(Function(echo)) as served:
        response = await served.client().post("/sessions", headers={"content-length": "lots"})
    assert response.status_code == 400 and response.json()["error"]["type"] == "bad_request"


async def test_request_headers_past_16_kib_are_refused(anyio_backend: str) -> None:
    async with on_socket(Function(echo)) as served:
        with anyio.fail_after(5):
            async with await connect(served.transport_or_url) as stream:
                filler = b"a" * 15_000
                await stream.send(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-filler: " + filler + b"\r\n\r\n")
                assert (await read_response(stream)).startswith(b"HTTP/1.1 200")
                # headers that have run past 16 KiB unfinished: h11, under both servers, takes a request whose
                # headers came whole in one read however large, but holds no more than this waiting for the end.
                await stream.send(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-filler: " + b"a" * 17_000)
                reply = await read_all(stream)
    # uvicorn answers 400, Hypercorn 431 (Request Header Fields Too Large); both close the connection.
    assert reply.startswith(b"HTTP/1.1 431" if anyio_backend == "trio" else b"HTTP/1.1 400"), reply[:100]


async def test_posts_beyond_the_rate_limit_are_429_per_token() -> None:
    async with in_process(Function(echo), rate_limit=RateLimit(per_second=0.01, burst=3)) as served:
        mine, theirs = served.client(TOKEN), served.client(OTHER)
        statuses = [(await mine.post("/sessions")).status_code for _ in range(4)]
        assert statuses == [201, 201, 201, 429]
        limited = await mine.post("/sessions")
        assert limited.status_code == 429 and limited.json()["error"]["type"] == "rate_limited"
        assert int(limited.headers["retry-after"]) >= 1
        assert served.manager.open_sessions == 3
        assert (await theirs.post("/sessions")).status_code == 201  # another token has its own bucket
        assert (await mine.get("/healthz")).status_code == 200  # reads are not limited
        assert (await mine.get("/sessions/x/turns")).status_code == 404


def test_one_default_body_limit_and_a_burst_an_sdk_batch_fits() -> None:
    assert DEFAULT_MAX_BODY_BYTES == 4 * 1024 * 1024
    assert HTTPConduit(token="t").max_body_bytes == DEFAULT_MAX_BODY_BYTES
    assert RateLimit() == RateLimit(per_second=20, burst=100)


async def _sdk_batch(served: Served, count: int) -> tuple[list[Any], list[int]]:
    """``count`` chat completions at once from the official client (with its default retries): the answers, and
    the status of every response the server sent."""
    statuses: list[int] = []

    async def seen(response: httpx.Response) -> None:
        statuses.append(response.status_code)

    async with httpx.AsyncClient(transport=served.transport_or_url, base_url="http://127.0.0.1",
                                 event_hooks={"response": [seen]}) as http:
        ai = openai.AsyncOpenAI(base_url="http://127.0.0.1/v1", api_key=TOKEN, http_client=http)
        answers: list[Any] = [None] * count

        async def ask(i: int) -> None:
            answers[i] = await ai.chat.completions.create(model="agent",
                                                          messages=[{"role": "user", "content": f"n{i}"}])

        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:
                for i in range(count):
                    group.start_soon(ask, i)
    return answers, statuses


async def test_a_batch_of_100_concurrent_sdk_requests_passes_the_default_rate_limit() -> None:
    async with in_process(Function(echo)) as served:
        answers, statuses = await _sdk_batch(served, 100)
    assert [a.choices[0].message.content for a in answers] == [f"N{i}" for i in range(100)]
    assert statuses == [200] * 100  # none was even retried


async def test_the_sdk_waits_out_retry_after_and_gets_through() -> None:
    async with in_process(Function(echo), rate_limit=RateLimit(per_second=20, burst=5)) as served:
        started = time.monotonic()
        answers, statuses = await _sdk_batch(served, 10)
        took = time.monotonic() - started
    assert [a.choices[0].message.content for a in answers] == [f"N{i}" for i in range(10)]
    assert sorted(statuses) == [200] * 10 + [429] * 5
    assert 1.0 <= took < 5  # Retry-After: 1 (whole seconds, rounded up), which the client honoured


async def test_opening_more_sessions_than_the_manager_allows_is_503() -> None:
    async with in_process(Function(echo), manager_options={"max_sessions": 1}) as served:
        client = served.client()
        assert (await client.post("/sessions")).status_code == 201
        refused = await client.post("/sessions")
    assert refused.status_code == 503 and refused.json()["error"]["type"] == "session_limit"


def test_a_rate_limit_must_make_sense() -> None:
    with pytest.raises(UsageError, match="per_second"):
        RateLimit(per_second=0)
    with pytest.raises(UsageError, match="burst"):
        RateLimit(burst=0)
    with pytest.raises(UsageError, match="per_second must be a positive number, got True"):
        RateLimit(per_second=True)
    with pytest.raises(UsageError, match="burst must be a positive integer, got True"):
        RateLimit(burst=True)
    with pytest.raises(UsageError, match="rate_limit"):
        HTTPConduit(token="t", rate_limit=20)  # type: ignore[arg-type]


async def test_no_rate_limit_when_turned_off() -> None:
    async with in_process(Function(echo), rate_limit=None) as served:
        client = served.client()
        statuses = {(await client.post("/sessions")).status_code for _ in range(50)}
    assert statuses == {201}


def _template(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "{}", path)


async def test_the_openapi_document_describes_every_route() -> None:
    async with in_process(Function(echo)) as served:
        response = await served.client(None).get("/openapi.json")
        app = served.transport_or_url.app
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    document = json.loads(response.text)
    assert document == json.loads(json.dumps(OPENAPI))
    assert document["openapi"] == "3.2.0"
    described = {(_template(path), method.upper()) for path, item in document["paths"].items() for method in item}
    served_routes = {(_template(r.path), m) for r in app.routes if isinstance(r, Route) for m in r.methods or ()
                     if m != "HEAD"}
    assert described == served_routes
    for (path, method) in described:
        operation = next(item for p, item in document["paths"].items() if _template(p) == path)[method.lower()]
        assert operation["responses"] and operation["summary"] and operation["operationId"]
    assert document["paths"]["/healthz"]["get"]["security"] == []
    assert document["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}


def test_the_openapi_document_is_valid_openapi() -> None:
    import openapi_spec_validator

    openapi_spec_validator.validate(json.loads(json.dumps(OPENAPI)))


async def test_every_request_is_logged_without_the_token() -> None:
    async with in_process(Function(echo)) as served:
        client = served.client()
        with structlog.testing.capture_logs() as logs:
            session_id = (await client.post("/sessions")).json()["id"]
            await client.post(f"/sessions/{session_id}/messages", json={"text": "hi"})
            await served.client(None).get("/sessions/x/turns")
    requests = [entry for entry in logs if entry["event"] == "http request"]
    assert [(r["method"], r["status"]) for r in requests] == [("POST", 201), ("POST", 202), ("GET", 401)]
    posted = requests[1]
    assert posted["path"] == f"/sessions/{session_id}/messages" and posted["session"] == session_id
    assert posted["duration_ms"] >= 0 and posted["owner"].startswith("tok_")
    assert requests[2]["owner"] is None
    assert TOKEN not in repr(logs)


async def test_every_request_gets_a_span(spans: InMemorySpanExporter) -> None:
    async with in_process(Function(echo)) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        await client.get(f"/sessions/{session_id}/turns")
        await client.get("/sessions/unknown/turns")
    by_name = {}
    for span in spans.get_finished_spans():
        if span.name.startswith("HTTP "):
            by_name.setdefault(span.name, []).append(span)
    assert set(by_name) == {"HTTP POST /sessions", "HTTP GET /sessions/{id}/turns"}
    found, missing = by_name["HTTP GET /sessions/{id}/turns"]
    assert found.attributes["session.id"] == session_id
    assert found.attributes["http.response.status_code"] == 200
    assert missing.attributes["http.response.status_code"] == 404
    assert found.attributes["http.request.method"] == "GET"
