"""The chat backend example, run as a user runs it, then used over HTTP: SSE events, turns, OpenAI client."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import openai

from tests.examples import ROOT

ENV = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}


async def test_the_backend_serves_sessions_events_and_the_openai_api(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "examples/chat_backend.py", "--port", "0", "--token", "t0k", "--database",
         str(tmp_path / "chat.db")], cwd=ROOT, env={**ENV, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        with anyio.fail_after(30):
            line = await anyio.to_thread.run_sync(child.stdout.readline)
        url = json.loads(line)["serving"]
        auth = {"authorization": "Bearer t0k"}
        async with httpx.AsyncClient(base_url=url, headers=auth, timeout=10) as http:
            session_id = (await http.post("/sessions")).json()["id"]
            kinds = []
            with anyio.fail_after(20):
                async with http.stream("GET", f"/sessions/{session_id}/events") as events:
                    posted = await http.post(f"/sessions/{session_id}/messages", json={"text": "Weather in Oslo?"})
                    assert posted.status_code == 202
                    async for text in events.aiter_lines():
                        if text.startswith("event:"):
                            kinds.append(text.split(":", 1)[1].strip())
                            if kinds[-1] == "message_finished":
                                break
            assert "tool_started" in kinds and "tool_finished" in kinds and "text_delta" in kinds
            turns = (await http.get(f"/sessions/{session_id}/turns")).json()["turns"]
            assert turns[-1]["parts"][0]["text"] == "Today: snow, -3 °C."
            assert (await http.get(f"/sessions/{session_id}/turns", headers={"authorization": "Bearer x"})
                    ).status_code == 401
            ai = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="t0k", http_client=http)
            reply = await ai.chat.completions.create(model="agent",
                                                     messages=[{"role": "user", "content": "And in Lima?"}])
        assert reply.choices[0].message.content == "Today: sunny, 24 °C."
    finally:
        child.send_signal(signal.SIGINT)
        try:
            await anyio.to_thread.run_sync(lambda: child.wait(timeout=20))
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            child.stdout.close()
    assert (tmp_path / "chat.db").exists()
