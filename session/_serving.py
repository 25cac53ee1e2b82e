"""Serving an ASGI app over HTTP for the conduits: a listening socket, and uvicorn run until cancelled."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import anyio.abc
import uvicorn

from loop import LoopError, UsageError, tracing

_log = tracing.logger("session.serving")


def listen(host: str, port: int) -> socket.socket:
    """A bound, non-blocking TCP socket on ``host``:``port`` (0: any free port), ready to hand to uvicorn."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP (not 0) lets asyncio turn Nagle's algorithm off on accepted connections; otherwise a
    # keep-alive client waits ~40 ms for a delayed ACK on every request after its first.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc}") from exc
    return sock


def url_of(sock: socket.socket, host: str, path: str = "") -> str:
    """The URL clients reach ``sock`` at."""
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    return f"http://{shown}:{sock.getsockname()[1]}{path}"


class _Server(uvicorn.Server):
    """uvicorn, stopped by cancelling ``serve_asgi`` rather than by the process's signals."""

    def capture_signals(self) -> Any:
        return contextlib.nullcontext()


async def serve_asgi(
    app: Any,
    sock: socket.socket,
    *,
    host: str,
    path: str = "",
    shutdown_timeout: float,
    task_status: anyio.abc.TaskStatus[str],
    around: AbstractAsyncContextManager[Any] | None = None,
    on_stop: Callable[[], None] | None = None,
    what: str = "HTTP server",
) -> None:
    """Serve ``app`` with uvicorn on ``sock`` (from ``listen``; the caller closes it) until cancelled (asyncio
    only). ``host`` and ``path`` make the URL.

    ``task_status`` gets the URL once the server accepts connections. ``around`` is entered for as long as the
    server runs (and left first on the way out); ``on_stop`` runs as shutdown begins, so long-lived responses
    can end before uvicorn waits up to ``shutdown_timeout`` seconds for requests in flight.
    """
    url = url_of(sock, host, path)
    # uvicorn hints this as int, but only hands it to asyncio.wait_for, which takes any number of seconds.
    config = uvicorn.Config(app, lifespan="off", log_config=None, access_log=False, ws="none",
                            server_header=False, timeout_graceful_shutdown=shutdown_timeout)  # type: ignore[arg-type]
    server = _Server(config)
    stopped = anyio.Event()

    async def run() -> None:
        with anyio.CancelScope(shield=True):  # uvicorn stops by should_exit, below
            try:
                await server.serve(sockets=[sock])
            finally:
                stopped.set()

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            try:
                async with around if around is not None else contextlib.nullcontext():
                    while not (server.started or stopped.is_set()):
                        await anyio.sleep(0.005)
                    if not server.started:
                        raise LoopError(f"the {what} on {url} stopped while starting")
                    _log.info("serving", what=what, url=url)
                    task_status.started(url)
                    await stopped.wait()
            finally:
                if on_stop is not None:
                    on_stop()
                server.should_exit = True
    finally:
        _log.info("stopped serving", what=what, url=url)
