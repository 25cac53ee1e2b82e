"""The OpenAPI 3.1.1 rendering served at ``/openapi-3.1.json``: valid 3.1, the same document as the 3.2 one but for
how event streams are described, open like ``/openapi.json`` and never rate limited."""

from __future__ import annotations

import json
from typing import Any

import openapi_spec_validator
import pytest
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

from provider import Function
from session.http import RateLimit
from session.http._openapi import OPENAPI, OPENAPI_31
from session.http._openapi_parts import openapi_31
from session.http._routes import OPEN_PATHS
from tests.session.http.helpers import in_process
from tests.session.models import echo

DOCUMENT = json.loads(json.dumps(OPENAPI))  # as served
RENDERED = json.loads(json.dumps(OPENAPI_31))


def event_streams(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every ``text/event-stream`` media type of ``document``, by its path."""
    return {path: media for path, item in document["paths"].items() for operation in item.values()
            for answer in operation["responses"].values()
            for kind, media in answer.get("content", {}).items() if kind == "text/event-stream"}


def test_the_rendering_is_valid_openapi_3_1() -> None:
    assert RENDERED["openapi"] == "3.1.1"
    openapi_spec_validator.OpenAPIV31SpecValidator(RENDERED).validate()


def test_the_3_2_document_is_what_3_1_tools_refuse() -> None:
    as_31 = {**DOCUMENT, "openapi": "3.1.1"}  # only the version changed: itemSchema is still there
    with pytest.raises(OpenAPIValidationError):
        openapi_spec_validator.OpenAPIV31SpecValidator(as_31).validate()


def test_event_streams_become_one_string_naming_their_item_schema() -> None:
    before, after = event_streams(DOCUMENT), event_streams(RENDERED)
    assert list(after) == list(before) == ["/sessions/{id}/events", "/agui", "/v1/chat/completions",
                                             "/v1/responses"]
    for path, media in after.items():
        assert set(media) == {"schema", "x-itemSchema"}, path
        assert media["x-itemSchema"] == before[path]["itemSchema"]
        assert media["schema"]["type"] == "string"
    assert "ChunkEvent (#/components/schemas/ChunkEvent)" in after["/v1/chat/completions"]["schema"]["description"]
    assert "SessionEvent" in after["/sessions/{id}/events"]["schema"]["description"]


def test_nothing_else_differs() -> None:
    def without_streams(document: dict[str, Any]) -> dict[str, Any]:
        copy = json.loads(json.dumps(document))
        copy.pop("openapi")
        for media in event_streams(copy).values():
            media.clear()
        return copy

    assert without_streams(RENDERED) == without_streams(DOCUMENT)
    assert openapi_31(OPENAPI) == OPENAPI_31 and OPENAPI["openapi"] == "3.2.0"  # the 3.2 document is left as it is


def test_both_documents_describe_both_paths() -> None:
    for document in (DOCUMENT, RENDERED):
        for path in ("/openapi.json", "/openapi-3.1.json"):
            operation = document["paths"][path]["get"]
            assert operation["security"] == [] and "200" in operation["responses"], path
    assert "3.1.1" in DOCUMENT["paths"]["/openapi-3.1.json"]["get"]["summary"]


async def test_the_rendering_is_served_without_a_token_and_never_rate_limited() -> None:
    assert "/openapi-3.1.json" in OPEN_PATHS
    limit = RateLimit(reads_per_second=0.01, read_burst=2)
    async with in_process(Function(echo), rate_limit=limit) as served:
        anonymous = served.client(None)
        answers = [await anonymous.get("/openapi-3.1.json") for _ in range(5)]
        documents = [await anonymous.get("/openapi.json") for _ in range(5)]
        reads = [(await served.client().get("/sessions")).status_code for _ in range(3)]
    assert [a.status_code for a in answers] == [200] * 5 and answers[0].json() == RENDERED
    assert [d.status_code for d in documents] == [200] * 5 and documents[0].json() == DOCUMENT
    assert reads == [200, 200, 429]  # the limit is on: the documents are exempt from it
