"""How an answer is written on the wire, for each API the endpoint speaks: one ``Wire`` per request, which turns
the run's ``Answer`` into a JSON body, or the stream's deltas into server-sent events. ``ChatWire`` writes Chat
Completions (``chat.completion`` and ``chat.completion.chunk``); the Responses API has its own
(``session.openai._responses_wire``). A request's ``Completion`` runs the message, follows it and decides what
goes out when; its wire only says how."""

from __future__ import annotations

from typing import Any, Protocol

from session.openai._answer import Answer, sse, stream_tool_calls
from session.openai._errors import OpenAIError


class Wire(Protocol):
    """One request's answer in one API's format. A stream is ``opening()``, then ``delta(d)`` for each delta
    (``{"content": text}`` or ``{"reasoning_content": text}``, as ``Deltas`` makes them) as the run goes on, then
    ``closing(answer, tail)`` once the run has ended (``tail``: the deltas that complete it), or ``failing(error)``
    when it failed. ``burst(answer)`` is a whole stream at once: what a retry of a streaming request gets."""

    id: str
    created: int

    def body(self, answer: Answer) -> dict[str, Any]: ...

    def opening(self) -> list[bytes]: ...

    def delta(self, delta: dict[str, str]) -> list[bytes]: ...

    def closing(self, answer: Answer, tail: list[dict[str, str]]) -> list[bytes]: ...

    def failing(self, error: OpenAIError) -> list[bytes]: ...

    def burst(self, answer: Answer) -> list[bytes]: ...


DONE = b"data: [DONE]\n\n"


class ChatWire:
    """Chat Completions: a ``chat.completion`` object, or ``chat.completion.chunk`` events ending ``[DONE]``."""

    def __init__(self, id: str, created: int, model: str, *, include_usage: bool = False) -> None:
        self.id = id
        self.created = created
        self.model = model
        self.include_usage = include_usage

    def body(self, answer: Answer) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": answer.message, "logprobs": None,
                             "finish_reason": answer.finish_reason}],
                "usage": answer.usage}

    def opening(self) -> list[bytes]:
        return [self._chunk({"role": "assistant", "content": ""})]

    def delta(self, delta: dict[str, str]) -> list[bytes]:
        return [self._chunk(delta)]

    def closing(self, answer: Answer, tail: list[dict[str, str]]) -> list[bytes]:
        message = answer.message
        out = [self._chunk(delta) for delta in tail]
        if answer.finish_reason == "content_filter":  # a guardrail stopped the run: its refusal, no content
            out.append(self._chunk({"refusal": message["refusal"]}))
        if "tool_calls" in message:
            out.append(self._chunk(stream_tool_calls(message["tool_calls"])))
        out.append(self._chunk({}, answer.finish_reason))
        if self.include_usage:
            out.append(sse({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                            "model": self.model, "choices": [], "usage": answer.usage}))
        return out + [DONE]

    def failing(self, error: OpenAIError) -> list[bytes]:
        # A run that failed ends the stream without [DONE]; one the shutdown stopped ends it as every stream
        # ends, after the error: the server is well, and the client may retry once it is back.
        return [sse(error.body())] + ([DONE] if error.code == "server_shutting_down" else [])

    def burst(self, answer: Answer) -> list[bytes]:
        message = answer.message
        tail = [{key: message[key]} for key in ("reasoning_content", "content") if message.get(key)]
        return self.opening() + self.closing(answer, tail)

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk: dict[str, Any] = {
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if self.include_usage:
            chunk["usage"] = None  # as OpenAI does: only the last chunk has usage
        return sse(chunk)
