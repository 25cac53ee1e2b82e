"""The scale-out page's two ``serve`` lines, as pasted, on one PostgreSQL database (the test server's, in a schema
of this test's own, for the page's ``postgresql://agent@127.0.0.1/agents``; free ports for 8001 and 8002): a
conversation started on one server goes on through the other, and the other server's event stream shows the runs
of both. Both stop on Ctrl-C and exit 0."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import anyio
import httpx

from tests.examples.shell import child_env, command, free_port, start, stop, substituted, wait_for
from tests.session.stores.pg_server import pg_schema, pg_url

__all__ = ["pg_schema", "pg_url"]  # fixtures, used by name
URL = "postgresql://agent@127.0.0.1/agents"
FIRST, SECOND = f"--store {URL} --port 8001", f"--store {URL} --port 8002"


async def finished(http: httpx.AsyncClient, url: str, count: int) -> list[str]:
    """The answers of the first ``count`` messages the event stream at ``url`` says finished."""
    answers: list[str] = []
    async with http.stream("GET", url) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                data = json.loads(line[len("data: "):])
                if data["type"] == "message_finished":
                    answers.append(data["answer"])
                    if len(answers) == count:
                        return answers
    raise AssertionError(f"the stream ended after {answers}")


async def test_two_servers_on_one_database_share_a_conversation(pg_url: str, tmp_path: Path) -> None:
    ports = free_port(), free_port()
    lines = [substituted(substituted(command(marker), URL, shlex.quote(pg_url)), f"--port {port}", f"--port {free}")
             for marker, port, free in ((FIRST, 8001, ports[0]), (SECOND, 8002, ports[1]))]
    assert all(line.startswith("SESSION_TOKEN=change-me ") for line in lines)
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    servers = []
    try:
        for line, log in zip(lines, logs):  # one after the other: the first makes the tables
            servers.append(server := await start(line, cwd=tmp_path, env=child_env(tmp_path), log=log))
            await wait_for(f"http://127.0.0.1:{ports[len(servers) - 1]}/healthz", server, log)
        one, two = (f"http://127.0.0.1:{port}" for port in ports)
        async with httpx.AsyncClient(timeout=30, headers={"authorization": "Bearer change-me"}) as http:
            with anyio.fail_after(60):
                session = (await http.post(f"{one}/sessions")).json()["id"]
                for server, question in ((one, "What is 2 + 3?"), (two, "What is 10 / 4?")):
                    posted = await http.post(f"{server}/sessions/{session}/messages", json={"text": question})
                    assert posted.status_code == 202, posted.text
                answers = await finished(http, f"{two}/sessions/{session}/events", 2)
                turns = (await http.get(f"{one}/sessions/{session}/turns")).json()["turns"]
    finally:
        for server in servers:
            await stop(server)
    assert [a.split(" = ")[-1] for a in answers] == ["5", "2.5"], answers
    assert [t["role"] for t in turns if t["role"] == "user"] == ["user", "user"]
    assert [server.returncode for server in servers] == [0, 0], [log.read_text() for log in logs]
