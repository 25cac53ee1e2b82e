"""Reading an OpenAI Chat Completions request: validation with OpenAI's error format, and the conversation it holds.

Every rejection is an ``OpenAIError`` whose ``response()`` is ``{"error": {"message", "type", "param", "code"}}``
with the HTTP status OpenAI would use (400 for a bad request, 404 for an unknown model, 413 for a body too large).
"""

from __future__ import annotations

import json
from typing import Any, Union

import attrs

from loop import File, Image, Options, OutputType, Part, Role, Text, ToolCall, ToolResult, ToolSpec, Turn
from session._serving import MAX_JSON_DEPTH, json_depth, lone_surrogate, utf8_json
from session.openai._errors import OpenAIError as OpenAIError  # re-exported: the format's one class
from session.openai._content import content_parts, content_text
from session.openai._errors import missing, unsupported, wrong_type
from session.openai._options import output_of, tool_choice_of, tools_of
from session.openai._stop import stop_of

_ROLES = ("system", "developer", "user", "assistant", "tool")
_PLAIN = {"system": Role.SYSTEM, "developer": Role.SYSTEM, "user": Role.USER}


@attrs.frozen
class ChatRequest:
    """A valid Chat Completions request as this endpoint uses it: the turns before the last message, the last
    message (a user's text, or the results of the calls the last answer left for the client), the streaming
    settings, the typed answer ``response_format`` asks for (``output``), the client's ``tools``, the
    ``options`` its ``tool_choice`` sets, and the ``stop`` sequences that cut the answer (``_stop``). Sampling
    parameters are accepted and not used."""

    history: tuple[Turn, ...]
    message: Union[str, tuple[Part, ...]]
    stream: bool = False
    include_usage: bool = False
    output: OutputType[Any] | None = None
    tools: tuple[ToolSpec, ...] = ()
    options: Options | None = None
    stop: tuple[str, ...] = ()

    @property
    def results(self) -> tuple[ToolResult, ...] | None:
        """The tool results the message is, or ``None`` for a user's message."""
        message = self.message
        if isinstance(message, str) or not isinstance(message[0], ToolResult):
            return None
        return tuple(part for part in message if isinstance(part, ToolResult))


def parse_chat_request(body: bytes, *, model_name: str, agent_tools: frozenset[str] = frozenset()) -> ChatRequest:
    """The request in ``body``; raises ``OpenAIError`` naming the first problem, as OpenAI would. A client tool
    named like one of ``agent_tools`` (the agent's own) is refused: the model could not tell them apart."""
    data = json_object(body)
    check_model(data, model_name)
    n = data.get("n")
    if n is not None:
        if not isinstance(n, int) or isinstance(n, bool):
            raise wrong_type("n", "an integer", n)
        if n != 1:
            raise unsupported("n", f"n={n} is not supported: this endpoint runs the agent once per request and "
                                    "returns one choice, so n must be 1.")
    stream = data.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise wrong_type("stream", "a boolean", stream)
    include_usage = _stream_options(data.get("stream_options"), bool(stream))
    if data.get("functions"):
        raise unsupported("functions", "'functions' is deprecated and not supported; send 'tools'.")
    tools = tools_of(data.get("tools"))
    clash = [spec.name for spec in tools if spec.name in agent_tools]
    if clash:
        raise OpenAIError(400, f"Invalid 'tools': {', '.join(map(repr, clash))} is the name of one of the agent's "
                               "own tools; rename the client's tool.", param="tools", code="tool_name_conflict")
    choice = tool_choice_of(data.get("tool_choice"), {s.name for s in tools} | agent_tools)
    parallel = data.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise wrong_type("parallel_tool_calls", "a boolean", parallel)
    output = output_of(data.get("response_format"))
    stop = stop_of(data.get("stop"))
    if stop and output is not None:
        raise OpenAIError(400, "Invalid 'stop': stop sequences cut a text answer, and this request asks for a typed "
                               "one (response_format), whose content is validated JSON a cut would break. Send one "
                               "or the other.", param="stop", code="invalid_value")
    messages = data.get("messages")
    if messages is None:
        raise missing("messages")
    if not isinstance(messages, list):
        raise wrong_type("messages", "an array", messages)
    if not messages:
        raise OpenAIError(400, "Invalid 'messages': empty array. Expected an array with minimum length 1, but got "
                               "an empty array instead.", param="messages", code="empty_array")
    history = _conversation(messages)
    last = len(messages) - 1
    options = None if choice is None else Options(tool_choice=choice)
    role = messages[last].get("role")
    if role == "tool":
        results = history[-1].tool_results
        earlier = history[:-1]
        earlier[-1] = left_for_client(earlier[-1])
        return ChatRequest(tuple(earlier), results, bool(stream), include_usage, output, tools, options, stop)
    if role != "user":
        raise OpenAIError(400, f"The last message must be from the user, or tool results (messages[{last}] has "
                               f"role {role!r}): the agent answers the newest user message.",
                          param=f"messages[{last}].role", code="invalid_value")
    return ChatRequest(tuple(history[:-1]), user_message(history[-1], f"messages[{last}].content"), bool(stream),
                       include_usage, output, tools, options, stop)


def json_object(body: bytes) -> dict[str, Any]:
    """``body`` read as a JSON object in UTF-8, nested at most ``MAX_JSON_DEPTH`` deep, with no lone UTF-16
    surrogate; 400 naming what is wrong."""
    try:
        text = utf8_json(body)  # first: every check below reads the body as UTF-8
    except ValueError as exc:
        raise OpenAIError(400, f"The JSON body of your request must be UTF-8 (RFC 8259), and {exc}.",
                          code="invalid_encoding") from None
    if json_depth(body) > MAX_JSON_DEPTH:
        raise OpenAIError(400, f"The JSON body of your request nests arrays and objects more than {MAX_JSON_DEPTH} "
                               "levels deep.", code="json_too_deep")
    try:
        data = json.loads(text)
    except ValueError:
        raise OpenAIError(400, "We could not parse the JSON body of your request. The endpoint expects a JSON "
                               "object, and what was sent was not valid JSON.") from None
    if not isinstance(data, dict):
        raise OpenAIError(400, "The request body must be a JSON object.")
    where = lone_surrogate(data, text=body)
    if where is not None:
        raise OpenAIError(400, f"Invalid '{where}': it holds a lone UTF-16 surrogate (an escape such as \\ud800 "
                               "without its pair), which is not valid Unicode text.", param=where,
                          code="invalid_unicode")
    return data


def check_model(data: dict[str, Any], model_name: str) -> None:
    """The request must name ``model_name``, the one model served: 400 without one, 404 for another."""
    model = data.get("model")
    if model is None:
        raise OpenAIError(400, "you must provide a model parameter", param="model", code="missing_required_parameter")
    if not isinstance(model, str):
        raise wrong_type("model", "a string", model)
    if model != model_name:
        raise OpenAIError(404, f"The model `{model}` does not exist or you do not have access to it. This "
                               f"server serves `{model_name}`.", param="model", code="model_not_found")


def user_message(turn: Turn, where: str) -> Union[str, tuple[Part, ...]]:
    """The message a user's turn sends: its text alone, or with the images and files it shows, its parts; 400
    when it holds neither text nor media."""
    media = any(isinstance(part, (Image, File)) for part in turn.parts)
    if not media and not turn.text.strip():
        raise OpenAIError(400, "The last user message is empty.", param=where, code="invalid_value")
    return tuple(turn.parts) if media else turn.text


def left_for_client(turn: Turn) -> Turn:
    """The assistant turn whose calls the request's last messages answer, marked as having left them for the
    client (outcome ``pending``), so that a session seeded with it keeps them open for those results."""
    outcome = {"status": "pending", "reason": "left for the client to answer"}
    return Turn(turn.role, turn.parts, {**turn.meta, "outcome": outcome}, turn.name)


def _stream_options(options: Any, stream: bool) -> bool:
    if options is None:
        return False
    if not stream:
        raise OpenAIError(400, "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                          param="stream_options", code="invalid_value")
    if not isinstance(options, dict):
        raise wrong_type("stream_options", "an object", options)
    include = options.get("include_usage", False)
    if not isinstance(include, bool):
        raise wrong_type("stream_options.include_usage", "a boolean", include)
    return include


def _conversation(messages: list[Any]) -> list[Turn]:
    """The messages as turns; consecutive tool messages become one ``TOOL`` turn, in the order of the calls."""
    turns: list[Turn] = []
    open_calls: dict[str, ToolCall] = {}  # calls of the last assistant message not answered yet, in call order
    order: list[str] = []
    results: dict[str, ToolResult] = {}
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise wrong_type(where, "an object", message)
        role = message.get("role")
        if role is None:
            raise missing(f"{where}.role")
        if role == "function":
            raise unsupported(f"{where}.role", "The role 'function' is deprecated and not supported; send tool "
                                                "results with the role 'tool'.")
        if role not in _ROLES:
            raise OpenAIError(400, f"Invalid value: {role!r}. Supported values are: 'system', 'developer', "
                                   "'user', 'assistant' and 'tool'.", param=f"{where}.role", code="invalid_value")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id is None:
                raise missing(f"{where}.tool_call_id")
            call = open_calls.pop(call_id, None) if isinstance(call_id, str) else None
            if call is None:
                raise OpenAIError(400, "Invalid parameter: messages with role 'tool' must be a response to a "
                                       f"preceding message with 'tool_calls'; {call_id!r} answers no open call.",
                                  param=f"{where}.tool_call_id", code="invalid_value")
            results[call.id] = ToolResult(call.id, call.name, _text(message, where))
            continue
        if open_calls:
            raise OpenAIError(400, "An assistant message with 'tool_calls' must be followed by tool messages "
                                   "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                                   f"response messages: {', '.join(open_calls)}", param=where, code="invalid_value")
        if results:
            turns.append(Turn(Role.TOOL, [results[call_id] for call_id in order]))
            results = {}
        if role == "assistant":
            calls = _calls(message.get("tool_calls"), f"{where}.tool_calls")
            text = _text(message, where, required=not calls)
            turns.append(Turn(Role.ASSISTANT, ([Text(text)] if text else []) + calls))
            open_calls = {c.id: c for c in calls}
            order = list(open_calls)
        elif role == "user":
            turns.append(Turn(Role.USER, content_parts(message.get("content"), f"{where}.content")))
        else:
            turns.append(Turn(_PLAIN[role], [Text(_text(message, where))]))
    if open_calls:
        raise OpenAIError(400, "An assistant message with 'tool_calls' must be followed by tool messages "
                               "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                               f"response messages: {', '.join(open_calls)}", param=f"messages[{len(messages) - 1}]",
                          code="invalid_value")
    if results:
        turns.append(Turn(Role.TOOL, [results[call_id] for call_id in order]))
    return turns


def _text(message: dict[str, Any], where: str, *, required: bool = True) -> str:
    """A message's text: a string, or the text parts of a content array joined by newlines."""
    if message.get("content") is None and not required:
        return ""
    return content_text(message.get("content"), f"{where}.content", kinds=("text",))


def _calls(raw: Any, where: str) -> list[ToolCall]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise wrong_type(where, "an array", raw)
    calls = []
    for j, call in enumerate(raw):
        at = f"{where}[{j}]"
        if not isinstance(call, dict):
            raise wrong_type(at, "an object", call)
        if call.get("type", "function") != "function":
            raise unsupported(f"{at}.type", f"Tool calls of type {call.get('type')!r} are not supported.")
        call_id, function = call.get("id"), call.get("function")
        if not isinstance(call_id, str) or not call_id:
            raise wrong_type(f"{at}.id", "a non-empty string", call_id)
        if not isinstance(function, dict):
            raise wrong_type(f"{at}.function", "an object", function)
        name, arguments = function.get("name"), function.get("arguments", "{}")
        if not isinstance(name, str) or not name:
            raise wrong_type(f"{at}.function.name", "a non-empty string", name)
        if not isinstance(arguments, str):
            raise wrong_type(f"{at}.function.arguments", "a string", arguments)
        calls.append(ToolCall(call_id, name, arguments))
    return calls

