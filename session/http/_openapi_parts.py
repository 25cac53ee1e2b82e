"""The pieces the OpenAPI document of the HTTP conduit is built from: the limits it states, and small builders
of its response and body objects."""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["MAX_EVENT_ID", "MAX_PAGE_SIZE", "NOT_BLANK", "PAGE_SIZE", "error", "json_body", "openapi_31",
           "openai_error", "ref", "request_body", "stream"]

MAX_EVENT_ID = 10**18 - 1
"""The largest event id a client may resume after (ids have at most 18 digits)."""

PAGE_SIZE = 100
"""How many turns a page of history holds when the client does not say."""
MAX_PAGE_SIZE = 1000
"""The most turns a page of history holds."""

NOT_BLANK = "[^\t-\r\x1c- \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
"""A pattern a string matches when it holds a character that is not whitespace (``str.isspace``): what makes a
message's text non-empty once stripped."""


def ref(schema: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{schema}"}


def json_body(description: str, schema: str | dict[str, Any]) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": ref(schema) if isinstance(schema, str) else schema}}}


def error(description: str) -> dict[str, Any]:
    return json_body(description, "Error")


def request_body(schema: str, *, required: bool) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": ref(schema)}}}


def stream(description: str, event: str) -> dict[str, Any]:
    return {"description": description, "content": {"text/event-stream": {"itemSchema": ref(event)}}}


def openai_error(description: str) -> dict[str, Any]:
    return json_body(description, "OpenAIError")


def openapi_31(document: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI 3.1.1 rendering of ``document`` (a 3.2 one), for tools that know 3.1 only and refuse 3.2.

    The two differ here only in how an event stream is described: 3.2 describes its events one by one
    (``itemSchema``), which 3.1 has no word for. In the rendering, such a media type's ``schema`` is the stream as
    one string, with a description naming the schema each event follows, and that schema is kept as the extension
    ``x-itemSchema`` (tools ignore extensions they do not know). ``document`` itself is left as it is."""
    rendered: dict[str, Any] = copy.deepcopy(document)
    rendered["openapi"] = "3.1.1"
    for item in rendered.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict):
                continue
            for answer in operation.get("responses", {}).values():
                for media in answer.get("content", {}).values():
                    if "itemSchema" in media:
                        events = media.pop("itemSchema")
                        media["schema"] = {"type": "string", "description": (
                            f"A stream of server-sent events; each event follows {_named(events)} (given as "
                            "x-itemSchema, and as itemSchema in the OpenAPI 3.2 document at /openapi.json).")}
                        media["x-itemSchema"] = events
    return rendered


def _named(schema: dict[str, Any]) -> str:
    reference = schema.get("$ref")
    if isinstance(reference, str):
        return f"the schema {reference.rsplit('/', 1)[-1]} ({reference})"
    return "the schema in x-itemSchema"
