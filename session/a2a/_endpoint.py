"""``A2AEndpoint``: a manager's agent served over the A2A protocol, as Starlette routes built from a2a-sdk's own
server pieces: its JSON-RPC dispatcher (``create_jsonrpc_routes``), its default request handler and in-memory task
store, its card route; and ours, ``SessionExecutor``, running each task's message in a session.

The routes sit behind the app's bearer check (``session._bearer.BearerAuth``), every path but the card's
(``open_paths``): a request without a valid token gets 401 before it reaches the SDK, and one let in is the
token's owner, whose tasks and conversations it alone sees (the SDK's task store keeps tasks per owner: another
token naming a task is told it does not exist).

asyncio only. The SDK's request handler runs every task in asyncio tasks of its own (``ActiveTask``), so the
JSON-RPC endpoint answers on asyncio (uvicorn) only; served on trio (Hypercorn), it answers every call with a
JSON-RPC error saying so, while the card is still served.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandler, build_error_response
from a2a.server.routes import DefaultServerCallContextBuilder, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskStore
from a2a.utils.errors import UnsupportedOperationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.datastructures import URLPath
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Receive, Scope, Send

from loop import UsageError
from session._bearer import ANONYMOUS, TokenQuota, owner_in
from session._manager import Manager
from session._steps import agent_tool_names
from session.a2a._approvals import check_policy, policy_approver
from session.a2a._card import CARD_PATHS, agent_card, card_routes
from session.a2a._executor import OWNER, SessionExecutor, SessionKey, SessionOpened, session_key

__all__ = ["A2AEndpoint", "a2a_routes"]

DESCRIPTION = "An AI agent: send it a request in text; it works on it (it may use its own tools) and answers in text."
ASYNCIO_ONLY = ("this A2A server runs its tasks on asyncio only (a2a-sdk's request handler is built on asyncio "
                "tasks); serve it with uvicorn on asyncio")


class _Owner(User):
    """The token owner ``BearerAuth`` let a request in as: the name the SDK's task store keeps its tasks under."""

    def __init__(self, owner: str) -> None:
        self._owner = owner

    @property
    def is_authenticated(self) -> bool:
        return self._owner != ANONYMOUS

    @property
    def user_name(self) -> str:
        return self._owner


class _OwnerContext(DefaultServerCallContextBuilder):
    """The SDK's call context of a request, as its own builder makes it, naming the request's token owner as its
    user (the task store's owner) and in its state (``OWNER``: the executor's conversations' namespace)."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        # The headers stay (the SDK reads the protocol version there), but not the bearer token.
        context.state["headers"] = {k: v for k, v in request.headers.items() if k.lower() != "authorization"}
        context.state[OWNER] = owner_in(request.scope)
        return context

    def build_user(self, request: Request) -> User:
        return _Owner(owner_in(request.scope))


class _Unlisted(BaseRoute):
    """One of the SDK's routes, answering as it does (405 for another method), but not a Starlette ``Route``: the
    HTTP conduit's OpenAPI document describes its ``Route`` s, and A2A is described by its own specification and
    the agent card."""

    def __init__(self, route: Route) -> None:
        self.route = route

    @property
    def path(self) -> str:
        return self.route.path

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        return self.route.matches(scope)

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:
        return self.route.url_path_for(name, **path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.route.handle(scope, receive, send)


class A2AEndpoint:
    """A manager's agent as an A2A server (see the module docstring): ``routes()`` are the JSON-RPC endpoint at
    ``path`` and the card at ``open_paths``.

    The card says ``name``, ``description`` and ``version``, lists ``examples`` (requests the agent handles
    well) and the agent's tools, and, with ``bearer``, that clients must send a bearer token (the app's
    ``BearerAuth`` checks it: these routes do not). ``url`` is the endpoint's public URL; without it, each
    card names the URL its request came to. Conversations are named by ``session_key(owner, contextId)``
    (``<owner>:<contextId>``, the session routes' key, by default); ``on_open`` hears of each one a task opens,
    and with a ``quota`` they are opened within the token's. ``approvals`` decides calls that need approval:
    ``"ask"`` (the task ends ``input-required`` and its client answers), ``"deny"`` or ``"allow"``. A canceled
    run gets ``cancel_grace`` seconds to stop. Tasks are kept per token owner in ``task_store``: by default the
    SDK's in memory, every task for as long as the process runs (the conversations themselves are the manager's
    store's); give the SDK's ``DatabaseTaskStore`` to keep them elsewhere.

    The manager must be running while requests are served; ``close`` ends the tasks still running (their
    messages interrupted) when the server stops.
    """

    def __init__(self, manager: Manager, *, name: str = "agent", description: str = DESCRIPTION,
                 url: str | None = None, version: str = "1.0.0", path: str = "/a2a", bearer: bool = True,
                 examples: Sequence[str] = (), session_key: SessionKey = session_key,
                 on_open: SessionOpened | None = None, quota: TokenQuota | None = None, approvals: str = "ask",
                 cancel_grace: float = 10.0, task_store: TaskStore | None = None) -> None:
        if not isinstance(path, str) or not path.startswith("/") or path == "/" or path.endswith("/"):
            raise UsageError(f"the A2A endpoint's path must start with '/' and name something, got {path!r}")
        for what, value in (("name", name), ("description", description), ("version", version)):
            if not isinstance(value, str) or not value.strip():
                raise UsageError(f"{what} must be a non-empty string (the agent card shows it), got {value!r}")
        if url is not None and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
            raise UsageError(f"url must be the endpoint's absolute http(s) URL or None, got {url!r}")
        if isinstance(examples, str) or not all(isinstance(e, str) for e in examples):
            raise UsageError(f"examples must be a sequence of strings, got {examples!r}")
        if task_store is not None and not isinstance(task_store, TaskStore):
            raise UsageError(f"task_store must be an a2a-sdk TaskStore or None, got {task_store!r}")
        if not isinstance(bearer, bool):
            raise UsageError(f"bearer must be true or false, got {bearer!r}")
        self.path = path
        self.url = url
        self.executor = SessionExecutor(manager, session_key=session_key, on_open=on_open, quota=quota,
                                        approver=policy_approver(check_policy(approvals)), cancel_grace=cancel_grace)
        self.card = agent_card(name=name, description=description, version=version, url=url or path,
                               tools=agent_tool_names(manager), examples=examples, bearer=bearer)
        # A task waiting for approval is let go (its parked SDK task released) once its calls would be denied.
        store = InMemoryTaskStore() if task_store is None else task_store
        self.handler = DefaultRequestHandler(agent_executor=self.executor, task_store=store,
                                             agent_card=self.card, interrupted_task_timeout=manager.approval_timeout)

    @property
    def open_paths(self) -> frozenset[str]:
        """The paths that need no token: the agent card's."""
        return frozenset(CARD_PATHS)

    def routes(self) -> list[BaseRoute]:
        """The JSON-RPC endpoint at ``path`` (POST) and the card at ``open_paths`` (GET), as routes an app's
        OpenAPI document does not take for its own (see ``_Unlisted``)."""
        rpc = create_jsonrpc_routes(self.handler, self.path, context_builder=_OwnerContext(), enable_v0_3_compat=True)
        routes = [Route(r.path, _asyncio_only(r.endpoint), methods=["POST"], name="a2a") for r in rpc]
        routes += card_routes(self.card, path=self.path, url=self.url)
        return [_Unlisted(route) for route in routes]

    async def close(self) -> None:
        """End the tasks still running (their messages interrupted, see ``SessionExecutor``), so that none is
        left behind when the server stops. Nothing to do on trio, where none runs."""
        if _on_asyncio():
            await self.handler.aclose()


def a2a_routes(manager: Manager, **settings: Any) -> list[BaseRoute]:
    """The routes of ``A2AEndpoint(manager, **settings)``: the agent over A2A, to mount in a Starlette app whose
    ``BearerAuth`` leaves the card's paths (``session.a2a.CARD_PATHS``) open. Use ``A2AEndpoint`` itself to
    ``close`` its running tasks when the app stops."""
    return A2AEndpoint(manager, **settings).routes()


def _on_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _asyncio_only(endpoint: Any) -> Any:
    """The SDK's JSON-RPC ``endpoint``, answering a JSON-RPC error instead of running anything off asyncio."""

    async def rpc(request: Request) -> Response:
        if not _on_asyncio():
            error = build_error_response(None, UnsupportedOperationError(message=ASYNCIO_ONLY))
            return JSONResponse(error)
        response: Response = await endpoint(request)
        return response

    return rpc
