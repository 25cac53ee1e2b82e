"""The client side of the Responses API wire tests: a provider aimed at the loopback server, the request bodies
expected on the wire, and builders for event streams shaped like the Responses API reference (for cases no
recorded fixture covers)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from provider._responses import OpenAIResponses
from tests.provider.wire.server import FIXTURES, Received

CLIENT_STREAMS = pytest.mark.filterwarnings(r"ignore:Async generator '(httpx|httpcore)\._:ResourceWarning")
"""On trio, an async generator dropped before it is exhausted warns when it is collected. httpx's response streams
are chains of async generators that closing the outer one does not close (httpx issue 3686), so a response left
mid-way (a stream closed early, an error event before the body ends) leaves some of httpx's and httpcore's behind
however it is closed. Those warnings, from the client library and only those, are ignored; the provider's own
generators still warn."""

MODEL = "gpt-4.1-mini"
KEY = "sk-test-0123456789"


def connect(server: Any, *, model: str = MODEL, api_key: str | None = KEY, client: httpx.AsyncClient | None = None,
            **settings: Any) -> OpenAIResponses:
    """An ``OpenAIResponses`` talking to ``/v1`` of the loopback server."""
    return OpenAIResponses(model, base_url=f"{server.url}/v1", api_key=api_key, client=client, **settings)


def expected_body(name: str) -> Any:
    """The request body a fixture says goes on the wire, e.g. ``expected_body("tool_round_trip")``."""
    return json.loads((FIXTURES / "responses" / f"{name}.request.json").read_text(encoding="utf-8"))


def canonical(value: Any) -> str:
    """``value`` as compact JSON keeping its key order, so two bodies compare field by field *and* in order."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def sent(received: Received) -> str:
    """What the provider sent, as ``canonical`` writes it (the body is compact JSON already; this only checks)."""
    return canonical(received.json())


def events(*items: dict[str, Any]) -> bytes:
    """Named events, as the API streams them: ``event: TYPE`` then the object as compact JSON."""
    return "".join(f"event: {e.get('type', 'message')}\ndata: {canonical(e)}\n\n" for e in items).encode()


def response(status: str = "completed", **fields: Any) -> dict[str, Any]:
    """A ``response`` object of a lifecycle event."""
    return {"id": "resp_test", "object": "response", "status": status, "model": MODEL, "output": [], **fields}


def completed(usage: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    return {"type": "response.completed", "response": response(usage=usage, **fields)}


def usage(input_tokens: int, output_tokens: int, cached: int = 0) -> dict[str, Any]:
    return {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens}


def text_events(*pieces: str) -> bytes:
    """A complete text response streamed in ``pieces``."""
    return events({"type": "response.created", "response": response("in_progress")},
                  {"type": "response.output_item.added", "output_index": 0,
                   "item": {"id": "msg_test", "type": "message", "role": "assistant", "content": []}},
                  *({"type": "response.output_text.delta", "output_index": 0, "item_id": "msg_test",
                     "content_index": 0, "delta": p} for p in pieces),
                  completed(usage(10, len(pieces))))
