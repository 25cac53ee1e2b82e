"""Checkpoints in a session's store: the ``CheckpointStore`` ability of both stores, the SQLite table's upgrade and
durability, ``StoreCheckpoints`` and ``Manager.checkpoints``, and an MCTS search run through a ``Manager`` that goes
on, in a new manager on the same SQLite file, where a budget, a shutdown or a SIGKILL stopped it."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import zlib
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from cognitive import MCTS, Checkpoints, WithBudget, checkpoint_key, new_turn_processor, react_factory
from loop import Budget, Request, Role, State, Step, Text, Turn, TurnExecutor, UsageError
from provider import Function
from session import (CheckpointStore, Manager, MemoryStore, SQLiteStore, StoreCheckpoints, StoreError,
                     current_checkpoints)
from tests.session.models import echo

ROOT = Path(__file__).resolve().parents[3]
QUESTION = "Make 24 from 4 4 6 8."
# A test whose child process runs its own event loop: the test's backend only waits for it, so once is enough.
CHILD_LOOP = pytest.mark.parametrize("anyio_backend", ["asyncio"])
ITERATIONS = 5


@asynccontextmanager
async def opened(kind: str, path: Path) -> AsyncIterator[CheckpointStore]:
    if kind == "memory":
        yield MemoryStore()
        return
    async with SQLiteStore(path) as store:
        yield store


@contextmanager
def connected(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain connection to ``path``, committed and closed at the end."""
    conn = sqlite3.connect(path)
    try:
        with conn:
            yield conn
    finally:
        conn.close()


# -- the ability on both stores ------------------------------------------------------------------------------

DATA = {"format": 1, "tree": {"nodes": [{"id": 0, "thought": "½ of 48 — “24”", "score": 0.1, "children": [1, 2]},
                                        {"id": 1, "thought": "", "score": None, "terminal": True}]},
        "iteration": 3, "big": 2 ** 70, "tiny": 1e-300, "third": 1 / 3, "negative": -0.0, "flags": [True, False],
        "empty": {"list": [], "map": {}}, "text": "line\nbreak\ttab \\ \"quote\" \u0000 nul"}


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_store_saves_replaces_loads_and_drops_checkpoints(kind: str, tmp_path: Path) -> None:
    async with opened(kind, tmp_path / "c.db") as store:
        assert isinstance(store, CheckpointStore)
        assert await store.load_checkpoint("k1") is None
        await store.save_checkpoint("k1", DATA)
        await store.save_checkpoint("k2", {"other": 1})
        loaded = await store.load_checkpoint("k1")
        assert loaded == DATA and json.dumps(loaded) == json.dumps(DATA)  # exact, to the order of the keys
        assert isinstance(loaded, dict)
        loaded["iteration"] = 99  # a copy: the kept checkpoint does not change
        assert (await store.load_checkpoint("k1")) == DATA

        await store.save_checkpoint("k1", {"iteration": 4})  # replaces, whole
        assert await store.load_checkpoint("k1") == {"iteration": 4}
        await store.drop_checkpoint("k1")
        assert await store.load_checkpoint("k1") is None
        await store.drop_checkpoint("k1")  # dropping what is not there is fine
        assert await store.load_checkpoint("k2") == {"other": 1}  # the other key is untouched


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_checkpoints_are_apart_from_the_conversations(kind: str, tmp_path: Path) -> None:
    async with opened(kind, tmp_path / "c.db") as store:
        await store.append("s", 0, [Turn(Role.USER, [Text("hi")])], {})
        await store.save_checkpoint("s", {"n": 1})  # a key like a session id is no session
        assert isinstance(store, (MemoryStore, SQLiteStore))
        assert await store.delete("s")
        assert await store.load_checkpoint("s") == {"n": 1}
        assert await store.load("s") is None


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("key", ["", 7, None, "k" * 257, b"bytes"])
async def test_a_bad_key_is_refused(kind: str, key: Any, tmp_path: Path) -> None:
    async with opened(kind, tmp_path / "c.db") as store:
        for call in (store.save_checkpoint(key, {"a": 1}), store.load_checkpoint(key), store.drop_checkpoint(key)):
            with pytest.raises(UsageError, match="checkpoint key is a non-empty string of at most 256"):
                await call
        await store.save_checkpoint("k" * 256, {"longest": True})
        assert await store.load_checkpoint("k" * 256) == {"longest": True}


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize(("data", "match"), [([1, 2], "mapping of JSON data, got list"),
                                             ({"when": object()}, "must be JSON data"),
                                             ({"set": {1}}, "must be JSON data")])
async def test_data_that_is_not_json_is_refused_and_nothing_is_written(kind: str, data: Any, match: str,
                                                                        tmp_path: Path) -> None:
    async with opened(kind, tmp_path / "c.db") as store:
        await store.save_checkpoint("k", {"kept": 1})
        with pytest.raises(UsageError, match=match):
            await store.save_checkpoint("k", data)
        assert await store.load_checkpoint("k") == {"kept": 1}


# -- the SQLite table -----------------------------------------------------------------------------------------


async def test_an_sqlite_file_from_before_checkpoints_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    async with SQLiteStore(path) as store:
        await store.append("s", 0, [Turn(Role.USER, [Text("kept")])], {"title": "t"})
        await store.post("s", Turn(Role.USER, [Text("waiting")], {"message_id": "m1"}))
    with connected(path) as conn:  # as schema 3, the version before checkpoints, left it
        conn.execute("DROP TABLE checkpoints")
        conn.execute("PRAGMA user_version = 3")
    with connected(path) as conn:
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'checkpoints'").fetchone() is None

    async with SQLiteStore(path) as store:
        stored = await store.load("s")
        assert stored is not None and [t.text for t in stored] == ["kept"] and stored.meta == {"title": "t"}
        assert [t.text for t in await store.inbox("s")] == ["waiting"]
        assert await store.load_checkpoint("k") is None
        await store.save_checkpoint("k", {"n": 1})
    with connected(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
        assert conn.execute("SELECT key, data FROM checkpoints").fetchall() == [("k", '{"n":1}')]
    async with SQLiteStore(path) as store:
        assert await store.load_checkpoint("k") == {"n": 1}


async def test_a_failed_save_leaves_the_previous_checkpoint_whole(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    async with SQLiteStore(path) as store:
        await store.save_checkpoint("k", {"rollouts": 2})
        with connected(path) as conn:  # every write of a checkpoint fails from now on, as a full disk would
            conn.execute("CREATE TRIGGER full BEFORE UPDATE ON checkpoints BEGIN SELECT RAISE(ABORT, 'disk full'); "
                         "END")
        with pytest.raises(StoreError, match="disk full"):
            await store.save_checkpoint("k", {"rollouts": 3, "tree": ["x" * 10_000]})
        assert await store.load_checkpoint("k") == {"rollouts": 2}
        await store.save_checkpoint("other", {"n": 1})  # the store goes on working
        assert await store.load_checkpoint("other") == {"n": 1}


async def test_an_unreadable_checkpoint_is_a_store_error_naming_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    async with SQLiteStore(path) as store:
        await store.save_checkpoint("k", {"n": 1})
        with connected(path) as conn:
            conn.execute("UPDATE checkpoints SET data = '{cut sh'")
        with pytest.raises(StoreError, match="checkpoint 'k' in .*c.db is not JSON .*drop it to start afresh"):
            await store.load_checkpoint("k")
        await store.drop_checkpoint("k")
        assert await store.load_checkpoint("k") is None


async def test_prune_drops_the_checkpoints_not_saved_for_a_while(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    async with SQLiteStore(path) as store:
        for key in ("old", "new"):
            await store.save_checkpoint(key, {"key": key})
        with connected(path) as conn:
            conn.execute("UPDATE checkpoints SET updated = updated - 7200 WHERE key = 'old'")
        with pytest.raises(UsageError, match="older_than must be a positive number of seconds"):
            await store.prune_checkpoints(0)
        assert await store.prune_checkpoints(3600) == 1
        assert await store.load_checkpoint("old") is None and await store.load_checkpoint("new") == {"key": "new"}


SAVER = textwrap.dedent("""
    import sys, anyio
    from session import SQLiteStore

    async def main():
        store = SQLiteStore(sys.argv[1])
        i = 0
        while True:
            await store.save_checkpoint("search", {"rollouts": i, "tree": ["node"] * (i % 50)})
            print(f"ack {i}", flush=True)
            i += 1

    anyio.run(main)
""")


@CHILD_LOOP
async def test_a_saved_checkpoint_survives_the_process_being_killed(tmp_path: Path) -> None:
    path = tmp_path / "killed.db"
    child = subprocess.Popen([sys.executable, "-c", SAVER, str(path)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    acked = -1
    assert child.stdout is not None
    with anyio.fail_after(30):
        while acked < 30:
            line = await anyio.to_thread.run_sync(child.stdout.readline)
            assert line.startswith("ack "), line
            acked = int(line.split()[1])
    child.send_signal(signal.SIGKILL)
    await anyio.to_thread.run_sync(child.wait)
    child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    async with SQLiteStore(path) as store:
        saved = await store.load_checkpoint("search")
    assert saved is not None and saved["rollouts"] >= acked
    assert saved["tree"] == ["node"] * (saved["rollouts"] % 50)
    with connected(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


# -- StoreCheckpoints and the manager -------------------------------------------------------------------------


class PlainStore:
    """A store with no optional ability."""

    async def load(self, session_id: str) -> State | None:
        return None

    async def append(self, session_id: str, start: int, turns: Sequence[Turn], meta: Mapping[str, Any]) -> None:
        pass


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_store_checkpoints_are_checkpoints_kept_in_the_store(kind: str, tmp_path: Path) -> None:
    async with opened(kind, tmp_path / "c.db") as store:
        checkpoints: Checkpoints = StoreCheckpoints(store)
        assert isinstance(checkpoints, Checkpoints)
        await checkpoints.save("k", {"n": 1})
        assert await store.load_checkpoint("k") == {"n": 1}
        assert await checkpoints.load("k") == {"n": 1}
        await checkpoints.drop("k")
        assert await store.load_checkpoint("k") is None and await checkpoints.load("k") is None
        assert repr(checkpoints) == f"StoreCheckpoints({store!r})"


def test_store_checkpoints_refuse_a_store_without_the_ability_naming_those_with_it() -> None:
    with pytest.raises(UsageError, match=r"CheckpointStore, as MemoryStore and SQLiteStore are.*FileCheckpoints"):
        StoreCheckpoints(PlainStore())  # type: ignore[arg-type]


async def test_the_manager_gives_its_stores_checkpoints_to_each_sessions_runs() -> None:
    seen: list[Checkpoints | None] = []

    def factory(step: TurnExecutor) -> Any:
        seen.append(current_checkpoints())
        return react_factory(step)

    assert current_checkpoints() is None
    store = MemoryStore()
    async with Manager(new_turn_processor(factory), provider=Function(echo), store=store) as manager:
        checkpoints = manager.checkpoints
        assert isinstance(checkpoints, StoreCheckpoints) and checkpoints.store is store
        for name in ("a", "b"):
            session = await manager.open(name)
            await session.ask(f"hello {name}")
        assert current_checkpoints() is None  # only the sessions' runs see it
    assert [type(c) for c in seen] == [StoreCheckpoints, StoreCheckpoints]
    assert all(isinstance(c, StoreCheckpoints) and c.store is store for c in seen)

    seen.clear()
    async with Manager(new_turn_processor(factory), provider=Function(echo), store=PlainStore()) as manager:
        assert manager.checkpoints is None
        await (await manager.open("a")).ask("hello")
    assert seen == [None]


# -- a search through a manager, stopped and taken up by a new manager on the same file ------------------------


class Model:
    """Proposes three next thoughts named by their place ("a", "a.b"...), final from the third level on, and
    answers "Answer: X" with X the last thought of the line it is shown. Counts its requests and keeps each
    proposal's rollout and line; with ``block_at``, hangs at the first proposal of that rollout."""

    def __init__(self, block_at: int | None = None) -> None:
        self.block_at = block_at
        self.blocked = anyio.Event()
        self.requests = 0
        self.proposals: list[tuple[int, tuple[str, ...]]] = []

    async def __call__(self, request: Request) -> str:
        wanted = (request.options.output_schema or {}).get("properties", {})
        if "thoughts" in wanted:
            found = re.search(r"rollout (\d+)", request.path)
            assert found, request.path
            rollout = int(found[1])
            if rollout == self.block_at:
                self.blocked.set()
                await anyio.sleep_forever()
            line = tuple(t.text for t in request.turns if t.kind == "thought")
            self.requests += 1
            self.proposals.append((rollout, line))
            prefix = f"{line[-1]}." if line else ""
            return json.dumps({"thoughts": [{"text": prefix + c, "final": len(line) >= 2} for c in "abc"]})
        self.requests += 1
        last = request.turns[-1].text.splitlines()[-1]
        return "Answer: " + (last.split(". ", 1)[1] if re.match(r"\d+\. ", last) else "none")

    def rollouts(self) -> list[int]:
        return sorted({rollout for rollout, _ in self.proposals})


def scorer(state: State) -> float:
    last = [t.text for t in state if t.kind == "thought"][-1]
    return 0.2 + (zlib.crc32(last.encode()) % 60) / 100  # below stop_at: the search runs every rollout


def search(step: TurnExecutor, checkpoints: Checkpoints | None) -> MCTS:
    return MCTS(step, iterations=ITERATIONS, scorer=scorer, reflect=False, checkpoints=checkpoints)


def factory_for(how: str, store: CheckpointStore) -> Any:
    """The agent factory: with the store's checkpoints given (``StoreCheckpoints``), or found at run time."""
    if how == "given":
        return lambda step: search(step, StoreCheckpoints(store))
    return lambda step: search(step, current_checkpoints())


async def uninterrupted() -> tuple[Model, State]:
    model = Model()
    state = await search(Step(Function(model)), None).run(State().append(Role.USER, Text(QUESTION)))
    return model, state


async def idle(session: Any) -> None:
    with anyio.fail_after(10):
        while session.busy:
            await anyio.sleep(0.01)


@pytest.mark.parametrize("how", ["given", "current"])
async def test_a_search_stopped_with_its_server_goes_on_in_a_new_manager(how: str, tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    whole, reference = await uninterrupted()
    first = Model(block_at=3)
    async with SQLiteStore(path) as store:
        async with Manager(new_turn_processor(factory_for(how, store)), provider=Function(first),
                           store=store) as manager:
            await (await manager.open("s")).post(QUESTION)
            with anyio.fail_after(10):
                await first.blocked.wait()
            # The server stops mid-search: the posted message waits in the store to run again.
        assert first.rollouts() == [1, 2]
        start = await store.load("s")
        assert start is not None and [t.text for t in start] == [QUESTION]
        key = checkpoint_key(repr(search(Step(Function(first)), None)), start)
        saved = await store.load_checkpoint(key)
        assert saved is not None and saved["iteration"] == 2

    again = Model()
    async with SQLiteStore(path) as store:  # a new process's store, on the same file
        async with Manager(new_turn_processor(factory_for(how, store)), provider=Function(again),
                           store=store) as manager:
            await idle(manager.get("s"))  # resumed when the manager started
        stored = await store.load("s")
        assert stored is not None and stored.answer == reference.answer
        assert stored.outcome is not None and stored.outcome.data["MCTS"]["resumed_at"] == 3
        assert stored.outcome.data["MCTS"]["rollouts"] == ITERATIONS
        # No finished rollout ran again: it asked exactly what the uninterrupted search asked from rollout 3 on.
        assert again.rollouts() == [3, 4, 5]
        assert sorted(again.proposals) == sorted(p for p in whole.proposals if p[0] >= 3)
        assert again.requests == len(again.proposals) + 1  # and one answer
        assert first.requests + again.requests == whole.requests  # nothing asked twice, in all
        assert await store.load_checkpoint(key) is None  # dropped with the answer
        assert await store.inbox("s") == ()
    with connected(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0] == 0


async def test_a_search_stopped_by_its_budget_in_a_manager_goes_on_with_a_new_managers_checkpoints(
        tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    whole, reference = await uninterrupted()
    first = Model()
    async with SQLiteStore(path) as store:
        processor = new_turn_processor(lambda step: WithBudget(search(step, StoreCheckpoints(store)),
                                                               Budget(max_turns=6)))
        async with Manager(processor, provider=Function(first), store=store) as manager:
            answered = await (await manager.open("s")).ask(QUESTION)
        assert answered.degraded and "budget" in answered.outcome.reason  # type: ignore[union-attr]
        start = State(answered.turns[:1], answered.meta)
        assert [t.text for t in start] == [QUESTION]

    again = Model()
    async with SQLiteStore(path) as store:  # a new process's store, on the same file
        async with Manager(new_turn_processor(react_factory), provider=Function(again), store=store) as manager:
            key = checkpoint_key(repr(search(Step(Function(again)), None)), start)
            saved = await store.load_checkpoint(key)
            assert saved is not None
            finished = saved["iteration"]
            assert 1 <= finished < max(first.rollouts())  # the budget ran out inside a later rollout
            state = await search(Step(Function(again)), manager.checkpoints).run(start)
        assert state.answer == reference.answer
        assert state.outcome is not None and state.outcome.data["MCTS"]["resumed_at"] == finished + 1
        assert min(again.rollouts()) == finished + 1  # no finished rollout ran again
        assert sorted(again.proposals) == sorted(p for p in whole.proposals if p[0] > finished)
        assert again.requests == len(again.proposals) + 1
        assert await store.load_checkpoint(key) is None


# The served agent of the SIGKILL test: a Manager on the SQLite store argv[1] whose factory finds the store's
# checkpoints with current_checkpoints(). Logs one JSON line per proposal to argv[2]; hangs at the first
# proposal of rollout argv[3] (0: never), after logging it; posts the question when argv[4] is "post". Prints
# the stored answer's MCTS outcome data once the session is idle.
SERVED = textwrap.dedent(r'''
    import json, os, re, sys, zlib

    import anyio

    from cognitive import MCTS, new_turn_processor
    from provider import Function
    from session import Manager, SQLiteStore, current_checkpoints

    path, log_path, block_at, post = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "post"


    def log(entry):
        with open(log_path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"pid": os.getpid(), **entry}) + "\n")


    def scorer(state):
        last = [t.text for t in state if t.kind == "thought"][-1]
        return 0.2 + (zlib.crc32(last.encode()) % 60) / 100


    async def model(request):
        wanted = (request.options.output_schema or {}).get("properties", {})
        if "thoughts" in wanted:
            rollout = int(re.search(r"rollout (\d+)", request.path)[1])
            log({"rollout": rollout, "blocked": rollout == block_at})
            if rollout == block_at:
                await anyio.sleep_forever()  # killed meanwhile
            line = [t.text for t in request.turns if t.kind == "thought"]
            prefix = line[-1] + "." if line else ""
            return json.dumps({"thoughts": [{"text": prefix + c, "final": len(line) >= 2} for c in "abc"]})
        last = request.turns[-1].text.splitlines()[-1]
        return "Answer: " + (last.split(". ", 1)[1] if re.match(r"\d+\. ", last) else "none")


    def make_agent(step):
        return MCTS(step, iterations=5, scorer=scorer, reflect=False, checkpoints=current_checkpoints())


    async def main():
        async with SQLiteStore(path) as store:
            async with Manager(new_turn_processor(make_agent), provider=Function(model), store=store) as manager:
                session = manager.get("s") or await manager.open("s")
                if post:
                    await session.post("Make 24 from 4 4 6 8.")
                await anyio.sleep(0.05)
                while session.busy:
                    await anyio.sleep(0.01)
            stored = await store.load("s")
            print(json.dumps(stored.outcome.data["MCTS"]), flush=True)


    anyio.run(main)
''')


def logged(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]


@CHILD_LOOP
async def test_a_served_search_killed_mid_rollout_goes_on_when_the_server_restarts(tmp_path: Path) -> None:
    path, log = tmp_path / "served.db", tmp_path / "log.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", SERVED, str(path), str(log), "3", "post"],
                             stdout=subprocess.DEVNULL, env=env)
    try:
        with anyio.fail_after(30):
            while not any(entry["blocked"] for entry in logged(log)):
                assert child.poll() is None, "the served search ended before it was killed"
                await anyio.sleep(0.02)
    finally:
        child.send_signal(signal.SIGKILL)
        await anyio.to_thread.run_sync(child.wait)
    killed = {entry["pid"] for entry in logged(log)}

    restarted = await anyio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-c", SERVED, str(path), str(log), "0", "resume"], capture_output=True, text=True,
        env=env, timeout=60))
    assert restarted.returncode == 0, restarted.stderr
    data = json.loads(restarted.stdout.splitlines()[-1])  # after the log lines
    assert data["resumed_at"] == 3 and data["rollouts"] == ITERATIONS
    after = [entry["rollout"] for entry in logged(log) if entry["pid"] not in killed]
    assert sorted(set(after)) == [3, 4, 5]  # the two rollouts finished before the kill did not run again
    with connected(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM inbox").fetchone()[0] == 0
