"""The OpenAPI description of ``POST /agui``: the ``paths`` entry the HTTP conduit's document merges in."""

from __future__ import annotations

from typing import Any

_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["type", "message"],
    "properties": {"type": {"type": "string"}, "message": {"type": "string"}}}}}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ERROR}}}


AGUI_OPENAPI: dict[str, Any] = {
    "post": {
        "summary": "Run the agent on an AG-UI thread",
        "description": (
            "The AG-UI protocol (1.0): the body is a RunAgentInput, the answer a text/event-stream of AG-UI events "
            "(RUN_STARTED, TEXT_MESSAGE_*, TOOL_CALL_*, REASONING_*, STEP_*, MESSAGES_SNAPSHOT, then RUN_FINISHED or "
            "RUN_ERROR). threadId is the session of the same id on /sessions/{id}. RUN_FINISHED's result carries the "
            "run's status (ok, degraded with its reason, pending); tool calls that need approval end the run with "
            "the interrupt outcome, answered by the next input's resume entries ({\"approved\": bool, \"reason\"}); "
            "calls to the input's tools end it with pendingToolCallIds, answered by the next input's tool messages."),
        "operationId": "runAgent",
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["threadId", "runId", "messages"],
            "description": "An AG-UI RunAgentInput (https://docs.ag-ui.com).",
            "properties": {
                "threadId": {"type": "string", "minLength": 1, "maxLength": 200},
                "runId": {"type": "string"},
                "messages": {"type": "array", "items": {"type": "object", "required": ["id", "role"]}},
                "tools": {"type": "array", "items": {"type": "object", "required": ["name", "description"],
                                                     "properties": {"name": {"type": "string"},
                                                                    "description": {"type": "string"},
                                                                    "parameters": {"type": "object"}}}},
                "resume": {"type": "array", "items": {
                    "type": "object", "required": ["interruptId", "status"],
                    "properties": {"interruptId": {"type": "string"},
                                   "status": {"type": "string", "enum": ["resolved", "cancelled"]},
                                   "payload": {}}}},
            },
            "additionalProperties": True}}}},
        "responses": {
            "200": {"description": "The run, as AG-UI events.",
                    "content": {"text/event-stream": {"itemSchema": {
                        "type": "object", "required": ["data"], "properties": {"data": {
                            "type": "string", "contentMediaType": "application/json",
                            "description": "One AG-UI event as JSON; its 'type' is one of the protocol's event "
                                           "types (RUN_STARTED ... RUN_FINISHED or RUN_ERROR)."}}}}}},
            "400": _error("The body is not JSON in UTF-8."),
            "401": _error("No token, or a wrong one."),
            "408": _error("The body did not arrive in time."),
            "409": _error("resume answers interrupts, and none waits."),
            "413": _error("The body, or the thread's conversation, is too large."),
            "422": _error("The body is not a valid RunAgentInput (the message names the field), or its tool "
                          "messages or resume entries do not answer what the thread waits for."),
            "429": _error("The token's quota of open sessions, or the thread's queue, is full."),
            "503": _error("The server has its most sessions open, or is shutting down."),
        },
    },
}
"""The ``paths["/agui"]`` entry of the conduit's OpenAPI document."""
