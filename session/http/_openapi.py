"""The OpenAPI 3.1 description of the HTTP conduit, written as data and served at ``/openapi.json``."""

from __future__ import annotations

from typing import Any

__all__ = ["OPENAPI"]


def _error(description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def _ok(description: str, schema: str | None) -> dict[str, Any]:
    if schema is None:
        return {"description": description}
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}


def _body(schema: str, *, required: bool) -> dict[str, Any]:
    return {"required": required,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}


_SESSION_ID = {"name": "id", "in": "path", "required": True, "description": "The id POST /sessions returned.",
               "schema": {"type": "string", "maxLength": 200}}
_AUTH = {"401": _error("Missing or wrong bearer token."), "404": _error("No such session for this token.")}
_POST = {"413": _error("The request body is larger than the server allows."),
         "429": _error("Too many requests for this token (see Retry-After), or the session's queue is full.")}

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "Session conduit",
        "version": "1.0.0",
        "description": (
            "Conversations with an agent. Open a session, post user messages (they queue and run one at a time), "
            "and follow what happens on the session's server-sent event stream, which can be resumed with "
            "Last-Event-ID after a disconnect. A session is visible only to the bearer token that opened it."
        ),
    },
    "security": [{"bearer": []}],
    "paths": {
        "/healthz": {"get": {
            "operationId": "health", "summary": "Whether the server is up.", "security": [],
            "responses": {"200": _ok("The server is up.", "Health")},
        }},
        "/openapi.json": {"get": {
            "operationId": "openapi", "summary": "This document.", "security": [],
            "responses": {"200": {"description": "The OpenAPI document.",
                                  "content": {"application/json": {"schema": {"type": "object"}}}}},
        }},
        "/sessions": {"post": {
            "operationId": "openSession",
            "summary": "Open a new session with an unguessable id. The body is empty or an empty JSON object.",
            "responses": {"201": _ok("The session was opened.", "SessionCreated"),
                          "400": _error("The body is not JSON; no session was opened."),
                          "422": _error("The body is JSON but not an object; no session was opened."),
                          "401": _AUTH["401"], "429": _POST["429"], "413": _POST["413"],
                          "500": _error("The session store failed; nothing was written."),
                          "503": _error("The server holds as many open sessions as it allows.")},
        }},
        "/sessions/{id}": {"delete": {
            "operationId": "closeSession",
            "summary": "Close a session: interrupt it, stop its worker and end its event streams. Its conversation "
                       "stays stored and readable, and the next message reopens the session.",
            "parameters": [_SESSION_ID],
            "responses": {"204": _ok("The session was closed.", None), **_AUTH},
        }},
        "/sessions/{id}/messages": {"post": {
            "operationId": "postMessage",
            "summary": "Queue a user message; it runs after the messages ahead of it.",
            "parameters": [_SESSION_ID],
            "requestBody": _body("MessageIn", required=True),
            "responses": {
                "202": _ok("The message was queued; follow it on the event stream.", "MessageQueued"),
                "400": _error("The body is not JSON."),
                **_AUTH, **_POST,
                "422": _error("'text' is missing, not a string, or empty."),
                "500": _error("The session store failed; nothing was written."),
            },
        }},
        "/sessions/{id}/interrupt": {"post": {
            "operationId": "interrupt",
            "summary": "Cancel the message being processed; open tool calls get 'cancelled' results.",
            "parameters": [_SESSION_ID],
            "requestBody": _body("InterruptIn", required=False),
            "responses": {"200": _ok("Interrupted.", "Interrupted"), "400": _error("The body is not JSON."),
                          **_AUTH, **_POST, "422": _error("'drop_queued' is not a boolean.")},
        }},
        "/sessions/{id}/turns": {"get": {
            "operationId": "turns", "summary": "The stored conversation, oldest turn first.",
            "parameters": [_SESSION_ID],
            "responses": {"200": _ok("The stored turns.", "Turns"), **_AUTH,
                          "500": _error("The session store failed.")},
        }},
        "/sessions/{id}/events": {"get": {
            "operationId": "events",
            "summary": "The session's events as server-sent events, from the start or after an event id.",
            "description": (
                "Each event has an id, an event type (text_delta, reasoning_delta, tool_call_delta, usage_delta, "
                "finish, turn_started, turn_completed, turn_failed, tool_started, tool_finished, events_dropped, "
                "message_queued, message_started, message_finished, message_failed, interrupted, turn_stored) "
                "and JSON data with the same 'type'. A comment line is sent after 15 quiet seconds. When the "
                "events after the requested id are no longer kept, an 'events_lost' event with their count "
                "comes first. Only the conversation's main line is streamed: a branch's, a tool's or a verifier's "
                "model calls are not. An event published by a pattern carries its run 'path' (e.g. "
                "'WithVerification/ReAct'). message_finished carries 'ok' and 'status' (ok, pending, degraded): "
                "only ok is a success."
            ),
            "parameters": [
                _SESSION_ID,
                {"name": "Last-Event-ID", "in": "header", "required": False,
                 "description": "Resume after this event id (sent by EventSource on reconnect).",
                 "schema": {"type": "integer", "minimum": 0}},
                {"name": "after", "in": "query", "required": False,
                 "description": "Resume after this event id, for clients that cannot set headers; "
                                "Last-Event-ID wins when both are given.",
                 "schema": {"type": "integer", "minimum": 0}},
            ],
            "responses": {"200": {"description": "An endless event stream.",
                                  "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                          "400": _error("The event id is not a whole number."), **_AUTH},
        }},
        "/v1/chat/completions": {"post": {
            "operationId": "chatCompletions",
            "summary": "OpenAI-compatible Chat Completions: the agent answers the last user message.",
            "description": (
                "Send the conversation as OpenAI's messages; the last must be the user's. With stream=true the answer "
                "arrives as chat.completion.chunk server-sent events ending in data: [DONE]; tool calls, tool results "
                "and verification reports travel as reasoning_content lines. An X-Session-Id header keeps the "
                "conversation on the server under that id. Errors use OpenAI's error format."),
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["messages"],
                "properties": {"model": {"type": "string"}, "stream": {"type": "boolean"},
                               "messages": {"type": "array", "minItems": 1, "items": {"type": "object"}}}}}}},
            "responses": {"200": {"description": "A chat.completion object, or a stream of chat.completion.chunk "
                                                 "events when stream=true.",
                                  "content": {"application/json": {"schema": {"type": "object"}},
                                              "text/event-stream": {"schema": {"type": "string"}}}},
                          "400": {"description": "The request is not a valid chat completion request."},
                          "401": {"description": "Missing or wrong bearer token (the client's api_key)."},
                          "409": {"description": "The run was interrupted before it finished."},
                          "429": {"description": "The session's queue is full."},
                          "500": {"description": "The agent failed."},
                          "502": {"description": "The model provider failed."}},
        }},
        "/v1/models": {"get": {
            "operationId": "listModels", "summary": "OpenAI-compatible model list: the one agent this server runs.",
            "responses": {"200": {"description": "A list object with one model.",
                                  "content": {"application/json": {"schema": {"type": "object"}}}},
                          "401": {"description": "Missing or wrong bearer token."}},
        }},
        "/v1/models/{model}": {"get": {
            "operationId": "getModel", "summary": "OpenAI-compatible model lookup.",
            "parameters": [{"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {"200": {"description": "The model object.",
                                  "content": {"application/json": {"schema": {"type": "object"}}}},
                          "401": {"description": "Missing or wrong bearer token."},
                          "404": {"description": "The server runs no model of that name."}},
        }},
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {"type": "object", "required": ["error"], "properties": {"error": {
                "type": "object", "required": ["type", "message"],
                "properties": {"type": {"type": "string", "examples": ["not_found", "invalid_message"]},
                               "message": {"type": "string"}}}}},
            "Health": {"type": "object", "properties": {"status": {"const": "ok"}}},
            "SessionCreated": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}},
            "MessageIn": {"type": "object", "required": ["text"],
                          "properties": {"text": {"type": "string", "minLength": 1}}},
            "MessageQueued": {"type": "object", "required": ["message_id", "position"], "properties": {
                "message_id": {"type": "string"},
                "position": {"type": "integer", "minimum": 0,
                             "description": "Messages ahead of this one, counting the one running."}}},
            "InterruptIn": {"type": "object", "properties": {
                "drop_queued": {"type": "boolean", "default": True,
                                "description": "Also discard the messages waiting behind it."}}},
            "Interrupted": {"type": "object", "required": ["dropped"],
                            "properties": {"dropped": {"type": "integer", "minimum": 0}}},
            "Turns": {"type": "object", "required": ["id", "turns"], "properties": {
                "id": {"type": "string"},
                "turns": {"type": "array", "items": {"$ref": "#/components/schemas/Turn"}}}},
            "Turn": {"type": "object", "required": ["role", "parts"], "properties": {
                "role": {"enum": ["system", "user", "assistant", "tool"]},
                "parts": {"type": "array", "items": {"$ref": "#/components/schemas/Part"}},
                "meta": {"type": "object"}}},
            "Part": {"type": "object", "required": ["type"], "properties": {
                "type": {"enum": ["text", "reasoning", "tool_call", "tool_result", "usage"]}},
                "additionalProperties": True},
        },
    },
}
