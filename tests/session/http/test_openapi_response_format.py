"""The OpenAPI document's ``response_format`` says what the server takes: each value below is valid against the
document's ChatRequest schema exactly when the server accepts it (``{}`` was allowed by the document and refused
by the server). A valid value can still be refused for what a schema cannot say (a JSON Schema that is itself
invalid, a pattern RE2 cannot compile), never the reverse: that is what the Schemathesis fuzzing checks."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from loop import Request
from provider import Function
from session.http._openapi import OPENAPI
from tests.session.http.helpers import in_process

DOCUMENT = json.loads(json.dumps(OPENAPI))  # as served
CHAT_REQUEST = jsonschema.Draft202012Validator({**DOCUMENT, "$ref": "#/components/schemas/ChatRequest"})

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}
CASES = [
    # (response_format, whether the document and the server take it)
    (None, True),
    ({}, False),
    ({"type": "text"}, True),
    ({"type": "text", "other": 1}, True),
    ({"type": "json_object"}, True),
    ({"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}, True),
    ({"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True}}, True),
    ({"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA, "strict": None}}, True),
    ({"type": "json_schema", "json_schema": {"name": "answer"}}, True),
    ({"type": "json_schema", "json_schema": {"name": "a-b_9", "description": "any", "schema": SCHEMA}}, True),
    ({"type": "json_schema"}, False),
    ({"type": "json_schema", "json_schema": None}, False),
    ({"type": "json_schema", "json_schema": {}}, False),
    ({"type": "json_schema", "json_schema": {"schema": SCHEMA}}, False),
    ({"type": "json_schema", "json_schema": {"name": "two words"}}, False),
    ({"type": "json_schema", "json_schema": {"name": "x" * 65}}, False),
    ({"type": "json_schema", "json_schema": {"name": ""}}, False),
    ({"type": "json_schema", "json_schema": {"name": 5}}, False),
    ({"type": "json_schema", "json_schema": {"name": "answer", "strict": "yes"}}, False),
    ({"type": "json_schema", "json_schema": {"name": "answer", "schema": []}}, False),
    ({"type": "json_schema", "json_schema": {"name": "answer", "schema": None}}, False),
    ({"type": "image"}, False),
    ({"type": None}, False),
    ({"type": 5}, False),
    ("json_object", False),
    ([], False),
]


def model(request: Request) -> str:
    return '{"a": 1}'


@pytest.mark.parametrize(("response_format", "taken"), CASES, ids=[json.dumps(c[0]) for c in CASES])
async def test_the_document_takes_a_response_format_when_the_server_does(response_format: Any, taken: bool) -> None:
    body = {"model": "agent", "messages": [{"role": "user", "content": "hi"}], "response_format": response_format}
    assert CHAT_REQUEST.is_valid(body) is taken, list(CHAT_REQUEST.iter_errors(body))
    async with in_process(Function(model)) as served:
        response = await served.client().post("/v1/chat/completions", json=body)
    if taken:
        assert response.status_code == 200, response.text
    else:
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"].startswith("response_format")
