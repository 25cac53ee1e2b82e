"""``POST /v1/responses`` served by the HTTP conduit on a real 127.0.0.1 socket, on asyncio (uvicorn) and trio
(Hypercorn): the stream's events, outcomes as statuses (degraded and guarded runs are ``incomplete``, a failed run
``response.failed``), a closed stream stopping the run, and the same token rules as every route."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx

from cognitive import ReAct, SingleShot, WithGuardrails, new_turn_processor
from loop import CANCELLED, Request, Role, TurnExecutor, tool
from loop.errors import ServerError
from provider import Function, tool_call
from tests.session.http.helpers import OTHER, key, on_socket
from verifier import NoSecrets

@tool
async def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


def waiting(started: anyio.Event) -> Any:
    """A tool that sets ``started``, then waits until it is cancelled."""
    @tool
    async def wait() -> str:
        """Waits until cancelled."""
        started.set()
        await anyio.sleep_forever()
        return "never"

    return wait


def adder(request: Request) -> Any:
    if request.turns[-1].role is Role.TOOL:
        return f"The sum is {request.turns[-1].tool_results[0].content}."
    return ["I will add them.", tool_call("add", {"a": 2, "b": 3})]


async def events(client: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of a streamed response, checked to be named after their type."""
    found = []
    async with client.stream("POST", "/v1/responses", json={"model": "agent", "stream": True, **body}) as response:
        assert response.status_code == 200, await response.aread()
        kind = None
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                event = json.loads(line[6:])
                assert event["type"] == kind
                found.append(event)
    return found


async def test_a_streamed_response_is_a_well_formed_sequence_of_items() -> None:
    async with on_socket(Function(adder), tools=[add]) as served:
        got = await events(served.client(), {"input": "2 + 3?"})
    assert [e["sequence_number"] for e in got] == list(range(len(got)))
    kinds = [e["type"] for e in got]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    opened = [e["output_index"] for e in got if e["type"] == "response.output_item.added"]
    closed = [e["output_index"] for e in got if e["type"] == "response.output_item.done"]
    assert opened == closed == list(range(len(opened)))
    final = got[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    assert final["output"][1]["content"][0]["text"] == "The sum is 5."
    summary = "".join(e["delta"] for e in got if e["type"] == "response.reasoning_summary_text.delta")
    assert summary == final["output"][0]["summary"][0]["text"]
    assert "I will add them." in summary and "← add: 5" in summary


async def test_a_degraded_run_is_incomplete_and_says_why() -> None:
    def loops(request: Request) -> Any:
        return tool_call("add", {"a": 1, "b": 1})

    processor = new_turn_processor(lambda step: ReAct(step, max_turns=2))
    async with on_socket(Function(loops), tools=[add], processor=processor) as served:
        answer = await served.client().post("/v1/responses", json={"model": "agent", "input": "loop"})
        streamed = await events(served.client(), {"input": "loop"})
    body = answer.json()
    assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert "degraded" in body["output"][0]["summary"][0]["text"]
    assert streamed[-1]["type"] == "response.incomplete"
    assert streamed[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


async def test_a_guardrail_trip_is_a_refusal_and_content_filter() -> None:
    def guarded(step: TurnExecutor) -> WithGuardrails:
        return WithGuardrails(SingleShot(step), step, input=[NoSecrets()])

    async with on_socket(Function(lambda request: "fine"), processor=new_turn_processor(guarded)) as served:
        secret = "my key is sk-proj-" + "a1B2" * 10
        answer = await served.client().post("/v1/responses", json={"model": "agent", "input": secret})
        streamed = await events(served.client(), {"input": secret})
    body = answer.json()
    assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "content_filter"}
    [message] = [item for item in body["output"] if item["type"] == "message"]
    assert message["content"][0]["type"] == "refusal" and "no-secrets" in message["content"][0]["refusal"]
    assert streamed[-1]["type"] == "response.incomplete"
    assert any(e["type"] == "response.refusal.done" for e in streamed)


async def test_a_failed_run_is_502_or_an_error_event_then_response_failed() -> None:
    def broken(request: Request) -> Any:
        raise ServerError("the model server fell over")

    async with on_socket(Function(broken), processor=new_turn_processor(SingleShot)) as served:
        answer = await served.client().post("/v1/responses", json={"model": "agent", "input": "hi"})
        streamed = await events(served.client(), {"input": "hi"})
    assert answer.status_code == 502 and answer.json()["error"]["code"] == "provider_error"
    assert [e["type"] for e in streamed[-2:]] == ["error", "response.failed"]
    assert streamed[-1]["response"]["error"]["code"] == "provider_error"


async def test_closing_the_stream_stops_the_run_and_its_open_call_is_cancelled() -> None:
    started = anyio.Event()
    async with on_socket(Function(lambda request: tool_call("wait", {})), tools=[waiting(started)]) as served:
        client = served.client()
        async with client.stream("POST", "/v1/responses",
                                 json={"model": "agent", "input": "wait", "stream": True}) as response:
            first = json.loads([line async for line in _lines(response, 2)][-1][6:])
            with anyio.fail_after(10):
                await started.wait()
        response_id = first["response"]["id"]
        conversation = f"resp_{response_id.split('_')[1]}"
        with anyio.fail_after(10):
            while True:
                stored = await served.manager.history(key(conversation))
                if stored is not None and stored.turns[-1].role is Role.TOOL:
                    break
                await anyio.sleep(0.05)
    [result] = stored.turns[-1].tool_results
    assert result.is_error and CANCELLED in result.content


async def test_previous_responses_are_per_token() -> None:
    async with on_socket(Function(lambda request: "ok")) as served:
        mine = (await served.client().post("/v1/responses", json={"model": "agent", "input": "hi"})).json()
        theirs = await served.client(OTHER).post("/v1/responses", json={
            "model": "agent", "input": "again", "previous_response_id": mine["id"]})
        again = await served.client().post("/v1/responses", json={
            "model": "agent", "input": "again", "previous_response_id": mine["id"]})
        nobody = await served.client(None).post("/v1/responses", json={"model": "agent", "input": "hi"})
    assert theirs.status_code == 404 and theirs.json()["error"]["code"] == "previous_response_not_found"
    assert again.status_code == 200 and again.json()["previous_response_id"] == mine["id"]
    assert nobody.status_code == 401


async def _lines(response: httpx.Response, count: int) -> AsyncIterator[str]:
    """The stream's first ``count`` data lines."""
    seen = 0
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            yield line
            seen += 1
            if seen == count:
                return
