"""A real OpenAI-compatible server on 127.0.0.1 that does less than OpenAI, as many local servers do: it
answers one choice whatever ``n`` asks, refuses ``response_format`` of type ``json_schema`` (400, naming the
field, with ``refusal_status``: 400, or 500 as llama-cpp-python's server answers; ``text`` and ``json_object``
are accepted), and streams no usage. It answers by the request: JSON when
asked for a JSON object, else ``answer N`` for the Nth request."""

from __future__ import annotations

import json
from typing import Any

from tests.provider.wire.server import WireServer


class ModestServer(WireServer):
    refusal_status = 400

    async def app(self, scope: dict, receive: Any, send: Any) -> None:
        asked = (await self.receive_request(scope, receive)).json()
        kind = (asked.get("response_format") or {}).get("type", "text")
        if kind not in ("text", "json_object"):
            error = {"error": {"message": f"response_format.type: input should be 'text' or 'json_object', got "
                                          f"{kind!r}", "type": "invalid_request_error"}}
            await self._send(send, self.refusal_status, [json.dumps(error).encode()], {b"content-type": b"application/json"})
            return
        text = json.dumps({"answer": "42"}) if kind == "json_object" else f"answer {len(self.requests)}"
        chunks = [{"id": "x", "object": "chat.completion.chunk", "model": asked["model"],
                   "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]},
                  {"id": "x", "object": "chat.completion.chunk", "model": asked["model"],
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
        events = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]
        await self._send(send, 200, events, {b"content-type": b"text/event-stream"})
