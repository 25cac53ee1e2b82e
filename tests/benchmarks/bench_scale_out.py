"""Serving one load from several processes sharing a PostgreSQL database, against one process.

The load: 300 sessions x 5 messages. Each session posts its messages one after another, each once the previous
one is answered; the sessions run concurrently. It is served three ways, each by fresh ``python -m session serve
tests.benchmarks.scale_out_agent:make_agent`` processes on 127.0.0.1 (``--rate-limit off
--max-sessions-per-token off``; an agent whose model answers at once, so the serving is what is timed):

- the baseline: 1 process on the SQLite store (a file in a temporary folder);
- 1 process on PostgreSQL;
- 3 processes on one PostgreSQL database, the messages posted round robin: message k of session i goes to server
  (i + k) mod 3, so every message after a session's first reaches another server than the one before. A server
  that does not hold the conversation hands the message to the one that does (``HandOffStore``: stored in the
  inbox, the holder notified); a conversation let go (idle for ``lease_idle``, 1 s by default) is taken up by the
  server the next message reaches.

Each PostgreSQL case gets a fresh schema of the ``COGNITIVE_LOOP_TEST_POSTGRES`` database, dropped after; without
that variable (or a server it reaches) only the baseline runs, and the output says why.

Every session is created on server i mod N and holds one SSE stream (``GET /sessions/{id}/events``) on that
server from before its first message to its last answer: in the 3-process case the events of the runs on the
other servers reach it through the database's feed (LISTEN/NOTIFY). So every one of the 1,500 messages is timed,
as the client reads its events: the time to first event, from just before the POST to the message's
``message_started`` (the run's first event; the ``message_queued`` the server publishes as it accepts the POST is
not counted), and the time to answer, to its ``message_finished``. Throughput is messages answered per second,
from the first POST to the last answer; the sessions are created and their streams opened before, untimed, after
a warm-up message on each server. The notes give the CPU the servers and the client used meanwhile: the client
(httpx, a client of its own per session, since one pool for hundreds of connections costs more CPU than the
servers) runs in this process, on the same cores as the servers and the database, and takes its share.

Each case runs once (they cannot be interleaved: each is its own set of processes), baseline first. Every answer
is checked against the message it answers: a failed message, or any answer to a POST but 202, stops the
benchmark, except the refusals after which nothing is stored (409 ``session_closed``, 503), which are posted again
and counted in the notes.
"""

from __future__ import annotations

import collections
import functools
import importlib
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import anyio.to_thread
import attrs
import httpx

from tests.benchmarks._harness import Figure
from tests.session.stores.pg_server import ENV as PG_ENV
from tests.session.stores.pg_server import in_schema

ROOT = Path(__file__).resolve().parents[2]
AGENT = "tests.benchmarks.scale_out_agent:make_agent"
FLAGS = ("--rate-limit", "off", "--max-sessions-per-token", "off")
SESSIONS, MESSAGES, SERVERS = 300, 5, 3
QUICK_SESSIONS = 20
START_TIMEOUT = 60.0  # seconds a serve process may take to say where it serves
KEEPALIVE = 2.0  # seconds the client keeps an idle connection
RETRIES = 3  # times a refused POST is posted again (see ``post``)
CASE_TIMEOUT = 600.0  # seconds one case's load may take before the benchmark gives up on it
BASELINE = "1 process, SQLite"


@attrs.define
class Server:
    """One ``serve`` process on 127.0.0.1, its log in ``log``."""

    store: str
    log: Path
    child: subprocess.Popen[bytes] | None = None
    url: str = ""

    async def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "SESSION_TOKEN"}  # loopback: served without a token
        env["PYTHONPATH"] = str(ROOT)
        with self.log.open("wb") as out:
            self.child = subprocess.Popen(
                [sys.executable, "-m", "session", "serve", AGENT, "--store", self.store, "--host", "127.0.0.1",
                 "--port", "0", *FLAGS], stdout=subprocess.DEVNULL, stderr=out, cwd=ROOT, env=env)
        deadline = time.monotonic() + START_TIMEOUT
        while (url := self._serving()) is None:
            if self.child.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"`serve` did not start (exit status {self.child.poll()}):\n{self.tail()}")
            await anyio.sleep(0.05)
        self.url = url

    def _serving(self) -> str | None:
        found = re.search(r"serving on (http://127\.0\.0\.1:\d+)", self.log.read_text("utf-8", "replace"))
        return None if found is None else found.group(1)

    def cpu(self) -> float:
        """Seconds of CPU the process has used (user and system), or 0 where ``/proc`` does not tell."""
        try:
            fields = Path(f"/proc/{self.child.pid if self.child else 0}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def warnings(self) -> collections.Counter[str]:
        """How many times the process logged each warning or error (by its message; request lines by status)."""
        counts: collections.Counter[str] = collections.Counter()
        for line in self.log.read_text("utf-8", "replace").splitlines():
            if not line.startswith("{") or ('"level": "warning"' not in line and '"level": "error"' not in line):
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            status = f" {entry.get('status')}" if entry.get("event") == "http request" else ""
            counts[f"{entry.get('event')}{status}"] += 1
        return counts

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text("utf-8", "replace").splitlines()[-lines:])

    async def stop(self) -> None:
        """Stop it as a deployment does (SIGTERM: its leases are let go), killing it if it takes too long."""
        child = self.child
        if child is None or child.poll() is not None:
            return
        child.send_signal(signal.SIGTERM)
        try:
            await anyio.to_thread.run_sync(lambda: child.wait(timeout=20))
        except subprocess.TimeoutExpired:
            child.kill()
            await anyio.to_thread.run_sync(child.wait)


@asynccontextmanager
async def served(store: str, folder: Path, size: int) -> AsyncIterator[list[Server]]:
    """``size`` serve processes on ``store``, started one after the other (the first makes the tables)."""
    servers = [Server(store, folder / f"server{n}.log") for n in range(size)]
    try:
        for server in servers:
            await server.start()
        yield servers
    except BaseException:
        for server in servers:
            if server.url:  # it started: what it logged last may say why the load failed
                print(f"--- last lines of {server.log.name}:\n{server.tail()}", file=sys.stderr)
        raise
    finally:
        for server in servers:
            await server.stop()


class Stream:
    """One session's SSE stream as the client reads it: when each message's run started and ended."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.ended: dict[str, tuple[float, str, dict[str, object]]] = {}
        self._changed = anyio.Event()

    async def read(self, response: httpx.Response) -> None:
        """Note when each message's ``message_started`` and its end arrive, until the stream ends."""
        kind = ""
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:") and kind in ("message_started", "message_finished", "message_failed"):
                now = time.perf_counter()
                data = json.loads(line[5:])
                if kind == "message_started":
                    self.started.setdefault(data["message_id"], now)
                else:
                    self.ended[data["message_id"]] = (now, kind, data)
                self._changed.set()
                self._changed = anyio.Event()

    async def end_of(self, message_id: str) -> tuple[float, str, dict[str, object]]:
        """When the message's run ended, how (``message_finished`` or ``message_failed``), and its event's data."""
        while message_id not in self.ended:
            await self._changed.wait()
        return self.ended[message_id]


@attrs.frozen
class Load:
    """What one run of the load measured. ``seconds``: from the first POST to the last answer; per message, the
    seconds from its POST to its 202 (``accepted``), to its first event and to its answer; the CPU seconds the
    servers and the client (this process) used meanwhile; the refusals of POSTs posted again (see ``post``); the
    warnings and errors the servers logged, each with how many times."""

    seconds: float
    accepted: tuple[float, ...]
    first_event: tuple[float, ...]
    answered: tuple[float, ...]
    server_cpu: float = 0.0
    client_cpu: float = 0.0
    refused: tuple[str, ...] = ()
    warnings: tuple[tuple[str, int], ...] = ()

    @property
    def throughput(self) -> float:
        return len(self.answered) / self.seconds


async def post(http: httpx.AsyncClient, url: str, text: str, refused: list[str]) -> str:
    """POST the message ``text`` to ``url``; its id. A refusal that leaves nothing stored (409 ``session_closed``:
    the session closed before the message was accepted; 503: the conversation stayed busy elsewhere) is noted in
    ``refused`` and the message posted again, at most ``RETRIES`` times; any other answer stops the benchmark."""
    attempts = 0
    while True:
        attempts += 1
        response = await http.post(url, json={"text": text})
        if response.status_code == 202:
            message_id: str = response.json()["message_id"]
            return message_id
        kind = response.json().get("error", {}).get("type", "?") if response.text.startswith("{") else "?"
        if attempts > RETRIES or not (response.status_code == 503 or kind == "session_closed"):
            raise RuntimeError(f"POST {url} answered {response.status_code}: {response.text}")
        refused.append(f"{response.status_code} {kind}")


async def load(urls: list[str], sessions: int, messages: int, servers_cpu: Callable[[], float] = lambda: 0.0
               ) -> Load:
    """Run the load against the servers at ``urls`` (see the module's notes) and time it; ``servers_cpu()`` says
    how many CPU seconds the servers have used so far."""
    # A client per session: httpx's pool looks through all its connections for each request, so one pool for
    # hundreds of streams and requests in flight costs the client more CPU than the servers use. A kept
    # connection is dropped well before the server's keep-alive timeout (uvicorn's, 5 s, as httpx's own
    # default): reused just as the server closes it, a POST would fail with a ReadError.
    limits = httpx.Limits(max_keepalive_connections=None, keepalive_expiry=KEEPALIVE)
    tls = ssl.create_default_context()  # never used (plain HTTP), but each client would make its own
    ready, go = anyio.Event(), anyio.Event()
    arrived = 0
    begun = cpu_before = client_before = 0.0
    accepted: list[float] = []
    first_event: list[float] = []
    answered: list[float] = []
    refused: list[str] = []
    last_answer = 0.0
    setting_up = anyio.CapacityLimiter(32)

    async def converse(number: int) -> None:
        nonlocal arrived, last_answer
        home = urls[number % len(urls)]
        stream = Stream()
        async with AsyncExitStack() as stack:
            http = await stack.enter_async_context(httpx.AsyncClient(limits=limits, timeout=120, verify=tls))
            async with setting_up:
                created = await http.post(f"{home}/sessions")
                if created.status_code != 201:
                    raise RuntimeError(f"POST /sessions answered {created.status_code}: {created.text}")
                session_id = created.json()["id"]
                response = await stack.enter_async_context(http.stream("GET", f"{home}/sessions/{session_id}/events"))
                if response.status_code != 200:
                    raise RuntimeError(f"GET /sessions/{session_id}/events answered {response.status_code}")
            async with anyio.create_task_group() as group:
                group.start_soon(stream.read, response)
                arrived += 1
                if arrived == sessions:
                    ready.set()
                await go.wait()
                for k in range(messages):
                    text = f"message {k} of session {number}"
                    sent = time.perf_counter()
                    message_id = await post(http, f"{urls[(number + k) % len(urls)]}/sessions/{session_id}/messages",
                                            text, refused)
                    took = time.perf_counter() - sent
                    ended, kind, data = await stream.end_of(message_id)
                    if kind != "message_finished" or data.get("answer") != f"answer to {text}":
                        raise RuntimeError(f"{text!r} ended with {kind} {data}")
                    accepted.append(took)
                    first_event.append(stream.started[message_id] - sent)
                    answered.append(ended - sent)
                    last_answer = max(last_answer, ended)
                group.cancel_scope.cancel()

    with anyio.fail_after(CASE_TIMEOUT):
        async with anyio.create_task_group() as group:
            for number in range(sessions):
                group.start_soon(converse, number)
            await ready.wait()
            cpu_before, client_before = servers_cpu(), time.process_time()
            begun = time.perf_counter()
            go.set()
    server_cpu, client_cpu = servers_cpu() - cpu_before, time.process_time() - client_before
    return Load(last_answer - begun, tuple(accepted), tuple(first_event), tuple(answered), server_cpu, client_cpu,
                tuple(refused))


async def case(store: str, size: int, sessions: int, messages: int) -> Load:
    """Start ``size`` servers on ``store``, warm each up with one message, run the load, stop them."""
    with tempfile.TemporaryDirectory(prefix="bench-scale-out-") as folder:
        store = store.replace("{folder}", folder)
        async with served(store, Path(folder), size) as servers:
            urls = [s.url for s in servers]
            await load(urls, len(urls), 1)  # untimed: each server's first requests pay for lazy set-up
            done = await load(urls, sessions, messages, lambda: sum(s.cpu() for s in servers))
            logged = sum((s.warnings() for s in servers), collections.Counter[str]())
            return attrs.evolve(done, warnings=tuple(logged.most_common()))


@asynccontextmanager
async def schema(url: str) -> AsyncIterator[str]:
    """``url`` with its tables in a fresh schema, dropped (with all in it) afterwards."""
    import psycopg

    name = f"bench_scale_out_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    try:
        yield in_schema(url, name)
    finally:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")


def postgres_problem() -> tuple[str, str | None]:
    """The PostgreSQL server's URL, and why it cannot be used (``None`` when it can)."""
    url = os.environ.get(PG_ENV, "").strip()
    if not url:
        return "", f"{PG_ENV} is not set"
    try:
        import psycopg
        importlib.import_module("psycopg_pool")  # the store needs it
    except ImportError as exc:
        return url, f"psycopg 3 and psycopg_pool are not installed ({exc})"
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return url, f"the server at {url} cannot be used: {' '.join(str(exc).split())}"
    return url, None


async def cases(sessions: int, messages: int, url: str, problem: str | None, say: Callable[[str], None]
                ) -> dict[str, Load]:
    """The baseline, then, unless there is a ``problem`` with the PostgreSQL server at ``url``, 1 and 3 processes
    on it."""
    found: dict[str, Load] = {}
    plan = [(BASELINE, "sqlite:///{folder}/sessions.db", 1)]
    if problem is None:
        plan += [("1 process, PostgreSQL", url, 1), (f"{SERVERS} processes, PostgreSQL", url, SERVERS)]
    else:
        say(f"  scale_out: skipped the PostgreSQL cases: {problem}; set {PG_ENV} to a server's URL "
            f"(postgresql://cl@127.0.0.1:54329/cl) to run them. Running the SQLite baseline only.")
    for label, store, size in plan:
        started = time.perf_counter()
        if not store.startswith("postgresql"):
            found[label] = await case(store, size, sessions, messages)
        else:
            async with schema(store) as in_fresh_schema:
                found[label] = await case(in_fresh_schema, size, sessions, messages)
        done = found[label]
        say(f"  scale_out: {label}: {len(done.answered)} messages answered in {done.seconds:.1f} s "
            f"({time.perf_counter() - started:.1f} s with start-up and shutdown)")
    return found


def percentile(samples: tuple[float, ...], fraction: float) -> float:
    """The sample at ``fraction`` of the sorted samples (nearest rank)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def figures(found: dict[str, Load], sessions: int, messages: int, skipped: str | None) -> list[Figure]:
    """One row per case and figure, each against the baseline's figure."""
    base = found[BASELINE]
    how = ("every message is timed, as the client reads its session's SSE stream (one per session, held from "
           "before its first message to its last answer): from just before the POST to the message's "
           "message_started (the run's first event) and to its message_finished")
    rows: list[Figure] = []
    for label, done in found.items():
        moved = f"; message k of session i posted to server (i + k) mod {SERVERS}" if label.startswith(
            f"{SERVERS} ") else ""
        per_message = done.server_cpu / len(done.answered) * 1000
        notes: tuple[str, ...] = (
            f"{sessions} sessions x {messages} messages, concurrently, each session's messages one after another; "
            f"{done.seconds:.2f} s from the first POST to the last answer{moved}",
            f"CPU meanwhile: {done.server_cpu:.1f} s in the server process(es) ({per_message:.2f} ms a message), "
            f"{done.client_cpu:.1f} s in the client (this process); the database's is not counted",
            f"POST -> 202: p50 {percentile(done.accepted, 0.5) * 1000:.1f} ms, p99 "
            f"{percentile(done.accepted, 0.99) * 1000:.1f} ms (on PostgreSQL the POST is answered once the message "
            "is in the inbox: taken up by its server, or handed to the server holding the conversation)")
        if done.refused:
            counts = ", ".join(f"{n} x {why}" for why, n in sorted(collections.Counter(done.refused).items()))
            notes += (f"POSTs refused, each posted again (its times run from the first POST): {counts}",)
        if done.warnings:
            notes += ("the servers logged: " + ", ".join(f"{n} x {what!r}" for what, n in done.warnings),)
        if label == BASELINE:
            notes += ("the baseline: the ratios are against it; for throughput higher is better, for times lower",)
            if skipped:
                notes += (f"the PostgreSQL cases were skipped: {skipped}",)
        rows.append(Figure("scale_out", f"{label}: throughput", done.throughput, "msg/s", base.throughput,
                           BASELINE, notes=notes))
        for key, name in (("first_event", "POST -> message_started"), ("answered", "POST -> message_finished")):
            for fraction, tag in ((0.5, "p50"), (0.99, "p99")):
                explained = (how,) if label == BASELINE and key == "first_event" and fraction == 0.5 else ()
                rows.append(Figure("scale_out", f"{label}: {name} {tag}", percentile(getattr(done, key), fraction)
                                   * 1000, "ms", percentile(getattr(base, key), fraction) * 1000, BASELINE,
                                   notes=explained))
    return rows


def run(quick: bool = False) -> list[Figure]:
    """Run the three cases (the baseline only without PostgreSQL); ``quick``: 20 sessions instead of 300."""
    sessions = QUICK_SESSIONS if quick else SESSIONS
    say = functools.partial(print, flush=True)
    url, problem = postgres_problem()
    found = anyio.run(cases, sessions, MESSAGES, url, problem, say, backend="asyncio")
    return figures(found, sessions, MESSAGES, problem)


if __name__ == "__main__":
    from tests.benchmarks._harness import render_table

    print(render_table(run(quick="--quick" in sys.argv)))
