"""What the client-library tests share: a served agent on a real server (``threaded``), and the model it answers
with.

The served agent is a ``Manager`` running ReAct over ``provider.Function(model)``; ``Served`` keeps every
``Request`` the model received, so a test can assert both on what the client library returned and on what the
model saw. Its own (server-side) tools come from ``step_factory``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel

from cognitive import new_turn_processor, react_factory
from loop import Request, Role, Tool, ToolResult
from provider import Function
from session import Manager, MemoryStore, step_factory
from session.openai import openai_app
from tests.session.openai.test_server import TOKEN
from tests.session.openai.threaded import serving_app

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
        self.tools = list(tools)
        self.requests: list[Request] = []
        self.store = MemoryStore()
        self.made: list[Manager] = []
        self.url = ""

    def app(self, **settings: Any) -> Any:
        """``openai_app`` for a new manager, made in the server's thread (on the event loop that runs it)."""
        manager = Manager(new_turn_processor(react_factory), provider=Function(self._answer), store=self.store,
                          make_step=step_factory(self.tools))
        self.made.append(manager)
        return openai_app(manager, token=TOKEN, **settings)

    @property
    def manager(self) -> Manager:
        return self.made[0]

    def _answer(self, request: Request) -> Any:
        self.requests.append(request)
        return self.reply(request)


@contextmanager
def serving(reply: Callable[[Request], Any], tools: Sequence[Tool] = (), **settings: Any) -> Iterator[Served]:
    """Serves ``openai_app(manager, token=TOKEN, **settings)`` on a pre-bound loopback socket in a thread (as
    ``test_server.serving`` does, with settings) and yields the ``Served`` agent; the server must log no error."""
    served = Served(reply, tools)
    with serving_app(functools.partial(served.app, **settings)) as (served.url, errors):
        yield served
    assert errors.records == [], [record.getMessage() for record in errors.records]
