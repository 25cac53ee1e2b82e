"""Shared setup for the A2A tests: a manager with an offline model served as an A2A agent behind the HTTP conduit's
bearer check (tokens ``TOKEN`` and ``OTHER``), in process (asyncio) or by uvicorn on 127.0.0.1 in a thread with an
asyncio loop of its own (so a client on trio can reach it too); and a2a-sdk's own client to talk to it."""

from __future__ import annotations

import asyncio
import queue
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, SendMessageRequest, StreamResponse, Task, TaskState
from starlette.applications import Starlette
from starlette.middleware import Middleware

from cognitive import new_turn_processor, react_factory
from loop import Provider, Tool
from session import Manager, step_factory
from session._bearer import BearerAuth
from session.a2a import A2AEndpoint
from tests.session.http.helpers import OTHER, TOKEN, Served
from tests.session.openai.threaded import serving_app

__all__ = ["OTHER", "TOKEN", "Served", "app_for", "client_for", "collect", "in_process", "manager_for", "remote", "remote_app",
           "sdk_client", "send", "state_of", "task_of"]


def manager_for(provider: Provider, tools: Sequence[Tool] = (), processor: Any = None, **options: Any) -> Manager:
    return Manager(processor or new_turn_processor(react_factory), provider=provider, make_step=step_factory(tools),
                   **options)


def app_for(endpoint: A2AEndpoint, tokens: Sequence[str] = (TOKEN, OTHER), **app: Any) -> Starlette:
    """The endpoint's routes behind ``BearerAuth``, its card's paths left open, as the HTTP conduit mounts it."""
    return Starlette(routes=endpoint.routes(), **app,
                     middleware=[Middleware(BearerAuth, tokens=list(tokens), open_paths=endpoint.open_paths)])


@asynccontextmanager
async def in_process(provider: Provider, *, tools: Sequence[Tool] = (), processor: Any = None,
                     manager_options: dict[str, Any] | None = None, **endpoint_options: Any
                     ) -> AsyncIterator[Served]:
    """The agent's app driven through ``httpx.ASGITransport`` (no socket; asyncio only)."""
    async with manager_for(provider, tools, processor, **(manager_options or {})) as manager:
        endpoint = A2AEndpoint(manager, **endpoint_options)
        served = Served(manager, httpx.ASGITransport(app=app_for(endpoint)))
        try:
            yield served
        finally:
            await served.aclose()
            await endpoint.close()


def remote_app(provider: Provider, *, tools: Sequence[Tool] = (), processor: Any = None,
               **endpoint_options: Any) -> Callable[[], Starlette]:
    """A factory of the agent's app, its manager running for the app's lifespan (made on the server's loop)."""

    def make() -> Starlette:
        manager = manager_for(provider, tools, processor)
        endpoint = A2AEndpoint(manager, **endpoint_options)

        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            async with manager:
                try:
                    yield
                finally:
                    await endpoint.close()

        return app_for(endpoint, lifespan=lifespan)

    return make


@contextmanager
def remote(make_app: Callable[[], Starlette]) -> Iterator[str]:
    """The app ``make_app`` makes, served by uvicorn on 127.0.0.1 (``serving_app``, entered from a thread running
    asyncio, whatever loop the test itself runs on); yields its base URL. The server logs no error meanwhile."""
    url: queue.Queue[Any] = queue.Queue()
    stop = threading.Event()

    async def hold() -> None:
        with serving_app(make_app, path="") as (base, errors):
            url.put(base)
            while not stop.is_set():
                await asyncio.sleep(0.01)
            assert not errors.records, [r.getMessage() for r in errors.records]

    def run() -> None:
        try:
            asyncio.run(hold())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            url.put(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    got = url.get(timeout=20)
    if isinstance(got, BaseException):
        raise got
    try:
        yield got
    finally:
        stop.set()
        thread.join(timeout=20)
    if not url.empty():
        raise url.get()


def client_for(url: str, token: str | None = TOKEN) -> httpx.AsyncClient:
    """An httpx client for the agent served at ``url``, sending ``token``."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=url, headers=headers, timeout=10)


async def sdk_client(http: httpx.AsyncClient, *, streaming: bool = True) -> Client:
    """a2a-sdk's client for the agent ``http`` reaches, made from the card it discovers there."""
    card = await A2ACardResolver(http, str(http.base_url)).get_agent_card()
    return ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)


def send(text: str = "", *, context_id: str = "", task_id: str = "", parts: Sequence[Part] = (),
         return_immediately: bool = False) -> SendMessageRequest:
    """A user's message as a ``SendMessageRequest``: ``text`` as one text part, or ``parts``."""
    message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, context_id=context_id, task_id=task_id,
                      parts=list(parts) or [Part(text=text)])
    request = SendMessageRequest(message=message)
    request.configuration.return_immediately = return_immediately
    return request


async def collect(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    """Every response the client yields for ``request``."""
    return [response async for response in client.send_message(request)]


def task_of(responses: Sequence[StreamResponse]) -> Task:
    """The task a non-streaming send answered with."""
    assert len(responses) == 1 and responses[0].HasField("task"), responses
    return responses[0].task


def state_of(task: Task) -> str:
    return TaskState.Name(task.status.state)
