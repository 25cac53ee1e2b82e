"""A manager on a store shared by several workers (a ``LeaseStore``) runs a conversation only while it holds its
lease: two managers on two workers of one in-memory database act as two processes."""

from __future__ import annotations

from typing import Any, cast

import anyio
import pytest

from cognitive import ReAct, new_turn_processor
from loop import Request, Role, Text, Turn, UsageError
from provider import Function
from session import Manager, MessageFailed, SessionElsewhere, ShuttingDown
from session.stores import LeaseLost
from tests.session.leasing import Shared, Worker
from tests.session.models import echo

pytestmark = pytest.mark.anyio


def make_manager(shared: Shared, provider: Function | None = None, **settings: Any) -> Manager:
    settings = {"lease_ttl": 0.6, "lease_idle": 0.1, "lease_wait": 5.0, **settings}
    return Manager(new_turn_processor(ReAct), provider=provider or Function(echo), store=Worker(shared),
                   **settings)


def texts(state: object) -> list[str]:
    return [t.text for t in state.turns]  # type: ignore[attr-defined]


async def test_a_conversation_moves_to_the_worker_its_message_reaches_in_order() -> None:
    shared = Shared()
    async with make_manager(shared) as a, make_manager(shared) as b:
        with anyio.fail_after(10):
            for n, manager in enumerate((a, b, a, b)):
                session = await manager.open("s")
                await session.ask(f"m{n}")
    stored = await shared.store.load("s")
    assert stored is not None
    assert texts(stored) == ["m0", "M0", "m1", "M1", "m2", "M2", "m3", "M3"]


async def test_a_worker_waits_for_the_holder_to_let_go_and_then_sees_its_turns() -> None:
    shared = Shared()
    release = anyio.Event()

    async def slow(request: Request) -> str:
        await release.wait()
        return "first answer"

    async with make_manager(shared, Function(slow)) as a, make_manager(shared) as b:
        with anyio.fail_after(10):
            running = await a.open("s")
            answered: list[object] = []
            opened: list[object] = []

            async def ask_on_a() -> None:
                answered.append(await running.ask("first"))

            async def open_on_b() -> None:
                opened.append(await b.open("s"))

            async with anyio.create_task_group() as group:
                group.start_soon(ask_on_a)
                await anyio.sleep(0.05)
                group.start_soon(open_on_b)
                await anyio.sleep(0.3)
                assert opened == [], "b opened a session whose lease a holds"
                release.set()
            state = await opened[0].ask("second")  # type: ignore[attr-defined]
    assert texts(answered[0]) == ["first", "first answer"]
    assert texts(state) == ["first", "first answer", "second", "SECOND"]
    assert a.get("s") is None  # a let go of it once idle


async def test_opening_a_busy_conversation_past_lease_wait_is_refused_clearly() -> None:
    shared = Shared()
    gate = anyio.Event()

    async def slow(request: Request) -> str:
        await gate.wait()
        return "done"

    async with make_manager(shared, Function(slow)) as a, make_manager(shared, lease_wait=0.1) as b:
        with anyio.fail_after(10):
            (await a.open("s")).send("hold it")
            with pytest.raises(SessionElsewhere, match="running on another worker"):
                await b.open("s")
            gate.set()


async def test_a_worker_whose_lease_is_taken_over_stops_and_writes_nothing_more() -> None:
    shared = Shared()
    started, gate = anyio.Event(), anyio.Event()

    async def slow(request: Request) -> str:
        started.set()
        await gate.wait()
        return "too late"

    async with make_manager(shared, Function(slow)) as a:
        with anyio.fail_after(10):
            session = await a.open("s")
            with session.events.subscribe(buffer=None) as events:
                await session.post("hello")
                await started.wait()
                shared.take_over("s", "another worker")
                gate.set()
                async for event in events:
                    if isinstance(event, MessageFailed):
                        assert event.kind == "LeaseLost"
                        break
            while a.get("s") is not None:
                await anyio.sleep(0.01)
    stored = await shared.store.load("s")
    assert stored is not None and texts(stored) == ["hello"]  # the answer was fenced off
    assert len(await shared.store.inbox("s")) == 1  # the message waits for the new holder, not marked done


async def test_messages_a_dead_worker_left_are_taken_over_by_another() -> None:
    shared = Shared()
    await shared.store.post("orphan", Turn(Role.USER, [Text("left behind")], {"message_id": "m1"}))
    shared.lapse("orphan", "dead worker", 3)
    async with make_manager(shared) as b:
        with anyio.fail_after(10):
            while (stored := await shared.store.load("orphan")) is None or len(stored) < 2:
                await anyio.sleep(0.02)
            assert b is not None
    assert texts(stored) == ["left behind", "LEFT BEHIND"]
    assert await shared.store.inbox("orphan") == ()
    assert shared.leases["orphan"][1] == 4  # taken with a new epoch


async def test_a_live_lease_keeps_its_conversation_from_being_taken_over() -> None:
    shared = Shared()
    await shared.store.post("held", Turn(Role.USER, [Text("mine")], {"message_id": "m1"}))
    shared.take_over("held", "a live worker")
    async with make_manager(shared) as b:
        await anyio.sleep(1.0)  # more than a sweep
        assert b.get("held") is None
    assert await shared.store.load("held") is None


async def test_draining_finishes_what_runs_and_opens_nothing_new() -> None:
    shared = Shared()
    started, gate = anyio.Event(), anyio.Event()

    async def slow(request: Request) -> str:
        started.set()
        await gate.wait()
        return "finished"

    async with make_manager(shared, Function(slow)) as a:
        with anyio.fail_after(10):
            session = await a.open("s")
            answered: list[object] = []

            async def work() -> None:
                answered.append(await session.ask("work"))

            async with anyio.create_task_group() as group:
                group.start_soon(work)
                await started.wait()
                group.start_soon(a.drain, 5.0)
                await anyio.sleep(0.05)
                with pytest.raises(ShuttingDown):
                    await a.open("other")
                gate.set()
            state = answered[0]
    assert state.answer == "finished"  # type: ignore[attr-defined]
    assert shared.leases["s"][3]  # let go


async def test_a_fenced_write_raises_lease_lost() -> None:
    shared = Shared()
    worker = Worker(shared)
    assert await worker.acquire("s", "me", 5.0) is not None
    shared.take_over("s", "someone else")
    with pytest.raises(LeaseLost):
        await worker.append("s", 0, (Turn(Role.USER, [Text("x")]),), {})


@pytest.mark.parametrize("setting, value, message", [
    ("lease_ttl", 0, "lease_ttl must be a positive number of seconds"),
    ("lease_idle", -1, "lease_idle must be a positive number of seconds"),
    ("lease_wait", float("nan"), "lease_wait must be a number of seconds, 0 or more"),
    ("holder", "", "a lease's holder is a non-empty string"),
])
async def test_bad_lease_settings_are_refused(setting: str, value: object, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        settings: dict[str, Any] = {setting: value}
        make_manager(Shared(), **settings)


async def test_a_session_reopened_as_its_idle_worker_stops_keeps_its_lease() -> None:
    shared = Shared()
    async with make_manager(shared, lease_idle=60.0) as a:
        cast(Worker, a.store).release_delay = 0.05
        with anyio.fail_after(10):
            await (await a.open("s")).ask("first")
            await a.close("s")  # its worker stops a moment later, and lets its lease go then
            await anyio.sleep(0.01)  # the worker is letting it go (a round trip)
            again = await a.open("s")  # a message for it arrives meanwhile: a new session takes the lease
            await anyio.sleep(0.1)  # the old worker has stopped by now
            assert not shared.leases["s"][3], "the stopping worker gave up the lease the new session holds"
            state = await again.ask("second")
    assert texts(state) == ["first", "FIRST", "second", "SECOND"]


async def test_a_lease_let_go_and_taken_again_while_a_renewal_runs_is_not_counted_lost() -> None:
    # The renewal answers from before the session was let go and opened again: its lease is new, and kept.
    from session._leases import Leasing

    shared = Shared()
    store = Worker(shared)
    renewing, answer = anyio.Event(), anyio.Event()
    renew = store.renew

    async def slow_renew(holder: str, ttl: float) -> tuple[str, ...]:
        kept = await renew(holder, ttl)
        renewing.set()
        await answer.wait()
        return tuple(k for k in kept if k != "s")  # as if it ran while "s" was let go

    store.renew = slow_renew  # type: ignore[method-assign]
    leasing = Leasing(store, ttl=5.0, idle=1.0, wait=0.0, holder="A")
    assert await leasing.take("s") and await leasing.take("t")
    async with anyio.create_task_group() as group:
        lost: list[set[str]] = []

        async def renewal() -> None:
            lost.append(await leasing.renew())

        group.start_soon(renewal)
        await renewing.wait()
        await leasing.release("s")
        assert await leasing.take("s")
        answer.set()
    assert lost == [set()] and leasing.held == {"s", "t"}
