"""Approvals through ``MCPConduit``: an official MCP client asked with elicitation, in both protocol eras (the 2026
``input_required`` round trip, the 2025 ``elicitation/create`` request), in-process and over HTTP; and the caller
the agent's tools see."""

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
from loop import Caller, Request, Role, RunContext, State, Text, TurnExecutor, branch, tool
from provider import Function, tool_call
from session import Manager, step_factory
from session._bearer import owner_of
from session.mcp import MCPConduit
from session.mcp._approvals import CANCELLED, DECLINED, NO_ELICITATION, NOT_LIVE

TOKEN = "t0ken"
ERAS = ["auto", "legacy"]  # 2026-07-28 (the client's default) and the 2025 handshake
paid: list[tuple[str, int, Caller | None]] = []


@tool(needs_approval=True)
async def pay(to: str, amount: int, context: RunContext) -> str:
    """Pay someone."""
    paid.append((to, amount, context.caller))
    return f"paid {to} {amount}"


@tool
async def whoami(context: RunContext) -> str:
    """Who is asking."""
    caller = context.caller
    return "nobody" if caller is None else f"{caller.id} in {caller.namespace}"


def model(request: Request) -> Any:
    """``pay both``: two calls at once; ``pay twice``: one call, then another after its result; ``who``: whoami;
    after tool results, reports them."""
    first = next(t.text for t in request.turns if t.role is Role.USER).removeprefix("side ")
    last = request.turns[-1]
    results = [r.content for t in request.turns if t.role is Role.TOOL for r in t.tool_results]
    if first == "pay twice" and len(results) == 1:
        return tool_call("pay", {"to": "Cy", "amount": 2}, id="p3")
    if last.role is Role.TOOL:
        return "result: " + "; ".join(results)
    if first.startswith("who"):
        return tool_call("whoami", {}, id="w1")
    if first == "pay both":
        return [tool_call("pay", {"to": "Ada", "amount": 250}, id="p1"),
                tool_call("pay", {"to": "Bob", "amount": 5}, id="p2")]
    return tool_call("pay", {"to": "Ada", "amount": 250}, id="p1")


react = new_turn_processor(react_factory)


async def processor(step: TurnExecutor, state: State) -> State:
    """ReAct, but ``side ...`` runs its turn in a branch, whose calls wait live rather than in the conversation."""
    if not state[-1].text.startswith("side"):
        return await react(step, state)
    with branch("side"):
        after = await step.turn(state)
    return state.append(Role.ASSISTANT, Text("branch: " + "; ".join(r.content for r in after[-1].tool_results)))


def manager() -> Manager:
    return Manager(processor, provider=Function(model), make_step=step_factory([pay, whoami]))


@pytest.fixture(autouse=True)
def fresh() -> None:
    paid.clear()


@pytest.fixture(scope="module")
async def running() -> AsyncIterator[Manager]:
    async with manager() as m:
        yield m


class Person:
    """An elicitation callback answering with ``answer(params)`` (``None``: decline), keeping what it was asked."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[types.ElicitRequestFormParams] = []

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        self.asked.append(params)
        content = self.answer(params)
        if isinstance(content, str):
            return types.ElicitResult(action=content)  # type: ignore[arg-type]
        return types.ElicitResult(action="accept", content=content)


def approve_all(params: types.ElicitRequestFormParams) -> dict[str, Any]:
    return {key: True for key in params.requested_schema["required"]}


async def call(m: Manager, message: str, era: str, person: Person | None = None) -> str:
    async with Client(MCPConduit().server(m), mode=era, elicitation_callback=person) as client:
        assert client.protocol_version.startswith("2026" if era == "auto" else "2025")
        result = await client.call_tool("ask", {"message": message})
    assert not result.is_error, result
    return text(result)


def text(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


@pytest.mark.parametrize("era", ERAS)
async def test_the_client_approves_each_call_through_elicitation(running: Manager, era: str) -> None:
    person = Person(lambda params: {"call_1": True, "call_2": False, "reason": "not Bob"})
    answer = await call(running, "pay both", era, person)
    assert answer == "result: paid Ada 250; error: the user denied this call: not Bob"
    assert paid == [("Ada", 250, Caller("local", "local"))], "run as the client's caller"
    (asked,) = person.asked
    assert 'pay {"to": "Ada", "amount": 250}' in asked.message and 'pay {"to": "Bob", "amount": 5}' in asked.message
    schema = asked.requested_schema
    assert schema["required"] == ["call_1", "call_2"]
    assert schema["properties"]["call_1"] == {"type": "boolean", "title": "Run pay?", "default": False,
                                              "description": 'pay with {"to": "Ada", "amount": 250}'}
    assert schema["properties"]["reason"]["type"] == "string"
    assert running.open_sessions == 0


@pytest.mark.parametrize("era", ERAS)
async def test_the_client_denies_through_elicitation(running: Manager, era: str) -> None:
    answer = await call(running, "pay", era, Person(lambda params: {"call_1": False}))
    assert answer == "result: error: the user denied this call" and paid == []


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(("action", "reason"), [("decline", DECLINED), ("cancel", CANCELLED)])
async def test_a_declined_form_denies_every_call(running: Manager, era: str, action: str, reason: str) -> None:
    answer = await call(running, "pay both", era, Person(lambda params: action))
    assert answer == f"result: error: the user denied this call: {reason}; error: the user denied this call: {reason}"
    assert paid == []


@pytest.mark.parametrize("era", ERAS)
async def test_a_client_without_elicitation_is_not_asked_and_the_run_goes_on(running: Manager, era: str) -> None:
    answer = await call(running, "pay", era)
    assert answer == f"result: error: the user denied this call: {NO_ELICITATION}" and paid == []


@pytest.mark.parametrize("era", ERAS)
async def test_a_resumed_run_that_asks_again_asks_the_client_again(running: Manager, era: str) -> None:
    person = Person(approve_all)
    assert await call(running, "pay twice", era, person) == "result: paid Ada 250; paid Cy 2"
    assert len(person.asked) == 2 and [p[:2] for p in paid] == [("Ada", 250), ("Cy", 2)]


async def test_calls_off_the_main_line_are_asked_during_the_call_in_the_2025_era(running: Manager) -> None:
    person = Person(lambda params: {"call_1": True, "call_2": False})
    answer = await call(running, "side pay both", "legacy", person)
    assert answer == "branch: paid Ada 250; error: the user denied this call" and len(person.asked) == 1


async def test_calls_off_the_main_line_are_denied_in_the_2026_era(running: Manager) -> None:
    person = Person(approve_all)
    answer = await call(running, "side pay", "auto", person)
    assert answer == f"branch: error: the user denied this call: {NOT_LIVE}" and person.asked == []


@pytest.mark.parametrize("era", ERAS)
async def test_a_tool_sees_the_local_caller_over_stdio_or_in_process(running: Manager, era: str) -> None:
    assert await call(running, "who am I?", era) == "result: local in local"


async def test_an_answer_is_taken_once_and_a_forged_state_is_refused(running: Manager) -> None:
    async with Client(MCPConduit().server(running), elicitation_callback=Person(approve_all)) as client:
        first = await client.session.call_tool("ask", {"message": "pay"}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult) and first.request_state is not None
        (request,) = (first.input_requests or {}).values()
        assert isinstance(request, types.ElicitRequest) and paid == []
        answer: types.InputResponses = {"approval": types.ElicitResult(action="accept", content={"call_1": True})}
        done = await client.session.call_tool("ask", {"message": "pay"}, input_responses=answer,
                                              request_state=first.request_state)
        assert text(done) == "result: paid Ada 250"
        again = await client.session.call_tool("ask", {"message": "pay"}, input_responses=answer,
                                               request_state=first.request_state)
        assert again.is_error and "no longer wait for approval" in text(again) and len(paid) == 1
        with pytest.raises(MCPError, match="Invalid or expired requestState"):
            await client.session.call_tool("ask", {"message": "pay"}, input_responses=answer,
                                           request_state=first.request_state[:-4] + "AAAA")
        with pytest.raises(MCPError, match="Invalid or expired requestState"):  # bound to the call's arguments
            await client.session.call_tool("ask", {"message": "pay more"}, input_responses=answer,
                                           request_state=first.request_state)


@pytest.fixture(scope="module")
async def served(running: Manager) -> AsyncIterator[str]:
    async with anyio.create_task_group() as group:
        url = await group.start(MCPConduit(transport="http", port=0, token=TOKEN).serve, running)
        yield url
        group.cancel_scope.cancel()


@pytest.mark.parametrize("era", ERAS)
async def test_over_http_the_caller_is_the_tokens_owner_and_approval_works(served: str, era: str) -> None:
    person = Person(approve_all)
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        async with Client(streamable_http_client(served, http_client=http), mode=era,
                          elicitation_callback=person) as client:
            who = await client.call_tool("ask", {"message": "who am I?"})
            paying = await client.call_tool("ask", {"message": "pay"})
    owner = owner_of(TOKEN)
    assert text(who) == f"result: {owner} in {owner}"
    assert text(paying) == "result: paid Ada 250" and paid == [("Ada", 250, Caller(owner, owner))]
    assert len(person.asked) == 1


async def test_a_client_that_does_not_answer_in_time_denies_and_the_run_goes_on() -> None:
    class Silent(Person):
        async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
            self.asked.append(params)
            await anyio.sleep_forever()
            raise AssertionError("never answers")

    async with Manager(processor, provider=Function(model), make_step=step_factory([pay, whoami]),
                       approval_timeout=1.0) as m:
        person = Silent(None)
        with anyio.fail_after(10):
            answer = await call(m, "pay", "legacy", person)
    assert len(person.asked) == 1 and paid == []
    assert answer.startswith("result: error: the user denied this call: the MCP client gave no answer within")
