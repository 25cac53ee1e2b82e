"""The OpenAPI document says exactly what the server does: the limits it declares are the server's, every status
an operation answers with is listed, and real responses (event streams event by event) match their schemas."""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import jsonschema
import openapi_spec_validator
import pytest

from loop import Reasoning, Request, Role, Usage, tool
from provider import Function, tool_call
from session.http._openapi import MAX_EVENT_ID, NOT_BLANK, OPENAPI
from session.http._wire import EVENT_TYPES
from tests.session.http.helpers import SSE, in_process, on_socket, wait_turns
from tests.session.models import echo

DOCUMENT = json.loads(json.dumps(OPENAPI))  # as served


def schema(name: str) -> jsonschema.Draft202012Validator:
    """A validator for ``#/components/schemas/<name>``, resolving references within the document."""
    return jsonschema.Draft202012Validator({**DOCUMENT, "$ref": f"#/components/schemas/{name}"})


def responses(path: str, method: str) -> dict[str, Any]:
    found: dict[str, Any] = DOCUMENT["paths"][path][method]["responses"]
    return found


@tool
def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


def calculator(request: Request) -> Any:
    if request.turns[-1].role is Role.USER:
        return [Reasoning("adding"), tool_call("add", {"a": 2, "b": 3}), Usage(5, 1)]
    return ["The sum is 5.", Usage(9, 2)]


def test_the_document_is_valid_openapi_3_2() -> None:
    assert DOCUMENT["openapi"] == "3.2.0"
    openapi_spec_validator.OpenAPIV32SpecValidator(DOCUMENT).validate()


def test_event_streams_are_described_event_by_event() -> None:
    streams = [(path, media) for path, item in DOCUMENT["paths"].items() for operation in item.values()
               for answer in operation["responses"].values()
               for kind, media in answer.get("content", {}).items() if kind == "text/event-stream"]
    assert [path for path, _ in streams] == ["/sessions/{id}/events", "/agui", "/v1/chat/completions",
                                             "/v1/responses"]
    assert all(set(media) == {"itemSchema"} for _, media in streams)  # not a "schema": the body is no one string
    events = DOCUMENT["components"]["schemas"]["SessionEvent"]["properties"]["event"]["enum"]
    assert events == [*EVENT_TYPES, "events_lost"]


def test_every_status_an_operation_can_answer_is_listed() -> None:
    def statuses(path: str, method: str) -> set[str]:
        return set(responses(path, method))

    assert statuses("/sessions", "post") == {"201", "400", "401", "408", "413", "422", "429", "500", "503"}
    assert statuses("/sessions/{id}/messages", "post") == {"202", "400", "401", "404", "408", "409", "413", "422",
                                                           "429", "500", "503"}
    assert statuses("/sessions/{id}/interrupt", "post") == {"200", "400", "401", "404", "408", "413", "422", "429",
                                                            "500"}
    assert statuses("/sessions/{id}", "delete") == {"204", "401", "404", "500"}
    assert statuses("/sessions/{id}/turns", "get") == {"200", "400", "401", "404", "429", "500"}
    assert statuses("/sessions/{id}/events", "get") == {"200", "400", "401", "404", "429", "500"}
    assert statuses("/v1/chat/completions", "post") == {"200", "400", "401", "404", "408", "409", "413", "429",
                                                        "500", "502", "503"}
    assert statuses("/v1/responses", "post") == statuses("/v1/chat/completions", "post")


async def test_the_server_refuses_exactly_the_event_ids_the_document_does() -> None:
    for place in ("query", "header"):
        (parameter,) = [p for p in DOCUMENT["paths"]["/sessions/{id}/events"]["get"]["parameters"]
                        if p["in"] == place and p["name"] in ("after", "Last-Event-ID")]
        assert parameter["schema"] == {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 10**18 - 1},
                                                 {"const": ""}]}
        assert MAX_EVENT_ID == 10**18 - 1
    async with on_socket(Function(echo)) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        url = f"/sessions/{session_id}/events"
        with anyio.fail_after(10):
            for value, status in [(MAX_EVENT_ID, 200), (MAX_EVENT_ID + 1, 400), (0, 200), (-1, 400), ("", 200),
                                  ("x", 400)]:
                async with client.stream("GET", url, params={"after": value}) as by_query:
                    assert by_query.status_code == status, value
                async with client.stream("GET", url, headers={"last-event-id": str(value)}) as by_header:
                    assert by_header.status_code == status, value


def test_not_blank_is_exactly_pythons_whitespace() -> None:
    import re

    pattern = re.compile(NOT_BLANK)
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        assert bool(pattern.search(char)) is (not char.isspace()), hex(code)


async def test_the_server_refuses_exactly_the_text_the_document_does() -> None:
    message = schema("MessageIn")
    async with in_process(Function(echo)) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        for text in [" ", "\t\n", "\x1c\u3000", "", " x ", "\ufeff", "."]:
            valid = message.is_valid({"text": text})
            response = await client.post(f"/sessions/{session_id}/messages", json={"text": text})
            assert response.status_code == (202 if valid else 422), (text, response.text)


def test_the_model_is_required() -> None:
    request = DOCUMENT["components"]["schemas"]["ChatRequest"]
    assert request["required"] == ["model", "messages"]
    assert not schema("ChatRequest").is_valid({"messages": [{"role": "user", "content": "hi"}]})


async def test_real_responses_match_their_schemas() -> None:
    def conforms(name: str, data: Any) -> None:
        schema(name).validate(data)

    async with on_socket(Function(calculator), tools=[add]) as served:
        client = served.client()
        created = await client.post("/sessions")
        conforms("SessionCreated", created.json())
        session_id = created.json()["id"]
        queued = await client.post(f"/sessions/{session_id}/messages", json={"text": "add 2 and 3"})
        conforms("MessageQueued", queued.json())
        turns = await wait_turns(client, session_id, 4)
        conforms("Turns", (await client.get(f"/sessions/{session_id}/turns")).json())
        assert {p["type"] for t in turns for p in t["parts"]} == {"text", "reasoning", "tool_call", "tool_result",
                                                                 "usage"}
        async with client.stream("GET", f"/sessions/{session_id}/events") as stream:
            frames = await SSE(stream).until("message_finished")
        conforms("Interrupted", (await client.post(f"/sessions/{session_id}/interrupt")).json())
        conforms("Error", (await client.get("/sessions/nope/turns")).json())
        ask = {"model": "agent", "messages": [{"role": "user", "content": "add 2 and 3"}]}
        conforms("ChatCompletion", (await client.post("/v1/chat/completions", json=ask)).json())
        chunks = (await client.post("/v1/chat/completions", json={**ask, "stream": True})).text
        conforms("ModelList", (await client.get("/v1/models")).json())
        conforms("Model", (await client.get("/v1/models/agent")).json())
        conforms("OpenAIError", (await client.get("/v1/models/other")).json())
        conforms("OpenAIError", (await served.client(None).post("/v1/chat/completions", json=ask)).json())
    for frame in frames:
        item = {"id": str(frame.id), "event": frame.event, "data": json.dumps(frame.data)}
        conforms("SessionEvent", item)
        conforms("EventData", frame.data)
    assert {f.event for f in frames} >= {"message_queued", "tool_started", "tool_finished", "turn_stored",
                                         "message_finished"}
    data = [line[6:] for line in chunks.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    for item in data:
        conforms("ChunkEvent", {"data": item})


@pytest.mark.parametrize("path", ["/sessions", "/sessions/{id}/messages", "/v1/chat/completions"])
async def test_a_body_over_the_limit_is_413_as_documented(path: str) -> None:
    async with in_process(Function(echo), max_body_bytes=50) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        url = path.format(id=session_id)
        response = await client.post(url, content=b'{"text": "' + b"x" * 100 + b'"}')
    assert response.status_code == 413
    assert "413" in responses(path, "post")
    schema("OpenAIError" if path.startswith("/v1") else "Error").validate(response.json())


async def test_reads_are_never_refused_for_a_body_they_do_not_read() -> None:
    async with in_process(Function(echo), max_body_bytes=50) as served:
        response = await served.client().request("GET", "/healthz", content=b"x" * 100)
    assert response.status_code == 200  # GET /healthz lists no 413


async def test_a_message_that_reopens_a_session_past_the_limit_is_503_as_documented() -> None:
    async with in_process(Function(echo), manager_options={"max_sessions": 1}) as served:
        client = served.client()
        first = (await client.post("/sessions")).json()["id"]
        await client.post(f"/sessions/{first}/messages", json={"text": "hello"})
        await wait_turns(client, first, 2)
        await client.delete(f"/sessions/{first}")
        assert (await client.post("/sessions")).status_code == 201  # takes the one place
        refused = await client.post(f"/sessions/{first}/messages", json={"text": "again"})
    assert refused.status_code == 503 and refused.json()["error"]["type"] == "session_limit"
    assert "503" in responses("/sessions/{id}/messages", "post")

