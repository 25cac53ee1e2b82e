"""The agent card: public at the well-known paths, telling clients the agent's name, skill and tools, that it
streams, where its endpoint is and that it wants a bearer token; the bearer check in front of everything else; and
what the A2A tool makes of a card. In process, on asyncio and on trio (the card and the bearer check do not need
the SDK's task machinery)."""

from __future__ import annotations

import socket

import anyio
import pytest
from a2a.client import A2ACardResolver
from a2a.utils.proto_utils import validate_proto_required_fields
from starlette.routing import Route

from loop import Text, tool
from provider import Function
from session.a2a import CARD_PATHS, A2AToolError, a2a_tool
from session.a2a._endpoint import ASYNCIO_ONLY
from tests.session.a2a.helpers import OTHER, in_process


@tool
async def lookup(word: str) -> str:
    """Look a word up."""
    return word


MODEL = Function(lambda request: [Text("hello")])


async def test_the_card_is_public_and_describes_the_agent() -> None:
    async with in_process(MODEL, tools=[lookup], name="librarian", description="Answers questions.",
                          examples=["What does 'ubiquitous' mean?"]) as served:
        anonymous = served.client(token=None)
        for path in CARD_PATHS:
            response = await anonymous.get(path)
            assert response.status_code == 200, (path, response.text)
            assert response.headers["etag"]
        card = await A2ACardResolver(anonymous, str(anonymous.base_url)).get_agent_card()
    validate_proto_required_fields(card)  # every field the spec requires is there
    assert (card.name, card.description, card.version) == ("librarian", "Answers questions.", "1.0.0")
    assert card.capabilities.streaming and not card.capabilities.push_notifications
    [skill] = card.skills
    assert list(skill.tags) == ["agent", "lookup"] and "lookup" in skill.description
    assert list(skill.examples) == ["What does 'ubiquitous' mean?"]
    assert [(i.url, i.protocol_binding, i.protocol_version) for i in card.supported_interfaces] == [
        ("http://127.0.0.1/a2a", "JSONRPC", "1.0"), ("http://127.0.0.1/a2a", "JSONRPC", "0.3")]
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    assert list(card.security_requirements[0].schemes) == ["bearer"]


async def test_a_card_names_the_url_it_was_given_or_says_no_token_is_needed() -> None:
    async with in_process(MODEL, url="https://agents.example/a2a", bearer=False) as served:
        body = (await served.client(token=None).get(CARD_PATHS[0])).json()
    assert {i["url"] for i in body["supportedInterfaces"]} == {"https://agents.example/a2a"}
    assert body["url"] == "https://agents.example/a2a"  # 0.3 clients read this one
    assert "securitySchemes" not in body and "securityRequirements" not in body


@pytest.mark.parametrize("token", [None, "wrong-token"])
async def test_the_endpoint_wants_one_of_the_tokens(token: str | None) -> None:
    async with in_process(MODEL) as served:
        client = served.client(token=token)
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}}
        response = await client.post("/a2a", json=body)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].lower().startswith("bearer")
    assert response.json()["error"]["type"] == "unauthorized"


@pytest.mark.parametrize("anyio_backend", ["trio"])  # the refusal is trio's; asyncio runs tasks (the other modules)
async def test_off_asyncio_the_endpoint_says_it_runs_on_asyncio_only() -> None:
    async with in_process(MODEL) as served:
        client = served.client(token=OTHER)
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                "params": {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}}
        with anyio.fail_after(5):
            response = await client.post("/a2a", json=body, headers={"a2a-version": "1.0"})
        assert served.manager.open_sessions == 0  # nothing ran
    assert response.status_code == 200
    assert response.json()["error"]["message"] == ASYNCIO_ONLY


async def test_the_routes_answer_their_methods_only_and_stay_out_of_an_openapi_document() -> None:
    async with in_process(MODEL) as served:
        card = await served.client(token=None).post(CARD_PATHS[0], json={})
        rpc = await served.client().get("/a2a")
        routes = served.transport_or_url.app.routes
    assert (card.status_code, rpc.status_code) == (405, 405)
    assert len(routes) == 3 and not any(isinstance(r, Route) for r in routes)  # the HTTP conduit documents Routes


async def test_the_tool_takes_its_name_from_the_card_and_keeps_its_token_on_the_cards_origin() -> None:
    async with in_process(MODEL, name="Word finder!", url="https://elsewhere.example/a2a") as served:
        transport = served.transport_or_url
        anonymous = await a2a_tool("http://127.0.0.1", transport=transport)
        named = await a2a_tool("http://127.0.0.1", name="words", description="Knows words.", transport=transport)
        with pytest.raises(A2AToolError, match="names an endpoint on another origin"):
            await a2a_tool("http://127.0.0.1", token=OTHER, transport=transport)
    assert anonymous.spec.name == "Word_finder" and "'Word finder!'" in anonymous.spec.description
    assert (named.spec.name, named.spec.description) == ("words", "Knows words.")
    assert anonymous.spec.parameters["required"] == ["message"]


async def test_an_agent_that_cannot_be_reached_is_an_error_naming_it() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # bound, never listening: connections are refused
        with anyio.fail_after(10), pytest.raises(A2AToolError, match=f"could not read the agent card at .*:{port}"):
            await a2a_tool(f"http://127.0.0.1:{port}")
