"""The pieces the OpenAPI document of the HTTP conduit is built from: the limits it states, and small builders
of its response and body objects."""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_EVENT_ID", "MAX_PAGE_SIZE", "NOT_BLANK", "PAGE_SIZE", "error", "json_body", "openai_error", "ref",
           "request_body", "stream"]

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
