"""Slow clients are timed out: request headers that trickle in, and request bodies that never finish, over raw
sockets to a real server on 127.0.0.1 (each test bounded to a few seconds)."""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import anyio.abc
import pytest

from loop import UsageError
from provider import Function
from session.http import HTTPConduit
from tests.session.http.helpers import TOKEN, on_socket
from tests.session.models import echo

SHORT = {"header_timeout": 0.5, "body_timeout": 0.5}


async def connect(url: str) -> anyio.abc.SocketStream:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return await anyio.connect_tcp(host, int(port))


async def read_all(stream: anyio.abc.SocketStream) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while True:
        try:
            data += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return data


async def read_response(stream: anyio.abc.SocketStream) -> bytes:
    """One response with a Content-Length, read whole."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length:"))
    while len(body) < length:
        body += await stream.receive()
    return data


def status_and_body(reply: bytes) -> tuple[int, Any]:
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body) if body else None


async def test_request_headers_that_trickle_in_are_cut_off(anyio_backend: str) -> None:
    async with on_socket(Function(echo), **SHORT) as served:
        stream = await connect(served.transport_or_url)
        started = time.monotonic()
        with anyio.fail_after(5):
            async with stream:
                await stream.send(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n")
                for _ in range(3):  # a byte now and then, never the blank line that ends the headers
                    await anyio.sleep(0.1)
                    await stream.send(b"x")
                reply = await read_all(stream)
        took = time.monotonic() - started
    if anyio_backend == "trio":
        assert reply == b""  # Hypercorn closes a late connection without a word (session._serving._Hypercorn)
    else:
        assert status_and_body(reply) == (408, {"error": {"type": "request_timeout", "message": "the request "
                                                          "headers did not arrive within 0.5 s"}})
        assert b"connection: close" in reply.lower()
    assert 0.4 < took < 2


async def test_a_connection_that_sends_nothing_is_closed_quietly() -> None:
    async with on_socket(Function(echo), **SHORT) as served:
        stream = await connect(served.transport_or_url)
        with anyio.fail_after(5):
            async with stream:
                assert await read_all(stream) == b""


async def test_the_next_request_on_a_kept_connection_has_its_own_deadline(anyio_backend: str) -> None:
    async with on_socket(Function(echo), header_timeout=0.8) as served:
        stream = await connect(served.transport_or_url)
        with anyio.fail_after(5):
            async with stream:
                for _ in range(2):  # each request in time, though the connection outlives one deadline
                    await anyio.sleep(0.5)
                    await stream.send(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
                    assert (await read_response(stream)).startswith(b"HTTP/1.1 200")
                await stream.send(b"GET /healthz HTTP/1.1\r\n")  # then one that stalls
                reply = await read_all(stream)
    assert reply == b"" if anyio_backend == "trio" else status_and_body(reply)[0] == 408


@pytest.mark.parametrize(("path", "format"), [("/sessions/{id}/messages", "session"),
                                               ("/v1/chat/completions", "openai")])
async def test_a_body_that_never_finishes_is_answered_408(path: str, format: str) -> None:
    async with on_socket(Function(echo), **SHORT) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        stream = await connect(served.transport_or_url)
        started = time.monotonic()
        with anyio.fail_after(5):
            async with stream:
                await stream.send(f"POST {path.format(id=session_id)} HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                                  f"authorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\n"
                                  "content-length: 100\r\n\r\n".encode() + b'{"text": "sl')
                reply = await read_all(stream)
        took = time.monotonic() - started
        assert not served.session(session_id).busy
    status, body = status_and_body(reply)
    assert status == 408 and b"connection: close" in reply.lower()
    if format == "session":
        assert body == {"error": {"type": "request_timeout",
                                  "message": "the request body did not arrive within 0.5 s"}}
    else:
        assert body["error"]["code"] == "request_timeout" and "0.5 seconds" in body["error"]["message"]
    assert 0.4 < took < 2


async def test_a_long_response_is_not_cut_by_the_header_deadline() -> None:
    async with on_socket(Function(echo), keepalive=0.2, **SHORT) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        comments = 0
        with anyio.fail_after(5):
            async with client.stream("GET", f"/sessions/{session_id}/events") as response:
                async for line in response.aiter_lines():
                    comments += line.startswith(": keep-alive")
                    if comments == 5:  # a second and more: past both deadlines, still streaming
                        break
        assert comments == 5


def test_timeouts_must_make_sense() -> None:
    for name in ("header_timeout", "body_timeout"):
        with pytest.raises(UsageError, match=f"{name} must be a positive number"):
            HTTPConduit(token="t", **{name: 0})
    conduit = HTTPConduit(token="t")
    assert (conduit.header_timeout, conduit.body_timeout) == (10.0, 30.0)
