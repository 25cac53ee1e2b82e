"""The PostgreSQL server that ``python -m session serve`` processes share is stopped for a few seconds, then started
again, and nobody does anything about it: while it is down, a request that needs it is answered with an HTTP error
naming the store's problem (not held until the server is back, and the servers stay up); once it is back, the
servers recover by themselves: every conversation answers a new message, no acknowledged message is lost, run
twice or run out of order, and an event stream opened before the outage goes on. A store idle through the restart
answers its next call: the connections its pool kept from before are not handed out dead.

These tests stop and start the one throwaway server of the test suite (the one ``.ci/postgres-setup.sh`` starts,
whose URL is in ``COGNITIVE_LOOP_TEST_POSTGRES``) with the CI's own scripts, so they run as root, as CI does (the
server's cluster belongs to an unprivileged user), and start the server again however they end. The agent is the
kill test's (``tests.session.durable_agent``): its answers name the messages they answer."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
import httpx
import pytest

from loop import Role, State, Text, Turn
from session import StoreError
from tests.session.http.helpers import SSE, Frame
from tests.session.stores.pg_server import ENV as URL_ENV
from tests.session.stores.pg_server import in_ci, pg_schema, pg_url, server_url
from tests.session.test_kills import conversation, examine, open_calls
from tests.session.test_scale_out import Server, cluster, total

try:
    from session.stores._postgres import PostgresStore
except ImportError:  # pragma: no cover
    if in_ci():
        raise
    pytest.skip("PostgresStore needs psycopg 3 and psycopg_pool (pip install -e '.[postgres]')",
                allow_module_level=True)

__all__ = ["pg_schema", "pg_url"]  # fixtures, used by name
pytestmark = [pytest.mark.slow, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

ROOT = Path(__file__).resolve().parents[2]
SESSIONS = 4  # half of them posted to each server
POST_EVERY = 0.5  # seconds between one session's messages: about as fast as the agent answers them
LOAD = 3.0  # seconds of load before the database stops
DOWN = 4.0  # seconds it stays down
SETTLE = 3.0  # seconds of load once it is back
RECOVERY = 45.0  # seconds for every conversation to answer its last message, once the load has stopped
REQUEST_TIMEOUT = 20.0  # seconds a client waits for an answer; a request still unanswered then is a hang
STORE_CALL = 10.0  # seconds a store call may wait to fail while the server is down (its pool's timeout is 30)


def _script(name: str) -> str:
    """Run one of the CI's scripts for the test server; its standard output."""
    done = subprocess.run(["bash", str(ROOT / ".ci" / name)], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 0, f".ci/{name} failed ({done.returncode}): {done.stderr}"
    return done.stdout.strip()


def start_database() -> None:
    """Start the throwaway server as CI does (``.ci/postgres-setup.sh`` does nothing when it answers already)."""
    _script("postgres-setup.sh")


def stop_database() -> None:
    """Stop it as CI does (``.ci/postgres-stop.sh``: ``pg_ctl -m fast stop`` as the cluster's owner): its
    connections are ended, and it refuses new ones."""
    _script("postgres-stop.sh")


def the_throwaway_server() -> None:
    """Skip unless this test may stop and start the server its URL names: the throwaway one, as root."""
    url = server_url()
    if os.geteuid() != 0:
        pytest.skip("stops and starts the test server as the user owning its cluster (runuser), which needs root, "
                    "as in CI")
    if _script("postgres-setup.sh") != url.split("?")[0]:
        pytest.skip(f"{URL_ENV} ({url}) is not the throwaway server .ci/postgres-setup.sh runs, the one this test "
                    "may stop and start")


@asynccontextmanager
async def restored() -> AsyncIterator[None]:
    """Start the database again when the block ends, however it ends: the other tests need it."""
    try:
        yield
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(start_database)


@attrs.frozen
class Posted:
    """A message posted, and how it was answered: when it was sent and answered (seconds since the load began),
    and the status (0: no answer) with the body."""

    session_id: str
    number: int
    sent: float
    answered: float
    status: int
    body: Any


def store_error(posted: Posted) -> bool:
    """Whether ``posted`` was refused with a server error whose JSON names the store's problem."""
    error = posted.body.get("error") if isinstance(posted.body, dict) else None
    return (posted.status >= 500 and isinstance(error, dict) and error.get("type") == "store_error"
            and "PostgreSQL store" in str(error.get("message")))


def closed_meanwhile(posted: Posted) -> bool:
    """Whether ``posted`` was refused because its session closed as it was posted (its lease went to the other
    server): the message was not accepted, and the client may post it again."""
    error = posted.body.get("error") if isinstance(posted.body, dict) else None
    return posted.status == 409 and isinstance(error, dict) and error.get("type") == "session_closed"


@attrs.define
class Load:
    """Sessions posting their messages, each to a server of its own (half on each), and what they were told: the
    numbers acknowledged (202), those that may or may not be stored (any other answer), and every answer."""

    servers: list[Server]
    began: float = attrs.Factory(time.monotonic)
    clients: dict[str, httpx.AsyncClient] = attrs.Factory(dict)
    home: dict[str, Server] = attrs.Factory(dict)
    acked: dict[str, list[int]] = attrs.Factory(dict)
    unsure: dict[str, list[int]] = attrs.Factory(dict)
    posted: list[Posted] = attrs.Factory(list)
    next: dict[str, int] = attrs.Factory(dict)

    def client(self, server: Server) -> httpx.AsyncClient:
        client = self.clients.get(server.url)
        if client is None:
            client = self.clients[server.url] = httpx.AsyncClient(base_url=server.url, timeout=REQUEST_TIMEOUT)
        return client

    def now(self) -> float:
        return time.monotonic() - self.began

    async def create(self, server: Server) -> str:
        response = await self.client(server).post("/sessions")
        assert response.status_code == 201, response.text
        session_id = response.json()["id"]
        self.home[session_id] = server
        self.acked[session_id], self.unsure[session_id], self.next[session_id] = [], [], 1
        return session_id

    async def post(self, session_id: str) -> Posted:
        """Post the session's next message to its server."""
        number = self.next[session_id]
        self.next[session_id] += 1
        sent = self.now()
        try:
            response = await self.client(self.home[session_id]).post(f"/sessions/{session_id}/messages",
                                                                      json={"text": f"message {number}"})
        except httpx.TransportError as exc:
            status, body = 0, f"{type(exc).__name__}: {exc}"
        else:
            status = response.status_code
            try:
                body = response.json()
            except ValueError:
                body = response.text
        (self.acked if status == 202 else self.unsure)[session_id].append(number)
        posted = Posted(session_id, number, sent, self.now(), status, body)
        self.posted.append(posted)
        return posted

    async def last(self, session_id: str) -> int:
        """Post one more message once the load has stopped, until it is accepted; its number. A 503 (the
        conversation still runs on the other server, which did not let go in time) or a 409 (``closed_meanwhile``)
        is tried again."""
        while (posted := await self.post(session_id)).status == 503 or closed_meanwhile(posted):
            await anyio.sleep(0.2)
        assert posted.status == 202, posted
        return posted.number

    async def answered(self, session_id: str, last: int) -> list[Turn]:
        """The conversation once it ends with the answer to message ``last``."""
        client = self.client(self.home[session_id])
        while True:
            turns = await conversation(client, session_id)
            if turns and turns[-1].text == f"answer to message {last}" and not open_calls(turns):
                return turns
            await anyio.sleep(0.1)

    async def aclose(self) -> None:
        for client in self.clients.values():
            await client.aclose()


@attrs.define
class Watched:
    """An event stream, read until it ends or its reader is cancelled: its frames, each with when it came (seconds
    since the load began), and how it ended."""

    frames: list[tuple[float, Frame]] = attrs.Factory(list)
    ended: str = ""

    async def read(self, load: Load, client: httpx.AsyncClient, session_id: str) -> None:
        try:
            async with client.stream("GET", f"/sessions/{session_id}/events") as response:
                sse = SSE(response)
                while True:
                    frame = await sse.frame()
                    self.frames.append((load.now(), frame))
        except (EOFError, httpx.TransportError) as exc:
            self.ended = f"{type(exc).__name__}: {exc}"

    def answers(self, since: float = 0.0) -> list[str]:
        return [f.data["answer"] for at, f in self.frames if f.event == "message_finished" and at >= since]


def texts(state: State | None) -> list[str]:
    return [] if state is None else [t.text for t in state.turns]


async def test_a_database_restarted_under_load_is_recovered_from_without_help(pg_url: str, tmp_path: Path
                                                                             ) -> None:
    the_throwaway_server()
    async with cluster(pg_url, tmp_path, size=2) as servers, AsyncExitStack() as stack:
        load = Load(servers)
        stack.push_async_callback(load.aclose)
        sessions = [await load.create(servers[n % 2]) for n in range(SESSIONS)]
        watched = Watched()  # the first session, running on the first server, followed on the second
        posting = True

        async def keep_posting(session_id: str) -> None:
            while posting:
                await load.post(session_id)
                await anyio.sleep(POST_EVERY)

        async with anyio.create_task_group() as reading:
            reading.start_soon(watched.read, load, load.client(servers[1]), sessions[0])
            async with restored(), anyio.create_task_group() as group:
                for session_id in sessions:
                    group.start_soon(keep_posting, session_id)
                await anyio.sleep(LOAD)
                await anyio.to_thread.run_sync(stop_database)
                down = load.now()
                await anyio.sleep(DOWN)
                alive_while_down = [s.child is not None and s.child.poll() is None for s in servers]
                restarting = load.now()
                await anyio.to_thread.run_sync(start_database)
                up = load.now()
                await anyio.sleep(SETTLE)
                posting = False
            with anyio.fail_after(RECOVERY):
                last = {s: await load.last(s) for s in sessions}
                final = {s: await load.answered(s, last[s]) for s in sessions}
            streamed = f"answer to message {last[sessions[0]]}"
            with anyio.move_on_after(RECOVERY):
                while streamed not in watched.answers():
                    await anyio.sleep(0.1)
            reading.cancel_scope.cancel()
        alive = [s.child is not None and s.child.poll() is None for s in servers]
        logs = "\n".join(s.logged()[-4000:] for s in servers)

    answered_while_down = [p for p in load.posted if down <= p.sent and p.answered < restarting]
    after = [p for p in load.posted if p.sent >= up]
    found = total([examine(final[s], load.acked[s]) for s in sessions])
    print(f"\ndatabase down from {down:.2f} s to {up:.2f} s; {len(load.posted)} messages posted, "
          f"{sum(len(a) for a in load.acked.values())} acknowledged, {len(answered_while_down)} refused while it "
          f"was down; {found}")
    for told in sorted({json.dumps(p.body)[:300] for p in load.posted if p.status != 202}):
        print(f"  told: {told}")
    assert alive_while_down == alive == [True, True], logs
    assert [p for p in load.posted if p.status == 0] == [], logs  # every request was answered
    # While it was down: refused, saying why, rather than held until it came back.
    assert {p.session_id for p in answered_while_down} == set(sessions), (down, restarting, load.posted)
    assert all(store_error(p) for p in answered_while_down), answered_while_down
    # Once it was back: nothing refused for the store, nothing lost, repeated or reordered, the stream went on.
    assert [p for p in after if p.status != 202 and not closed_meanwhile(p)] == [], logs
    assert found["lost"] == found["duplicated"] == found["out_of_order"] == found["unanswered"] == 0, found
    assert watched.ended == "", watched.ended
    ids = [f.id for _, f in watched.frames if f.id is not None]
    assert ids == sorted(set(ids)), ids  # each event once, in order
    assert streamed in watched.answers(since=up), watched.frames


async def test_a_store_fails_at_once_while_its_server_is_down_and_an_idle_one_works_at_once_after(pg_url: str
                                                                                                   ) -> None:
    the_throwaway_server()
    turn = Turn(Role.USER, [Text("kept")])
    async with PostgresStore(pg_url, pool_size=2) as busy, PostgresStore(pg_url, pool_size=2) as idle:
        feed = idle.event_feed()
        await busy.append("s", 0, [turn], {})
        async with anyio.create_task_group() as group:  # the pools keep connections made before the stop
            for store in (busy, busy, idle, idle):
                group.start_soon(store.load, "s")
        await feed.publish("s", [("note", "{}", True)])
        async with restored():
            await anyio.to_thread.run_sync(stop_database)
            for call in range(1, 5):  # past the connections its pool kept: the pool must connect, and cannot
                began = time.monotonic()
                with pytest.raises(StoreError, match="PostgreSQL store"):
                    await busy.load("s")
                took = time.monotonic() - began
                assert took < STORE_CALL, f"call {call} waited {took:.1f} s for the server to fail"
            await anyio.to_thread.run_sync(start_database)
        # The idle store's pools still hold the connections the stop ended: they are not handed out.
        assert texts(await idle.load("s")) == ["kept"]
        assert len(await feed.publish("s", [("note", "{}", True)])) == 1
        assert texts(await busy.load("s")) == ["kept"]
