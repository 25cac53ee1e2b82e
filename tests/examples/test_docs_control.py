"""The control page's walkthrough, run word for word: an approval-gated agent served over HTTP, asked for a
refund with curl, its waiting call listed and approved with curl, and the answer read back.

The commands are taken from the page by their content and run through ``bash -c`` as a user would type them
(``tests.examples.shell``), in a temporary working directory with this interpreter first on ``PATH``. The only
change to their words is the port: 8000 becomes a free loopback port. A person types the commands one after
another, reading each reply; the test runs them in the same order, and where a person would look again (the
approval is listed once the model has asked for it; the answer is there once the approved call has run) it waits
for the server to get there first.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx

from tests.examples.shell import child_env, command, commands, free_port, run, start, stop, substituted, wait_for
from tests.examples.docs import SH_BLOCKS
from tests.examples.docs import block as _block

AUTH = {"authorization": "Bearer change-me"}


async def test_the_control_walkthrough_approves_a_refund_over_http(tmp_path: Path) -> None:
    port = free_port()
    env = child_env(tmp_path)
    serve = substituted(command("serve examples.approvals:make_agent --store sqlite:///refunds.db"), "--port 8000",
                        f"--port {port}")
    steps = [substituted(c, "localhost:8000", f"localhost:{port}")
             for c in commands(_block(SH_BLOCKS, "CALL=$(curl -s localhost:8000/sessions/$ID/approvals"))]
    assert len(steps) == 6, steps
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "server.log"
    server = await start(serve, cwd=tmp_path, env=env, log=log)
    try:
        await wait_for(f"{base}/healthz", server, log)
        asked = await run(f"{steps[0]}\n{steps[1]}\necho \"ID=$ID\"", cwd=tmp_path, env=env)
        assert asked.returncode == 0, asked.stderr
        lines = asked.stdout.decode().splitlines()
        assert json.loads(lines[0])["message_id"], "the message was queued (202)"
        session_id = lines[-1].removeprefix("ID=")
        async with httpx.AsyncClient(base_url=base, headers=AUTH, timeout=10) as client:
            with anyio.fail_after(20):  # the model looks the order up, then asks to refund it
                while not (await client.get(f"/sessions/{session_id}/approvals")).json()["approvals"]:
                    await anyio.sleep(0.05)
            prefix = f"ID={session_id}\n"
            listed = await run(prefix + steps[2], cwd=tmp_path, env=env)
            (request,) = json.loads(listed.stdout)["approvals"]
            assert [c["name"] for c in request["calls"]] == ["refund"] and request["live"] is False
            answered = await run(f"{prefix}{steps[3]}\n{steps[4]}", cwd=tmp_path, env=env)
            assert answered.returncode == 0 and json.loads(answered.stdout)["message_id"], answered.stdout
            with anyio.fail_after(20):
                while not (await client.get(f"/sessions/{session_id}/approvals")).json() == {"approvals": []}:
                    await anyio.sleep(0.05)
                while True:
                    turns = json.loads((await run(prefix + steps[5], cwd=tmp_path, env=env)).stdout)["turns"]
                    if turns[-1]["role"] == "assistant" and turns[-1]["parts"][0].get("text", "").startswith("Done"):
                        break
                    await anyio.sleep(0.05)
        assert turns[-1]["parts"][0]["text"] == "Done: refunded 120 on order 42 (asked by tok_" + \
            turns[-1]["parts"][0]["text"].split("(asked by tok_")[1]
        assert (tmp_path / "refunds.db").exists(), "the conversation is in the store the command names"
    finally:
        await stop(server)
