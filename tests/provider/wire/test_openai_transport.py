"""``OpenAICompatible`` when the connection itself fails: refused, timing out while connecting or reading, and
a consumer that cancels or closes mid-stream (the connection must be closed and nothing left running).
"""

from __future__ import annotations

import asyncio
import gc
import re
import socket
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
from anyio.abc import SocketAttribute

from loop import TextDelta
from loop.errors import ProviderTimeout, ProviderUnreachable
from tests.provider.wire.openai_client import ASK, collect, collect_until_error, connect
from tests.provider.wire.server import WireServer, fixture


def free_port() -> int:
    """A port on 127.0.0.1 with nothing listening: bound, noted, closed."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_a_refused_connection_is_provider_unreachable(wire: WireServer) -> None:
    async with connect(f"http://127.0.0.1:{free_port()}") as p:
        with pytest.raises(ProviderUnreachable, match="cannot connect to OpenAI-compatible server at 127.0.0.1") \
                as caught:
            await collect(p)
    assert caught.value.retryable and isinstance(caught.value.__cause__, httpx.ConnectError)
    assert wire.requests == []


async def test_a_connect_timeout_is_a_provider_timeout(wire: WireServer) -> None:
    attempts: list[httpx.Request] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        attempts.append(request)
        raise httpx.ConnectTimeout("timed out connecting", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as client:
        with pytest.raises(ProviderTimeout, match="connecting to OpenAI-compatible server at 127.0.0.1 timed out") \
                as caught:
            await collect(connect(wire, client=client))
    assert caught.value.retryable and isinstance(caught.value.__cause__, httpx.ConnectTimeout)
    assert [str(r.url) for r in attempts] == [f"{wire.url}/v1/chat/completions"]


async def test_a_read_timeout_mid_stream_is_a_provider_timeout(wire: WireServer) -> None:
    wire.reply(fixture("openai/text.sse"), hang_after=3)  # the role chunk, "Hello", "!", then silence
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=0.2)) as client:
        seen, err = await collect_until_error(connect(wire, client=client))
    assert seen == [TextDelta("Hello"), TextDelta("!")]
    assert isinstance(err, ProviderTimeout) and err.retryable
    assert isinstance(err.__cause__, httpx.ReadTimeout)


# -- cancelling or closing mid-stream -----------------------------------------------------------------------


class Sockets:
    """Notes the socket under every response a client receives, to check later that it was closed."""

    def __init__(self) -> None:
        self.seen: list[socket.socket] = []

    async def __call__(self, response: httpx.Response) -> None:
        self.seen.append(response.extensions["network_stream"].get_extra_info("socket"))

    @property
    def open(self) -> list[socket.socket]:
        return [s for s in self.seen if s.fileno() != -1]


async def settle() -> None:
    """Let finalizers and callbacks scheduled by closing run before tasks are counted."""
    gc.collect()
    for _ in range(5):
        await asyncio.sleep(0)


async def test_cancelling_the_consumer_mid_stream_closes_the_connection_and_leaks_no_task(wire: WireServer) -> None:
    await settle()
    tasks_before = asyncio.all_tasks()
    wire.reply(fixture("openai/text.sse"), hang_after=3)
    wire.reply(fixture("openai/text.sse"))
    sockets = Sockets()
    seen: list[Any] = []
    async with httpx.AsyncClient(event_hooks={"response": [sockets]}) as client:
        p = connect(wire, client=client)

        async def consume(scope: anyio.CancelScope) -> None:
            async for delta in p.stream(ASK):
                seen.append(delta)
                if len(seen) == 2:
                    scope.cancel()  # the server is silent from here on: the provider waits on the read

        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:
                group.start_soon(consume, scope)
        assert scope.cancelled_caught
        assert seen == [TextDelta("Hello"), TextDelta("!")]
        assert len(sockets.seen) == 1 and sockets.open == []  # the connection was closed, not pooled
        # The provider and the client still work after the cancellation.
        assert (await collect(p))[0] == TextDelta("Hello")
    await settle()
    assert asyncio.all_tasks() - tasks_before == set()


async def raw_sse_server(first: bytes, disconnected: anyio.Event,
                         *, task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
    """Serve one request on 127.0.0.1: send ``first`` as the start of an event stream, then wait, and set
    ``disconnected`` when the client closes its end. (The shared loopback server cannot see a disconnect.)"""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")

    async def handle(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive()
            head, _, body = data.partition(b"\r\n\r\n")
            length = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
            while length and len(body) < int(length.group(1)):
                body += await stream.receive()
            await stream.send(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                              b"transfer-encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (len(first), first))
            try:
                while True:
                    await stream.receive()  # the client sends nothing more: this ends only when it hangs up
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                disconnected.set()

    async with listener:
        task_status.started(listener.extra(SocketAttribute.local_port))
        await listener.serve(handle)


@pytest.mark.parametrize("how", ["aclose", "cancel"])
async def test_the_server_sees_the_client_hang_up_when_the_consumer_stops(how: str) -> None:
    first = fixture("openai/text.sse").split(b"\n\n")[1] + b"\n\n"  # one event: "Hello"
    disconnected = anyio.Event()
    async with anyio.create_task_group() as servers:
        port = await servers.start(raw_sse_server, first, disconnected)
        try:
            async with connect(f"http://127.0.0.1:{port}") as p:
                stream = p.stream(ASK)
                if how == "aclose":
                    assert await stream.__anext__() == TextDelta("Hello")
                    await stream.aclose()  # type: ignore[attr-defined]
                else:
                    with anyio.move_on_after(0.2) as scope:
                        async for _ in stream:
                            pass  # "Hello", then the provider waits for more until cancelled
                    assert scope.cancelled_caught
                    await stream.aclose()  # type: ignore[attr-defined]
                with anyio.fail_after(5):
                    await disconnected.wait()
        finally:
            servers.cancel_scope.cancel()
    assert disconnected.is_set()
