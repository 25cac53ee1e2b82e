"""The agent card: what a served agent tells A2A clients about itself, and the routes that serve it.

The card names the agent and says what it does (``name``, ``description``, ``version``); it has one skill, the
agent answering a text request, whose tags and description list the agent's own tools; it can stream (so clients
may use ``message/stream``); it reads and writes plain text; and, when the server checks bearer tokens, it says
so (an HTTP ``bearer`` security scheme, required). It lists one JSON-RPC endpoint twice: for protocol 1.0
(``SendMessage``, ``SendStreamingMessage``, ``GetTask``, ``CancelTask``) and for 0.3 (``message/send``,
``message/stream``, ``tasks/get``, ``tasks/cancel``), both answered at the same URL.

The card is public: it is how a client learns to authenticate. It is served at ``/.well-known/agent-card.json``
(the path A2A 0.3 and 1.0 use) and ``/.well-known/agent.json`` (the one earlier clients look for), by the SDK's
own card route (with its ``ETag`` and ``304`` revalidation). Without a fixed ``url`` the endpoint's URL is made
from each request (its scheme, ``Host`` and root path), so a server on port 0 or behind a name of its own
still gives a URL its client can reach.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from typing import Any

from a2a.server.routes import create_agent_card_routes
from a2a.types import (AgentCapabilities, AgentCard, AgentInterface, AgentSkill, HTTPAuthSecurityScheme,
                       SecurityRequirement, SecurityScheme, StringList)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

CARD_PATHS = (AGENT_CARD_WELL_KNOWN_PATH, "/.well-known/agent.json")
"""Where the card is served."""
BEARER = "bearer"
"""The name of the card's security scheme."""
TEXT = "text/plain"
# What a message may hold: text, and files (images the model is shown, documents it reads).
INPUT = [TEXT, "image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf"]
_base: ContextVar[str] = ContextVar("a2a_card_base", default="")


def agent_card(*, name: str, description: str, version: str, url: str, tools: Iterable[str] = (),
               examples: Sequence[str] = (), bearer: bool = True) -> AgentCard:
    """The card of an agent answering at the JSON-RPC endpoint ``url`` (see the module docstring); ``tools`` are
    the names of the agent's own tools, ``examples`` requests it handles well, ``bearer`` whether the server
    wants a bearer token."""
    tools = sorted(tools)
    about = description if not tools else f"{description} Tools it can use: {', '.join(tools)}."
    skill = AgentSkill(id="ask", name=name, description=about, tags=["agent", *tools], examples=list(examples),
                       input_modes=INPUT, output_modes=[TEXT])
    card = AgentCard(name=name, description=description, version=version, supported_interfaces=interfaces(url),
                     capabilities=AgentCapabilities(streaming=True, push_notifications=False),
                     default_input_modes=INPUT, default_output_modes=[TEXT], skills=[skill])
    if bearer:
        scheme = HTTPAuthSecurityScheme(scheme="Bearer", description="The bearer token the server was given for "
                                                                     "this client ('Authorization: Bearer <token>').")
        card.security_schemes[BEARER].CopyFrom(SecurityScheme(http_auth_security_scheme=scheme))
        card.security_requirements.append(SecurityRequirement(schemes={BEARER: StringList()}))
    return card


def interfaces(url: str) -> list[AgentInterface]:
    """The JSON-RPC endpoint at ``url``, for protocol 1.0 and 0.3."""
    return [AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=version)
            for version in (PROTOCOL_VERSION_1_0, PROTOCOL_VERSION_0_3)]


def card_routes(card: AgentCard, *, path: str, url: str | None) -> list[Route]:
    """The routes serving ``card`` at ``CARD_PATHS``: with ``url`` its endpoint's URL as given, else made from
    each request and the endpoint's ``path``."""

    async def per_request(served: AgentCard) -> AgentCard:
        base = _base.get()
        if url is not None or not base:
            return served
        copy = AgentCard()
        copy.CopyFrom(served)
        del copy.supported_interfaces[:]
        copy.supported_interfaces.extend(interfaces(base + path))
        return copy

    routes: list[Route] = []
    for where in CARD_PATHS:
        for route in create_agent_card_routes(card, card_modifier=per_request, card_url=where):
            routes.append(Route(route.path, _with_base(route.endpoint), methods=["GET"], name=f"a2a card {where}"))
    return routes


def _with_base(endpoint: Any) -> Any:
    """``endpoint`` (the SDK's card route) with the request's base URL where the card's modifier reads it."""

    async def serve(request: Request) -> Response:
        token = _base.set(str(request.base_url).rstrip("/"))
        try:
            response: Response = await endpoint(request)
        finally:
            _base.reset(token)
        return response

    return serve
