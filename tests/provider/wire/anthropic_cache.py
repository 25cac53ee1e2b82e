"""A loopback server that answers like the Messages API and keeps a prompt cache as Anthropic describes it.

``CachingAnthropic`` reads each request as Anthropic renders it (tools, then system, then the messages' blocks),
and reports ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` from the ``cache_control`` marks it
received: a mark caches the prompt up to and including its block, if that prefix has at least ``minimum``
tokens; a later request reads back the longest cached prefix that ends at one of its marks or at one of the
20 blocks before a mark, and writes what lies between that and its last cacheable mark. Marks themselves are
not part of the prompt. ``input_tokens`` counts the rest, as the API's does. A block's tokens are a quarter of
the characters of its JSON text (rounded up): not Anthropic's tokenizer, but the same for every request, which
is what the arithmetic needs. Entries never expire (the 5-minute lifetime is longer than any test).

Answers are queued as content blocks (``answer``) and streamed back as the API streams them.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from typing import Any

import attrs

from tests.provider.wire.server import WireServer

LOOKBACK = 20
MINIMUM = 1024


@attrs.frozen
class Billed:
    """What one request was billed: all its input tokens, and how many of them were read from the cache, written
    to it, and (``repeated``) the same as the start of the request before it (the most any cache could read)."""

    input_tokens: int
    read: int
    written: int
    repeated: int
    marks: int

    @property
    def uncached(self) -> int:
        return self.input_tokens - self.read - self.written


def blocks(body: dict[str, Any]) -> list[tuple[dict[str, Any], bool]]:
    """The prompt of ``body`` as Anthropic reads it, block by block: each block without its mark, and whether it
    was marked."""
    out: list[tuple[dict[str, Any], bool]] = []

    def add(block: Any) -> None:
        if isinstance(block, str):
            block = {"type": "text", "text": block}
        bare = {k: v for k, v in block.items() if k != "cache_control"}
        out.append((bare, "cache_control" in block))

    for tool in body.get("tools") or ():
        add(tool)
    system = body.get("system")
    if isinstance(system, str):
        if system:
            add(system)
    else:
        for block in system or ():
            add(block)
    for message in body.get("messages") or ():
        content = message["content"]
        for block in [content] if isinstance(content, str) else content:
            add({"role": message["role"], **(block if isinstance(block, dict) else {"type": "text", "text": block})})
    return out


def tokens(block: dict[str, Any]) -> int:
    return -(-len(json.dumps(block, ensure_ascii=False, sort_keys=True)) // 4)


class PromptCache:
    """The cache: digests of cached prefixes, and the previous request's prompt (for ``Billed.repeated``)."""

    def __init__(self, minimum: int = MINIMUM) -> None:
        self.minimum = minimum
        self.entries: set[bytes] = set()
        self._previous: list[bytes] = []
        self._previous_totals: list[int] = []

    def bill(self, body: dict[str, Any]) -> Billed:
        prompt = blocks(body)
        digests: list[bytes] = []
        totals: list[int] = []  # tokens of the prefix ending at each block
        running = hashlib.sha256()
        total = 0
        for block, _ in prompt:
            running.update(json.dumps(block, sort_keys=True).encode())
            digests.append(running.copy().digest())
            total += tokens(block)
            totals.append(total)
        marks = [i for i, (_, marked) in enumerate(prompt) if marked]
        if len(marks) > 4:
            raise ValueError(f"A maximum of 4 blocks with cache_control may be provided. Found {len(marks)}.")
        hit = -1
        for mark in marks:
            for at in range(mark, max(mark - LOOKBACK, -1), -1):
                if digests[at] in self.entries:
                    hit = max(hit, at)
                    break
        read = totals[hit] if hit >= 0 else 0
        cacheable = [m for m in marks if totals[m] >= self.minimum]
        end = max(cacheable, default=-1)
        written = totals[end] - read if end > hit else 0
        self.entries.update(digests[m] for m in cacheable)
        same = 0
        for mine, theirs in zip(digests, self._previous):
            if mine != theirs:
                break
            same += 1
        repeated = self._previous_totals[same - 1] if same else 0
        self._previous, self._previous_totals = digests, totals
        return Billed(total, read, written, repeated, len(marks))


class CachingAnthropic(WireServer):
    """``WireServer`` answering ``/v1/messages`` from queued content blocks, billing each request through a
    ``PromptCache`` (``billed`` keeps every bill, in order)."""

    def __init__(self, minimum: int = MINIMUM) -> None:
        super().__init__()
        self.cache = PromptCache(minimum)
        self.answers: deque[list[dict[str, Any]]] = deque()
        self.billed: list[Billed] = []

    def answer(self, *content: dict[str, Any]) -> None:
        """Queue the content blocks of the next response."""
        self.answers.append(list(content))

    def reset(self) -> None:
        super().reset()
        self.cache = PromptCache(self.cache.minimum)
        self.answers.clear()
        self.billed.clear()

    async def app(self, scope: dict, receive: Any, send: Any) -> None:
        received = await self.receive_request(scope, receive)
        body = received.json()
        try:
            bill = self.cache.bill(body)
        except ValueError as exc:
            error = {"type": "error", "error": {"type": "invalid_request_error", "message": str(exc)}}
            await self._send(send, 400, [json.dumps(error).encode()], {"content-type": "application/json"})
            return
        self.billed.append(bill)
        content = self.answers.popleft() if self.answers else [{"type": "text", "text": "(no answer queued)"}]
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        for event in stream_events(body["model"], content, bill):
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def stream_events(model: str, content: list[dict[str, Any]], bill: Billed) -> list[bytes]:
    """The server-sent events of a response carrying ``content``, billed as ``bill`` says."""
    output = sum(tokens(block) for block in content)
    usage = {"input_tokens": bill.uncached, "cache_creation_input_tokens": bill.written,
             "cache_read_input_tokens": bill.read, "output_tokens": 1}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": {
        "id": "msg_01SimulatedCache", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": usage}}]
    for index, block in enumerate(content):
        if block["type"] == "tool_use":
            events += [{"type": "content_block_start", "index": index,
                        "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}},
                       {"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}}]
        else:
            events += [{"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
                       {"type": "content_block_delta", "index": index,
                        "delta": {"type": "text_delta", "text": block["text"]}}]
        events.append({"type": "content_block_stop", "index": index})
    stop = "tool_use" if any(block["type"] == "tool_use" for block in content) else "end_turn"
    events += [{"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": output}},
               {"type": "message_stop"}]
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]
