"""Reading a request's body within the server's limits, for the routes that read their body themselves (the
OpenAI-compatible API and AG-UI), each answering the failures in its own error format."""

from __future__ import annotations

import contextlib

import anyio
from starlette.requests import Request

__all__ = ["BodyTooLarge", "read_body"]


class BodyTooLarge(Exception):
    """The request's body is, or says it is, larger than the route takes."""


async def read_body(request: Request, *, max_bytes: int, timeout: float) -> bytes:
    """The request's body, refused with ``BodyTooLarge`` as soon as it passes ``max_bytes`` (or declares more in
    its ``Content-Length``). ``TimeoutError`` when it has not arrived within ``timeout`` seconds; Starlette's
    ``ClientDisconnect`` when the client leaves first."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise BodyTooLarge
    body = bytearray()
    # The stream is closed here when the body is refused part-way, not left to the garbage collector (trio warns).
    with anyio.fail_after(timeout):
        async with contextlib.aclosing(request.stream()) as chunks:
            async for chunk in chunks:
                body += chunk
                if len(body) > max_bytes:
                    raise BodyTooLarge
    return bytes(body)
