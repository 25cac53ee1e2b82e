"""Reading a Responses API request (``POST /v1/responses``): validation in OpenAI's error format, and the
conversation its ``input`` holds.

``input`` is a string (one user message) or an array of items: messages (``role`` user, system, developer or
assistant; ``content`` a string or ``input_text`` / ``output_text`` parts), ``function_call`` items (an assistant
turn's calls) and ``function_call_output`` items (their results), as the API's clients send a conversation back.
``reasoning`` items are read and left out: the reasoning a model wrote is its own, and this endpoint's
(``summary_text`` of what the agent did) was never a model's. ``instructions`` open the conversation as a system
turn (marked ``{"instructions": true}``). The last item is the message the session runs: a user message, or the outputs of the calls the previous
answer left for the client.

The parts that shape the run are read as the Chat Completions endpoint reads them (``session.openai._options``),
from the Responses API's own shapes: ``text.format`` (``text``, ``json_object``, or ``json_schema`` with ``name``
and ``schema`` at its top level), function ``tools`` (``name``, ``parameters`` at the top level) and
``tool_choice`` (``{"type": "function", "name": ...}``). Errors name the Responses parameter.
"""

from __future__ import annotations

from typing import Any

import attrs

from loop import File, Image, Options, Part, Role, Text, ToolCall, ToolResult, Turn
from session.openai._errors import OpenAIError, missing, unsupported, wrong_type
from session.openai._options import output_of, tool_choice_of, tools_of
from session.openai._content import content_text, input_parts
from session.openai._request import ChatRequest, check_model, json_object, left_for_client, user_message

# Accepted and not used, as the Chat Completions endpoint accepts sampling parameters: the pattern chooses its own.
_ECHOED = ("temperature", "top_p", "max_output_tokens", "parallel_tool_calls", "user", "reasoning", "truncation",
           "service_tier", "prompt_cache_key", "safety_identifier", "top_logprobs", "max_tool_calls")
_UNSUPPORTED = {
    "background": "Background responses are not supported: a response runs while its request is open.",
    "conversation": "Conversations are not supported; continue a conversation with 'previous_response_id'.",
    "prompt": "Stored prompt templates are not supported; send 'instructions' and 'input'.",
}
_PLAIN = {"system": Role.SYSTEM, "developer": Role.SYSTEM, "user": Role.USER}


@attrs.frozen
class ResponsesRequest:
    """A valid Responses request: the run it asks for as the Chat Completions endpoint would run it (``chat``:
    history, message, typed answer, client tools, options), the response it continues, whether its conversation
    is kept (``store``) and the request's settings the response object echoes (``echo``)."""

    chat: ChatRequest
    previous_response_id: str | None = None
    store: bool = True
    echo: dict[str, Any] = attrs.field(factory=dict)
    instructions: str | None = None


def parse_responses_request(body: bytes, *, model_name: str,
                            agent_tools: frozenset[str] = frozenset()) -> ResponsesRequest:
    """The request in ``body``; raises ``OpenAIError`` naming the first problem, as OpenAI would."""
    data = json_object(body)
    check_model(data, model_name)
    for name, why in _UNSUPPORTED.items():
        if data.get(name) not in (None, False):
            raise unsupported(name, why)
    stream = _flag(data, "stream", False)
    store = _flag(data, "store", True)
    previous = data.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not previous):
        raise wrong_type("previous_response_id", "a non-empty string", previous)
    instructions = data.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise wrong_type("instructions", "a string", instructions)
    tools = _tools(data.get("tools"), agent_tools)
    choice = _tool_choice(data.get("tool_choice"), {s.name for s in tools} | agent_tools)
    output = _output(data.get("text"))
    history, message = _input(data.get("input"), continuing=previous is not None)
    if instructions and previous is None:
        history = [instructions_turn(instructions), *history]
    chat = ChatRequest(tuple(history), message, stream, False, output, tools,
                       None if choice is None else Options(tool_choice=choice))
    echo = {name: data.get(name) for name in _ECHOED}
    echo.update(instructions=instructions, metadata=data.get("metadata") or {}, tools=data.get("tools") or [],
                tool_choice=data.get("tool_choice", "auto"), text=data.get("text") or {"format": {"type": "text"}})
    if echo["parallel_tool_calls"] is None:
        echo["parallel_tool_calls"] = True
    return ResponsesRequest(chat, previous, store, echo, instructions or None)


def instructions_turn(instructions: str) -> Turn:
    """The system turn that opens a conversation with a response's ``instructions``, marked as theirs."""
    return Turn(Role.SYSTEM, [Text(instructions)], {"instructions": True})


def _flag(data: dict[str, Any], name: str, default: bool) -> bool:
    value = data.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise wrong_type(name, "a boolean", value)
    return value


def _renamed(error: OpenAIError, old: str, new: str) -> OpenAIError:
    """``error`` as the Responses API names its parameter: ``old`` (the Chat Completions name) becomes ``new``."""
    return OpenAIError(error.status, error.message.replace(old, new), type=error.type,
                       param=None if error.param is None else error.param.replace(old, new), code=error.code)


def _output(text: Any) -> Any:
    if text is None:
        return None
    if not isinstance(text, dict):
        raise wrong_type("text", "an object", text)
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise wrong_type("text.format", "an object", fmt)
    chat = dict(fmt)
    if fmt.get("type") == "json_schema":
        chat = {"type": "json_schema", "json_schema": {k: v for k, v in fmt.items() if k != "type"}}
    try:
        return output_of(chat)
    except OpenAIError as error:
        raise _renamed(_renamed(error, "response_format.json_schema", "text.format"),
                       "response_format", "text.format") from None


def _tools(raw: Any, agent_tools: frozenset[str]) -> tuple[Any, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise wrong_type("tools", "an array", raw)
    chat = []
    for entry in raw:
        if isinstance(entry, dict) and entry.get("type") == "function":
            function = {k: v for k, v in entry.items() if k not in ("type", "strict")}
            chat.append({"type": "function", "function": function})
        else:
            chat.append(entry)
    try:
        tools = tools_of(chat)
    except OpenAIError as error:
        raise _renamed(error, ".function.", ".") from None
    clash = [spec.name for spec in tools if spec.name in agent_tools]
    if clash:
        raise OpenAIError(400, f"Invalid 'tools': {', '.join(map(repr, clash))} is the name of one of the agent's "
                               "own tools; rename the client's tool.", param="tools", code="tool_name_conflict")
    return tools


def _tool_choice(raw: Any, offered: set[str]) -> Any:
    if isinstance(raw, dict) and raw.get("type") == "function" and "function" not in raw:
        raw = {"type": "function", "function": {"name": raw.get("name")}}
    try:
        return tool_choice_of(raw, offered)
    except OpenAIError as error:
        raise OpenAIError(400, error.message.replace('{"type": "function", "function": {"name": ...}}',
                                                     '{"type": "function", "name": ...}'),
                          param="tool_choice" if error.param == "tool_choice" else "tool_choice.name",
                          code=error.code) from None


def _input(raw: Any, *, continuing: bool) -> tuple[list[Turn], str | tuple[Part, ...]]:
    """The turns before the last message, and the last message (a user's text or function call outputs).
    ``continuing``: the input follows a stored conversation, so its outputs may answer calls it does not hold
    (their tool names are filled in from the conversation, see ``named_results``)."""
    if raw is None:
        raise missing("input")
    if isinstance(raw, str):
        raw = [{"role": "user", "content": raw}]
    if not isinstance(raw, list):
        raise wrong_type("input", "a string or an array of input items", raw)
    if not raw:
        raise OpenAIError(400, "Invalid 'input': empty array. Expected at least one input item.", param="input",
                          code="empty_array")
    turns = _Conversation(continuing).read(raw)
    last = turns[-1] if turns else None
    if last is not None and last.role is Role.TOOL:
        earlier = turns[:-1]
        if earlier and earlier[-1].role is Role.ASSISTANT:
            earlier[-1] = left_for_client(earlier[-1])
        return earlier, last.tool_results
    if last is None or last.role is not Role.USER:
        raise OpenAIError(400, "The last input item must be a user message, or the outputs of function calls: the "
                               "agent answers the newest user message.", param=f"input[{len(raw) - 1}]",
                          code="invalid_value")
    return turns[:-1], user_message(last, f"input[{len(raw) - 1}].content")


def named_results(results: tuple[ToolResult, ...], open_calls: dict[str, str]) -> tuple[ToolResult, ...]:
    """Function call outputs sent after ``previous_response_id``, with the names of the calls they answer
    (``open_calls``: call id → tool name, the calls the conversation left open); an output that answers none is
    400, naming its call id."""
    named = []
    for result in results:
        name = open_calls.get(result.call_id)
        if name is None:
            raise OpenAIError(400, f"No tool output found for function call {result.call_id}: the previous response "
                                   f"left open only {', '.join(open_calls) or 'no calls'}.", param="input",
                              code="invalid_value")
        named.append(ToolResult(result.call_id, name, result.content, result.is_error, result.attachments))
    return tuple(named)


class _Conversation:
    """Input items read in order into turns: an assistant message and the function calls after it are one
    assistant turn; the outputs answering that turn's calls are one tool turn, in the order of the calls."""

    def __init__(self, continuing: bool) -> None:
        self.continuing = continuing
        self.turns: list[Turn] = []
        self.parts: list[Any] | None = None  # the assistant turn being read
        self.open: dict[str, ToolCall] = {}  # calls not answered yet, in call order
        self.order: list[str] = []
        self.results: dict[str, ToolResult] = {}

    def read(self, items: list[Any]) -> list[Turn]:
        for i, item in enumerate(items):
            where = f"input[{i}]"
            if not isinstance(item, dict):
                raise wrong_type(where, "an object", item)
            kind = item.get("type", "message" if "role" in item else None)
            if kind == "message":
                self._message(item, where)
            elif kind == "function_call":
                self._call(item, where)
            elif kind == "function_call_output":
                self._output(item, where)
            elif kind != "reasoning":
                raise unsupported(f"{where}.type", f"Input items of type {kind!r} are not supported: this endpoint "
                                                   "reads messages, function calls and their outputs.")
        self._end_assistant()
        if self.open:
            raise OpenAIError(400, f"No tool output found for function call {next(iter(self.open))}.",
                              param="input", code="invalid_value")
        self._end_results()
        return self.turns

    def _message(self, item: dict[str, Any], where: str) -> None:
        role = item.get("role")
        if role not in ("user", "system", "developer", "assistant"):
            raise OpenAIError(400, f"Invalid value: {role!r}. Supported values are: 'user', 'system', 'developer' "
                                   "and 'assistant'.", param=f"{where}.role", code="invalid_value")
        if role == "user":
            self._end_assistant()
            self._before_turn(where)
            self.turns.append(Turn(Role.USER, input_parts(item.get("content"), f"{where}.content")))
            return
        text = content_text(item.get("content"), f"{where}.content")
        if role == "assistant":
            if self.parts is not None and any(isinstance(p, ToolCall) for p in self.parts):
                self._end_assistant()
            self._before_turn(where)
            if self.parts is None:
                self.parts = []
            if text:
                self.parts.append(Text(text))
            return
        self._end_assistant()
        self._before_turn(where)
        self.turns.append(Turn(_PLAIN[role], [Text(text)]))

    def _call(self, item: dict[str, Any], where: str) -> None:
        call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments", "{}")
        if not isinstance(call_id, str) or not call_id:
            raise wrong_type(f"{where}.call_id", "a non-empty string", call_id)
        if not isinstance(name, str) or not name:
            raise wrong_type(f"{where}.name", "a non-empty string", name)
        if not isinstance(arguments, str):
            raise wrong_type(f"{where}.arguments", "a string", arguments)
        if self.parts is None:
            self._before_turn(where)
            self.parts = []
        call = ToolCall(call_id, name, arguments)
        self.parts.append(call)
        self.open[call_id] = call
        self.order.append(call_id)

    def _output(self, item: dict[str, Any], where: str) -> None:
        self._end_assistant()
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise wrong_type(f"{where}.call_id", "a non-empty string", call_id)
        parts = input_parts(item.get("output"), f"{where}.output")
        content = "\n".join(p.text for p in parts if isinstance(p, Text))
        attachments = tuple(p for p in parts if isinstance(p, (Image, File)))
        call = self.open.pop(call_id, None)
        if call is None and not (self.continuing and not self.turns):
            raise OpenAIError(400, f"No function call found for the function call output with call_id {call_id}.",
                              param=f"{where}.call_id", code="invalid_value")
        if call is None:  # answers a call of the stored conversation: named once it is open
            self.order.append(call_id)
            call = ToolCall(call_id, "")
        self.results[call_id] = ToolResult(call_id, call.name, content, attachments=attachments)

    def _before_turn(self, where: str) -> None:
        """A new turn begins: the calls before it must all be answered."""
        if self.open:
            raise OpenAIError(400, f"No tool output found for function call {next(iter(self.open))}: each function "
                                   f"call's output must come before the next message.", param=where,
                              code="invalid_value")
        self._end_results()

    def _end_assistant(self) -> None:
        if self.parts is not None:
            if self.parts:
                self.turns.append(Turn(Role.ASSISTANT, self.parts))
            self.parts = None

    def _end_results(self) -> None:
        if self.results:
            self.turns.append(Turn(Role.TOOL, [self.results[i] for i in self.order if i in self.results]))
            self.results, self.order = {}, []

