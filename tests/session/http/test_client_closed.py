"""A request its client abandons (it closes the connection before the answer, or before sending all of its body)
is logged as client-closed, status 499 (nginx's convention), at info level: it is no server error (500)."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
import structlog

from loop import Request
from provider import Function
from tests.session.http.helpers import TOKEN, on_socket
from tests.session.models import echo


async def logged(logs: list[dict[str, Any]], path: str) -> dict[str, Any]:
    """The request log's entry for ``path``, once it is written."""
    with anyio.fail_after(10):
        while True:
            found = [entry for entry in logs if entry["event"] == "http request" and entry["path"] == path]
            if found:
                return found[-1]
            await anyio.sleep(0.01)


def request(path: str, body: bytes, *, length: int | None = None) -> bytes:
    """An HTTP/1.1 POST of ``body``, declaring ``length`` bytes (more than it holds, for a body cut short)."""
    return (f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {TOKEN}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body) if length is None else length}\r\n\r\n"
            ).encode() + body


async def send_and_leave(url: str, data: bytes, *, until: anyio.Event | None = None) -> None:
    """Send ``data`` on a connection of its own, wait for ``until`` (or a moment), and close the connection."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    async with await anyio.connect_tcp(host, int(port)) as stream:
        await stream.send(data)
        if until is not None:
            with anyio.fail_after(10):
                await until.wait()
        else:
            await anyio.sleep(0.1)


async def test_a_completion_whose_client_leaves_mid_run_is_logged_as_client_closed() -> None:
    called = anyio.Event()

    async def slow(request: Request) -> str:
        called.set()
        await anyio.sleep(30)
        return "too late"

    async with on_socket(Function(slow)) as served:
        body = b'{"model": "agent", "messages": [{"role": "user", "content": "hi"}]}'
        with structlog.testing.capture_logs() as logs:
            started = time.monotonic()
            await send_and_leave(served.transport_or_url, request("/v1/chat/completions", body), until=called)
            entry = await logged(logs, "/v1/chat/completions")
            assert time.monotonic() - started < 10  # the run was stopped, not waited out
    assert entry["status"] == 499 and entry["log_level"] == "info", entry


@pytest.mark.parametrize("path", ["/sessions/{id}/messages", "/sessions", "/v1/chat/completions"])
async def test_a_request_whose_client_leaves_mid_body_is_logged_as_client_closed(path: str) -> None:
    async with on_socket(Function(echo)) as served:
        if "{id}" in path:
            path = path.format(id=(await served.client().post("/sessions")).json()["id"])
        with structlog.testing.capture_logs() as logs:
            await send_and_leave(served.transport_or_url, request(path, b'{"text": "h', length=100))
            entry = await logged(logs, path)
            health = await served.client(None).get("/healthz")
    assert entry["status"] == 499 and entry["log_level"] == "info", entry
    assert health.status_code == 200
    assert not [e for e in logs if e["log_level"] in ("error", "critical")], logs
