"""The OpenAI-compatible provider's own cost on the wire: (1) latency from a response's first byte to its first
``TextDelta``, and (2) parse throughput on a 10,000-chunk stream.

Both feed ``OpenAICompatible`` from memory: an ``httpx.AsyncClient`` whose ``MockTransport`` answers with a body
that is an async iterator of byte chunks (one SSE event per chunk, shaped like OpenAI's chunks with
``stream_options.include_usage``), so no socket or server time is measured. The baseline is the bare loop a
hand-written client would use on the *same* client and bytes: ``response.aiter_lines()``, ``json.loads`` of
each ``data:`` line and a look at ``choices[0].delta.content``. It skips everything the provider does beyond that
(SSE framing per the standard, comments and named events, tool-call slots, usage, errors, [DONE] checks).

(1) The clock starts when the body hands over its first chunk (an event carrying text) and stops when the
consumer holds the first ``TextDelta`` (bare: the first content string). Target: the provider adds <= 1 ms.
(2) Chunks per second and MB per second over the whole stream, against the bare loop (informational).
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx

from loop import Finish, Request, Role, Text, TextDelta, Turn
from provider import OpenAICompatible
from tests.benchmarks._harness import Figure, interleave_async, median

CHUNKS = 10_000
LATENCY_SAMPLES = 2_000
TARGET_ADDED_US = 1_000.0
BASE_URL = "http://127.0.0.1:9/v1"  # never dialled: the mock transport answers every request
REQUEST = Request((Turn(Role.USER, (Text("Count to ten thousand."),)),))


def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {"id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", "object": "chat.completion.chunk",
             "created": 1741569952, "model": "gpt-4o-mini-2024-07-18", "service_tier": "default",
             "system_fingerprint": "fp_06737a9306",
             "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], "usage": None}
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def stream_of(tokens: int) -> list[bytes]:
    """A text response of ``tokens`` content chunks, one SSE event per chunk, ending with usage and [DONE]."""
    usage = {"id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", "object": "chat.completion.chunk",
             "created": 1741569952, "model": "gpt-4o-mini-2024-07-18", "choices": [],
             "usage": {"prompt_tokens": 12, "completion_tokens": tokens, "total_tokens": 12 + tokens}}
    return [event({"role": "assistant", "content": " tok0"}),
            *(event({"content": f" tok{i}"}) for i in range(1, tokens)),
            event({}, "stop"), b"data: " + json.dumps(usage).encode() + b"\n\n", b"data: [DONE]\n\n"]


class Feed(httpx.AsyncByteStream):
    """A response body served from memory, noting when it hands over its first chunk."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.first_at = 0.0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        first = True
        for chunk in self.chunks:
            if first:
                first = False
                self.first_at = time.perf_counter()
            yield chunk


class Bench:
    """One client and provider over an in-memory server that answers every request with ``chunks``."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.bytes = sum(map(len, chunks))
        self.feeds: list[Feed] = []
        self.client = httpx.AsyncClient(transport=httpx.MockTransport(self._answer))
        self.provider = OpenAICompatible("gpt-4o-mini", base_url=BASE_URL, api_key="sk-bench", client=self.client)
        self.body = self.provider.body(REQUEST)  # the bare loop sends the very same request

    def _answer(self, request: httpx.Request) -> httpx.Response:
        feed = Feed(self.chunks)
        self.feeds[:] = [feed]
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=feed)

    # -- (1) first byte to first text -------------------------------------------------------------------------

    async def framework_first(self) -> float:
        stream = self.provider.stream(REQUEST)
        delta = await stream.__anext__()
        at = time.perf_counter()
        await stream.aclose()  # type: ignore[attr-defined]
        assert delta == TextDelta(" tok0"), delta
        return at - self.feeds[0].first_at

    async def bare_first(self) -> float:
        at = 0.0
        async with self.client.stream("POST", f"{BASE_URL}/chat/completions", json=self.body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    content = json.loads(line[6:])["choices"][0]["delta"].get("content")
                    if content:
                        at = time.perf_counter()
                        break
        assert at, "no text arrived"
        return at - self.feeds[0].first_at

    # -- (2) the whole stream ---------------------------------------------------------------------------------

    async def framework_all(self) -> int:
        texts = 0
        async for delta in self.provider.stream(REQUEST):
            texts += type(delta) is TextDelta
        assert type(delta) is Finish and texts == len(self.chunks) - 3, (delta, texts)
        return texts

    async def bare_all(self) -> int:
        texts = 0
        async with self.client.stream("POST", f"{BASE_URL}/chat/completions", json=self.body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    data = line[6:]
                    if data == "[DONE]":
                        break
                    choices = json.loads(data)["choices"]
                    if choices and choices[0]["delta"].get("content"):
                        texts += 1
        assert texts == len(self.chunks) - 3, texts
        return texts


async def interleaved(cases: dict[str, Callable[[], Awaitable[float]]], samples: int) -> dict[str, list[float]]:
    """``samples`` latencies from each case, timed in turn (so load bursts hit every case) after a warm-up, with no
    garbage collection inside a sample (one between batches instead, untimed)."""
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(max(5, samples // 20)):  # warm-up, untimed
        for case in cases.values():
            await case()
    gc.collect()
    gc.disable()
    try:
        for number in range(samples):
            if number % 250 == 0:
                gc.collect()
            for name, case in cases.items():
                seconds[name].append(await case())
    finally:
        gc.enable()
    return seconds


async def _latency(samples: int) -> dict[str, list[float]]:
    bench = Bench(stream_of(20))
    seconds = await interleaved({"framework": bench.framework_first, "bare": bench.bare_first}, samples)
    await bench.client.aclose()
    return seconds


async def _throughput(chunks: int, warmup: int, repeats: int) -> tuple[dict[str, float], int]:
    bench = Bench(stream_of(chunks))
    seconds = await interleave_async({"framework": bench.framework_all, "bare": bench.bare_all},
                                     warmup=warmup, repeats=repeats)
    await bench.client.aclose()
    return seconds, bench.bytes


def _p90(samples: list[float]) -> float:
    return sorted(samples)[int(len(samples) * 0.9)]


def run(quick: bool = False) -> list[Figure]:
    """Measure (1) and (2); ``quick`` uses tiny sizes (for the smoke test)."""
    samples, chunks, warmup, repeats = (40, 300, 0, 1) if quick else (LATENCY_SAMPLES, CHUNKS, 1, 7)
    lat = anyio.run(_latency, samples, backend="asyncio")
    (secs, size) = anyio.run(_throughput, chunks, warmup, repeats, backend="asyncio")
    fw_us, bare_us = median(lat["framework"]) * 1e6, median(lat["bare"]) * 1e6
    fw_rate, bare_rate = chunks / secs["framework"], chunks / secs["bare"]
    mb = size / 1e6
    sizes = f"{chunks:,} chunks, {mb:.2f} MB, one SSE event per read, median of {repeats}"
    return [
        Figure(
            "wire", "first byte -> first TextDelta", fw_us, "µs", bare_us, "bare aiter_lines+json.loads",
            high=bare_us + TARGET_ADDED_US, target_text=f"<= bare + {TARGET_ADDED_US / 1e3:g} ms",
            notes=(f"added latency {fw_us - bare_us:+.1f} µs (median of {samples} interleaved samples); p90 "
                   f"{_p90(lat['framework']) * 1e6:.1f} µs framework, {_p90(lat['bare']) * 1e6:.1f} µs bare",
                   "clock from the body handing over its first chunk (an event with text) to the consumer "
                   "holding the first TextDelta; in-memory MockTransport, no socket"),
        ),
        Figure(
            "wire", "parse throughput", fw_rate, "chunks/s", bare_rate, "bare aiter_lines+json.loads",
            notes=(f"{sizes}; {secs['framework'] * 1e3:.1f} ms framework vs {secs['bare'] * 1e3:.1f} ms bare "
                   f"per stream, {secs['framework'] / chunks * 1e6:.2f} µs vs {secs['bare'] / chunks * 1e6:.2f} "
                   "µs per chunk",),
        ),
        Figure(
            "wire", "parse throughput", mb / secs["framework"], "MB/s", mb / secs["bare"],
            "bare aiter_lines+json.loads", notes=(sizes,),
        ),
    ]


if __name__ == "__main__":
    import sys

    from tests.benchmarks._harness import render_table

    print(render_table(run(quick="--quick" in sys.argv)))
