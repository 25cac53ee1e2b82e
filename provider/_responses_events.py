"""``ResponseEvents``: the semantic server-sent events of one streamed Responses API call, read into deltas."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from loop import Delta, Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from loop.errors import ProviderError, StreamError
from provider._http import SSEEvent, excerpt, status_error
from provider._responses_items import reasoning_signature

_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}
# What an error's ``code`` (or ``type``) says, as an HTTP status; codes not named here are read by their shape.
_ERROR_STATUS = {
    "server_error": 500, "api_error": 500, "rate_limit_exceeded": 429, "insufficient_quota": 429,
    "invalid_prompt": 400, "invalid_request_error": 400, "context_length_exceeded": 400, "invalid_api_key": 401,
    "authentication_error": 401, "permission_error": 403, "not_found_error": 404, "model_not_found": 404,
    "vector_store_timeout": 504, "overloaded": 503, "overloaded_error": 503,
}
_CLIENT_FAULT = ("invalid_", "image_", "unsupported_", "empty_")
_REASONING_TEXT = ("response.reasoning_summary_text.delta", "response.reasoning_text.delta")


class _Item:
    """One output item being streamed: its type, the tool call number it is (function calls only), and whether
    deltas carried its content (else ``response.output_item.done`` does)."""

    __slots__ = ("kind", "slot", "streamed", "part")

    def __init__(self, kind: str, slot: int = -1) -> None:
        self.kind = kind
        self.slot = slot
        self.streamed = False
        self.part: Any = None  # the summary part (reasoning) last streamed


class ResponseEvents:
    """Reads the events of one response into deltas, keeping what spans events: the output items still open
    (by ``output_index``), the model that answered, the usage, and whether a terminal event has arrived.

    Text (``response.output_text.delta``) and refusals become ``TextDelta``; reasoning summaries (and the raw
    reasoning text some servers stream) become ``ReasoningDelta``, the parts of one summary joined by a blank
    line; every ``function_call`` item is a tool call numbered from 0 in the order the items were added, its id
    the item's ``call_id``. When a reasoning item is done, a ``ReasoningDelta`` with no text carries its id and
    ``encrypted_content`` as the signature (``reasoning_signature``), so the next request can send it back.
    Content an item's done event holds that no delta carried (a compatible server that sends items whole) is
    streamed then. ``response.completed`` and ``response.incomplete`` end the response; ``response.failed`` and
    ``error`` raise the typed error their code names. Event types this does not know are ignored, as the API
    reference asks of clients.
    """

    __slots__ = ("who", "model", "usage", "done", "written", "_items", "_calls", "_refused", "_incomplete")

    def __init__(self, who: str) -> None:
        self.who = who
        self.model: str | None = None
        self.usage: Usage | None = None
        self.done = False  # a terminal event arrived: the response is complete
        self.written = 0  # characters of answer streamed, to estimate the output when no usage comes
        self._items: dict[int, _Item] = {}
        self._calls = 0
        self._refused = False
        self._incomplete: str | None = None

    def finish(self) -> Finish:
        if self._incomplete is not None:
            return Finish(_INCOMPLETE.get(self._incomplete, self._incomplete))
        if self._calls:
            return Finish("tool_calls")
        return Finish("content_filter" if self._refused else "stop")

    def deltas(self, event: SSEEvent) -> list[Delta]:
        data = event.json(self.who)
        if not isinstance(data, dict):
            raise StreamError(f"{self.who} sent an event that is not a JSON object on line {event.line}: "
                              f"{excerpt(event.data, 200)!r}")
        kind = data.get("type") or event.event
        try:
            out = self._read(kind, data)
        except (AttributeError, TypeError, ValueError) as exc:
            raise StreamError(f"{self.who} sent a {kind!r} event of an unexpected shape on line {event.line} "
                              f"({type(exc).__name__}: {exc}): {excerpt(event.data, 200)!r}") from None
        for delta in out:
            if isinstance(delta, (TextDelta, ReasoningDelta)):
                self.written += len(delta.text)
            elif isinstance(delta, ToolCallDelta):
                self.written += len(delta.arguments_fragment)
        return out

    def _read(self, kind: Any, data: Mapping[str, Any]) -> list[Delta]:
        match kind:
            case "response.output_text.delta":
                self._item(data, "message").streamed = True
                return _text(TextDelta, data.get("delta"))
            case "response.refusal.delta":
                self._item(data, "message").streamed = True
                self._refused = True
                return _text(TextDelta, data.get("delta"))
            case "response.function_call_arguments.delta":
                item = self._item(data, "function_call")
                item.streamed = True
                fragment = _string(data.get("delta"))
                return [ToolCallDelta(item.slot, arguments_fragment=fragment)] if fragment else []
            case kind if kind in _REASONING_TEXT:
                return self._reasoning_text(data)
            case "response.output_item.added":
                return self._added(data)
            case "response.output_item.done":
                return self._done(data)
            case "response.created" | "response.in_progress":
                self._response(data)
            case "response.completed":
                self._response(data)
                self.done = True
            case "response.incomplete":
                response = self._response(data)
                reason = _object(response.get("incomplete_details")).get("reason")
                self._incomplete = _string(reason) or "incomplete"
                self.done = True
            case "response.failed":
                raise self._error(_object(self._response(data).get("error")), failed=True)
            case "error":
                raise self._error(_object(data.get("error")) or data, failed=False)
        return []  # content parts, done events of deltas, and event types added later

    def _item(self, data: Mapping[str, Any], kind: str) -> _Item:
        """The open item an event names by ``output_index``; one the server never announced is opened now."""
        index = _index(data)
        item = self._items.get(index)
        if item is None:
            item = self._open(index, kind)
        return item

    def _open(self, index: int, kind: str) -> _Item:
        slot = -1
        if kind == "function_call":
            slot, self._calls = self._calls, self._calls + 1
        item = self._items[index] = _Item(kind, slot)
        return item

    def _added(self, data: Mapping[str, Any]) -> list[Delta]:
        body = _object(data.get("item"))
        kind = _string(body.get("type"))
        item = self._open(_index(data), kind)
        if kind == "function_call":
            return [ToolCallDelta(item.slot, _string(body.get("call_id")) or None, _string(body.get("name")) or None,
                                  "")]
        return []

    def _reasoning_text(self, data: Mapping[str, Any]) -> list[Delta]:
        item = self._item(data, "reasoning")
        text = _string(data.get("delta"))
        if not text:
            return []
        part = data.get("summary_index", data.get("content_index"))
        if item.streamed and part != item.part:
            text = "\n\n" + text  # the next part of the summary
        item.streamed, item.part = True, part
        return [ReasoningDelta(text)]

    def _done(self, data: Mapping[str, Any]) -> list[Delta]:
        body = _object(data.get("item"))
        kind = _string(body.get("type"))
        index = _index(data)
        item = self._items.pop(index, None)
        out: list[Delta] = []
        if kind == "function_call":
            if item is None:
                item = self._open(index, kind)
                self._items.pop(index)
                out.append(ToolCallDelta(item.slot, _string(body.get("call_id")) or None,
                                         _string(body.get("name")) or None, ""))
            if not item.streamed:
                out.append(ToolCallDelta(item.slot, arguments_fragment=_arguments(body.get("arguments"))))
        elif kind == "message":
            if item is None or not item.streamed:
                for part in _list(body.get("content")):
                    part = _object(part)
                    if part.get("type") == "refusal":
                        self._refused = True
                        out += _text(TextDelta, part.get("refusal"))
                    else:
                        out += _text(TextDelta, part.get("text"))
        elif kind == "reasoning":
            if item is None or not item.streamed:
                summary = "\n\n".join(_string(_object(p).get("text")) for p in _list(body.get("summary")))
                out += _text(ReasoningDelta, summary)
            if item_id := _string(body.get("id")):
                out.append(ReasoningDelta("", reasoning_signature(item_id, _string(body.get("encrypted_content")))))
        return out

    def _response(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """The ``response`` object a lifecycle event carries; its model and usage are kept."""
        response = _object(data.get("response"))
        if model := _string(response.get("model")):
            self.model = model
        usage = response.get("usage")
        if isinstance(usage, dict):
            self.usage = _usage(usage)
        return response

    def _error(self, error: Mapping[str, Any], *, failed: bool) -> ProviderError:
        code = _string(error.get("code")) or _string(error.get("type"))
        if code in _ERROR_STATUS:
            status = _ERROR_STATUS[code]
        elif code.startswith(_CLIENT_FAULT) or "policy" in code:
            status = 400
        else:
            status = 500  # the server failed and did not say why: a later try may succeed
        if not error:
            error = {"message": "the response failed without saying why" if failed else "an error event"}
        return status_error(self.who, status, json.dumps({"error": dict(error)}), {})


def _usage(data: Mapping[str, Any]) -> Usage:
    """A response's usage as ``Usage``. ``input_tokens`` counts every input token, those read from the prompt
    cache (``input_tokens_details.cached_tokens``) included, as ``Usage.input_tokens`` does; ``output_tokens``
    includes the reasoning tokens (``output_tokens_details.reasoning_tokens``)."""
    details = _object(data.get("input_tokens_details"))
    return Usage(
        input_tokens=_count(data.get("input_tokens")),
        output_tokens=_count(data.get("output_tokens")),
        cache_read_tokens=_count(details.get("cached_tokens")),
        cache_write_tokens=_count(details.get("cache_write_tokens")),
    )


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value if isinstance(value, dict) else {})  # some servers send the object itself


def _text(kind: Any, value: Any) -> list[Delta]:
    text = _string(value)
    return [kind(text)] if text else []


def _index(data: Mapping[str, Any]) -> int:
    index = data.get("output_index")
    return index if isinstance(index, int) and not isinstance(index, bool) else 0


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _object(value: Any) -> Mapping[str, Any]:
    """``value`` if it is a JSON object; a stream that breaks the documented shapes degrades to "nothing"."""
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""
