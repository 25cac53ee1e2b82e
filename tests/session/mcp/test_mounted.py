"""Approvals through MCP elicitation at the HTTP conduit's ``/mcp``: asked during the call (2025 protocol, on the
call's event stream) or by an ``input_required`` round trip (2026), as the token's owner, and sealed for that
token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from cognitive import new_turn_processor, react_factory
from loop import Caller, Request, Role, RunContext, tool
from provider import Function, tool_call
from session import Manager, step_factory
from session._bearer import owner_of
from session.http import HTTPConduit

ALPHA, BETA = "token-alpha", "token-beta"
paid: list[tuple[str, Caller | None]] = []


@tool(needs_approval=True)
async def pay(to: str, context: RunContext) -> str:
    """Pay someone."""
    paid.append((to, context.caller))
    return f"paid {to}"


def model(request: Request) -> Any:
    last = request.turns[-1]
    if last.role is Role.TOOL:
        return "result: " + last.tool_results[0].content
    return tool_call("pay", {"to": last.text.split()[-1]}, id="p1")


@pytest.fixture(autouse=True)
def fresh() -> None:
    paid.clear()


@pytest.fixture(scope="module")
async def url() -> AsyncIterator[str]:
    """The HTTP conduit (with its ``/mcp``) of an agent whose ``pay`` needs approval, on 127.0.0.1."""
    manager = Manager(new_turn_processor(react_factory), provider=Function(model), make_step=step_factory([pay]))
    async with manager, anyio.create_task_group() as group:
        yield await group.start(HTTPConduit(port=0, token=[ALPHA, BETA]).serve, manager)
        group.cancel_scope.cancel()


class Person:
    """An elicitation callback: approves (or denies) every call it is asked about, and counts the forms."""

    def __init__(self, approve: bool) -> None:
        self.approve = approve
        self.asked: list[str] = []

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        self.asked.append(params.message)
        content: dict[str, Any] = {key: self.approve for key in params.requested_schema["required"]}
        return types.ElicitResult(action="accept", content=content)


def client(url: str, token: str, http: httpx2.AsyncClient, **options: Any) -> Client:
    http.headers["authorization"] = f"Bearer {token}"
    return Client(streamable_http_client(f"{url}/mcp", http_client=http), **options)


def text(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


@pytest.mark.parametrize("era", ["auto", "legacy"])  # 2026-07-28's input_required, and 2025's elicitation/create
@pytest.mark.parametrize("approve", [True, False])
async def test_a_call_that_needs_approval_asks_the_mcp_client(url: str, era: str, approve: bool) -> None:
    person = Person(approve)
    with anyio.fail_after(10):
        async with httpx2.AsyncClient() as http, client(url, ALPHA, http, mode=era,
                                                        elicitation_callback=person) as mcp:
            assert mcp.protocol_version.startswith("2026" if era == "auto" else "2025")
            result = await mcp.call_tool("ask", {"message": "pay Ada"})
    assert not result.is_error and len(person.asked) == 1 and 'pay {"to": "Ada"}' in person.asked[0]
    owner = owner_of(ALPHA)
    if approve:
        assert text(result) == "result: paid Ada" and paid == [("Ada", Caller(owner, owner))]
    else:
        assert text(result) == "result: error: the user denied this call" and paid == []


async def test_another_token_cannot_answer_a_tokens_approval(url: str) -> None:
    with anyio.fail_after(10):
        async with httpx2.AsyncClient() as alpha_http, httpx2.AsyncClient() as beta_http, \
                client(url, ALPHA, alpha_http, elicitation_callback=Person(True)) as alpha, \
                client(url, BETA, beta_http, elicitation_callback=Person(True)) as beta:
            asked = await alpha.session.call_tool("ask", {"message": "pay Bob"}, allow_input_required=True)
            assert isinstance(asked, types.InputRequiredResult) and asked.request_state is not None
            answer: types.InputResponses = {"approval": types.ElicitResult(action="accept",
                                                                           content={"call_1": True})}
            with pytest.raises(MCPError, match="Invalid or expired requestState"):
                await beta.session.call_tool("ask", {"message": "pay Bob"}, input_responses=answer,
                                             request_state=asked.request_state)
            assert paid == []
            done = await alpha.session.call_tool("ask", {"message": "pay Bob"}, input_responses=answer,
                                                 request_state=asked.request_state)
    assert isinstance(done, types.CallToolResult) and text(done) == "result: paid Bob"
    assert [to for to, _ in paid] == ["Bob"]
