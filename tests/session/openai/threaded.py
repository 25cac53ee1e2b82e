"""A Starlette app served in a thread on a pre-bound 127.0.0.1 socket, for tests that drive it with real (sync or
async) clients, and the errors the server logs meanwhile. The server runs on the event loop the test runs on:
uvicorn on asyncio, Hypercorn on trio, each with the app's lifespan on, as a user would serve it."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sniffio
import trio
import uvicorn
from hypercorn.config import Config, Sockets
from hypercorn.trio import worker_serve
from hypercorn.utils import wrap_app

LOGGERS = ("uvicorn.error", "hypercorn.error")


class Errors(logging.Handler):
    """Collects the error records the server logs (an exception escaping the app is one)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class _Uvicorn:
    def __init__(self, make_app: Callable[[], Any], sock: socket.socket) -> None:
        # A factory, so that the app (and the manager in it) is made on the server's own event loop.
        config = uvicorn.Config(make_app, factory=True, lifespan="on", log_level="error", access_log=False,
                                timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.sock = sock

    @property
    def started(self) -> bool:
        return self.server.started

    def run(self) -> None:
        self.server.run(sockets=[self.sock])

    def stop(self) -> None:
        self.server.should_exit = True


class _Hypercorn:
    def __init__(self, make_app: Callable[[], Any], sock: socket.socket) -> None:
        self.make_app = make_app
        self.sock = sock
        self.config = Config()
        self.config.graceful_timeout = 1
        self.config.accesslog = None
        self.config.errorlog = logging.getLogger("hypercorn.error")
        self.started = False
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None

    def run(self) -> None:
        trio.run(self._serve)

    async def _serve(self) -> None:
        self._token, self._stop = trio.lowlevel.current_trio_token(), trio.Event()
        self.sock.listen(100)
        await worker_serve(wrap_app(self.make_app(), self.config.wsgi_max_body_size, "asgi"), self.config,
                           sockets=Sockets(secure_sockets=[], insecure_sockets=[self.sock], quic_sockets=[]),
                           shutdown_trigger=self._stop.wait, task_status=_Status(self))

    def stop(self) -> None:
        if self._token is not None and self._stop is not None:
            self._token.run_sync_soon(self._stop.set)  # from any thread, the test's own trio loop's included


class _Status:
    """The ``task_status`` Hypercorn reports to once it listens."""

    def __init__(self, server: _Hypercorn) -> None:
        self.server = server

    def started(self, value: object = None) -> None:
        self.server.started = True


@contextmanager
def serving_app(make_app: Callable[[], Any], path: str = "/v1") -> Iterator[tuple[str, Errors]]:
    """Serves the app ``make_app()`` makes (in the server's thread) until the block ends; yields its URL (with
    ``path``) and its errors."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = _Hypercorn(make_app, sock) if sniffio.current_async_library() == "trio" else _Uvicorn(make_app, sock)
    thread = threading.Thread(target=server.run, daemon=True)
    errors = Errors()
    for name in LOGGERS:
        logging.getLogger(name).addHandler(errors)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the loopback server did not start")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}{path}", errors
    finally:
        server.stop()
        thread.join(timeout=10)
        sock.close()
        for name in LOGGERS:
            logging.getLogger(name).removeHandler(errors)
