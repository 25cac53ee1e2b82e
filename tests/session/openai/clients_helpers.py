"""What the client-library tests share: a served agent on a real uvicorn server, and the model it answers with.

The served agent is a ``Manager`` running ReAct over ``provider.Function(model)``; ``Served`` keeps every
``Request`` the model received, so a test can assert both on what the client library returned and on what the
model saw. Its own (server-side) tools come from ``step_factory``.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import uvicorn
from pydantic import BaseModel

from cognitive import new_turn_processor, react_factory
from loop import Request, Role, Tool, ToolResult
from provider import Function
from session import Manager, MemoryStore, step_factory
from session.openai import openai_app
from tests.session.openai.test_server import TOKEN, Errors

MODEL = "agent"
PARIS: dict[str, Any] = {"name": "Paris", "population": 2100000}


class City(BaseModel):
    """A city and how many people live in it."""

    name: str
    population: int


def results(request: Request) -> list[ToolResult]:
    """Every tool result the model was shown in ``request``, oldest first."""
    return [result for turn in request.turns if turn.role is Role.TOOL for result in turn.tool_results]


def names(request: Request) -> set[str]:
    """The names of the tools the model was offered."""
    return {spec.name for spec in request.tools}


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


class Served:
    """A served agent: ``url`` for clients, ``requests`` the model received, ``manager`` and its ``store``."""

    def __init__(self, reply: Callable[[Request], Any], tools: Sequence[Tool] = ()) -> None:
        self.reply = reply
        self.requests: list[Request] = []
        self.store = MemoryStore()
        self.manager = Manager(new_turn_processor(react_factory), provider=Function(self._answer),
                               store=self.store, make_step=step_factory(list(tools)))
        self.url = ""
        self.errors = Errors()

    def _answer(self, request: Request) -> Any:
        self.requests.append(request)
        return self.reply(request)


@contextmanager
def serving(reply: Callable[[Request], Any], tools: Sequence[Tool] = (), **settings: Any) -> Iterator[Served]:
    """Serves ``openai_app(manager, token=TOKEN, **settings)`` on a pre-bound loopback socket in a thread (as
    ``test_server.serving`` does, with settings) and yields the ``Served`` agent; uvicorn must log no error."""
    served = Served(reply, tools)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(openai_app(served.manager, token=TOKEN, **settings), lifespan="on", log_level="error",
                            access_log=False, timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    logging.getLogger("uvicorn.error").addHandler(served.errors)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the loopback server did not start")
            time.sleep(0.01)
        served.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        yield served
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        logging.getLogger("uvicorn.error").removeHandler(served.errors)
    assert served.errors.records == [], [record.getMessage() for record in served.errors.records]
