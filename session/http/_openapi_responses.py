"""The Responses API's part of the HTTP conduit's OpenAPI document: ``POST /v1/responses`` and its schemas."""

from __future__ import annotations

from typing import Any

from session._serving import MAX_JSON_DEPTH
from session.http._openapi_parts import NOT_BLANK, openai_error, ref

__all__ = ["RESPONSES_PATHS", "RESPONSES_SCHEMAS"]

RESPONSES_PATHS: dict[str, Any] = {
    "/v1/responses": {"post": {
        "operationId": "createResponse",
        "summary": "OpenAI's Responses API: the agent answers the last user message (or the client's function "
                   "call outputs).",
        "description": (
            "input is a string, or message, function_call and function_call_output items (reasoning items are "
            "read and left out). The response's output holds a reasoning item whose summary_text is what the "
            "agent did (its tool calls and results, verification reports, a degradation), a message item with the "
            "answer, and function_call items for calls left to the client. Kept responses (store, the default) can "
            "be continued with previous_response_id; an earlier response forks a new conversation. text.format "
            "asks for a typed answer; function tools run on the client. With stream=true the answer arrives as "
            "semantic server-sent events (response.created ... response.completed), each with a sequence_number. "
            "status is incomplete when the run was degraded or a guardrail stopped it. An X-Request-Id makes "
            "retries return the first run's answer. Errors use OpenAI's error format."),
        "parameters": [{"name": "X-Request-Id", "in": "header", "required": False,
                        "description": "An idempotency key: a retry with the same key and body gets the first "
                                       "run's answer instead of running the agent again.",
                        "schema": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": NOT_BLANK}}],
        "requestBody": {"required": True, "content": {"application/json": {"schema": ref("ResponsesRequest")}}},
        "responses": {
            "200": {"description": "A response object, or a stream of response events when stream=true.",
                    "content": {"application/json": {"schema": ref("Response")},
                                "text/event-stream": {"itemSchema": ref("ResponseEvent")}}},
            "400": openai_error("The request is not a valid Responses request, or its body is not a JSON object in "
                                f"UTF-8 nested at most {MAX_JSON_DEPTH} deep without lone UTF-16 surrogates."),
            "401": openai_error("Missing or wrong bearer token (the client's api_key)."),
            "404": openai_error("The server runs no model of that name, or the previous_response_id names no "
                                "response kept for this token."),
            "408": openai_error("The request body did not arrive in time; the connection closes."),
            "409": openai_error("The run was interrupted before it finished."),
            "413": openai_error("The request body is larger than the server allows, or the conversation holds more "
                                "message text than the server keeps in one (conversation_too_large)."),
            "429": openai_error("Too many requests for this token, or the token holds as many open sessions as one "
                                "token may."),
            "500": openai_error("The agent failed, or a session could not be opened."),
            "502": openai_error("The model provider failed."),
            "503": openai_error("The server holds as many open sessions as it allows, or is shutting down."),
        },
    }},
}

_ITEM = {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}}}

RESPONSES_SCHEMAS: dict[str, Any] = {
    "ResponsesRequest": {"type": "object", "required": ["model", "input"], "properties": {
        "model": {"type": "string", "description": "The model /v1/models lists.", "examples": ["agent"]},
        "input": {"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": {"type": "object"}}],
                  "examples": ["Hello"]},
        "instructions": {"type": ["string", "null"],
                         "description": "A system turn opening a new conversation (kept by its continuations)."},
        "previous_response_id": {"type": ["string", "null"], "minLength": 1},
        "store": {"type": ["boolean", "null"], "description": "Keep the conversation (default true)."},
        "stream": {"type": ["boolean", "null"]},
        "tools": {"type": ["array", "null"], "items": {"type": "object"},
                  "description": "Function tools the client runs itself, offered beside the agent's own."},
        "tool_choice": {"description": "'auto', 'none', 'required' or {type: function, name}, for every turn.",
                        "anyOf": [{"enum": ["auto", "none", "required", None]}, {"type": "object"}]},
        "text": {"type": ["object", "null"], "properties": {"format": {"type": "object", "required": ["type"],
                 "properties": {"type": {"enum": ["text", "json_object", "json_schema"]},
                                "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                                "schema": {"type": "object"}, "strict": {"type": ["boolean", "null"]}}}}},
        "background": {"enum": [False, None], "description": "Background responses are not supported."},
        "metadata": {"type": ["object", "null"]}}},
    "Response": {"type": "object", "required": ["id", "object", "created_at", "status", "model", "output"],
                 "properties": {
        "id": {"type": "string", "pattern": "^resp_"}, "object": {"const": "response"},
        "created_at": {"type": "integer"}, "model": {"type": "string"},
        "status": {"enum": ["completed", "incomplete", "failed", "in_progress"]},
        "incomplete_details": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {
            "reason": {"enum": ["max_output_tokens", "content_filter"]}}}]},
        "output": {"type": "array", "items": _ITEM},
        "previous_response_id": {"type": ["string", "null"]},
        "usage": {"anyOf": [{"type": "null"}, {"type": "object", "required": ["input_tokens", "output_tokens",
                                                                              "total_tokens"]}]}}},
    "ResponseEvent": {"type": "object", "required": ["event", "data"], "properties": {
        "event": {"type": "string", "description": "The event's type, as its data's type field says."},
        "data": {"type": "string", "description": "The event as JSON, with its sequence_number."}}},
}
