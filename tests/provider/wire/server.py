"""A real HTTP server on 127.0.0.1 that replays recorded responses byte for byte and records requests.

Tests queue responses (``server.reply(...)``) and read what the provider sent (``server.requests``). The
server runs uvicorn in a background thread for the whole test session; nothing leaves the machine.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import anyio
import attrs
import uvicorn

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> bytes:
    """The bytes of a recorded stream, e.g. ``fixture("openai/text.sse")``."""
    return (FIXTURES / name).read_bytes()


@attrs.define
class Reply:
    """One queued response. ``chunks`` are sent as separate writes; ``cut_after`` drops the connection after
    that many chunks without finishing the body; ``hang_after`` stops sending (keeping the connection open)
    after that many chunks; ``delay`` waits before the response starts."""

    status: int = 200
    chunks: list[bytes] = attrs.Factory(list)
    headers: dict[str, str] = attrs.Factory(dict)
    cut_after: int | None = None
    hang_after: int | None = None
    delay: float = 0.0


@attrs.define
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class WireServer:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Received] = []
        self.disconnects = 0
        # IPPROTO_TCP lets asyncio turn Nagle's algorithm off on accepted connections; without it every
        # reused keep-alive connection waits ~40 ms for a delayed ACK.
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self.app, interface="asgi3", lifespan="off", ws="none", log_level="error", access_log=False,
                                timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the loopback test server did not start within 10 s")
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=5)
        self._sock.close()

    def reset(self) -> None:
        self.replies.clear()
        self.requests.clear()
        self.disconnects = 0

    def reply(self, body: bytes | list[bytes] = b"", *, status: int = 200, sse: bool = True,
              headers: dict[str, str] | None = None, **options: Any) -> None:
        """Queue the next response. A ``bytes`` body is split at event boundaries, one event per write."""
        if isinstance(body, bytes):
            chunks = [c + b"\n\n" for c in body.split(b"\n\n") if c.strip()] if sse and status < 400 else [body]
        else:
            chunks = list(body)
        kind = "text/event-stream" if sse and status < 400 else "application/json"
        self.replies.append(Reply(status, chunks, {"content-type": kind, **(headers or {})}, **options))

    async def receive_request(self, scope: dict, receive: Any) -> Received:
        """Read the request's whole body, and keep the request in ``requests``."""
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.requests.append(Received(scope["method"], scope["path"], headers, body))
        return self.requests[-1]

    async def app(self, scope: dict, receive: Any, send: Any) -> None:
        await self.receive_request(scope, receive)
        if not self.replies:
            await self._send(send, 599, [b'{"error": {"message": "the test queued no reply"}}'], {})
            return
        reply = self.replies.popleft()
        if reply.delay:
            await anyio.sleep(reply.delay)
        await send({"type": "http.response.start", "status": reply.status,
                    "headers": [(k.encode(), v.encode()) for k, v in reply.headers.items()]})
        for n, chunk in enumerate(reply.chunks):
            if reply.cut_after is not None and n >= reply.cut_after:
                self.disconnects += 1
                raise ConnectionAbortedError("cut by the test")  # uvicorn drops the connection mid-body
            if reply.hang_after is not None and n >= reply.hang_after:
                # Hang until the client goes away, and count that it did.
                while (await receive())["type"] != "http.disconnect":
                    pass
                self.disconnects += 1
                return
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    @staticmethod
    async def _send(send: Any, status: int, chunks: list[bytes], headers: dict[str, str]) -> None:
        await send({"type": "http.response.start", "status": status, "headers": list(headers.items())})
        for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
