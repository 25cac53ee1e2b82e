"""Reading Chat Completions stream chunks into deltas, choice by choice."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from loop import Delta, Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from loop.errors import StreamError
from provider._http import SSEEvent, excerpt, status_error

_FINISH = {"tool_calls": "tool_calls", "function_call": "tool_calls"}


class Chunks:
    """Reads the chunks of one response into deltas, keeping what spans chunks: the usage (a total, so the last
    report wins), the model that answered, and per choice its finish reason and tool-call slots. Calls to
    ``output_tool`` (if one was forced for structured output) are read as text."""

    __slots__ = ("who", "output_tool", "usage", "model", "choices")

    def __init__(self, who: str, output_tool: str | None = None) -> None:
        self.who = who
        self.output_tool = output_tool
        self.usage: Usage | None = None
        self.model: str | None = None
        self.choices: dict[int, _Choice] = {0: _Choice()}

    def deltas(self, event: SSEEvent) -> list[Delta]:
        chunk = event.json(self.who)
        if not isinstance(chunk, dict):
            raise StreamError(f"{self.who} sent a chunk that is not a JSON object on line {event.line}")
        error = chunk.get("error")
        if error or event.event == "error":
            raise _stream_error(self.who, error or chunk)
        try:
            return self._read(chunk)
        except (AttributeError, TypeError, ValueError) as exc:
            raise StreamError(
                f"{self.who} sent a chunk of an unexpected shape in the event on line {event.line} "
                f"({type(exc).__name__}: {exc}): {excerpt(event.data, 200)!r}"
            ) from None

    def finishes(self) -> list[Finish]:
        """One ``Finish`` per choice seen, in choice order; choice 0 always."""
        return [Finish(self.choices[i].finish(), i) for i in sorted(self.choices)]

    def _read(self, chunk: dict[str, Any]) -> list[Delta]:
        out: list[Delta] = []
        usage = chunk.get("usage")
        if usage:
            self.usage = _usage(usage)
        model = chunk.get("model")
        if model and isinstance(model, str):
            self.model = model
        for choice in chunk.get("choices") or ():
            index = choice.get("index")
            if type(index) is not int:
                if index is not None:
                    raise ValueError(f"a choice index must be a whole number, got {index!r}")
                index = 0  # servers answering one choice sometimes leave the index out
            state = self.choices.get(index)
            if state is None:
                if index < 0:
                    raise ValueError(f"a choice index must be a whole number, got {index!r}")
                state = self.choices[index] = _Choice()
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning:
                out.append(ReasoningDelta(_text(reasoning), None, index))
            content = delta.get("content")
            if content:
                out.append(TextDelta(_text(content), index))
            refusal = delta.get("refusal")
            if refusal:
                # Structured output puts a refusal here instead of in content; dropping it would leave an
                # empty answer that looks like success.
                state.refused = True
                out.append(TextDelta(_text(refusal), index))
            for call in delta.get("tool_calls") or ():
                fn = call.get("function") or {}
                name = fn.get("name") or None
                arguments = fn.get("arguments")
                if arguments is None:
                    arguments = ""
                elif not isinstance(arguments, str):
                    arguments = json.dumps(arguments)  # some servers send the object itself
                call_id = call.get("id") or None
                slot = state.slot(call.get("index"), call_id)
                if name is not None and name == self.output_tool:
                    state.output.add(slot)
                if slot in state.output:
                    if arguments:
                        out.append(TextDelta(arguments, index))
                    continue
                state.other_calls = True
                out.append(ToolCallDelta(slot, call_id, name, arguments, index))
            reason = choice.get("finish_reason")
            if reason:
                state.reason = _FINISH.get(reason, reason)
        return out


class _Choice:
    """What one choice keeps across chunks: its finish reason, whether it refused, which tool call each
    fragment belongs to (every choice numbers its calls from 0), and which calls carry structured output."""

    __slots__ = ("reason", "refused", "output", "other_calls", "_slot_of_id", "_id_of_slot", "_moved", "_last",
                 "_next")

    def __init__(self) -> None:
        self.reason: str | None = None
        self.refused = False
        self.output: set[int] = set()  # slots of calls to the forced output tool, streamed as text
        self.other_calls = False
        self._slot_of_id: dict[str, int] = {}
        self._id_of_slot: dict[int, str] = {}
        self._moved: dict[int, int] = {}  # wire index -> slot, for a second call sent on a used index
        self._last = 0
        self._next = 0

    def finish(self) -> str:
        if self.refused and self.reason in (None, "stop"):
            return "content_filter"
        if self.reason == "tool_calls" and self.output and not self.other_calls:
            return "stop"  # the forced output call is the answer, not a call for the loop to run
        return self.reason or "stop"

    def slot(self, index: Any, call_id: str | None) -> int:
        """The index this fragment's call gets. It is the wire ``index``, except that servers which omit the
        index (or send several calls on one) get a fresh index for every new call id, so calls never merge."""
        if isinstance(index, int) and not isinstance(index, bool):
            slot = self._moved.get(index, index)
            owner = self._id_of_slot.get(slot)
            if call_id is not None and owner is not None and owner != call_id:
                slot = self._moved[index] = max(self._next, index + 1)
        elif call_id is None:
            slot = self._last
        else:
            slot = self._slot_of_id.get(call_id, self._next)
        if call_id is not None:
            self._slot_of_id[call_id] = slot
            self._id_of_slot[slot] = call_id
        self._last = slot
        self._next = max(self._next, slot + 1)
        return slot


def _text(value: Any) -> str:
    """A delta's text: a string, or the text parts of a list some servers send instead."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(p.get("text") or "" for p in value if isinstance(p, dict) and p.get("type") == "text")
    raise TypeError(f"expected text, got {type(value).__name__}")


def _usage(data: Mapping[str, Any]) -> Usage:
    """A usage object as ``Usage``. ``prompt_tokens`` counts every input token, those read from the prompt cache
    (``prompt_tokens_details.cached_tokens``) included, as ``Usage.input_tokens`` does. OpenAI charges nothing
    for writing its cache and reports no writes; routers in front of Anthropic models (OpenRouter) report them
    as ``prompt_tokens_details.cache_write_tokens``, read here too."""
    details = data.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=int(data.get("prompt_tokens") or 0),
        output_tokens=int(data.get("completion_tokens") or 0),
        cache_read_tokens=int(details.get("cached_tokens") or 0),
        cache_write_tokens=int(details.get("cache_write_tokens") or 0),
    )


# What an error object's ``code`` or ``type`` says, as an HTTP status (OpenAI, vLLM and llama.cpp spellings).
_ERROR_STATUS = {
    "invalid_request_error": 400, "BadRequestError": 400, "authentication_error": 401, "invalid_api_key": 401,
    "permission_error": 403, "not_found_error": 404, "rate_limit_exceeded": 429, "rate_limit_error": 429,
    "insufficient_quota": 429, "requests": 429, "tokens": 429, "server_error": 500, "api_error": 500,
    "InternalServerError": 500, "overloaded": 503, "overloaded_error": 503, "unavailable_error": 503,
}


def _stream_error(who: str, error: Any) -> Exception:
    """The typed error for an ``{"error": ...}`` object sent inside a stream that began with HTTP 200."""
    if not isinstance(error, dict):
        error = {"message": str(error)}
    status = 500
    code, kind = error.get("code"), error.get("type")
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code < 600:
        status = code  # vLLM sends the status itself
    elif isinstance(code, str) and code in _ERROR_STATUS:
        status = _ERROR_STATUS[code]
    elif isinstance(kind, str) and kind in _ERROR_STATUS:
        status = _ERROR_STATUS[kind]
    return status_error(who, status, json.dumps({"error": error}), {})


def not_a_stream(who: str, text: str) -> Exception:
    """The error for a JSON document where an event stream was asked for."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("error"):
        return _stream_error(who, data["error"])
    return StreamError(f"{who} answered with a JSON document instead of an event stream; does it support "
                       f"stream=true? {excerpt(text, 200)!r}")
