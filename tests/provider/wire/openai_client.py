"""The client side of the OpenAI wire tests: a provider aimed at the loopback server, a delta collector, and
small builders for streams shaped like the Chat Completions reference (for cases no recorded fixture covers).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from loop import Request, Role, State, Text, Turn, tool
from provider import OpenAICompatible
from tests.provider.streams import collect as collect_deltas
from tests.provider.wire.server import WireServer

MODEL = "gpt-4o-mini"
KEY = "sk-test-0123456789"
ASK = Request((Turn(Role.USER, (Text("Hello?"),)),))


def connect(server: WireServer | str, *, api_key: str | None = KEY, client: httpx.AsyncClient | None = None,
            **settings: Any) -> OpenAICompatible:
    """An ``OpenAICompatible`` talking to ``/v1`` of the loopback server (or of a ``http://127.0.0.1:PORT``)."""
    root = server if isinstance(server, str) else server.url
    return OpenAICompatible(MODEL, base_url=f"{root}/v1", api_key=api_key, client=client, **settings)


async def collect(provider: Any, request: Request = ASK, *, estimates: bool = False) -> list[Any]:
    """``tests.provider.streams.collect`` of ``ASK`` by default."""
    return await collect_deltas(provider, request, estimates=estimates)


async def collect_until_error(provider: Any, request: Request = ASK) -> tuple[list[Any], BaseException]:
    """The deltas that arrived before the stream failed, and the error it failed with."""
    seen: list[Any] = []
    try:
        async for delta in provider.stream(request):
            seen.append(delta)
    except Exception as exc:
        return seen, exc
    raise AssertionError(f"the stream ended without an error after {seen!r}")


def ask(text: str = "What is the weather in Paris?") -> State:
    return State().append(Role.USER, Text(text))


# -- the tools the recorded streams call ------------------------------------------------------------------


@tool
async def get_weather(location: str, unit: str = "celsius") -> str:
    """The current weather at a place.

    Args:
        location: city and country, e.g. "Paris, France".
        unit: "celsius" or "fahrenheit".
    """
    return f"18.5 {unit}, cloudy in {location}"


@tool
async def get_time(timezone: str) -> str:
    """The local time in an IANA time zone.

    Args:
        timezone: e.g. "Asia/Tokyo".
    """
    return f"09:30 in {timezone}"


TOOLS = [get_weather, get_time]


# -- streams shaped like the reference ---------------------------------------------------------------------


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **top: Any) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with a single choice; ``top`` adds or replaces top-level fields."""
    return {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1741569952, "model": MODEL,
            "system_fingerprint": "fp_test", "choices": [{"index": 0, "delta": delta or {}, "logprobs": None,
                                                          "finish_reason": finish}], **top}


def sse(*events: dict[str, Any] | str, done: bool = True) -> bytes:
    """``data:`` events (objects as compact JSON, strings as they are), then ``data: [DONE]`` unless told."""
    lines = [f"data: {e if isinstance(e, str) else json.dumps(e, separators=(',', ':'))}\n\n" for e in events]
    return ("".join(lines) + ("data: [DONE]\n\n" if done else "")).encode()


def text_reply(*pieces: str) -> bytes:
    """A complete text response streamed in ``pieces``."""
    return sse(chunk({"role": "assistant", "content": ""}), *(chunk({"content": p}) for p in pieces),
               chunk(finish="stop"))


def tool_reply(call_id: str, name: str, *fragments: str) -> bytes:
    """A complete response calling one tool, its arguments streamed in ``fragments``."""
    first = {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
    return sse(chunk({"role": "assistant", "content": None, "tool_calls": [first]}),
               *(chunk({"tool_calls": [{"index": 0, "function": {"arguments": f}}]}) for f in fragments),
               chunk(finish="tool_calls"))
