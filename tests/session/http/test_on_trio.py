"""On trio, Hypercorn serves the HTTP conduits: requests and event streams over a real 127.0.0.1 socket, a
shutdown that ends the streams and answers the requests in flight, a WebSocket handshake refused, and HTTP/2
behind the same guards. (The whole http, openai and mcp suites run on trio too; these tests are about what
trio's server does, so they run on trio alone.)"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest

from cognitive import new_turn_processor, react_factory
from loop import Request, TextDelta
from provider import Function
from session import Manager, MemoryStore
from session.http import HTTPConduit
from tests.session.http.helpers import SSE, TOKEN, on_socket
from tests.session.http.test_timeouts import connect, read_all
from tests.session.models import echo


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def test_hypercorn_serves_requests_and_a_live_event_stream(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hypercorn.error")
    async with on_socket(Function(echo)) as served:
        client = served.client()
        health = await client.get("/healthz")
        assert health.status_code == 200 and "server" not in health.headers
        session_id = (await client.post("/sessions")).json()["id"]
        async with client.stream("GET", f"/sessions/{session_id}/events") as response:
            sse = SSE(response)
            sent = await client.post(f"/sessions/{session_id}/messages", json={"text": "hello"})
            assert sent.status_code == 202
            frames = await sse.until("message_finished")
        assert "".join(f.data["text"] for f in frames if f.event == "text_delta") == "HELLO"
        assert any(r.name == "hypercorn.error" and served.transport_or_url in r.getMessage() for r in caplog.records)


class Held:
    """A model that answers "done" once ``release`` is set, and says when a call came."""

    def __init__(self) -> None:
        self.called = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, request: Request) -> AsyncIterator[Any]:
        self.called.set()
        await self.release.wait()
        yield TextDelta("done")


async def test_shutdown_ends_event_streams_answers_requests_in_flight_and_closes_the_socket() -> None:
    model = Held()
    conduit = HTTPConduit(host="127.0.0.1", port=0, token=TOKEN, shutdown_timeout=10)
    serving = anyio.CancelScope()
    stopped = anyio.Event()

    async def serve(manager: Manager, *, task_status: anyio.abc.TaskStatus[str]) -> None:
        with serving:
            await conduit.serve(manager, task_status=task_status)
        stopped.set()

    async def ask(client: httpx.AsyncClient, answers: list[httpx.Response]) -> None:
        answers.append(await client.post("/v1/chat/completions", json={
            "model": "agent", "messages": [{"role": "user", "content": "hi"}]}))

    manager = Manager(new_turn_processor(react_factory), provider=Function(model), store=MemoryStore())
    async with manager, anyio.create_task_group() as group:
        url = await group.start(serve, manager)
        answers: list[httpx.Response] = []
        async with httpx.AsyncClient(base_url=url, headers={"authorization": f"Bearer {TOKEN}"},
                                     timeout=10) as client, anyio.create_task_group() as asking:
            session_id = (await client.post("/sessions")).json()["id"]
            async with client.stream("GET", f"/sessions/{session_id}/events") as response:
                sse = SSE(response)
                asking.start_soon(ask, client, answers)
                with anyio.fail_after(5):
                    await model.called.wait()
                    serving.cancel()
                    with pytest.raises(EOFError):  # the stream ends, rather than holding the shutdown up
                        while True:
                            await sse.frame()
            model.release.set()  # the request in flight is still answered
        with anyio.fail_after(5):
            await stopped.wait()
    assert answers[0].status_code == 200, answers[0].text
    assert answers[0].json()["choices"][0]["message"]["content"] == "done"
    with pytest.raises(OSError):
        await connect(url)


async def test_a_websocket_handshake_is_refused() -> None:
    async with on_socket(Function(echo)) as served:
        with anyio.fail_after(5):
            async with await connect(served.transport_or_url) as stream:
                await stream.send(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: upgrade\r\n"
                                  b"upgrade: websocket\r\nsec-websocket-version: 13\r\n"
                                  b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
                reply = await read_all(stream)
    assert reply.startswith(b"HTTP/1.1 403")


async def test_http2_in_clear_text_is_served_behind_the_same_guards() -> None:
    # Hypercorn speaks HTTP/2 with a client that knows it does (uvicorn, on asyncio, speaks HTTP/1.1 only).
    async with on_socket(Function(echo)) as served:
        async with httpx.AsyncClient(base_url=served.transport_or_url, http1=False, http2=True) as client:
            refused = await client.post("/sessions")
            opened = await client.post("/sessions", headers={"authorization": f"Bearer {TOKEN}"})
    assert (refused.http_version, refused.status_code) == ("HTTP/2", 401)
    assert (opened.http_version, opened.status_code) == ("HTTP/2", 201)
