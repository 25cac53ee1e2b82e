"""``MessageEvents``: the server-sent events of one Messages API stream, read into deltas."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from loop import Delta, Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage, UsageDelta
from provider._http import SSEEvent, status_error

# A redacted_thinking block travels as a Reasoning part whose signature is this prefix and the block's data;
# the API signs thinking in base64, which never contains ":". It must go back unchanged like signed thinking.
REDACTED = "redacted_thinking:"
_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length",
           "refusal": "content_filter", "pause_turn": "pause", "model_context_window_exceeded": "length"}
_ERROR_STATUS = {"invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
                 "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429, "api_error": 500,
                 "timeout_error": 504, "overloaded_error": 529}
_USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


class MessageEvents:
    """Reads the events of one response into deltas, keeping what spans events: the usage (``message_delta``
    counts are cumulative, so a later count replaces an earlier one), the model ``message_start`` names, the
    finish reason, the ``tool_use`` blocks still open by index, and whether ``message_stop`` has arrived.

    A call to ``output_tool`` (the tool forced for structured output, if one was) is read as text, and a
    response that finished by calling it finishes with ``"stop"``: the call is the answer, not a call for the
    loop to run. Shapes the API reference does not draw degrade to "nothing"; ``ping`` and event types added
    later are ignored. An ``error`` event raises the typed error for its ``type``.
    """

    __slots__ = ("who", "output_tool", "model", "done", "_usage", "_reason", "_tools")

    def __init__(self, who: str, output_tool: str | None = None) -> None:
        self.who = who
        self.output_tool = output_tool
        self.model: str | None = None
        self.done = False  # message_stop arrived: the response is complete
        self._usage: dict[str, int] = {}
        self._reason = "stop"
        self._tools: dict[int, _ToolBlock] = {}  # tool_use blocks still open, by index

    def deltas(self, event: SSEEvent) -> list[Delta]:
        data = _object(event.json(self.who))
        match data.get("type"):
            case "content_block_start":
                return self._block_start(data)
            case "content_block_delta":
                return self._block_delta(data)
            case "content_block_stop":
                return self._block_stop(data)
            case "message_start":
                return self._message_start(data)
            case "message_delta":
                return self._message_delta(data)
            case "message_stop":
                return self._message_stop()
            case "error":
                raise self._error(data)
        return []  # ping, and event types added later, as the API reference asks

    def usage(self) -> UsageDelta:
        return UsageDelta(_usage(self._usage), self.model)

    def finish(self) -> Finish:
        if self.output_tool is not None and self._reason == "tool_calls":
            return Finish("stop")
        return Finish(self._reason)

    def _block_start(self, data: Mapping[str, Any]) -> list[Delta]:
        block = _object(data.get("content_block"))
        kind = block.get("type")
        out: list[Delta] = []
        if kind == "text":
            if text := _string(block.get("text")):
                out.append(TextDelta(text))
        elif kind == "tool_use":
            index = _index(data)
            output = self.output_tool is not None and block.get("name") == self.output_tool
            self._tools[index] = _ToolBlock(output, block.get("input"))
            if not output:
                out.append(ToolCallDelta(index, _string(block.get("id")) or None, _string(block.get("name")) or None,
                                         ""))
        elif kind == "thinking":
            if thought := _string(block.get("thinking")):
                out.append(ReasoningDelta(thought))
            if signature := _string(block.get("signature")):
                out.append(ReasoningDelta("", signature))
        elif kind == "redacted_thinking":
            if secret := _string(block.get("data")):
                out.append(ReasoningDelta("", REDACTED + secret))
        return out

    def _block_delta(self, data: Mapping[str, Any]) -> list[Delta]:
        delta = _object(data.get("delta"))
        kind = delta.get("type")
        if kind == "text_delta":
            if text := _string(delta.get("text")):
                return [TextDelta(text)]
        elif kind == "input_json_delta":
            if fragment := _string(delta.get("partial_json")):
                index = _index(data)
                tool = self._tools.get(index)
                if tool is None:
                    return [ToolCallDelta(index, arguments_fragment=fragment)]
                tool.streamed = True
                return [TextDelta(fragment) if tool.output else ToolCallDelta(index, arguments_fragment=fragment)]
        elif kind == "thinking_delta":
            if thought := _string(delta.get("thinking")):
                return [ReasoningDelta(thought)]
        elif kind == "signature_delta":
            if signature := _string(delta.get("signature")):
                return [ReasoningDelta("", signature)]
        return []

    def _block_stop(self, data: Mapping[str, Any]) -> list[Delta]:
        index = _index(data)
        tool = self._tools.pop(index, None)
        rest = None if tool is None else tool.unstreamed(index)
        return [] if rest is None else [rest]

    def _message_start(self, data: Mapping[str, Any]) -> list[Delta]:
        message = _object(data.get("message"))
        self._usage.update(_usage_fields(_object(message.get("usage"))))
        self.model = _string(message.get("model")) or None
        return []

    def _message_delta(self, data: Mapping[str, Any]) -> list[Delta]:
        if stop := _string(_object(data.get("delta")).get("stop_reason")):
            self._reason = _FINISH.get(stop, stop)
        self._usage.update(_usage_fields(_object(data.get("usage"))))
        return []

    def _message_stop(self) -> list[Delta]:
        self.done = True
        # Blocks the server never closed still owe the input no input_json_delta carried.
        rests = (tool.unstreamed(index) for index, tool in self._tools.items())
        return [rest for rest in rests if rest is not None]

    def _error(self, data: Mapping[str, Any]) -> Exception:
        error = _object(data.get("error"))
        kind = error.get("type")
        status = _ERROR_STATUS.get(kind, 500) if isinstance(kind, str) else 500
        return status_error(self.who, status, json.dumps({"error": error}), {})


class _ToolBlock:
    """A ``tool_use`` block being streamed: whether it carries structured output, and its input so far."""

    __slots__ = ("output", "initial", "streamed")

    def __init__(self, output: bool, initial: Any) -> None:
        self.output = output
        self.initial = initial
        self.streamed = False

    def unstreamed(self, index: int) -> Delta | None:
        """The block's input when no ``input_json_delta`` carried it: the API streams ``{}`` for a tool with
        no arguments that way, and some compatible servers put the whole input in ``content_block_start``."""
        if self.streamed:
            return None
        arguments = json.dumps(self.initial if isinstance(self.initial, dict) else {})
        return TextDelta(arguments) if self.output else ToolCallDelta(index, arguments_fragment=arguments)


def _index(data: Mapping[str, Any]) -> int:
    index = data.get("index")
    return index if isinstance(index, int) else 0


def _object(value: Any) -> Mapping[str, Any]:
    """``value`` if it is a JSON object; a stream that breaks the documented shapes degrades to "nothing"."""
    return value if isinstance(value, dict) else {}


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _usage_fields(usage: Mapping[str, Any]) -> dict[str, int]:
    return {k: v for k in _USAGE_FIELDS if isinstance(v := usage.get(k), int) and not isinstance(v, bool)}


def _usage(fields: Mapping[str, int]) -> Usage:
    read = fields.get("cache_read_input_tokens", 0)
    write = fields.get("cache_creation_input_tokens", 0)
    # Anthropic counts cached input apart; Usage.input_tokens counts every input token, as OpenAI does.
    return Usage(fields.get("input_tokens", 0) + read + write, fields.get("output_tokens", 0), read, write)
