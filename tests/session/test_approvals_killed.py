"""An approval answered after the server was SIGKILLed and restarted: the call waits in the store, the restarted
server lists it, and the answer resumes the run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx

ROOT = Path(__file__).resolve().parents[2]
ENV = {**{k: v for k, v in os.environ.items()
          if k not in ("SESSION_TOKEN", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY")},
       "PYTHONPATH": str(ROOT)}


@asynccontextmanager
async def served(db: Path, log: Path) -> AsyncIterator[tuple[subprocess.Popen[bytes], httpx.AsyncClient]]:
    """``python -m session serve examples.approvals:make_agent`` on 127.0.0.1 with the SQLite store ``db``, and a
    client of it once it listens (``log`` gathers what every start wrote)."""
    pattern = r"serving on (http://127\.0\.0\.1:\d+)"
    before = len(re.findall(pattern, log.read_text(errors="replace"))) if log.exists() else 0
    with log.open("ab") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "session", "serve", "examples.approvals:make_agent",
             "--store", f"sqlite:///{db}", "--host", "127.0.0.1", "--port", "0"],
            stdout=subprocess.DEVNULL, stderr=out, cwd=ROOT, env=ENV)
    try:
        with anyio.fail_after(20):
            while len(urls := re.findall(pattern, log.read_text(errors="replace"))) <= before:
                assert child.poll() is None, log.read_text(errors="replace")
                await anyio.sleep(0.02)
        async with httpx.AsyncClient(base_url=urls[-1], timeout=10) as client:
            yield child, client
    finally:
        if child.poll() is None:
            child.kill()
        await anyio.to_thread.run_sync(child.wait)


async def until(client: httpx.AsyncClient, path: str, ready: Any) -> Any:
    with anyio.fail_after(20):
        while not ready(body := (await client.get(path)).json()):
            await anyio.sleep(0.05)
    return body


async def test_an_approval_answered_after_a_sigkill_and_a_restart(tmp_path: Path) -> None:
    db, log = tmp_path / "refunds.db", tmp_path / "server.log"
    async with served(db, log) as (child, client):
        sid = (await client.post("/sessions")).json()["id"]
        assert (await client.post(f"/sessions/{sid}/messages",
                                  json={"text": "Please refund order 42."})).status_code == 202
        waiting = await until(client, f"/sessions/{sid}/approvals", lambda b: b["approvals"])
        child.send_signal(signal.SIGKILL)
        await anyio.to_thread.run_sync(child.wait)
    (request,) = waiting["approvals"]
    (call,) = request["calls"]
    assert call["name"] == "refund" and '"amount": 120' in call["arguments"]

    async with served(db, log) as (_, client):
        listed = (await client.get(f"/sessions/{sid}/approvals")).json()["approvals"]
        assert [c["id"] for c in listed[0]["calls"]] == [call["id"]], "still waiting after the restart"
        answered = await client.post(f"/sessions/{sid}/approvals",
                                     json={"decisions": [{"call_id": call["id"], "approved": True}]})
        assert answered.status_code == 202, answered.text
        turns = await until(client, f"/sessions/{sid}/turns",
                            lambda b: b["turns"][-1]["role"] == "assistant"
                            and b["turns"][-1]["parts"][0].get("text", "").startswith("Done"))
    answer = turns["turns"][-1]["parts"][0]["text"]
    assert answer == "Done: refunded 120 on order 42 (asked by anonymous)."
    results = [p for t in turns["turns"] if t["role"] == "tool" for p in t["parts"]]
    assert [r["name"] for r in results] == ["look_up_order", "refund"], "nothing answered 'interrupted'"
