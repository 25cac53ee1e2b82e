"""The endpoint as a drop-in model: typed answers, client tools, and the choices a client makes by its requests
(``tool_choice``), driven over the ASGI interface with httpx."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from cognitive import new_turn_processor, react_factory
from loop import Request, Role, ToolCall, tool
from provider import Function
from session import Manager, MemoryStore, step_factory
from session.openai import openai_app

LOOKUP = {"type": "function", "function": {"name": "lookup", "description": "Looks a word up.",
                                           "parameters": {"type": "object", "properties": {"q": {"type": "string"}},
                                                          "required": ["q"]}}}
CITY = {"type": "object", "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["name", "population"], "additionalProperties": False}
USER = {"role": "user", "content": "hi"}


@tool
def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


class Served:
    def __init__(self, http: httpx.AsyncClient, manager: Manager, requests: list[Request]) -> None:
        self.http = http
        self.manager = manager
        self.requests = requests

    async def post(self, headers: dict[str, str] | None = None, **fields: Any) -> httpx.Response:
        return await self.http.post("/v1/chat/completions", json={"model": "agent", **fields}, headers=headers)


@asynccontextmanager
async def serving(reply: Callable[[Request], Any], **settings: Any) -> AsyncIterator[Served]:
    requests: list[Request] = []

    def model(request: Request) -> Any:
        requests.append(request)
        return reply(request)

    manager = Manager(new_turn_processor(react_factory), provider=Function(model), store=MemoryStore(),
                      make_step=step_factory([add]))
    app = openai_app(manager, enter_manager=False, **settings)
    async with manager, httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as http:
        yield Served(http, manager, requests)


def both_kinds(request: Request) -> Any:
    """Calls the agent's add and the client's lookup in one turn; answers once lookup's result is in."""
    last = request.turns[-1]
    if last.role is Role.USER:
        return ["Let me check.", ToolCall("a1", "add", '{"a": 2, "b": 3}'), ToolCall("c1", "lookup", '{"q": "x"}')]
    results = {r.name: r.content for r in last.tool_results}
    return f"lookup says {results['lookup']}" if "lookup" in results else "?"


def message_of(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    return {**choice["message"], "finish_reason": choice["finish_reason"]}


async def test_a_client_tool_call_ends_the_run_and_is_handed_to_the_client() -> None:
    async with serving(both_kinds) as served:
        message = message_of(await served.post(messages=[USER], tools=[LOOKUP]))
        offered = [spec.name for spec in served.requests[0].tools]
    assert offered == ["add", "lookup"]
    assert message["finish_reason"] == "tool_calls"
    assert message["tool_calls"] == [{"id": "c1", "type": "function",
                                      "function": {"name": "lookup", "arguments": '{"q": "x"}'}}]
    assert message["content"] == "Let me check."
    # The agent's own call ran on the server, and shows in the trace; the client's is not in it.
    assert message["reasoning_content"] == '→ calling add({"a": 2, "b": 3})\n← add: 5\n'
    assert len(served.requests) == 1


async def test_the_next_request_carries_the_results_and_the_run_goes_on_from_them() -> None:
    async with serving(both_kinds) as served:
        first = message_of(await served.post(messages=[USER], tools=[LOOKUP]))
        history = [USER, {"role": "assistant", "content": first["content"], "tool_calls": first["tool_calls"]},
                   {"role": "tool", "tool_call_id": "c1", "content": "forty-two"}]
        second = message_of(await served.post(messages=history, tools=[LOOKUP]))
        seen = served.requests[-1].turns
    assert (second["content"], second["finish_reason"]) == ("lookup says forty-two", "stop")
    assert "tool_calls" not in second
    # Rebuilt from the messages: the client's call and its result, as the client sent them.
    assert [t.role for t in seen] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    assert seen[-1].tool_results[0].content == "forty-two"


async def test_a_kept_conversation_goes_on_with_the_agents_own_calls_in_it() -> None:
    async with serving(both_kinds) as served:
        headers = {"X-Session-Id": "chat-1"}
        first = message_of(await served.post(headers, messages=[USER], tools=[LOOKUP]))
        history = [USER, {"role": "assistant", "content": first["content"], "tool_calls": first["tool_calls"]},
                   {"role": "tool", "tool_call_id": "c1", "content": "forty-two"}]
        second = message_of(await served.post(headers, messages=history, tools=[LOOKUP]))
        seen = served.requests[-1].turns
        stored = await served.manager.store.load("chat-1")
    assert second["content"] == "lookup says forty-two"
    assert [t.role for t in seen] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.TOOL]
    assert [r.name for t in seen[2:] for r in t.tool_results] == ["add", "lookup"]
    assert stored is not None and [t.role for t in stored] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.TOOL,
                                                               Role.ASSISTANT]


async def test_results_that_do_not_answer_a_kept_conversations_calls_are_refused() -> None:
    async with serving(both_kinds) as served:
        headers = {"X-Session-Id": "chat-2"}
        first = message_of(await served.post(headers, messages=[USER], tools=[LOOKUP]))
        wrong = [USER, {"role": "assistant", "tool_calls": [{**first["tool_calls"][0], "id": "c9"}]},
                 {"role": "tool", "tool_call_id": "c9", "content": "1"}]
        response = await served.post(headers, messages=wrong, tools=[LOOKUP])
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "tool_call_mismatch" and "c9" in error["message"] and "c1" in error["message"]


async def test_a_client_tool_named_like_an_agent_tool_is_refused() -> None:
    clash = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
    async with serving(both_kinds) as served:
        response = await served.post(messages=[USER], tools=[clash])
        assert served.requests == []
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "tool_name_conflict"
    assert "'add'" in response.json()["error"]["message"]


async def test_a_streamed_answer_hands_the_calls_over_as_a_tool_calls_delta() -> None:
    async with serving(both_kinds) as served:
        response = await served.post(messages=[USER], tools=[LOOKUP], stream=True)
    chunks = [json.loads(line[6:]) for line in response.text.splitlines()
              if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    calls = [d["tool_calls"] for d in deltas if "tool_calls" in d]
    assert calls == [[{"index": 0, "id": "c1", "type": "function",
                       "function": {"name": "lookup", "arguments": '{"q": "x"}'}}]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert "".join(d.get("content", "") for d in deltas) == "Let me check."
    assert response.text.endswith("data: [DONE]\n\n")


async def test_tool_choice_is_laid_over_the_runs_turns() -> None:
    def reply(request: Request) -> Any:
        if request.turns[-1].role is Role.USER:
            return ToolCall("c1", "lookup", '{"q": "x"}')
        return "done"

    async with serving(reply) as served:
        message = message_of(await served.post(messages=[USER], tools=[LOOKUP], tool_choice="required"))
        named = message_of(await served.post(messages=[USER], tools=[LOOKUP],
                                             tool_choice={"type": "function", "function": {"name": "lookup"}}))
    assert message["finish_reason"] == named["finish_reason"] == "tool_calls"
    assert served.requests[0].options.tool_choice == "required"
    assert served.requests[1].options.tool_choice is not None
    assert getattr(served.requests[1].options.tool_choice, "name", None) == "lookup"


def prose_then_json(request: Request) -> str:
    if request.options.output_schema is None:
        return "Paris has about 2.1 million people."
    return 'Sure: {"name": "Paris", "population": 2100000}'


JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "City", "schema": CITY, "strict": True}}


async def test_a_json_schema_answer_is_the_validated_json_in_one_model_call() -> None:
    async with serving(prose_then_json) as served:
        message = message_of(await served.post(messages=[USER], response_format=JSON_SCHEMA))
        schemas = [r.options.output_schema for r in served.requests]
    assert json.loads(message["content"]) == {"name": "Paris", "population": 2100000}
    assert message["content"] == '{"name":"Paris","population":2100000}'
    assert message["finish_reason"] == "stop"
    # The agent's own turn was asked for the schema (the provider takes one beside tools): one model call.
    assert len(schemas) == 1 and schemas[0] is not None and schemas[0]["properties"] == CITY["properties"]


async def test_a_prose_answer_to_a_json_schema_request_gets_one_formatting_turn() -> None:
    calls: list[Request] = []

    def prose_at_first(request: Request) -> str:
        calls.append(request)
        return "Paris has about 2.1 million people." if len(calls) == 1 else prose_then_json(request)

    async with serving(prose_at_first) as served:
        message = message_of(await served.post(messages=[USER], response_format=JSON_SCHEMA))
    assert json.loads(message["content"]) == {"name": "Paris", "population": 2100000}
    assert len(calls) == 2 and calls[1].options.output_schema is not None  # the formatting turn


async def test_an_answer_that_already_validates_needs_no_formatting_turn() -> None:
    async with serving(lambda request: '{"name": "Oslo", "population": 700000}') as served:
        message = message_of(await served.post(messages=[USER], response_format={"type": "json_object"}))
    assert json.loads(message["content"]) == {"name": "Oslo", "population": 700000}
    assert len(served.requests) == 1


async def test_a_streamed_typed_answer_sends_only_the_json_as_content() -> None:
    async with serving(prose_then_json) as served:
        response = await served.post(messages=[USER], response_format=JSON_SCHEMA, stream=True)
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert content == '{"name":"Paris","population":2100000}'
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_an_answer_that_never_validates_fails_the_request() -> None:
    async with serving(lambda request: "no JSON here") as served:
        response = await served.post(messages=[USER], response_format=JSON_SCHEMA)
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == "verification_failed" and "City" in error["message"]
    assert response.headers["x-should-retry"] == "false"


async def test_tool_results_then_a_typed_answer() -> None:
    def reply(request: Request) -> str | ToolCall:
        if request.turns[-1].role is Role.USER:
            return ToolCall("c1", "lookup", '{"q": "Paris"}')
        if request.options.output_schema is not None:
            return '{"name": "Paris", "population": 2100000}'
        return "Paris, 2.1 million"

    async with serving(reply) as served:
        first = message_of(await served.post(messages=[USER], tools=[LOOKUP], response_format=JSON_SCHEMA))
        history = [USER, {"role": "assistant", "content": None, "tool_calls": first["tool_calls"]},
                   {"role": "tool", "tool_call_id": "c1", "content": "2.1 million"}]
        second = message_of(await served.post(messages=history, tools=[LOOKUP], response_format=JSON_SCHEMA))
    # Calls left for the client come before the typed answer: no formatting turn while they are open.
    assert first["finish_reason"] == "tool_calls" and first["content"] is None
    assert json.loads(second["content"]) == {"name": "Paris", "population": 2100000}


@pytest.mark.parametrize("schema", [{"type": "objekt"}, {"$ref": "file:///etc/passwd"}])
async def test_a_schema_the_server_cannot_honour_is_refused(schema: dict[str, Any]) -> None:
    async with serving(lambda request: "{}") as served:
        response = await served.post(messages=[USER], response_format={
            "type": "json_schema", "json_schema": {"name": "X", "schema": schema}})
        assert served.requests == []
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "response_format.json_schema.schema"


async def test_the_model_sees_the_client_tools_description_and_parameters() -> None:
    async with serving(lambda request: "ok") as served:
        await served.post(messages=[USER], tools=[LOOKUP])
    spec = served.requests[0].tools[1]
    assert (spec.name, spec.description) == ("lookup", "Looks a word up.")
    assert dict(spec.parameters) == LOOKUP["function"]["parameters"]


async def test_results_sent_twice_at_once_to_a_kept_conversation_answer_the_second_with_400() -> None:
    async with serving(both_kinds) as served:
        headers = {"X-Session-Id": "chat-3"}
        first = message_of(await served.post(headers, messages=[USER], tools=[LOOKUP]))
        history = [USER, {"role": "assistant", "content": first["content"], "tool_calls": first["tool_calls"]},
                   {"role": "tool", "tool_call_id": "c1", "content": "forty-two"}]
        answers: list[httpx.Response] = []

        async def send() -> None:
            answers.append(await served.post(headers, messages=history, tools=[LOOKUP]))

        async with anyio.create_task_group() as group:  # both pass the check made when the request arrives
            group.start_soon(send)
            group.start_soon(send)
    statuses = sorted((r.status_code, r.json().get("error", {}).get("code")) for r in answers)
    assert statuses == [(200, None), (400, "tool_call_mismatch")]
