"""The OpenAPI 3.2 description of the HTTP conduit, written as data and served at ``/openapi.json``.

It lists every status each operation can answer with, and the schema of every body. The event streams are
described event by event (``itemSchema``, new in OpenAPI 3.2): an SSE event's ``data`` is a string holding JSON.
``OPENAPI_31`` is the same document rendered as OpenAPI 3.1.1 (``openapi_31``), served at ``/openapi-3.1.json``
for tools that refuse 3.2.
"""

from __future__ import annotations

from typing import Any

from session._serving import MAX_JSON_DEPTH
from session.agui._openapi import AGUI_OPENAPI
from session.http._openapi_openai import OPENAI_PATHS, OPENAI_SCHEMAS
from session.http._openapi_responses import RESPONSES_PATHS, RESPONSES_SCHEMAS
from session.http._openapi_parts import (MAX_EVENT_ID, MAX_PAGE_SIZE, NOT_BLANK, PAGE_SIZE, error, json_body,
                                         openapi_31, ref, request_body, stream)
from session.http._wire import BASE64, EVENT_TYPES, HTTP_URL, IMAGE_MEDIA_TYPES, MEDIA_TYPE
from session.web._page import PAGE_PATHS

__all__ = ["MAX_EVENT_ID", "MAX_PAGE_SIZE", "NOT_BLANK", "OPENAPI", "OPENAPI_31", "PAGE_SIZE"]

_NOT_JSON = (f"The body is not a JSON object in UTF-8 (UTF-16 and UTF-32 are refused, named), nests arrays and "
             f"objects more than {MAX_JSON_DEPTH} deep, or holds a lone UTF-16 surrogate (an escape such as \\ud800 "
             "without its pair, which is not text).")
_SESSION_ID = {"name": "id", "in": "path", "required": True, "description": "The id POST /sessions returned.",
               "schema": {"type": "string", "minLength": 1, "maxLength": 200}}
# An empty value counts as none given (EventSource never sends one, but other clients may).
_EVENT_ID = {"anyOf": [{"type": "integer", "minimum": 0, "maximum": MAX_EVENT_ID}, {"const": ""}]}
_AUTH = {"401": error("Missing or wrong bearer token.")}
_SESSION = {**_AUTH, "404": error("No such session for this token."),
            "500": error("The session store failed; nothing was written.")}
_POST = {"400": error(_NOT_JSON),
         "408": error("The request body did not arrive in time (the server's body timeout); the connection closes."),
         "413": error("The request body is larger than the server allows.")}
_READS = {"429": error("Too many reads for this token (see Retry-After); reads have a budget of their own.")}
_TOO_LARGE = error("The request body is larger than the server allows, or the message would take the conversation "
                    "past the most message text the server keeps in one (conversation_too_large).")
_OPENS = {"429": error("Too many requests for this token (see Retry-After), or the token holds as many open "
                        "sessions as one token may (session_quota)."),
          "503": error("The server holds as many open sessions as it allows (session_limit).")}




def _media_in(kind: str, description: str, media_type: dict[str, Any], **more: Any) -> dict[str, Any]:
    """The schema of a posted image or file part: an http(s) ``url``, or base64 ``data`` with its ``media_type``
    (the form ``loop.codec`` writes the part in)."""
    return {"type": "object", "required": ["type"], "additionalProperties": False, "description": description,
            "oneOf": [{"required": ["url"]}, {"required": ["data"]}], "dependentRequired": {"data": ["media_type"]},
            "properties": {
                "type": {"const": kind},
                "url": {"type": "string", "pattern": f"^{HTTP_URL}$"},
                "data": {"type": "string", "pattern": f"^{BASE64}$", "contentEncoding": "base64",
                         "description": "The bytes, base64 (RFC 4648, with its padding)."},
                "media_type": {**media_type, "description": "Lowercase; needed with data."},
                **more}}


_PAGE = {"get": {"operationId": "chatPage", "summary": "The chat page (HTML); it asks for the bearer token itself.",
                 "security": [], "responses": {"200": {"description": "The page.",
                                                       "content": {"text/html": {"schema": {"type": "string"}}}}}}}
PAGE_PATHS_DOC: dict[str, Any] = {path: _PAGE if path == "/" else {"get": {
    "operationId": "chatPage" + path.strip("/").replace(".", "_").title().replace("_", ""),
    "summary": f"A file of the chat page ({path}).", "security": [],
    "responses": {"200": {"description": "The file.", "content": {"*/*": {"schema": {"type": "string"}}}}}}}
    for path in PAGE_PATHS}

_SESSION_EVENTS = (
    "Each event has an id (an event type's 'events_lost' has none), an event type, and JSON data with the same "
    "'type' (see the SessionEvent schema). A comment line is sent after 15 quiet seconds. When the events after "
    "the requested id are no longer kept, an 'events_lost' event with their count comes first. Only the "
    "conversation's main line is streamed unless ?branches=true: a branch's, a tool's or a verifier's model calls "
    "are not. An event published by a pattern carries its run 'path' (e.g. 'WithVerification/ReAct'). "
    "message_finished carries 'ok' "
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
            "Last-Event-ID after a disconnect. A session is visible only to the bearer token that opened it. "
            "The same server speaks the Model Context Protocol (streamable HTTP) at /mcp, behind the same bearer "
            "token; that protocol is described by its own specification, not here."
        ),
    },
    "security": [{"bearer": []}],
    "paths": {
        "/healthz": {"get": {
            "operationId": "health", "summary": "Whether the server is up.", "security": [],
            "responses": {"200": json_body("The server is up.", "Health")},
        }},
        "/openapi.json": {"get": {
            "operationId": "openapi", "summary": "This document, in OpenAPI 3.2.", "security": [],
            "responses": {"200": json_body("The OpenAPI 3.2 document.", {"type": "object"})},
        }},
        "/openapi-3.1.json": {"get": {
            "operationId": "openapi31",
            "summary": "This document rendered as OpenAPI 3.1.1, for tools that refuse 3.2: the same paths and "
                       "schemas, but an event stream is described as one string (its per-event schema kept as "
                       "x-itemSchema) instead of event by event (itemSchema).", "security": [],
            "responses": {"200": json_body("The OpenAPI 3.1.1 document.", {"type": "object"})},
        }},
        "/sessions": {"get": {
            "operationId": "listSessions",
            "summary": "This token's stored conversations, most recently updated first: each one's id, title (its "
                       "first user message, on one line and cut short), length in turns and when it was last "
                       "updated. A session no message was sent to has nothing stored, and is not listed.",
            "parameters": [{"name": "limit", "in": "query", "required": False,
                            "description": "The most conversations to list.",
                            "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE, "default": 50}}],
            "responses": {"200": json_body("The conversations, newest first.", "SessionList"),
                          "400": error("'limit' is not a whole number in its range."), **_AUTH, **_READS,
                          "500": error("The session store failed."),
                          "501": error("The server's store cannot list its conversations (not_supported).")},
        }, "post": {
            "operationId": "openSession",
            "summary": "Open a new session with an unguessable id. The body is empty or a JSON object (its fields "
                       "are ignored).",
            "requestBody": request_body("OpenIn", required=False),
            "responses": {"201": json_body("The session was opened.", "SessionCreated"), **_AUTH, **_POST, **_OPENS,
                          "422": error("The body is JSON but not an object; no session was opened."),
                          "500": error("The session store failed; nothing was written.")},
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
            "requestBody": request_body("MessageIn", required=True),
            "responses": {
                "202": json_body("The message was queued; follow it on the event stream.", "MessageQueued"),
                **_SESSION, **_POST, **_OPENS, "413": _TOO_LARGE,
                "409": error("The session closed while the message was being queued; send it again."),
                "422": error("Neither or both of 'text' and 'parts' are given, 'text' is not a string or only "
                              "whitespace, or a part is not one the schema describes, or holds bytes of another "
                              "type than its media_type (the message names the part); nothing was queued."),
                "429": error("Too many requests for this token (see Retry-After), the session's queue is full "
                              "(session_busy), or reopening it would pass the token's session quota."),
            },
        }},
        "/sessions/{id}/interrupt": {"post": {
            "operationId": "interrupt",
            "summary": "Cancel the message being processed; open tool calls get 'cancelled' results.",
            "parameters": [_SESSION_ID],
            "requestBody": request_body("InterruptIn", required=False),
            "responses": {"200": json_body("Interrupted.", "Interrupted"), **_SESSION, **_POST,
                          "422": error("'drop_queued' is not a boolean."),
                          "429": error("Too many requests for this token (see Retry-After).")},
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
            "responses": {"200": json_body("A page of the stored turns.", "Turns"),
                          "400": error("'after' or 'limit' is not a whole number in its range."), **_SESSION,
                          **_READS},
        }},
        "/sessions/{id}/approvals": {
            "get": {
                "operationId": "pendingApprovals",
                "summary": "The tool calls waiting for a person's approval: those the conversation keeps open (they "
                           "survive a restart) and those a running program waits on ('live').",
                "parameters": [_SESSION_ID],
                "responses": {"200": json_body("What waits, oldest first.", "Approvals"), **_SESSION, **_READS},
            },
            "post": {
                "operationId": "answerApprovals",
                "summary": "Approve or deny calls waiting for approval. Approved calls run, denied ones get an error "
                           "result the model reads, and the run resumes; calls a running program waits on are "
                           "answered at once (message_id null). No answer within the server's approval timeout "
                           "denies them.",
                "parameters": [_SESSION_ID],
                "requestBody": request_body("ApprovalsIn", required=True),
                "responses": {
                    "202": json_body("The decisions were taken; follow the resumed run on the event stream.",
                                 "ApprovalsTaken"),
                    **_SESSION, **_POST, **_OPENS,
                    "409": error("A decision names a call that is not waiting for approval (not_waiting)."),
                    "422": error("'decisions' is malformed, or does not decide every call the conversation keeps "
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
                {"name": "branches", "in": "query", "required": False,
                 "description": "true: also the events of branches, samples, tools' own runs and verifiers, each "
                                "with 'main': false in its data (to draw the whole run); false: the main line's only.",
                 "schema": {"enum": ["true", "false"], "default": "false"}},
            ],
            "responses": {"200": stream("An endless event stream.", "SessionEvent"),
                          "400": error("The event id is not a whole number of at most 18 digits, or 'branches' is "
                                       "neither true nor false."), **_SESSION, **_READS},
        }},
        **PAGE_PATHS_DOC,
        "/agui": AGUI_OPENAPI,
        **OPENAI_PATHS,
        **RESPONSES_PATHS,
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {"type": "object", "required": ["error"], "properties": {"error": {
                "type": "object", "required": ["type", "message"],
                "properties": {"type": {"type": "string", "examples": ["not_found", "invalid_message"]},
                               "message": {"type": "string"}}}}},
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
            "MessageIn": {
                "type": "object", "oneOf": [{"required": ["text"]}, {"required": ["parts"]}],
                "description": "The user's message: its text, or its parts (text, and the images and files it "
                               "shows); exactly one of the two.",
                "properties": {
                    "text": {"type": "string", "minLength": 1, "pattern": NOT_BLANK,
                             "description": "The user's message: not only whitespace."},
                    "parts": {"type": "array", "minItems": 1, "items": {"oneOf": [
                        ref("TextPartIn"), ref("ImagePartIn"), ref("FilePartIn")]},
                              "description": "The message as parts, in the form the turns are sent back in."}}},
            "TextPartIn": {"type": "object", "required": ["type", "text"], "additionalProperties": False,
                           "properties": {"type": {"const": "text"},
                                          "text": {"type": "string", "minLength": 1, "pattern": NOT_BLANK}}},
            "ImagePartIn": _media_in("image", "An image: at an http(s) URL (passed to the model, not fetched by the "
                                              "server), or its bytes.",
                                     {"enum": list(IMAGE_MEDIA_TYPES)}),
            "FilePartIn": _media_in("file", "A document (a PDF, a text file): at an http(s) URL, or its bytes; which "
                                            "types reach the model depends on its provider.",
                                    {"type": "string", "pattern": f"^{MEDIA_TYPE}$"},
                                    name={"type": "string", "minLength": 1, "pattern": NOT_BLANK,
                                          "description": "The file's name, as the model is shown it."}),
            "MessageQueued": {"type": "object", "required": ["message_id", "position"], "properties": {
                "message_id": {"type": "string"},
                "position": {"type": "integer", "minimum": 0,
                             "description": "Messages ahead of this one, counting the one running."}}},
            "Approvals": {"type": "object", "required": ["approvals"], "properties": {"approvals": {
                "type": "array", "items": ref("ApprovalRequest")}}},
            "ApprovalRequest": {"type": "object", "required": ["calls", "deadline", "live"], "properties": {
                "message_id": {"type": ["string", "null"]},
                "calls": {"type": "array", "minItems": 1, "items": ref("ToolCallPart")},
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
                "turns": {"type": "array", "maxItems": MAX_PAGE_SIZE, "items": ref("Turn")},
                "next": {"type": ["integer", "null"], "minimum": 0,
                         "description": "The 'after' that reads the next page; null: this page is the last."}}},
            "Turn": {"type": "object", "required": ["role", "parts"], "properties": {
                "role": {"enum": ["system", "user", "assistant", "tool"]},
                "parts": {"type": "array", "items": ref("Part")},
                "meta": {"type": "object"}}},
            "Part": {"type": "object", "required": ["type"], "properties": {
                "type": {"enum": ["text", "reasoning", "tool_call", "tool_result", "usage", "image", "file"]}},
                "additionalProperties": True},
            "SessionEvent": {
                "type": "object", "required": ["event", "data"],
                "properties": {
                    "id": {"type": "string", "pattern": "^[0-9]{1,18}$"},
                    "event": {"enum": [*EVENT_TYPES, "events_lost"]},
                    "data": {"type": "string", "contentMediaType": "application/json",
                             "contentSchema": ref("EventData")}}},
            "EventData": {"type": "object", "required": ["type"], "properties": {
                "type": {"enum": [*EVENT_TYPES, "events_lost"]},
                "path": {"type": "string", "description": "The run path of the pattern that published it."},
                "main": {"const": False, "description": "Present on events off the main line (with ?branches=true "
                                                        "only)."}}},
            **OPENAI_SCHEMAS,
            **RESPONSES_SCHEMAS,
        },
    },
}

OPENAPI_31: dict[str, Any] = openapi_31(OPENAPI)
