"""Shared setup for the HTTP conduit tests: a manager with an offline provider, served in process or on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs
import httpx

from cognitive import new_turn_processor, react_factory
from loop import Provider, Tool
from session import Manager, Store, step_factory
from session.http import HTTPConduit
from session._bearer import owner_of
from session.http._routes import session_key

TOKEN = "token-alpha"
OTHER = "token-beta"


def key(session_id: str, token: str = TOKEN) -> str:
    """The manager's (and store's) id for the session ``token``'s client calls ``session_id``."""
    return session_key(owner_of(token), session_id)


@attrs.define
class Served:
    """A running conduit: its manager, and clients for it (closed when the test's ``async with`` ends)."""

    manager: Manager
    transport_or_url: Any
    stack: list[httpx.AsyncClient] = attrs.Factory(list)

    def client(self, token: str | None = TOKEN) -> httpx.AsyncClient:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        if isinstance(self.transport_or_url, str):
            client = httpx.AsyncClient(base_url=self.transport_or_url, headers=headers, timeout=10)
        else:
            client = httpx.AsyncClient(transport=self.transport_or_url, base_url="http://127.0.0.1",
                                       headers=headers)
        self.stack.append(client)
        return client

    def session(self, session_id: str, token: str = TOKEN) -> Any:
        """The open session a client of ``token`` calls ``session_id`` (``None`` if it is not open)."""
        return self.manager.get(key(session_id, token))

    async def aclose(self) -> None:
        for client in self.stack:
            await client.aclose()


def _manager(provider: Provider, tools: Sequence[Tool], store: Store | None, processor: Any,
             manager_options: dict[str, Any]) -> Manager:
    return Manager(processor or new_turn_processor(react_factory), provider=provider, store=store,
                   make_step=step_factory(tools), **manager_options)


@asynccontextmanager
async def in_process(provider: Provider, *, tools: Sequence[Tool] = (), store: Store | None = None,
                     processor: Any = None, manager_options: dict[str, Any] | None = None,
                     **conduit_options: Any) -> AsyncIterator[Served]:
    """The conduit's app driven through ``httpx.ASGITransport`` (no socket)."""
    conduit_options.setdefault("token", [TOKEN, OTHER])
    conduit = HTTPConduit(**conduit_options)
    async with _manager(provider, tools, store, processor, manager_options or {}) as manager:
        async with conduit.app(manager) as app:
            served = Served(manager, httpx.ASGITransport(app=app))
            try:
                yield served
            finally:
                await served.aclose()


@asynccontextmanager
async def on_socket(provider: Provider, *, tools: Sequence[Tool] = (), store: Store | None = None,
                    processor: Any = None, manager_options: dict[str, Any] | None = None,
                    **conduit_options: Any) -> AsyncIterator[Served]:
    """The conduit served on 127.0.0.1 (a free port; uvicorn on asyncio, Hypercorn on trio), stopped by
    cancellation at the end."""
    conduit_options.setdefault("token", [TOKEN, OTHER])
    conduit = HTTPConduit(host="127.0.0.1", port=0, **conduit_options)
    async with _manager(provider, tools, store, processor, manager_options or {}) as manager:
        async with anyio.create_task_group() as group:
            with anyio.fail_after(10):
                url = await group.start(conduit.serve, manager)
            served = Served(manager, url)
            try:
                yield served
            finally:
                await served.aclose()
                group.cancel_scope.cancel()


@attrs.frozen
class Frame:
    """One server-sent event (``comment`` set for a comment line instead)."""

    id: int | None = None
    event: str | None = None
    data: Any = None
    comment: str | None = None


class SSE:
    """Reads frames from a streaming ``text/event-stream`` response."""

    def __init__(self, response: httpx.Response) -> None:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        self._lines = response.aiter_lines()

    async def frame(self, *, comments: bool = False) -> Frame:
        fields: dict[str, Any] = {}
        async for line in self._lines:
            if line.startswith(":"):
                if comments:
                    return Frame(comment=line[1:].strip())
                continue
            if not line:
                if fields:
                    return Frame(**fields)
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "id":
                fields["id"] = int(value)
            elif name == "event":
                fields["event"] = value
            elif name == "data":
                fields["data"] = json.loads(value)
        raise EOFError("the event stream ended")

    async def until(self, event: str, count: int = 1) -> list[Frame]:
        """Frames up to and including the ``count``-th of type ``event``."""
        seen: list[Frame] = []
        with anyio.fail_after(10):
            while sum(f.event == event for f in seen) < count:
                seen.append(await self.frame())
        return seen


async def wait_turns(client: httpx.AsyncClient, session_id: str, count: int) -> list[dict[str, Any]]:
    """The stored turns once there are at least ``count`` of them."""
    with anyio.fail_after(10):
        while True:
            response = await client.get(f"/sessions/{session_id}/turns")
            assert response.status_code == 200, response.text
            turns = response.json()["turns"]
            if len(turns) >= count:
                return turns
            await anyio.sleep(0.01)
