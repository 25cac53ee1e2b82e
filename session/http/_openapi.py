"""The OpenAPI 3.2 description of the HTTP conduit, written as data and served at ``/openapi.json``.

It lists every status each operation can answer with, and the schema of every body. The event streams are
described event by event (``itemSchema``, new in OpenAPI 3.2): an SSE event's ``data`` is a string holding JSON.
"""

from __future__ import annotations

from typing import Any

from session._serving import MAX_JSON_DEPTH
from session.http._wire import EVENT_TYPES

__all__ = ["MAX_EVENT_ID", "MAX_PAGE_SIZE", "NOT_BLANK", "OPENAPI", "PAGE_SIZE"]

MAX_EVENT_ID = 10**18 - 1
"""The largest event id a client may resume after (ids have at most 18 digits)."""

PAGE_SIZE = 100
"""How many turns a page of history holds when the client does not say."""
MAX_PAGE_SIZE = 1000
"""The most turns a page of history holds."""

NOT_BLANK = "[^\t-\r\x1c- \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
"""A pattern a string matches when it holds a character that is not whitespace (``str.isspace``): what makes a
message's text non-empty once stripped."""


def _ref(schema: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{schema}"}


def _json(description: str, schema: str | dict[str, Any]) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": _ref(schema) if isinstance(schema, str) else schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(description, "Error")


def _body(schema: str, *, required: bool) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": _ref(schema)}}}


def _stream(description: str, event: str) -> dict[str, Any]:
    return {"description": description, "content": {"text/event-stream": {"itemSchema": _ref(event)}}}


_NOT_JSON = (f"The body is not a JSON object in UTF-8 (UTF-16 and UTF-32 are refused, named), nests arrays and "
             f"objects more than {MAX_JSON_DEPTH} deep, or holds a lone UTF-16 surrogate (an escape such as \\ud800 "
             "without its pair, which is not text).")
_SESSION_ID = {"name": "id", "in": "path", "required": True, "description": "The id POST /sessions returned.",
               "schema": {"type": "string", "minLength": 1, "maxLength": 200}}
# An empty value counts as none given (EventSource never sends one, but other clients may).
_EVENT_ID = {"anyOf": [{"type": "integer", "minimum": 0, "maximum": MAX_EVENT_ID}, {"const": ""}]}
_AUTH = {"401": _error("Missing or wrong bearer token.")}
_SESSION = {**_AUTH, "404": _error("No such session for this token."),
            "500": _error("The session store failed; nothing was written.")}
_POST = {"400": _error(_NOT_JSON),
         "408": _error("The request body did not arrive in time (the server's body timeout); the connection closes."),
         "413": _error("The request body is larger than the server allows.")}
_READS = {"429": _error("Too many reads for this token (see Retry-After); reads have a budget of their own.")}
_TOO_LARGE = _error("The request body is larger than the server allows, or the message would take the conversation "
                    "past the most message text the server keeps in one (conversation_too_large).")
_OPENS = {"429": _error("Too many requests for this token (see Retry-After), or the token holds as many open "
                        "sessions as one token may (session_quota)."),
          "503": _error("The server holds as many open sessions as it allows (session_limit).")}


def _openai(description: str) -> dict[str, Any]:
    return _json(description, "OpenAIError")


_SESSION_EVENTS = (
    "Each event has an id (an event type's 'events_lost' has none), an event type, and JSON data with the same "
    "'type' (see the SessionEvent schema). A comment line is sent after 15 quiet seconds. When the events after "
    "the requested id are no longer kept, an 'events_lost' event with their count comes first. Only the "
    "conversation's main line is streamed: a branch's, a tool's or a verifier's model calls are not. An event "
    "published by a pattern carries its run 'path' (e.g. 'WithVerification/ReAct'). message_finished carries 'ok' "
    "and 'status' (ok, pending, degraded): only ok is a success. The stream ends only when the server stops."
)

OPENAPI: dict[str, Any] = {
    "openapi": "3.2.0",
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
            "responses": {"200": _json("The server is up.", "Health")},
        }},
        "/openapi.json": {"get": {
            "operationId": "openapi", "summary": "This document.", "security": [],
            "responses": {"200": _json("The OpenAPI document.", {"type": "object"})},
        }},
        "/sessions": {"get": {
            "operationId": "listSessions",
            "summary": "This token's stored conversations, most recently updated first: each one's id, title (its "
                       "first user message, on one line and cut short), length in turns and when it was last "
                       "updated. A session no message was sent to has nothing stored, and is not listed.",
            "parameters": [{"name": "limit", "in": "query", "required": False,
                            "description": "The most conversations to list.",
                            "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE, "default": 50}}],
            "responses": {"200": _json("The conversations, newest first.", "SessionList"),
                          "400": _error("'limit' is not a whole number in its range."), **_AUTH, **_READS,
                          "500": _error("The session store failed."),
                          "501": _error("The server's store cannot list its conversations (not_supported).")},
        }, "post": {
            "operationId": "openSession",
            "summary": "Open a new session with an unguessable id. The body is empty or a JSON object (its fields "
                       "are ignored).",
            "requestBody": _body("OpenIn", required=False),
            "responses": {"201": _json("The session was opened.", "SessionCreated"), **_AUTH, **_POST, **_OPENS,
                          "422": _error("The body is JSON but not an object; no session was opened."),
                          "500": _error("The session store failed; nothing was written.")},
        }},
        "/sessions/{id}": {"delete": {
            "operationId": "closeSession",
            "summary": "Close a session: interrupt it, stop its worker and end its event streams. Its conversation "
                       "stays stored and readable, and the next message reopens the session.",
            "parameters": [_SESSION_ID],
            "responses": {"204": {"description": "The session was closed."}, **_SESSION},
        }},
        "/sessions/{id}/messages": {"post": {
            "operationId": "postMessage",
            "summary": "Queue a user message; it runs after the messages ahead of it. A closed session is reopened.",
            "parameters": [_SESSION_ID],
            "requestBody": _body("MessageIn", required=True),
            "responses": {
                "202": _json("The message was queued; follow it on the event stream.", "MessageQueued"),
                **_SESSION, **_POST, **_OPENS, "413": _TOO_LARGE,
                "409": _error("The session closed while the message was being queued; send it again."),
                "422": _error("'text' is missing, not a string, or only whitespace."),
                "429": _error("Too many requests for this token (see Retry-After), the session's queue is full "
                              "(session_busy), or reopening it would pass the token's session quota."),
            },
        }},
        "/sessions/{id}/interrupt": {"post": {
            "operationId": "interrupt",
            "summary": "Cancel the message being processed; open tool calls get 'cancelled' results.",
            "parameters": [_SESSION_ID],
            "requestBody": _body("InterruptIn", required=False),
            "responses": {"200": _json("Interrupted.", "Interrupted"), **_SESSION, **_POST,
                          "422": _error("'drop_queued' is not a boolean."),
                          "429": _error("Too many requests for this token (see Retry-After).")},
        }},
        "/sessions/{id}/turns": {"get": {
            "operationId": "turns",
            "summary": "A page of the stored conversation, oldest turn first; 'next' is the 'after' of the next page.",
            "parameters": [
                _SESSION_ID,
                {"name": "after", "in": "query", "required": False,
                 "description": "Start after the turn of this index (the 'next' of the page before); not given: "
                                "from the first turn.",
                 "schema": {"type": "integer", "minimum": 0, "maximum": MAX_EVENT_ID}},
                {"name": "limit", "in": "query", "required": False,
                 "description": "The most turns the page holds.",
                 "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE,
                            "default": PAGE_SIZE}},
            ],
            "responses": {"200": _json("A page of the stored turns.", "Turns"),
                          "400": _error("'after' or 'limit' is not a whole number in its range."), **_SESSION,
                          **_READS},
        }},
        "/sessions/{id}/approvals": {
            "get": {
                "operationId": "pendingApprovals",
                "summary": "The tool calls waiting for a person's approval: those the conversation keeps open (they "
                           "survive a restart) and those a running program waits on ('live').",
                "parameters": [_SESSION_ID],
                "responses": {"200": _json("What waits, oldest first.", "Approvals"), **_SESSION, **_READS},
            },
            "post": {
                "operationId": "answerApprovals",
                "summary": "Approve or deny calls waiting for approval. Approved calls run, denied ones get an error "
                           "result the model reads, and the run resumes; calls a running program waits on are "
                           "answered at once (message_id null). No answer within the server's approval timeout "
                           "denies them.",
                "parameters": [_SESSION_ID],
                "requestBody": _body("ApprovalsIn", required=True),
                "responses": {
                    "202": _json("The decisions were taken; follow the resumed run on the event stream.",
                                 "ApprovalsTaken"),
                    **_SESSION, **_POST, **_OPENS,
                    "409": _error("A decision names a call that is not waiting for approval (not_waiting)."),
                    "422": _error("'decisions' is malformed, or does not decide every call the conversation keeps "
                                  "open together (invalid_decisions)."),
                },
            },
        },
        "/sessions/{id}/events": {"get": {
            "operationId": "events",
            "summary": "The session's events as server-sent events, from the start or after an event id.",
            "description": _SESSION_EVENTS,
            "parameters": [
                _SESSION_ID,
                {"name": "Last-Event-ID", "in": "header", "required": False,
                 "description": "Resume after this event id (sent by EventSource on reconnect); empty: not given.",
                 "schema": _EVENT_ID},
                {"name": "after", "in": "query", "required": False,
                 "description": "Resume after this event id, for clients that cannot set headers; "
                                "Last-Event-ID wins when both are given. Empty: not given.", "schema": _EVENT_ID},
            ],
            "responses": {"200": _stream("An endless event stream.", "SessionEvent"),
                          "400": _error("The event id is not a whole number of at most 18 digits."), **_SESSION,
                          **_READS},
        }},
        "/v1/chat/completions": {"post": {
            "operationId": "chatCompletions",
            "summary": "OpenAI-compatible Chat Completions: the agent answers the last user message.",
            "description": (
                "Send the conversation as OpenAI's messages; the last must be the user's, or the results of the tool "
                "calls the last answer handed to the client. With stream=true the answer arrives as "
                "chat.completion.chunk server-sent events ending in data: [DONE]; the agent's own tool calls, tool "
                "results and verification reports travel as reasoning_content lines. response_format asks for a "
                "typed answer (the content is the validated JSON); the client's tools are offered beside the agent's, "
                "and a call to one ends the run with finish_reason tool_calls. An X-Session-Id header keeps the "
                "conversation on the server under that id; an X-Request-Id makes retries return the first run's "
                "answer. Errors use OpenAI's error format."),
            "parameters": [{"name": "X-Session-Id", "in": "header", "required": False,
                            "description": "Keep the conversation on the server under this id.",
                            "schema": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": NOT_BLANK}},
                           {"name": "X-Request-Id", "in": "header", "required": False,
                            "description": "An idempotency key: a retry with the same key and body gets the first "
                                           "run's answer instead of running the agent again.",
                            "schema": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": NOT_BLANK}}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("ChatRequest")}}},
            "responses": {
                "200": {"description": "A chat.completion object, or a stream of chat.completion.chunk events when "
                                       "stream=true.",
                        "content": {"application/json": {"schema": _ref("ChatCompletion")},
                                    "text/event-stream": {"itemSchema": _ref("ChunkEvent")}}},
                "400": _openai("The request is not a valid chat completion request, or its body is not a JSON "
                               f"object in UTF-8 nested at most {MAX_JSON_DEPTH} deep without lone UTF-16 "
                               "surrogates."),
                "401": _openai("Missing or wrong bearer token (the client's api_key)."),
                "404": _openai("The server runs no model of that name, or no session of that X-Session-Id is "
                               "available to this token."),
                "408": _openai("The request body did not arrive in time; the connection closes."),
                "409": _openai("The run was interrupted before it finished."),
                "413": _openai("The request body is larger than the server allows, or the X-Session-Id conversation "
                               "holds more message text than the server keeps in one (conversation_too_large)."),
                "429": _openai("Too many requests for this token, the session's queue is full, or the token holds "
                               "as many open sessions as one token may."),
                "500": _openai("The agent failed, or a session could not be opened."),
                "502": _openai("The model provider failed."),
                "503": _openai("The server holds as many open sessions as it allows."),
            },
        }},
        "/v1/models": {"get": {
            "operationId": "listModels", "summary": "OpenAI-compatible model list: the one agent this server runs.",
            "responses": {"200": _json("A list object with one model.", "ModelList"),
                          "401": _openai("Missing or wrong bearer token."),
                          "429": _openai("Too many reads for this token (see Retry-After).")},
        }},
        "/v1/models/{model}": {"get": {
            "operationId": "getModel", "summary": "OpenAI-compatible model lookup.",
            "parameters": [{"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {"200": _json("The model object.", "Model"),
                          "401": _openai("Missing or wrong bearer token."),
                          "404": _openai("The server runs no model of that name."),
                          "429": _openai("Too many reads for this token (see Retry-After).")},
        }},
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {"type": "object", "required": ["error"], "properties": {"error": {
                "type": "object", "required": ["type", "message"],
                "properties": {"type": {"type": "string", "examples": ["not_found", "invalid_message"]},
                               "message": {"type": "string"}}}}},
            "OpenAIError": {
                "type": "object", "required": ["error"],
                "description": "OpenAI's error format; the server's guards (bearer token, rate limit, body size) "
                               "answer with 'type' and 'message' only.",
                "properties": {"error": {"type": "object", "required": ["message", "type"], "properties": {
                    "message": {"type": "string"}, "type": {"type": "string"},
                    "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}},
            "Health": {"type": "object", "required": ["status"], "properties": {"status": {"const": "ok"}}},
            "OpenIn": {"type": "object", "description": "No fields yet; any given are ignored."},
            "SessionCreated": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}},
            "SessionList": {"type": "object", "required": ["sessions"], "properties": {"sessions": {
                "type": "array", "items": {
                    "type": "object", "required": ["id", "title", "turns", "updated"], "properties": {
                        "id": {"type": "string"},
                        "title": {"type": "string", "description": "The first user message, on one line and cut "
                                                                   "short; empty when there is none."},
                        "turns": {"type": "integer", "minimum": 0},
                        "updated": {"type": "number", "description": "Seconds since the epoch."}}}}}},
            "MessageIn": {"type": "object", "required": ["text"], "properties": {
                "text": {"type": "string", "minLength": 1, "pattern": NOT_BLANK,
                         "description": "The user's message: not only whitespace."}}},
            "MessageQueued": {"type": "object", "required": ["message_id", "position"], "properties": {
                "message_id": {"type": "string"},
                "position": {"type": "integer", "minimum": 0,
                             "description": "Messages ahead of this one, counting the one running."}}},
            "Approvals": {"type": "object", "required": ["approvals"], "properties": {"approvals": {
                "type": "array", "items": _ref("ApprovalRequest")}}},
            "ApprovalRequest": {"type": "object", "required": ["calls", "deadline", "live"], "properties": {
                "message_id": {"type": ["string", "null"]},
                "calls": {"type": "array", "minItems": 1, "items": _ref("ToolCallPart")},
                "deadline": {"type": "number", "description": "When they are denied unanswered, in seconds since "
                                                              "the epoch."},
                "live": {"type": "boolean", "description": "true: a running program waits on them; false: the "
                                                           "conversation keeps them open, across restarts."}}},
            "ToolCallPart": {"type": "object", "required": ["type", "id", "name", "arguments"], "properties": {
                "type": {"const": "tool_call"}, "id": {"type": "string"}, "name": {"type": "string"},
                "arguments": {"type": "string", "description": "The arguments as the model wrote them (JSON)."}}},
            "ApprovalsIn": {"type": "object", "required": ["decisions"], "properties": {"decisions": {
                "type": "array", "minItems": 1, "maxItems": 256, "items": {
                    "type": "object", "required": ["call_id", "approved"], "properties": {
                        "call_id": {"type": "string", "minLength": 1},
                        "approved": {"type": "boolean"},
                        "reason": {"type": "string", "maxLength": 2000,
                                   "description": "Why; the model reads it with a denial."}}}}}},
            "ApprovalsTaken": {"type": "object", "required": ["message_id"], "properties": {
                "message_id": {"type": ["string", "null"],
                               "description": "The message that runs the approved calls and resumes the run; null "
                                              "when every decision answered a running program."}}},
            "InterruptIn": {"type": "object", "properties": {
                "drop_queued": {"type": "boolean", "default": True,
                                "description": "Also discard the messages waiting behind it."}}},
            "Interrupted": {"type": "object", "required": ["dropped"],
                            "properties": {"dropped": {"type": "integer", "minimum": 0}}},
            "Turns": {"type": "object", "required": ["id", "turns", "next"], "properties": {
                "id": {"type": "string"},
                "turns": {"type": "array", "maxItems": MAX_PAGE_SIZE, "items": _ref("Turn")},
                "next": {"type": ["integer", "null"], "minimum": 0,
                         "description": "The 'after' that reads the next page; null: this page is the last."}}},
            "Turn": {"type": "object", "required": ["role", "parts"], "properties": {
                "role": {"enum": ["system", "user", "assistant", "tool"]},
                "parts": {"type": "array", "items": _ref("Part")},
                "meta": {"type": "object"}}},
            "Part": {"type": "object", "required": ["type"], "properties": {
                "type": {"enum": ["text", "reasoning", "tool_call", "tool_result", "usage"]}},
                "additionalProperties": True},
            "SessionEvent": {
                "type": "object", "required": ["event", "data"],
                "properties": {
                    "id": {"type": "string", "pattern": "^[0-9]{1,18}$"},
                    "event": {"enum": [*EVENT_TYPES, "events_lost"]},
                    "data": {"type": "string", "contentMediaType": "application/json",
                             "contentSchema": _ref("EventData")}}},
            "EventData": {"type": "object", "required": ["type"], "properties": {
                "type": {"enum": [*EVENT_TYPES, "events_lost"]},
                "path": {"type": "string", "description": "The run path of the pattern that published it."}}},
            "ChatRequest": {"type": "object", "required": ["model", "messages"], "properties": {
                "model": {"type": "string", "description": "The model /v1/models lists.", "examples": ["agent"]},
                "messages": {"type": "array", "minItems": 1, "items": {"type": "object"},
                             "examples": [[{"role": "user", "content": "Hello"}]]},
                "stream": {"type": ["boolean", "null"]},
                "stream_options": {"type": ["object", "null"], "description": "Only with stream=true.",
                                   "properties": {"include_usage": {"type": "boolean"}}},
                "n": {"enum": [1, None]},
                "tools": {"type": ["array", "null"], "items": {"type": "object"},
                          "description": "Function tools the client runs itself, offered beside the agent's own."},
                "tool_choice": {"description": "'auto', 'none', 'required' or a named function, for every turn.",
                                "anyOf": [{"enum": ["auto", "none", "required", None]}, {"type": "object"}]},
                "parallel_tool_calls": {"type": ["boolean", "null"], "description": "Accepted and not used."},
                "response_format": {"anyOf": [{"type": "null"}, _ref("TextFormat"), _ref("JSONSchemaFormat")],
                                    "description": "text, json_object, or json_schema: a typed answer."}},
                "if": {"required": ["stream_options"], "properties": {"stream_options": {"type": "object"}}},
                "then": {"required": ["stream"], "properties": {"stream": {"const": True}}}},
            "TextFormat": {"type": "object", "required": ["type"], "properties": {
                "type": {"enum": ["text", "json_object"],
                         "description": "text: a plain answer; json_object: an answer that is a JSON object."}}},
            "JSONSchemaFormat": {"type": "object", "required": ["type", "json_schema"], "properties": {
                "type": {"const": "json_schema"},
                "json_schema": {"type": "object", "required": ["name"], "properties": {
                    "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                    "strict": {"type": ["boolean", "null"], "description": "Either way, the answer is validated."},
                    "schema": {"type": "object", "description": (
                        "The JSON Schema the answer's JSON must match ({} when not given). It must be valid, refer "
                        "only within itself, name a '$schema' at its root only, and hold only patterns RE2 compiles "
                        "(no lookarounds or backreferences): patterns are matched in linear time.")}}}}},
            "ChatCompletion": {"type": "object", "required": ["id", "object", "created", "model", "choices", "usage"],
                               "properties": {
                "id": {"type": "string"}, "object": {"const": "chat.completion"}, "created": {"type": "integer"},
                "model": {"type": "string"},
                "choices": {"type": "array", "minItems": 1, "maxItems": 1, "items": {
                    "type": "object", "required": ["index", "message", "finish_reason"], "properties": {
                        "index": {"const": 0}, "finish_reason": {"enum": ["stop", "length", "tool_calls"]},
                        "message": {"type": "object", "required": ["role", "content"], "properties": {
                            "role": {"const": "assistant"}, "content": {"type": ["string", "null"]},
                            "reasoning_content": {"type": "string"},
                            "tool_calls": {"type": "array", "items": _ref("ToolCall")}}}}}},
                "usage": {"type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
                          "properties": {"prompt_tokens": {"type": "integer", "minimum": 0},
                                         "completion_tokens": {"type": "integer", "minimum": 0},
                                         "total_tokens": {"type": "integer", "minimum": 0}}}}},
            "ToolCall": {"type": "object", "required": ["id", "type", "function"], "properties": {
                "id": {"type": "string"}, "type": {"const": "function"},
                "function": {"type": "object", "required": ["name", "arguments"], "properties": {
                    "name": {"type": "string"}, "arguments": {"type": "string"}}}}},
            "ChunkEvent": {"type": "object", "required": ["data"], "properties": {"data": {
                "type": "string", "description": "A chat.completion.chunk object as JSON, an error object as JSON "
                                                 "(the stream then ends), or [DONE] at the end."}}},
            "ModelList": {"type": "object", "required": ["object", "data"], "properties": {
                "object": {"const": "list"}, "data": {"type": "array", "items": _ref("Model")}}},
            "Model": {"type": "object", "required": ["id", "object", "created", "owned_by"], "properties": {
                "id": {"type": "string"}, "object": {"const": "model"}, "created": {"type": "integer"},
                "owned_by": {"type": "string"}}},
        },
    },
}
