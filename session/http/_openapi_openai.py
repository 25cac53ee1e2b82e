"""The OpenAI-compatible API's part of the HTTP conduit's OpenAPI document: its paths and its schemas."""

from __future__ import annotations

from typing import Any

from session._serving import MAX_JSON_DEPTH
from session.http._openapi_parts import NOT_BLANK, json_body, openai_error, ref
from session.openai._stop import MAX_STOP

__all__ = ["OPENAI_PATHS", "OPENAI_SCHEMAS"]

OPENAI_PATHS: dict[str, Any] = {
    "/v1/chat/completions": {"post": {
        "operationId": "chatCompletions",
        "summary": "OpenAI-compatible Chat Completions: the agent answers the last user message.",
        "description": (
            "Send the conversation as OpenAI's messages; the last must be the user's, or the results of the tool "
            "calls the last answer handed to the client. With stream=true the answer arrives as "
            "chat.completion.chunk server-sent events ending in data: [DONE]; the agent's own tool calls, tool "
            "results and verification reports travel as reasoning_content lines, and so does the text a model wrote "
            "before calling the agent's tools: content is the final answer, the same streamed or not (it streams as "
            "it is written when no tool can be called, else it comes whole once the run has ended). stop cuts "
            "that answer at the first stop sequence. response_format asks for a "
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
        "requestBody": {"required": True, "content": {"application/json": {"schema": ref("ChatRequest")}}},
        "responses": {
            "200": {"description": "A chat.completion object, or a stream of chat.completion.chunk events when "
                                   "stream=true.",
                    "content": {"application/json": {"schema": ref("ChatCompletion")},
                                "text/event-stream": {"itemSchema": ref("ChunkEvent")}}},
            "400": openai_error("The request is not a valid chat completion request, or its body is not a JSON "
                           f"object in UTF-8 nested at most {MAX_JSON_DEPTH} deep without lone UTF-16 "
                           "surrogates."),
            "401": openai_error("Missing or wrong bearer token (the client's api_key)."),
            "404": openai_error("The server runs no model of that name, or no session of that X-Session-Id is "
                           "available to this token."),
            "408": openai_error("The request body did not arrive in time; the connection closes."),
            "409": openai_error("The run was interrupted before it finished."),
            "413": openai_error("The request body is larger than the server allows, or the X-Session-Id conversation "
                           "holds more message text than the server keeps in one (conversation_too_large)."),
            "429": openai_error("Too many requests for this token, the session's queue is full, or the token holds "
                           "as many open sessions as one token may."),
            "500": openai_error("The agent failed, or a session could not be opened."),
            "502": openai_error("The model provider failed."),
            "503": openai_error("The server holds as many open sessions as it allows."),
        },
    }},
    "/v1/models": {"get": {
        "operationId": "listModels", "summary": "OpenAI-compatible model list: the one agent this server runs.",
        "responses": {"200": json_body("A list object with one model.", "ModelList"),
                      "401": openai_error("Missing or wrong bearer token."),
                      "429": openai_error("Too many reads for this token (see Retry-After).")},
    }},
    "/v1/models/{model}": {"get": {
        "operationId": "getModel", "summary": "OpenAI-compatible model lookup.",
        "parameters": [{"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}],
        "responses": {"200": json_body("The model object.", "Model"),
                      "401": openai_error("Missing or wrong bearer token."),
                      "404": openai_error("The server runs no model of that name."),
                      "429": openai_error("Too many reads for this token (see Retry-After).")},
    }}
}

OPENAI_SCHEMAS: dict[str, Any] = {
    "OpenAIError": {
        "type": "object", "required": ["error"],
        "description": "OpenAI's error format; the server's guards (bearer token, rate limit, body size) "
                       "answer with 'type' and 'message' only.",
        "properties": {"error": {"type": "object", "required": ["message", "type"], "properties": {
            "message": {"type": "string"}, "type": {"type": "string"},
            "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}},
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
        "response_format": {"anyOf": [{"type": "null"}, ref("TextFormat"), ref("JSONSchemaFormat")],
                            "description": "text, json_object, or json_schema: a typed answer."},
        "stop": {"anyOf": [{"type": "null"}, {"type": "string", "minLength": 1},
                           {"type": "array", "maxItems": MAX_STOP, "items": {"type": "string", "minLength": 1}}],
                 "description": "Up to 4 sequences that end the answer: its content stops just before the first "
                                "one found (streamed or not). Only the final answer is cut, never the agent's own "
                                "turns. Not with a json_object or json_schema response_format."}},
        "allOf": [
            {"if": {"required": ["stream_options"], "properties": {"stream_options": {"type": "object"}}},
             "then": {"required": ["stream"], "properties": {"stream": {"const": True}}}},
            {"if": {"required": ["response_format", "stop"], "properties": {
                "response_format": {"type": "object", "required": ["type"],
                                    "properties": {"type": {"enum": ["json_object", "json_schema"]}}}}},
             "then": {"properties": {"stop": {"anyOf": [{"type": "null"}, {"type": "array", "maxItems": 0}]}}}}]},
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
                "index": {"const": 0}, "finish_reason": {"enum": ["stop", "length", "tool_calls", "content_filter"]},
                "message": {"type": "object", "required": ["role", "content"], "properties": {
                    "role": {"const": "assistant"}, "content": {"type": ["string", "null"]},
                    "reasoning_content": {"type": "string"},
                    "tool_calls": {"type": "array", "items": ref("ToolCall")}}}}}},
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
        "object": {"const": "list"}, "data": {"type": "array", "items": ref("Model")}}},
    "Model": {"type": "object", "required": ["id", "object", "created", "owned_by"], "properties": {
        "id": {"type": "string"}, "object": {"const": "model"}, "created": {"type": "integer"},
        "owned_by": {"type": "string"}}}
}
