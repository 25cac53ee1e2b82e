"""``WarmPool`` with stand-in start and remove functions: fills, hands out each container once, replaces it."""

import itertools
import threading

import anyio
import pytest

from sandbox import SandboxError
from sandbox._pool import WarmPool


class Engine:
    """Counts containers started and removed; ``fail`` makes the next starts raise."""

    def __init__(self) -> None:
        self.ids = itertools.count(1)
        self.started: list[str] = []
        self.removed: list[str] = []
        self.fail = 0
        self.lock = threading.Lock()

    def start(self) -> str:
        with self.lock:
            if self.fail:
                self.fail -= 1
                raise SandboxError("engine hiccup")
            cid = f"c{next(self.ids)}"
            self.started.append(cid)
            return cid

    def remove(self, cid: str) -> None:
        with self.lock:
            self.removed.append(cid)


async def test_the_pool_fills_hands_each_container_out_once_and_replaces_it() -> None:
    engine = Engine()
    async with anyio.create_task_group() as group:
        pool = WarmPool(engine.start, engine.remove, size=2, max_age=60)
        await pool.run(group)
        with anyio.fail_after(10):
            await pool.wait_full()
        assert pool.idle == 2 and engine.started == ["c1", "c2"]
        taken = [pool.take(), pool.take()]
        assert taken == ["c1", "c2"]
        for cid in taken:
            pool.discard(cid)  # used: destroyed in the background, never handed out again
        with anyio.fail_after(10):
            await pool.wait_full()
        assert [pool.take(), pool.take()] == ["c3", "c4"]
        await pool.close()
    # c3 and c4 belong to whoever took them; every other container, used or idle, was removed.
    assert sorted(engine.removed) == sorted(set(engine.started) - {"c3", "c4"})


async def test_closing_removes_every_idle_container() -> None:
    engine = Engine()
    async with anyio.create_task_group() as group:
        pool = WarmPool(engine.start, engine.remove, size=3, max_age=60)
        await pool.run(group)
        with anyio.fail_after(10):
            await pool.wait_full()
        await pool.close()
    assert sorted(engine.removed) == sorted(engine.started) == ["c1", "c2", "c3"]


async def test_an_empty_pool_returns_none_so_the_caller_starts_its_own() -> None:
    engine = Engine()
    engine.fail = 2
    async with anyio.create_task_group() as group:
        pool = WarmPool(engine.start, engine.remove, size=1, max_age=60)
        await pool.run(group)
        assert pool.take() is None
        with anyio.fail_after(10):  # the failures are retried after a pause, then the pool fills
            await pool.wait_full()
        assert pool.take() == "c1"
        await pool.close()


async def test_stale_containers_are_replaced() -> None:
    engine = Engine()
    async with anyio.create_task_group() as group:
        pool = WarmPool(engine.start, engine.remove, size=1, max_age=0.05)
        await pool.run(group)
        with anyio.fail_after(10):
            while len(engine.removed) < 2:  # started, aged out, removed, again
                await anyio.sleep(0.02)
        await pool.close()
    assert set(engine.removed) == set(engine.started)


async def test_discard_needs_a_running_pool() -> None:
    pool = WarmPool(Engine().start, Engine().remove, size=1, max_age=60)
    with pytest.raises(RuntimeError, match="not running"):
        pool.discard("c1")
