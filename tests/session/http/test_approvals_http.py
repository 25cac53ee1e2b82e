"""Approvals over HTTP: the request on the event stream and the approvals route, a real client answering it, the
OpenAI-compatible API's policy, and the caller and dependencies a tool sees for two tokens."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from loop import Request, Role, RunContext, branch, tool
from provider import Function, tool_call
from session._bearer import owner_of
from tests.session.http.helpers import OTHER, SSE, TOKEN, on_socket

paid: list[tuple[str, int, str]] = []


@tool(needs_approval=True)
async def pay(to: str, amount: int, context: RunContext[dict[str, str]]) -> str:
    """Pay someone."""
    who = "nobody" if context.caller is None else context.caller.id
    paid.append((to, amount, who))
    return f"paid {to} {amount}"


@tool
async def whoami(context: RunContext[dict[str, str]]) -> str:
    """Who is asking, and the database the app gave the run."""
    caller = "nobody" if context.caller is None else context.caller.id
    return f"{caller} on {(context.deps or {}).get('db')}"


def model(request: Request) -> Any:
    last = request.turns[-1]
    if last.role is Role.TOOL:
        return f"result: {last.tool_results[0].content}"
    if "who" in last.text:
        return tool_call("whoami", {}, id="w1")
    return tool_call("pay", {"to": "Ada", "amount": 250}, id="p1")


@pytest.fixture(autouse=True)
def fresh() -> None:
    paid.clear()


def served(**options: Any) -> Any:
    return on_socket(Function(model), tools=[pay, whoami], manager_options={"deps": {"db": "orders"}}, **options)


async def open_session(client: httpx.AsyncClient) -> str:
    response = await client.post("/sessions")
    assert response.status_code == 201
    return str(response.json()["id"])


async def frames_until(stream: SSE, event: str) -> list[Any]:
    seen = []
    with anyio.fail_after(10):
        while True:
            frame = await stream.frame()
            seen.append(frame)
            if frame.event == event:
                return seen


async def asked_to_pay(client: httpx.AsyncClient) -> str:
    """A new session whose message asked to pay, once the call waits for approval; its id."""
    sid = await open_session(client)
    await client.post(f"/sessions/{sid}/messages", json={"text": "pay Ada"})
    with anyio.fail_after(10):
        while not (await client.get(f"/sessions/{sid}/approvals")).json()["approvals"]:
            await anyio.sleep(0.02)
    return sid


async def answer_of(client: httpx.AsyncClient, sid: str) -> str | None:
    turns = (await client.get(f"/sessions/{sid}/turns")).json()["turns"]
    last = turns[-1]
    return last["parts"][0]["text"] if last["role"] == "assistant" and last["parts"] else None


async def test_a_client_answers_an_approval_request_on_the_route() -> None:
    async with served() as server:
        client = server.client()
        sid = await open_session(client)
        async with client.stream("GET", f"/sessions/{sid}/events") as response:
            stream = SSE(response)
            assert (await client.post(f"/sessions/{sid}/messages", json={"text": "pay Ada"})).status_code == 202
            seen = await frames_until(stream, "approval_requested")
            request = seen[-1].data
            assert [c["name"] for c in request["calls"]] == ["pay"] and request["live"] is False
            assert json.loads(request["calls"][0]["arguments"]) == {"to": "Ada", "amount": 250}
            listed = (await client.get(f"/sessions/{sid}/approvals")).json()["approvals"]
            assert request.pop("type") == "approval_requested" and request["message_id"]
            assert listed == [{**request, "message_id": None}], "the route lists what the conversation keeps"
            answered = await client.post(f"/sessions/{sid}/approvals",
                                         json={"decisions": [{"call_id": "p1", "approved": True}]})
            assert answered.status_code == 202 and answered.json()["message_id"]
            after = await frames_until(stream, "message_finished")  # the message that asked
            assert after[-1].data["status"] == "pending"
            after = await frames_until(stream, "message_finished")  # the one the decisions resumed
            assert after[-1].data["message_id"] == answered.json()["message_id"]
        decided = [f.data for f in after if f.event == "approval_answered"]
        assert decided == [{"type": "approval_answered", "call_id": "p1", "name": "pay", "approved": True,
                            "reason": "", "by": owner_of(TOKEN)}]
        assert await answer_of(client, sid) == "result: paid Ada 250"
        assert paid == [("Ada", 250, owner_of(TOKEN))], "the call ran for the token that asked"
        assert (await client.get(f"/sessions/{sid}/approvals")).json() == {"approvals": []}


async def test_a_denial_is_read_by_the_model() -> None:
    async with served() as server:
        client = server.client()
        sid = await asked_to_pay(client)
        answered = await client.post(f"/sessions/{sid}/approvals", json={
            "decisions": [{"call_id": "p1", "approved": False, "reason": "not today"}]})
        assert answered.status_code == 202
        with anyio.fail_after(10):
            while (answer := await answer_of(client, sid)) is None or not answer.startswith("result"):
                await anyio.sleep(0.02)
    assert answer == "result: error: the user denied this call: not today" and paid == []


async def test_bad_answers_are_refused_with_the_reason() -> None:
    async with served() as server:
        client = server.client()
        sid = await asked_to_pay(client)
        route = f"/sessions/{sid}/approvals"
        unknown = await client.post(route, json={"decisions": [{"call_id": "zz", "approved": True}]})
        assert unknown.status_code == 409 and "the calls waiting are: p1" in unknown.json()["error"]["message"]
        for body, says in (({}, "'decisions' must be a list"),
                           ({"decisions": [{"call_id": "p1", "approved": "yes"}]}, "approved must be true or false"),
                           ({"decisions": [{"call_id": "", "approved": True}]}, "call_id must be a non-empty"),
                           ({"decisions": [{"call_id": "p1", "approved": True, "reason": 3}]}, "reason must be")):
            refused = await client.post(route, json=body)
            assert refused.status_code == 422 and says in refused.json()["error"]["message"], refused.text
        other = server.client(OTHER)
        assert (await other.get(route)).status_code == 404, "another token's session does not exist for it"
        assert paid == []


async def test_two_tokens_are_two_callers_with_the_apps_dependencies() -> None:
    async with served() as server:
        answers = []
        for token in (TOKEN, OTHER):
            client = server.client(token)
            sid = await open_session(client)
            await client.post(f"/sessions/{sid}/messages", json={"text": "who am I?"})
            with anyio.fail_after(10):
                while (answer := await answer_of(client, sid)) is None:
                    await anyio.sleep(0.02)
            answers.append(answer)
    assert answers == [f"result: {owner_of(TOKEN)} on orders", f"result: {owner_of(OTHER)} on orders"]


@pytest.mark.parametrize("policy", ["deny", "allow"])
async def test_the_openai_api_decides_approvals_by_the_servers_policy(policy: str) -> None:
    async with served(openai_approvals=policy) as server:
        response = await server.client().post("/v1/chat/completions", json={
            "model": "agent", "messages": [{"role": "user", "content": "pay Ada"}]})
    assert response.status_code == 200, response.text
    content = response.json()["choices"][0]["message"]["content"]
    if policy == "allow":
        assert content == "result: paid Ada 250" and paid == [("Ada", 250, owner_of(TOKEN))]
    else:
        assert content.startswith("result: error: the user denied this call: the OpenAI-compatible endpoint cannot")
        assert paid == []


async def test_a_live_request_from_a_branch_reaches_the_stream_and_is_answered_at_once() -> None:
    async def side_run(step: Any, state: Any) -> Any:
        with branch("side"):
            await step.turn(state)  # a branch's calls cannot be kept in the conversation: they wait live
        return state

    async with on_socket(Function(model), tools=[pay], processor=side_run) as server:
        client = server.client()
        sid = await open_session(client)
        async with client.stream("GET", f"/sessions/{sid}/events") as response:
            stream = SSE(response)
            await client.post(f"/sessions/{sid}/messages", json={"text": "pay Ada"})
            request = (await frames_until(stream, "approval_requested"))[-1].data
            assert request["live"] is True
            listed = (await client.get(f"/sessions/{sid}/approvals")).json()["approvals"]
            assert [r["live"] for r in listed] == [True]
            answered = await client.post(f"/sessions/{sid}/approvals",
                                         json={"decisions": [{"call_id": "p1", "approved": True}]})
            assert answered.status_code == 202 and answered.json() == {"message_id": None}
            await frames_until(stream, "message_finished")
    assert paid == [("Ada", 250, owner_of(TOKEN))]
