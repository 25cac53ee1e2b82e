"""Three ``python -m session serve`` processes on one PostgreSQL database: a conversation runs on one of them at a
time (its lease holder), whichever the messages reach; a reader on any of them sees every run; a killed, stopped
or restarted server loses and repeats nothing.

The agent is the kill test's (``tests.session.durable_agent``): slow enough (0.6 s a model call) for a message to
be caught mid-run, and its answers name the messages they answer, so each conversation can be checked against what
its client was told."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import attrs
import httpx
import pytest

from loop import Role, Turn
from tests.session.http.helpers import SSE
from tests.session.stores.pg_server import pg_schema, pg_url
from tests.session.test_kills import Findings, conversation, examine, open_calls

__all__ = ["pg_schema", "pg_url"]  # fixtures, used by name
pytestmark = [pytest.mark.slow, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

ROOT = Path(__file__).resolve().parents[2]
ENV = {**{k: v for k, v in os.environ.items() if k != "SESSION_TOKEN"}, "PYTHONPATH": str(ROOT)}
TTL = 1.0  # the servers' --lease-ttl: short, so a takeover is quick to wait for


@attrs.define
class Server:
    """One ``serve`` process on 127.0.0.1 (a new one, on a new port, after each ``start``)."""

    store: str
    log_dir: Path
    name: str
    child: subprocess.Popen[bytes] | None = None
    url: str = ""
    starts: int = 0

    @property
    def log(self) -> Path:
        return self.log_dir / f"{self.name}-{self.starts}.log"

    async def start(self) -> None:
        self.starts += 1
        with self.log.open("wb") as out:
            self.child = subprocess.Popen(
                [sys.executable, "-m", "session", "serve", "tests.session.durable_agent:make_agent", "--store",
                 self.store, "--host", "127.0.0.1", "--port", "0", "--lease-ttl", str(TTL), "--rate-limit", "off",
                 "--shutdown-grace", "10"],
                stdout=subprocess.DEVNULL, stderr=out, cwd=ROOT, env=ENV)
        with anyio.fail_after(30):
            while (found := re.search(r"serving on (http://127\.0\.0\.1:\d+)", self.log.read_text("utf-8", "replace"))
                   ) is None:
                assert self.child.poll() is None, self.log.read_text("utf-8", "replace")
                await anyio.sleep(0.02)
        self.url = found.group(1)

    def signal(self, number: int) -> None:
        assert self.child is not None
        self.child.send_signal(number)

    async def wait(self) -> int:
        assert self.child is not None
        return await anyio.to_thread.run_sync(self.child.wait)

    async def stop(self) -> None:
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGCONT)
            self.child.kill()
            await self.wait()

    def logged(self) -> str:
        return "".join(p.read_text("utf-8", "replace") for p in sorted(self.log_dir.glob(f"{self.name}-*.log")))


@asynccontextmanager
async def cluster(store: str, log_dir: Path, size: int = 3) -> AsyncIterator[list[Server]]:
    servers = [Server(store, log_dir, f"server{n}") for n in range(size)]
    try:
        for server in servers:  # one after the other: the first makes the tables
            await server.start()
        yield servers
    finally:
        for server in servers:
            await server.stop()


@attrs.define
class Client:
    """Posts each session's messages in turn to the servers, round robin, moving on to the next server on a 503
    (draining, or the conversation busy elsewhere for too long) or a connection error; what it was told."""

    servers: list[Server]
    clients: dict[str, httpx.AsyncClient] = attrs.Factory(dict)
    acked: dict[str, list[int]] = attrs.Factory(dict)
    unsure: dict[str, list[int]] = attrs.Factory(dict)
    turn: itertools.count[int] = attrs.Factory(itertools.count)

    def client(self, server: Server) -> httpx.AsyncClient:
        client = self.clients.get(server.url)
        if client is None:
            client = self.clients[server.url] = httpx.AsyncClient(base_url=server.url, timeout=60)
        return client

    async def create(self) -> str:
        response = await self.client(self.servers[0]).post("/sessions")
        assert response.status_code == 201, response.text
        session_id = response.json()["id"]
        self.acked[session_id], self.unsure[session_id] = [], []
        return session_id

    async def post(self, session_id: str, number: int) -> None:
        for _ in range(50):
            server = self.servers[next(self.turn) % len(self.servers)]
            try:
                response = await self.client(server).post(f"/sessions/{session_id}/messages",
                                                          json={"text": f"message {number}"})
            except httpx.ConnectError:  # that server is down (restarting): the message never left
                await anyio.sleep(0.05)
                continue
            except httpx.TransportError:  # the server went away: the message may or may not be stored
                self.unsure[session_id].append(number)
                return
            if response.status_code in (429, 503):  # too many waiting, or no server free to take it: not stored
                await anyio.sleep(0.1)
                continue
            assert response.status_code == 202, response.text
            self.acked[session_id].append(number)
            return
        raise AssertionError(f"message {number} of {session_id} was refused by every server, 50 times")

    async def answered(self, session_id: str, last: int, *, timeout: float = 60) -> list[Turn]:
        """The conversation once it ends with the answer to message ``last``, read from any live server."""
        with anyio.fail_after(timeout):
            while True:
                for server in self.servers:
                    try:
                        turns = await conversation(self.client(server), session_id)
                    except httpx.TransportError:
                        continue
                    if turns and turns[-1].text == f"answer to message {last}" and not open_calls(turns):
                        return turns
                    break
                await anyio.sleep(0.05)

    async def aclose(self) -> None:
        for client in self.clients.values():
            await client.aclose()


async def stored(client: httpx.AsyncClient, session_id: str) -> list[Turn]:
    """The conversation as a server shows it; empty while nothing of it is stored (404)."""
    response = await client.get(f"/sessions/{session_id}/turns")
    if response.status_code == 404:
        return []
    assert response.status_code == 200, response.text
    return [Turn.from_dict(t) for t in response.json()["turns"]]


def total(found: list[Findings]) -> dict[str, int]:
    return {field: sum(getattr(f, field) for f in found) for field in attrs.fields_dict(Findings)}


async def test_messages_posted_round_robin_to_three_servers_run_in_order_once_and_every_reader_sees_them(
        pg_url: str, tmp_path: Path) -> None:
    async with cluster(pg_url, tmp_path) as servers, AsyncExitStack() as stack:
        client = Client(servers)
        stack.push_async_callback(client.aclose)
        sessions = [await client.create() for _ in range(4)]
        watched, reader = sessions[0], servers[2]
        async with client.client(reader).stream("GET", f"/sessions/{watched}/events") as response:
            sse = SSE(response)

            async def send(session_id: str) -> None:
                for number in range(1, 7):  # message 3 and 6 call a tool first
                    await client.post(session_id, number)

            with anyio.fail_after(120):
                async with anyio.create_task_group() as group:
                    for session_id in sessions:
                        group.start_soon(send, session_id)
                frames = await sse.until("message_finished", 6)
        conversations = {s: await client.answered(s, 6) for s in sessions}
    answers = [f.data["answer"] for f in frames if f.event == "message_finished"]
    assert answers == [f"answer to message {n}" for n in range(1, 7)]  # seen from a server that ran few of them
    found = total([examine(conversations[s], client.acked[s]) for s in sessions])
    assert sum(len(a) for a in client.acked.values()) == 24
    assert found["lost"] == found["duplicated"] == found["out_of_order"] == found["unanswered"] == 0, found


async def test_a_killed_lease_holder_s_conversation_finishes_on_another_server(pg_url: str, tmp_path: Path
                                                                              ) -> None:
    async with cluster(pg_url, tmp_path) as servers, AsyncExitStack() as stack:
        client = Client(servers)
        stack.push_async_callback(client.aclose)
        session_id = await client.create()
        holder, other = servers[0], client.client(servers[1])
        response = await client.client(holder).post(f"/sessions/{session_id}/messages", json={"text": "message 3"})
        assert response.status_code == 202
        with anyio.fail_after(10):  # the holder has begun: the user's turn is stored, the tool call not yet answered
            while len(await stored(other, session_id)) < 2:
                await anyio.sleep(0.01)
        holder.signal(signal.SIGKILL)
        await holder.wait()
        killed = time.monotonic()
        at_kill = await stored(other, session_id)
        assert len(at_kill) < 4, at_kill  # killed before it answered
        client.servers = servers[1:]
        turns = await client.answered(session_id, 3, timeout=TTL + 10)
        took = time.monotonic() - killed
    found = examine(turns, [3])
    assert found.lost == found.duplicated == found.unanswered == found.open_calls == 0, (found, turns)
    assert [t.role for t in turns[:2]] == [Role.USER, Role.ASSISTANT]  # the acknowledged turns were kept
    print(f"\ntaken over and answered {took:.2f} s after the holder was killed (lease ttl {TTL:g} s)")


async def test_a_stalled_holder_that_wakes_after_its_lease_was_taken_writes_nothing(pg_url: str, tmp_path: Path
                                                                                   ) -> None:
    async with cluster(pg_url, tmp_path, size=2) as servers, AsyncExitStack() as stack:
        client = Client(servers)
        stack.push_async_callback(client.aclose)
        session_id = await client.create()
        holder, other = servers[0], servers[1]
        response = await client.client(holder).post(f"/sessions/{session_id}/messages", json={"text": "message 1"})
        assert response.status_code == 202
        with anyio.fail_after(10):
            while len(await stored(client.client(other), session_id)) < 1:
                await anyio.sleep(0.01)
        holder.signal(signal.SIGSTOP)  # mid-run: its model call is under way
        client.servers = [other]
        await client.answered(session_id, 1, timeout=TTL + 10)  # the other server took it over
        await client.post(session_id, 2)
        before = await client.answered(session_id, 2)
        holder.signal(signal.SIGCONT)  # it finishes its model call, and tries to store the answer
        with anyio.fail_after(10):
            while "LeaseLost" not in holder.logged() and "lease lost" not in holder.logged():
                await anyio.sleep(0.05)
        await anyio.sleep(0.5)
        after = await conversation(client.client(other), session_id)
    assert [t.to_dict() for t in after] == [t.to_dict() for t in before]  # nothing of the deposed holder's
    assert examine(after, [1, 2]).duplicated == 0


async def test_a_rolling_restart_under_load_loses_and_repeats_nothing(pg_url: str, tmp_path: Path
                                                                     ) -> None:
    async with cluster(pg_url, tmp_path) as servers, AsyncExitStack() as stack:
        client = Client(servers)
        stack.push_async_callback(client.aclose)
        sessions = [await client.create() for _ in range(6)]
        numbers = {s: itertools.count(1) for s in sessions}
        posting = True

        async def keep_posting(session_id: str) -> None:
            while posting:  # about as fast as the model answers (MODEL_SECONDS a reply): a backlog, bounded
                await client.post(session_id, next(numbers[session_id]))
                await anyio.sleep(0.5)

        with anyio.fail_after(180):
            async with anyio.create_task_group() as group:
                for session_id in sessions:
                    group.start_soon(keep_posting, session_id)
                await anyio.sleep(2)
                for server in servers:
                    server.signal(signal.SIGTERM)
                    assert await server.wait() == 0, server.logged()
                    await server.start()
                    await anyio.sleep(1.5)
                posting = False
            last = {s: max(client.acked[s] + client.unsure[s]) for s in sessions}
            final = {}
            for session_id in sessions:
                await client.post(session_id, last[session_id] + 1)
                final[session_id] = await client.answered(session_id, last[session_id] + 1)
    found = total([examine(final[s], client.acked[s]) for s in sessions])
    acked = sum(len(a) for a in client.acked.values())
    unsure = sum(len(u) for u in client.unsure.values())
    print(f"\nrolling restart: {acked} acknowledged, {unsure} cut off, {found}")
    assert acked >= 30
    assert found["lost"] == found["duplicated"] == found["out_of_order"] == found["unanswered"] == 0, found
