"""The Responses API's answer on the wire: a ``response`` object, or its stream of semantic events.

Output items. What the agent did (the lines ``reasoning_content`` holds on the Chat Completions endpoint: the
model's reasoning, tool calls and results, verification reports, a degradation) is a ``reasoning`` item whose
``summary_text`` is that trace: a summary of the work, never a model's raw reasoning, so no ``encrypted_content``
goes with it and one sent back is dropped. The answer is a ``message`` item with one ``output_text`` part (a
guardrail's refusal: one ``refusal`` part); calls left for the client are ``function_call`` items.

Status. ``completed`` for a clean run (also when it hands calls to the client); ``incomplete`` when it was
degraded (``incomplete_details.reason`` ``max_output_tokens``, the closest the API has to "a budget or cap
stopped it"; the reasoning item's last line says which) or stopped by a guardrail (``content_filter``).

Streaming. ``response.created`` and ``response.in_progress``, then each item as it happens: ``output_item.added``,
its part added, its text deltas (``response.reasoning_summary_text.delta``, ``response.output_text.delta``), the
text done, the part done, ``output_item.done``; one item is open at a time, so work written after an answer (a
verifier's report on a draft) is a new reasoning item, and the answer after it a new message item. Calls left for
the client follow as ``function_call`` items with their arguments. The stream ends with ``response.completed`` (or
``response.incomplete``) carrying the whole response: the items exactly as they were streamed. A run that failed
ends with an ``error`` event and ``response.failed``. Every event has its ``sequence_number``.
"""

from __future__ import annotations

import secrets
from typing import Any

from session._serving import json_text
from session.openai._answer import Answer
from session.openai._errors import OpenAIError


def _item_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


def _usage(chat: dict[str, Any]) -> dict[str, Any]:
    details = chat.get("prompt_tokens_details") or {}
    return {"input_tokens": chat["prompt_tokens"], "input_tokens_details": {"cached_tokens": details.get("cached_tokens", 0)},
            "output_tokens": chat["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": chat["total_tokens"]}


def _status(answer: Answer) -> tuple[str, dict[str, str] | None]:
    if answer.finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if answer.finish_reason == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def _reasoning(text: str, item_id: str | None = None) -> dict[str, Any]:
    return {"type": "reasoning", "id": item_id or _item_id("rs"), "summary": [{"type": "summary_text", "text": text}]}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message(part: dict[str, Any], item_id: str | None = None, status: str = "completed") -> dict[str, Any]:
    return {"type": "message", "id": item_id or _item_id("msg"), "status": status, "role": "assistant",
            "content": [part]}


def _function_call(call: dict[str, Any], item_id: str | None = None, status: str = "completed") -> dict[str, Any]:
    return {"type": "function_call", "id": item_id or _item_id("fc"), "call_id": call["id"],
            "name": call["function"]["name"], "arguments": call["function"]["arguments"], "status": status}


def output_items(answer: Answer) -> list[dict[str, Any]]:
    """The output items of a non-streamed response."""
    message = answer.message
    items = []
    if message.get("reasoning_content"):
        items.append(_reasoning(message["reasoning_content"]))
    if answer.finish_reason == "content_filter":
        items.append(_message({"type": "refusal", "refusal": message["refusal"]}))
    elif message.get("content"):
        items.append(_message(_text_part(message["content"])))
    items += [_function_call(call) for call in message.get("tool_calls", ())]
    return items


class ResponsesWire:
    """One response: ``id``, ``created`` (its ``created_at``), the model's name, the ``settings`` the response
    echoes (instructions, tools, text format, sampling parameters, metadata ...) and the response it continues."""

    def __init__(self, id: str, created: int, model: str, *, settings: dict[str, Any],
                 previous: str | None = None, store: bool = True) -> None:
        self.id = id
        self.created = created
        self.model = model
        self.settings = settings
        self.previous = previous
        self.store = store
        self.sequence = 0
        self.items: list[dict[str, Any]] = []  # the items streamed so far, as they stand
        self.open: dict[str, Any] | None = None  # the item being streamed
        self.text = ""  # the open item's text so far

    def response(self, status: str, output: list[dict[str, Any]], *, usage: dict[str, Any] | None = None,
                 incomplete: dict[str, str] | None = None, error: dict[str, Any] | None = None) -> dict[str, Any]:
        """The ``response`` object at ``status``."""
        return {"id": self.id, "object": "response", "created_at": self.created, "status": status, "error": error,
                "incomplete_details": incomplete, "model": self.model, "output": output,
                "previous_response_id": self.previous, "store": self.store, "usage": usage, **self.settings}

    def body(self, answer: Answer) -> dict[str, Any]:
        status, incomplete = _status(answer)
        return self.response(status, output_items(answer), usage=_usage(answer.usage), incomplete=incomplete)

    def opening(self) -> list[bytes]:
        snapshot = self.response("in_progress", [])
        return [self._event("response.created", response=snapshot),
                self._event("response.in_progress", response=snapshot)]

    def delta(self, delta: dict[str, str]) -> list[bytes]:
        out: list[bytes] = []
        if "reasoning_content" in delta:
            text = delta["reasoning_content"]
            if self.open is None or self.open["type"] != "reasoning":
                out += self._close()
                out += self._add(_reasoning("") | {"summary": []}, "response.reasoning_summary_part.added",
                                 part={"type": "summary_text", "text": ""}, summary_index=0)
            out.append(self._on_open("response.reasoning_summary_text.delta", summary_index=0, delta=text))
        elif "content" in delta:
            text = delta["content"]
            if self.open is None or self.open["type"] != "message":
                if self.items and text.startswith("\n\n"):  # another answer: a message of its own, no separator
                    text = text[2:]
                out += self._close()
                out += self._add(_message(_text_part(""), status="in_progress") | {"content": []},
                                 "response.content_part.added", part=_text_part(""), content_index=0)
            out.append(self._on_open("response.output_text.delta", content_index=0, delta=text, logprobs=[]))
        else:
            return out
        self.text += text
        return out

    def closing(self, answer: Answer, tail: list[dict[str, str]]) -> list[bytes]:
        out = [data for delta in tail for data in self.delta(delta)]
        out += self._close()
        message = answer.message
        if answer.finish_reason == "content_filter":
            refusal = message["refusal"]
            item = _message({"type": "refusal", "refusal": ""}, status="in_progress") | {"content": []}
            out += self._add(item, "response.content_part.added", part={"type": "refusal", "refusal": ""},
                             content_index=0)
            out.append(self._on_open("response.refusal.delta", content_index=0, delta=refusal))
            out.append(self._on_open("response.refusal.done", content_index=0, refusal=refusal))
            out.append(self._on_open("response.content_part.done", content_index=0,
                                     part={"type": "refusal", "refusal": refusal}))
            out += self._done(_message({"type": "refusal", "refusal": refusal}, item["id"]))
        for call in message.get("tool_calls", ()):
            item = _function_call(call, status="in_progress") | {"arguments": ""}
            arguments = call["function"]["arguments"]
            out += self._add(item)
            out.append(self._on_open("response.function_call_arguments.delta", delta=arguments))
            out.append(self._on_open("response.function_call_arguments.done", arguments=arguments,
                                     name=call["function"]["name"]))
            out += self._done(_function_call(call, item["id"]))
        status, incomplete = _status(answer)
        final = self.response(status, self.items, usage=_usage(answer.usage), incomplete=incomplete)
        return out + [self._event(f"response.{status}", response=final)]

    def failing(self, error: OpenAIError) -> list[bytes]:
        out = self._close()
        failed = self.response("failed", self.items, error={"code": error.code or "server_error",
                                                             "message": error.message})
        return out + [self._event("error", code=error.code, message=error.message, param=error.param),
                      self._event("response.failed", response=failed)]

    def burst(self, answer: Answer) -> list[bytes]:
        message = answer.message
        tail = [{key: message[key]} for key in ("reasoning_content", "content") if message.get(key)]
        return self.opening() + self.closing(answer, tail)

    # -- the events of one item -----------------------------------------------------------------------------

    def _add(self, item: dict[str, Any], part_event: str | None = None, **part: Any) -> list[bytes]:
        self.open, self.text = item, ""
        out = [self._event("response.output_item.added", output_index=len(self.items), item=item)]
        if part_event is not None:
            out.append(self._on_open(part_event, **part))
        return out

    def _on_open(self, kind: str, **fields: Any) -> bytes:
        assert self.open is not None  # every item event follows its output_item.added
        return self._event(kind, item_id=self.open["id"], output_index=len(self.items), **fields)

    def _close(self) -> list[bytes]:
        """The events that finish the open text item, if any."""
        item, text = self.open, self.text
        if item is None:
            return []
        if item["type"] == "reasoning":
            part = {"type": "summary_text", "text": text}
            return [self._on_open("response.reasoning_summary_text.done", summary_index=0, text=text),
                    self._on_open("response.reasoning_summary_part.done", summary_index=0, part=part),
                    *self._done(_reasoning(text, item["id"]))]
        part = _text_part(text)
        return [self._on_open("response.output_text.done", content_index=0, text=text, logprobs=[]),
                self._on_open("response.content_part.done", content_index=0, part=part),
                *self._done(_message(part, item["id"]))]

    def _done(self, item: dict[str, Any]) -> list[bytes]:
        data = self._event("response.output_item.done", output_index=len(self.items), item=item)
        self.items.append(item)
        self.open, self.text = None, ""
        return [data]

    def _event(self, kind: str, **fields: Any) -> bytes:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {kind}\ndata: {json_text(event, separators=(',', ':'))}\n\n".encode()
