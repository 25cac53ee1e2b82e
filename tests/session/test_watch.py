"""``Manager.watch``: every session's worker runs inside each watcher's context, left once the worker has stopped."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from cognitive import ReAct, new_turn_processor
from loop import UsageError
from provider import Function
from session import Manager, Session, TurnStored
from tests.session.models import echo

pytestmark = pytest.mark.anyio


async def test_a_watcher_sees_each_session_from_its_start_to_after_its_last_write() -> None:
    seen: list[tuple[str, str, int]] = []

    @asynccontextmanager
    async def watcher(session: Session) -> AsyncIterator[None]:
        seen.append(("enter", session.id, len(session.state)))
        with session.events.subscribe(buffer=None) as events:
            yield
            stored = [e for e in events.drain() if isinstance(e, TurnStored)]
        seen.append(("exit", session.id, len(stored)))

    async with Manager(new_turn_processor(ReAct), provider=Function(echo)) as manager:
        manager.watch(watcher)
        with anyio.fail_after(5):
            await (await manager.open("a")).ask("hello")
            await manager.close("a", wait=True)
    assert seen == [("enter", "a", 0), ("exit", "a", 2)]


async def test_a_watcher_that_fails_stops_only_its_session() -> None:
    @asynccontextmanager
    async def broken(session: Session) -> AsyncIterator[None]:
        if session.id == "bad":
            raise RuntimeError("cannot watch")
        yield

    async with Manager(new_turn_processor(ReAct), provider=Function(echo)) as manager:
        manager.watch(broken)
        with anyio.fail_after(5):
            bad = await manager.open("bad")
            while manager.get("bad") is not None:
                await anyio.sleep(0.01)
            assert bad.closed
            state = await (await manager.open("good")).ask("hi")
    assert state.answer == "HI"


async def test_watch_takes_a_function() -> None:
    async with Manager(new_turn_processor(ReAct), provider=Function(echo)) as manager:
        with pytest.raises(UsageError, match="watch takes a function"):
            manager.watch("not a function")  # type: ignore[arg-type]
