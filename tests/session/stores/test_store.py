"""Stores: the conformance check on both built-in stores, SQLite durability under SIGKILL, closing, and bad input."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from loop import Role, State, Text, Turn, UsageError
from session import MemoryStore, SQLiteStore, StoreConflict, StoreError, open_store
from session.testing import ConformanceError, check_store
from tests.session.stores.conftest import ASYNCIO_ONLY

ROOT = Path(__file__).resolve().parents[3]


def open_files(folder: Path) -> list[str]:
    """The files under ``folder`` this process holds open."""
    found = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed since the listing
            continue
        if target.startswith(f"{folder}{os.sep}"):
            found.append(target)
    return sorted(found)


@pytest.fixture(autouse=True)
def _no_file_left_open(tmp_path: Path) -> Iterator[None]:
    """A connection still open when a test ends was never closed. Python 3.13 warns about one only when the
    collector finds it, in some later test; this names the test that left it, on every version."""
    yield
    assert open_files(tmp_path) == [], "a connection was left open: close stores with aclose() or `async with`"


@contextmanager
def connected(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain connection to ``path``, committed and closed at the end (``with sqlite3.connect(...)`` only
    commits: the connection stays open until the collector finds it, and Python 3.13 warns then)."""
    conn = sqlite3.connect(path)
    try:
        with conn:
            yield conn
    finally:
        conn.close()


async def test_memory_store_conforms() -> None:
    await check_store(MemoryStore)


async def test_sqlite_store_conforms(tmp_path: Path) -> None:
    stores: list[SQLiteStore] = []

    def make() -> SQLiteStore:
        stores.append(SQLiteStore(tmp_path / "conv.db"))
        return stores[-1]

    await check_store(make)
    for store in stores:
        await store.aclose()


async def test_the_check_catches_a_store_that_ignores_start() -> None:
    class Careless(MemoryStore):
        async def append(self, session_id, start, turns, meta):  # type: ignore[no-untyped-def]
            current = await self.load(session_id)
            await super().append(session_id, len(current or State()), turns, meta)

    with pytest.raises(ConformanceError, match="must conflict"):
        await check_store(Careless)


async def test_the_check_catches_a_store_that_cannot_branch() -> None:
    class AppendOnly(MemoryStore):
        async def append(self, session_id, start, turns, meta):  # type: ignore[no-untyped-def]
            current = await self.load(session_id)
            if start < len(current or State()):
                return
            await super().append(session_id, start, turns, meta)

    with pytest.raises(ConformanceError, match="branch"):
        await check_store(AppendOnly)


async def test_sqlite_keeps_superseded_rows_as_a_record(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "c.db")
    await store.append("s", 0, [Turn(Role.USER, [Text(t)]) for t in "abc"], {})
    await store.append("s", 1, [Turn(Role.USER, [Text("B")])], {})
    state = await store.load("s")
    assert state is not None and [t.text for t in state] == ["a", "B"]
    await store.aclose()
    with connected(tmp_path / "c.db") as conn:
        rows = conn.execute("SELECT idx, rev FROM turns ORDER BY idx, rev").fetchall()
    assert rows == [(0, 0), (1, 0), (1, 1), (2, 0)]


async def test_sqlite_keeps_conversations_across_reopening(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "conv.db"
    store = SQLiteStore(path)
    await store.append("a", 0, [Turn(Role.USER, [Text("one")])], {"title": "first"})
    await store.aclose()
    again = SQLiteStore(path)
    state = await again.load("a")
    assert state is not None and state.turns[0].text == "one" and state.meta["title"] == "first"
    assert await again.sessions() == ["a"]
    assert await again.delete("a") is True and await again.load("a") is None
    assert await again.delete("a") is False
    await again.aclose()


async def test_aclose_closes_the_file_and_a_closed_store_refuses_to_reopen_it(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "c.db")
    await store.append("s", 0, [turn("t")], {})
    assert open_files(tmp_path)  # the database, its WAL and its shared memory
    await store.aclose()
    assert open_files(tmp_path) == [] and not (tmp_path / "c.db-wal").exists()  # the close checkpointed
    for call in (lambda: store.load("s"), lambda: store.append("s", 1, [turn("u")], {}), store.sessions,
                 lambda: store.delete("s")):
        with pytest.raises(UsageError, match="closed"):
            await call()
    assert open_files(tmp_path) == []
    await store.aclose()  # closing twice is fine


async def test_a_call_that_reaches_the_file_after_aclose_opens_no_connection(tmp_path: Path) -> None:
    # A call whose task was cancelled natively (past anyio's shield) goes on in its worker thread, and can
    # get there after aclose; it must not open a connection that nobody would close.
    store = SQLiteStore(tmp_path / "c.db")
    await store.append("s", 0, [turn("t")], {})
    await store.aclose()
    with pytest.raises(UsageError, match="closed"):
        await anyio.to_thread.run_sync(store._alone, store._load, "s")
    assert open_files(tmp_path) == []


async def test_async_with_closes_the_store(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "c.db") as store:
        await store.append("s", 0, [turn("t")], {})
        assert open_files(tmp_path)
    assert open_files(tmp_path) == []


async def test_sqlite_is_in_wal_mode_with_one_row_per_turn(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "c.db")
    await store.append("s", 0, [Turn(Role.USER, [Text(str(i))]) for i in range(3)], {})
    await store.aclose()
    with connected(tmp_path / "c.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
        rows = conn.execute("SELECT idx, data FROM turns ORDER BY idx").fetchall()
    assert [(i, json.loads(d)["parts"][0]["text"]) for i, d in rows] == [(0, "0"), (1, "1"), (2, "2")]


async def test_a_schema_1_store_loads_with_old_run_results_moved_onto_the_answer(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "old.db")
    turns = [Turn(Role.USER, [Text("q")]), Turn(Role.ASSISTANT, [Text("a")])]
    await store.append("old", 0, turns, {"title": "t", "degraded": True, "degraded_reason": "cap",
                                         "code_action": {"attempts": 2}})
    await store.append("plain", 0, turns, {"title": "u"})
    await store.aclose()
    with connected(tmp_path / "old.db") as conn:  # as a version without outcomes left it
        conn.execute("PRAGMA user_version = 1")
    reopened = SQLiteStore(tmp_path / "old.db")
    old = await reopened.load("old")
    assert old is not None and old.meta == {"title": "t"}
    assert old.degraded and old.outcome is not None and old.outcome.reason == "cap"
    assert old.outcome.data == {"CodeAction": {"attempts": 2}}
    plain = await reopened.load("plain")
    assert plain is not None and plain.meta == {"title": "u"} and plain.outcome is None
    await reopened.append("later", 0, turns, {"degraded": "a caller's own key"})  # schema 2: kept as given
    later = await reopened.load("later")
    assert later is not None and later.meta == {"degraded": "a caller's own key"} and later.outcome is None
    await reopened.aclose()


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    with connected(tmp_path / "new.db") as conn:
        conn.execute("PRAGMA user_version = 99")
    store = SQLiteStore(tmp_path / "new.db")
    with pytest.raises(StoreError, match="schema 99"):
        await store.load("x")


async def test_a_failed_write_leaves_nothing_half_written(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "c.db")
    await store.append("s", 0, [Turn(Role.USER, [Text("kept")])], {})
    with pytest.raises(UsageError, match="JSON"):
        await store.append("s", 1, [Turn(Role.USER, [Text("lost")])], {"bad": object()})
    with pytest.raises(StoreConflict, match="gap"):
        await store.append("s", 2, [Turn(Role.USER, [Text("lost")])], {})
    state = await store.load("s")
    assert state is not None and [t.text for t in state] == ["kept"]
    await store.aclose()


def turn(text: str) -> Turn:
    return Turn(Role.USER, [Text(text)])


async def test_concurrent_appends_share_transactions_and_all_land(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SQLiteStore(tmp_path / "c.db")
    batches: list[int] = []
    write_batch = SQLiteStore._append_batch

    def counted(self: SQLiteStore, batch: list) -> None:
        batches.append(len(batch))
        write_batch(self, batch)

    monkeypatch.setattr(SQLiteStore, "_append_batch", counted)
    async with anyio.create_task_group() as group:
        for n in range(200):
            group.start_soon(store.append, f"s{n}", 0, [turn(f"t{n}")], {"n": n})
    assert sum(batches) == 200 and len(batches) < 20, batches
    for n in (0, 77, 199):
        state = await store.load(f"s{n}")
        assert state is not None and [t.text for t in state] == [f"t{n}"] and state.meta == {"n": n}
    await store.aclose()


class HeldWriter:
    """Holds the store's first transaction until ``release``, so the appends made meanwhile all wait and
    share the next one."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.writing = threading.Event()
        self.go_on = threading.Event()
        self.batches: list[list[str]] = []
        write_batch = SQLiteStore._append_batch

        def held(store: SQLiteStore, batch: list) -> None:
            self.batches.append([w.session_id for w in batch])
            if len(self.batches) == 1:
                self.writing.set()
                self.go_on.wait(10)
            write_batch(store, batch)

        monkeypatch.setattr(SQLiteStore, "_append_batch", held)

    async def started(self) -> None:
        with anyio.fail_after(5):
            while not self.writing.is_set():
                await anyio.sleep(0.001)


async def outcome(store: SQLiteStore, name: str, start: int = 0) -> object:
    try:
        await store.append(name, start, [turn(name)], {})
    except StoreError as exc:
        return exc
    return "ok"


@ASYNCIO_ONLY
async def test_an_append_refused_in_a_shared_transaction_fails_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, held = SQLiteStore(tmp_path / "c.db"), HeldWriter(monkeypatch)
    outcomes: dict[str, object] = {}

    async def append(name: str, start: int) -> None:
        outcomes[name] = await outcome(store, name, start)

    async with anyio.create_task_group() as group:
        group.start_soon(append, "first", 0)
        await held.started()
        for name, start in (("a", 0), ("gap", 5), ("b", 0)):
            group.start_soon(append, name, start)
        await anyio.wait_all_tasks_blocked()
        held.go_on.set()
    assert held.batches == [["first"], ["a", "gap", "b"]]
    assert outcomes["first"] == outcomes["a"] == outcomes["b"] == "ok"
    assert isinstance(outcomes["gap"], StoreConflict)
    assert await store.load("gap") is None and await store.load("b") is not None
    await store.aclose()


class FailingCommits:
    """A connection whose commits fail (a full disk) from the ``after``-th on, counted in ``commits``."""

    def __init__(self, conn: sqlite3.Connection, commits: list[int], after: int) -> None:
        self._conn, self._commits, self._after = conn, commits, after

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT":
            self._commits.append(1)
            if len(self._commits) >= self._after:
                raise sqlite3.OperationalError("database or disk is full")
        return self._conn.execute(sql, *args)


async def test_a_failed_commit_fails_every_append_it_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, held = SQLiteStore(tmp_path / "c.db"), HeldWriter(monkeypatch)
    connect = SQLiteStore._connect
    commits: list[int] = []
    monkeypatch.setattr(SQLiteStore, "_connect", lambda self: FailingCommits(connect(self), commits, after=2))
    outcomes: dict[str, object] = {}

    async def append(name: str) -> None:
        outcomes[name] = await outcome(store, name)

    async with anyio.create_task_group() as group:
        group.start_soon(append, "first")
        await held.started()
        for name in ("a", "b", "c"):
            group.start_soon(append, name)
        await anyio.wait_all_tasks_blocked()
        held.go_on.set()
    errors = [outcomes[name] for name in ("a", "b", "c")]
    assert all(isinstance(e, StoreError) and "disk is full" in str(e) for e in errors), outcomes
    assert len({id(e) for e in errors}) == 3  # each caller raises an error of its own
    monkeypatch.setattr(SQLiteStore, "_connect", connect)
    assert outcomes["first"] == "ok" and await store.load("first") is not None
    assert [await store.load(name) for name in ("a", "b", "c")] == [None, None, None]
    await store.aclose()


@ASYNCIO_ONLY
async def test_an_append_whose_rows_will_not_go_in_fails_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, held = SQLiteStore(tmp_path / "c.db"), HeldWriter(monkeypatch)
    outcomes: dict[str, object] = {}

    async def append(name: str, text: str) -> None:
        try:
            await store.append(name, 0, [turn(text)], {})
            outcomes[name] = "ok"
        except StoreError as exc:
            outcomes[name] = exc

    async with anyio.create_task_group() as group:
        group.start_soon(append, "first", "fine")
        await held.started()
        group.start_soon(append, "a", "fine")
        group.start_soon(append, "broken", "\ud800")  # a lone surrogate: no UTF-8 for it
        group.start_soon(append, "b", "fine")
        await anyio.wait_all_tasks_blocked()
        held.go_on.set()
    assert held.batches == [["first"], ["a", "broken", "b"]]
    assert outcomes["a"] == outcomes["b"] == "ok" and isinstance(outcomes["broken"], StoreError)
    assert await store.load("broken") is None and await store.load("b") is not None
    await store.aclose()


@ASYNCIO_ONLY
async def test_a_writer_cancelled_as_it_starts_still_writes_the_appends_it_took(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "c.db")
    await store.load("warm")  # the connection is open: the writer goes straight to its transaction
    outcomes: dict[str, object] = {}
    scope = anyio.CancelScope()

    async def writer() -> None:
        with scope:
            await store.append("w", 0, [turn("w")], {})

    async def shielded(name: str) -> None:
        with anyio.CancelScope(shield=True):  # as a session's writes are
            outcomes[name] = await outcome(store, name)

    async with anyio.create_task_group() as group:
        group.start_soon(writer)
        group.start_soon(shielded, "b")
        group.start_soon(shielded, "c")

        async def cancel() -> None:
            scope.cancel()  # lands as the writer enters its transaction

        group.start_soon(cancel)
    assert outcomes == {"b": "ok", "c": "ok"}
    assert [await store.load(name) is not None for name in "wbc"] == [True, True, True]
    await store.aclose()


@ASYNCIO_ONLY
async def test_a_writer_cancelled_natively_mid_transaction_reports_the_truth_and_blocks_nobody(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``asyncio.wait_for`` and friends cancel past anyio's shield: the transaction goes on in its thread; its
    appends are reported when it ends, and the next transaction waits for it."""
    import asyncio

    inside, go_on = threading.Event(), threading.Event()
    append_one = SQLiteStore._append_one

    def held(conn: sqlite3.Connection, write: Any) -> None:
        if write.session_id == "x":
            inside.set()
            go_on.wait(10)
        append_one(conn, write)

    monkeypatch.setattr(SQLiteStore, "_append_one", staticmethod(held))
    store = SQLiteStore(tmp_path / "c.db")
    await store.append("first", 0, [turn("first")], {})
    writer = asyncio.ensure_future(outcome(store, "w"))
    x = asyncio.ensure_future(outcome(store, "x"))
    await asyncio.sleep(0)  # both queued: "w" writes, "x" waits for it
    second = asyncio.ensure_future(outcome(store, "w2"))
    with anyio.fail_after(5):
        while not inside.is_set():
            await anyio.sleep(0.001)
    writer.cancel()
    late = asyncio.ensure_future(outcome(store, "late"))  # must wait for the transaction under way
    await anyio.sleep(0.05)
    assert not late.done()
    go_on.set()
    results = await asyncio.gather(writer, x, second, late, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError) and results[1:] == ["ok", "ok", "ok"]
    assert [await store.load(name) is not None for name in ("w", "x", "w2", "late")] == [True] * 4
    await store.aclose()


async def test_an_append_cancelled_while_it_waits_is_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, held = SQLiteStore(tmp_path / "c.db"), HeldWriter(monkeypatch)
    async with anyio.create_task_group() as group:
        group.start_soon(outcome, store, "first")
        await held.started()
        with anyio.move_on_after(0.05):
            await store.append("cancelled", 0, [turn("c")], {})
        group.start_soon(outcome, store, "after")
        await anyio.wait_all_tasks_blocked()
        held.go_on.set()
    assert held.batches == [["first"], ["after"]]
    assert await store.load("cancelled") is None and await store.load("after") is not None
    await store.aclose()


async def test_an_append_cancelled_just_as_its_turn_to_write_comes_passes_the_turn_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, held = SQLiteStore(tmp_path / "c.db"), HeldWriter(monkeypatch)
    second = anyio.CancelScope()
    hand_over = SQLiteStore._hand_over

    def then_cancel_the_next_writer(self: SQLiteStore) -> None:
        hand_over(self)
        second.cancel()  # the append just made the writer is cancelled before it runs again

    monkeypatch.setattr(SQLiteStore, "_hand_over", then_cancel_the_next_writer)

    async def cancelled() -> None:
        with second:
            await store.append("second", 0, [turn("s")], {})

    with anyio.fail_after(10):  # a turn to write that went nowhere would leave "third" waiting for ever
        async with anyio.create_task_group() as group:
            group.start_soon(outcome, store, "first")
            await held.started()
            group.start_soon(cancelled)
            await anyio.wait_all_tasks_blocked()
            group.start_soon(outcome, store, "third")
            await anyio.wait_all_tasks_blocked()
            held.go_on.set()
    assert held.batches == [["first"], ["third"]]
    assert await store.load("second") is None and await store.load("third") is not None
    await store.aclose()


async def test_an_unwritable_path_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = SQLiteStore(blocker / "c.db")
    with pytest.raises((StoreError, OSError)):
        await store.append("s", 0, [], {})


@pytest.mark.parametrize("bad", ["", 3, None, "x" * 257])
async def test_bad_session_ids_are_rejected(bad: object) -> None:
    with pytest.raises(UsageError, match="session id"):
        await MemoryStore().load(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("start", [-1, 1.0, True])
async def test_bad_start_is_rejected(start: object) -> None:
    with pytest.raises(UsageError, match="start"):
        await MemoryStore().append("s", start, [], {})  # type: ignore[arg-type]


async def test_a_memory_store_writes_at_once_with_append_now_and_checks_as_append_does() -> None:
    store = MemoryStore()
    hi, hello = Turn(Role.USER, (Text("hi"),)), Turn(Role.ASSISTANT, (Text("hello"),))
    store.append_now("s", 0, [hi], {})
    store.append_now("s", 1, (hello,), {"k": 1})
    assert await store.load("s") == State((hi, hello), {"k": 1})
    store.append_now("s", 1, [hi], {})  # a rewrite from turn 1 on
    assert await store.load("s") == State((hi, hi))
    with pytest.raises(StoreConflict, match="gap"):
        store.append_now("s", 3, [hi], {})
    for start in (-1, 1.0, True):
        with pytest.raises(UsageError, match="start"):
            store.append_now("s", start, [hi], {})  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="Turn values"):
        store.append_now("s", 2, [hi, "not a turn"], {})  # type: ignore[list-item]
    with pytest.raises(UsageError, match="session id"):
        store.append_now("", 0, [hi], {})
    with pytest.raises(UsageError, match="session id"):
        store.append_now(["s"], 0, [hi], {})  # type: ignore[arg-type]
    assert await store.load("s") == State((hi, hi)), "a refused append writes nothing"


def test_open_store_reads_urls(tmp_path: Path) -> None:
    assert isinstance(open_store("memory://"), MemoryStore)
    store = open_store(f"sqlite:///{tmp_path}/x.db")
    assert isinstance(store, SQLiteStore) and store.path == tmp_path / "x.db"
    for bad in ("postgres://x", "sqlite:///", "memory"):
        with pytest.raises(UsageError, match="store URL"):
            open_store(bad)


CHILD = textwrap.dedent("""
    import sys, anyio
    from loop import Role, Text, Turn
    from session import SQLiteStore

    async def main():
        store = SQLiteStore(sys.argv[1])
        i = 0
        while True:
            await store.append("s", i, [Turn(Role.USER, [Text(str(i))])], {"last": i})
            print(f"ack {i}", flush=True)
            i += 1

    anyio.run(main)
""")


@pytest.mark.slow
async def test_sqlite_loses_no_acknowledged_turn_when_the_process_is_killed(tmp_path: Path) -> None:
    path = tmp_path / "killed.db"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    acked = -1
    assert child.stdout is not None
    with anyio.fail_after(30):
        while acked < 200:
            line = await anyio.to_thread.run_sync(child.stdout.readline)
            assert line.startswith("ack "), line
            acked = int(line.split()[1])
    child.send_signal(signal.SIGKILL)
    await anyio.to_thread.run_sync(child.wait)
    child.stdout.close()
    assert child.returncode == -signal.SIGKILL

    store = SQLiteStore(path)
    state = await store.load("s")
    assert state is not None
    texts = [t.text for t in state]
    assert len(texts) > acked, f"acknowledged {acked + 1} turns, found {len(texts)}"
    assert texts == [str(i) for i in range(len(texts))]
    assert state.meta["last"] == len(texts) - 1
    # The conversation resumes where it stopped.
    await store.append("s", len(texts), [Turn(Role.USER, [Text("resumed")])], {})
    resumed = await store.load("s")
    assert resumed is not None and resumed.last is not None and resumed.last.text == "resumed"
    await store.aclose()
    with connected(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
