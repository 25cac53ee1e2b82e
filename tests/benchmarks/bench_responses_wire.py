"""The Responses API provider's cost on the wire, beside the Chat Completions provider's in the same run: latency
from a response's first byte to its first ``TextDelta``.

``OpenAIResponses`` is fed from memory as ``bench_wire`` feeds ``OpenAICompatible``: an ``httpx.MockTransport``
answering with a body that hands over one server-sent event per chunk, here shaped as OpenAI's Responses stream
(``response.created``, ``response.in_progress``, ``response.output_item.added``, ``response.content_part.added``,
then ``response.output_text.delta`` events). The clock starts when the body hands over its first chunk and stops
when the consumer holds the first ``TextDelta``; the Responses stream has four events before its first text, the
Chat Completions stream none, so its first chunk is the first text-bearing event's (the events before it are
handed over in the same chunk: a server writes them at once). Three cases are timed interleaved: the Responses
provider, the bare loop on the same bytes (``aiter_lines``, ``json.loads`` of each ``data:`` line, a look at
``type`` and ``delta``), and the Chat Completions provider on its own stream (``bench_wire.Bench``). Target: the
Responses provider adds <= 1 ms over the bare loop; its figure against the Chat Completions provider's is
informational.
"""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import httpx

from loop import TextDelta
from provider import OpenAIResponses
from tests.benchmarks import bench_wire
from tests.benchmarks._harness import Figure, median

LATENCY_SAMPLES = 2_000
TARGET_ADDED_US = 1_000.0
BASE_URL = bench_wire.BASE_URL
_RESPONSE = {"id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b", "object": "response",
             "created_at": 1741476542, "status": "in_progress", "model": "gpt-4o-mini-2024-07-18", "output": [],
             "usage": None}
_ITEM = "msg_67ccd2bf17f0819081ff3bb2cf6508e60bb6a6b452d3795b"


def event(kind: str, sequence: int, **fields: Any) -> bytes:
    data = json.dumps({"type": kind, "sequence_number": sequence, **fields}, separators=(",", ":"))
    return f"event: {kind}\ndata: {data}\n\n".encode()


def stream_of(tokens: int) -> list[bytes]:
    """A text response of ``tokens`` text deltas; the four events before the first are in its chunk."""
    opening = b"".join([
        event("response.created", 0, response=_RESPONSE),
        event("response.in_progress", 1, response=_RESPONSE),
        event("response.output_item.added", 2, output_index=0,
              item={"id": _ITEM, "type": "message", "status": "in_progress", "role": "assistant", "content": []}),
        event("response.content_part.added", 3, item_id=_ITEM, output_index=0, content_index=0,
              part={"type": "output_text", "text": "", "annotations": []}),
    ])
    deltas = [event("response.output_text.delta", 4 + i, item_id=_ITEM, output_index=0, content_index=0,
                    delta=f" tok{i}", logprobs=[]) for i in range(tokens)]
    text = "".join(f" tok{i}" for i in range(tokens))
    item = {"id": _ITEM, "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}
    done = {**_RESPONSE, "status": "completed", "output": [item],
            "usage": {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": tokens,
                      "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 12 + tokens}}
    n = 4 + tokens
    return [opening + deltas[0], *deltas[1:],
            event("response.output_text.done", n, item_id=_ITEM, output_index=0, content_index=0, text=text),
            event("response.output_item.done", n + 1, output_index=0, item=item),
            event("response.completed", n + 2, response=done)]


class Bench:
    """The Responses provider over an in-memory server that answers every request with ``chunks``."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.feeds: list[bench_wire.Feed] = []
        self.client = httpx.AsyncClient(transport=httpx.MockTransport(self._answer))
        self.provider = OpenAIResponses("gpt-4o-mini", base_url=BASE_URL, api_key="sk-bench", client=self.client)
        self.body = self.provider.body(bench_wire.REQUEST)

    def _answer(self, request: httpx.Request) -> httpx.Response:
        feed = bench_wire.Feed(self.chunks)
        self.feeds[:] = [feed]
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=feed)

    async def framework_first(self) -> float:
        stream = self.provider.stream(bench_wire.REQUEST)
        delta = await stream.__anext__()
        while type(delta) is not TextDelta:  # the response's id and model come first, as usage-free deltas
            delta = await stream.__anext__()
        at = time.perf_counter()
        await stream.aclose()  # type: ignore[attr-defined]
        assert delta == TextDelta(" tok0"), delta
        return at - self.feeds[0].first_at

    async def bare_first(self) -> float:
        at = 0.0
        async with self.client.stream("POST", f"{BASE_URL}/responses", json=self.body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    data = json.loads(line[6:])
                    if data["type"] == "response.output_text.delta" and data["delta"]:
                        at = time.perf_counter()
                        break
        assert at, "no text arrived"
        return at - self.feeds[0].first_at


async def _latency(samples: int) -> dict[str, list[float]]:
    responses, chat = Bench(stream_of(20)), bench_wire.Bench(bench_wire.stream_of(20))
    seconds = await bench_wire.interleaved({"responses": responses.framework_first, "bare": responses.bare_first,
                                            "chat": chat.framework_first}, samples)
    await responses.client.aclose()
    await chat.client.aclose()
    return seconds


def run(quick: bool = False) -> list[Figure]:
    samples = 40 if quick else LATENCY_SAMPLES
    lat = anyio.run(_latency, samples, backend="asyncio")
    responses_us, bare_us, chat_us = (median(lat[name]) * 1e6 for name in ("responses", "bare", "chat"))
    return [
        Figure(
            "responses_wire", "first byte -> first TextDelta (Responses)", responses_us, "µs", bare_us,
            "bare aiter_lines+json.loads", high=bare_us + TARGET_ADDED_US,
            target_text=f"<= bare + {TARGET_ADDED_US / 1e3:g} ms",
            notes=(f"added latency {responses_us - bare_us:+.1f} µs (median of {samples} interleaved samples); the "
                   "first chunk holds the four events before the first text delta",),
        ),
        Figure(
            "responses_wire", "first byte -> first TextDelta, Responses vs Chat Completions", responses_us, "µs",
            chat_us, "OpenAICompatible on its own stream",
            notes=(f"the same run, interleaved: {responses_us:.1f} µs Responses, {chat_us:.1f} µs Chat Completions",),
        ),
    ]


if __name__ == "__main__":
    import sys

    from tests.benchmarks._harness import render_table

    print(render_table(run(quick="--quick" in sys.argv)))
