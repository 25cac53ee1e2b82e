"""A Starlette app served by uvicorn in a thread on a pre-bound 127.0.0.1 socket, for tests that drive it with
real (sync or async) clients, and the errors uvicorn logs meanwhile."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


class Errors(logging.Handler):
    """Collects the error records uvicorn logs (an exception escaping the app is one)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def serving_app(app: Any, path: str = "/v1") -> Iterator[tuple[str, Errors]]:
    """Serves ``app`` (its lifespan on) until the block ends; yields its URL (with ``path``) and its errors."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, lifespan="on", log_level="error", access_log=False, timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    errors = Errors()
    logging.getLogger("uvicorn.error").addHandler(errors)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the loopback server did not start")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}{path}", errors
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        logging.getLogger("uvicorn.error").removeHandler(errors)
