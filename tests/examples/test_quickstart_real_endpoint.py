"""The quickstart runs on a real OpenAI-compatible endpoint when OPENAI_BASE_URL names one.

The endpoint is a real HTTP server on 127.0.0.1 streaming Chat Completions chunks, standing in for a model.
"""

import json
import subprocess
import sys
from collections.abc import Iterator

import anyio
import pytest

from tests.examples import ROOT
from tests.provider.wire.server import WireServer


@pytest.fixture
def server() -> Iterator[WireServer]:
    wire = WireServer()
    wire.start()
    yield wire
    wire.stop()


def sse(*deltas: dict, finish: str) -> bytes:
    chunks = [{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    chunks.append({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    chunks.append({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}})
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def call(index: int, call_id: str, name: str, arguments: dict) -> dict:
    return {"tool_calls": [{"index": index, "id": call_id, "type": "function",
                            "function": {"name": name, "arguments": json.dumps(arguments)}}]}


async def test_quickstart_talks_to_the_endpoint_named_in_the_environment(server: WireServer) -> None:
    server.reply(sse(call(0, "c1", "add", {"a": 120, "b": 80}), call(1, "c2", "add", {"a": 1.5, "b": 0.5}),
                     finish="tool_calls"))
    server.reply(sse({"content": "About 110 km/h."}, finish="stop"))
    server.reply(sse(call(0, "c3", "divide", {"a": 200, "b": 2}), finish="tool_calls"))
    server.reply(sse({"content": "200 km in 2 h: 100 km/h."}, finish="stop"))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "OPENAI_BASE_URL": f"{server.url}/v1",
           "OPENAI_MODEL": "local-model"}
    done = await anyio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "examples/quickstart.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60))
    assert done.returncode == 0, done.stderr
    assert f"Running on Retry(OpenAICompatible('local-model', base_url='{server.url}/v1')" in done.stdout
    assert "final answer: 200 km in 2 h: 100 km/h." in done.stdout
    assert "tokens: 200 in, 40 out" in done.stdout
    bodies = [r.json() for r in server.requests]
    assert [b["model"] for b in bodies] == ["local-model"] * 4
    assert "authorization" not in server.requests[0].headers  # a local server needs no key
    # The verifier's report reached the model as a system message before its third call.
    assert bodies[2]["messages"][-1]["role"] == "system"
    assert "grounded: FAIL" in bodies[2]["messages"][-1]["content"]
