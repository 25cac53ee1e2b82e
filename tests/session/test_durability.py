"""Durable messages: a posted (202) message is stored before it is acknowledged, and a stopped process's
messages run on resume in order, exactly once; a history a crash left is shown with its tool calls answered."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from cognitive import new_turn_processor, react_factory
from loop import Request, Role, State, Text, ToolCall, Turn
from provider import Function
from session import Manager, MemoryStore, SessionClosed, SQLiteStore, StoreError
from session._resume import resume
from tests.session.http.helpers import in_process, key, wait_turns
from tests.session.models import echo

PROCESSOR = new_turn_processor(react_factory)


def held(gate: anyio.Event, *, started: anyio.Event | None = None) -> Function:
    """Echoes upper-cased, but holds a message saying "wait" until ``gate`` is set."""

    async def reply(request: Request) -> str:
        if request.turns[-1].text == "wait":
            if started is not None:
                started.set()
            await gate.wait()
        return request.turns[-1].text.upper()

    return Function(reply)


def user(text: str, message_id: str) -> Turn:
    return Turn(Role.USER, [Text(text)], {"message_id": message_id})


def texts(state: State | None) -> list[str]:
    assert state is not None
    return [t.text for t in state]


async def idle(session: Any) -> None:
    """Wait until ``session`` has no message running or waiting."""
    with anyio.fail_after(5):
        while session.busy:
            await anyio.sleep(0.01)


# -- item 10: acknowledged messages survive the process ------------------------------------------------------


async def test_messages_acknowledged_with_202_run_after_the_server_stops_in_order_once(tmp_path: Path) -> None:
    gate, started = anyio.Event(), anyio.Event()
    async with SQLiteStore(tmp_path / "c.db") as store:
        async with in_process(held(gate, started=started), store=store) as served:
            client = served.client()
            session_id = (await client.post("/sessions")).json()["id"]
            for text in ("wait", "second", "third"):
                sent = await client.post(f"/sessions/{session_id}/messages", json={"text": text})
                assert sent.status_code == 202
            with anyio.fail_after(5):
                await started.wait()
            # The server stops while "wait" runs and two acknowledged messages wait behind it.
        async with in_process(Function(echo), store=store) as served:
            turns = await wait_turns(served.client(), session_id, 6)  # resumed at start-up: nobody opened it
            assert [t["parts"][0]["text"] for t in turns] == ["wait", "WAIT", "second", "SECOND", "third", "THIRD"]
        assert await store.inbox(key(session_id)) == ()


async def test_a_202_is_sent_only_once_the_message_is_in_the_store(tmp_path: Path) -> None:
    gate = anyio.Event()
    async with SQLiteStore(tmp_path / "c.db") as store, in_process(held(gate), store=store) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        first = await client.post(f"/sessions/{session_id}/messages", json={"text": "wait"})
        second = await client.post(f"/sessions/{session_id}/messages", json={"text": "queued"})
        assert first.status_code == second.status_code == 202
        async with SQLiteStore(tmp_path / "c.db") as other:  # another connection, as a restarted process has
            waiting = await other.inbox(key(session_id))
        assert [(t.text, t.meta["message_id"]) for t in waiting] == [
            ("wait", first.json()["message_id"]), ("queued", second.json()["message_id"])]
        gate.set()
        await wait_turns(client, session_id, 4)
        with anyio.fail_after(5):
            while await store.inbox(key(session_id)):  # each is marked done once it has run
                await anyio.sleep(0.01)


async def test_a_message_the_store_refuses_is_not_acknowledged_and_never_runs() -> None:
    class RefusingInbox(MemoryStore):
        async def post(self, session_id: str, message: Turn) -> None:
            raise StoreError("the disk is full")

    store = RefusingInbox()
    async with in_process(Function(echo), store=store) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        refused = await client.post(f"/sessions/{session_id}/messages", json={"text": "lost"})
        assert refused.status_code == 500 and refused.json()["error"]["type"] == "store_error"
        session = served.session(session_id)
        assert not session.busy
        assert (await session.ask("next")).answer == "NEXT"
    assert texts(await store.load(key(session_id))) == ["next", "NEXT"]


class SlowInbox(MemoryStore):
    """Posts wait until ``written`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.written = anyio.Event()

    async def post(self, session_id: str, message: Turn) -> None:
        await self.written.wait()
        await super().post(session_id, message)


async def test_a_message_sent_while_a_post_is_written_runs_after_it() -> None:
    store = SlowInbox()
    async with Manager(PROCESSOR, provider=Function(echo), store=store) as manager:
        session = await manager.open("s")
        async with anyio.create_task_group() as group:
            group.start_soon(session.post, "posted first")
            await anyio.sleep(0.01)  # its write has begun, and waits
            group.start_soon(session.ask, "sent second")
            await anyio.sleep(0.05)
            assert len(session.state) == 0  # the worker waits for the first message to be stored
            store.written.set()
    assert texts(await store.load("s")) == ["posted first", "POSTED FIRST", "sent second", "SENT SECOND"]


@pytest.mark.parametrize("closing", [False, True])
async def test_a_post_dropped_while_it_is_written_never_runs(closing: bool) -> None:
    store = SlowInbox()
    outcome: list[object] = []
    async with Manager(PROCESSOR, provider=Function(echo), store=store) as manager:
        session = await manager.open("s")

        async def post() -> None:
            try:
                outcome.append(await session.post("dropped"))
            except SessionClosed as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as group:
            group.start_soon(post)
            await anyio.sleep(0.01)
            if closing:
                await manager.close("s")
            else:
                assert session.interrupt() == 1
            store.written.set()
        if not closing:
            assert (await session.ask("next")).answer == "NEXT"
    # Closing refuses it (the client is told); an interrupt drops it, as it drops any waiting message.
    assert isinstance(outcome[0], SessionClosed if closing else str)
    assert await store.inbox("s") == () and await store.inboxes() == ()
    assert [t.text for t in await store.load("s") or ()] == ([] if closing else ["next", "NEXT"])


async def test_an_interrupt_drops_posted_messages_for_good() -> None:
    gate, started = anyio.Event(), anyio.Event()
    store = MemoryStore()
    async with Manager(PROCESSOR, provider=held(gate, started=started), store=store) as manager:
        session = await manager.open("s")
        for text in ("wait", "dropped"):
            await session.post(text)
        with anyio.fail_after(5):
            await started.wait()
        assert session.interrupt() == 1
        with anyio.fail_after(5):
            while await store.inbox("s"):
                await anyio.sleep(0.01)
    async with Manager(PROCESSOR, provider=Function(echo), store=store) as manager:
        assert manager.open_sessions == 0  # nothing was waiting
        state = await (await manager.open("s")).ask("after")
    assert [t.text for t in state if t.role is Role.USER] == ["wait", "after"]


async def test_the_manager_resumes_sessions_with_messages_waiting_when_it_starts() -> None:
    store = MemoryStore()
    for name in ("a", "b"):
        await store.post(name, user(f"hello {name}", f"{name}1"))
        await store.post(name, user(f"bye {name}", f"{name}2"))
    async with Manager(PROCESSOR, provider=Function(echo), store=store) as manager:
        assert manager.open_sessions == 2
        for name in ("a", "b"):
            await idle(manager.get(name))
    assert texts(await store.load("a")) == ["hello a", "HELLO A", "bye a", "BYE A"]
    assert await store.inboxes() == ()


# -- how a stopped process's conversation is taken up -------------------------------------------------------


async def test_a_message_cut_short_runs_again_from_its_start() -> None:
    store = MemoryStore()
    before = [user("first", "m1"), Turn(Role.ASSISTANT, [Text("FIRST")])]
    cut = [user("look it up", "m2"), Turn(Role.ASSISTANT, [ToolCall("c1", "lookup", "{}")])]
    await store.append("s", 0, before + cut, {"title": "kept"})
    await store.post("s", cut[0])
    await store.post("s", user("later", "m3"))
    taken = await resume(store, "s")
    assert taken.state is not None and taken.state.turns == tuple(before)
    assert [t.meta["message_id"] for t in taken.waiting] == ["m2", "m3"]
    assert texts(await store.load("s")) == ["first", "FIRST"]  # the unfinished attempt is no longer part of it
    async with Manager(PROCESSOR, provider=Function(echo), store=store) as manager:
        await idle(manager.get("s"))
    stored = await store.load("s")
    assert texts(stored) == ["first", "FIRST", "look it up", "LOOK IT UP", "later", "LATER"]
    assert stored is not None and stored.meta == {"title": "kept"} and stored.pending_calls == ()


async def test_a_message_that_finished_but_was_not_marked_done_does_not_run_again() -> None:
    store = MemoryStore()
    await store.append("s", 0, [user("one", "m1"), Turn(Role.ASSISTANT, [Text("ONE")]), user("two", "m2")], {})
    await store.post("s", user("one", "m1"))  # the mark was lost: "two" had started since
    await store.post("s", user("two", "m2"))
    taken = await resume(store, "s")
    assert taken.finished == ("m1",) and [t.text for t in taken.waiting] == ["two"]
    assert [t.text for t in await store.inbox("s")] == ["two"]
    assert taken.state is not None and texts(taken.state) == ["one", "ONE"]


async def test_tool_calls_of_a_message_that_does_not_run_again_are_answered_interrupted() -> None:
    store = MemoryStore()
    await store.append("s", 0, [user("asked", "m1"), Turn(Role.ASSISTANT, [ToolCall("c1", "lookup", "{}")])], {})
    async with Manager(PROCESSOR, provider=Function(echo), store=store) as manager:
        assert manager.open_sessions == 0  # nothing waits: it resumes when opened
        state = await (await manager.open("s")).ask("again")
    (result,) = state[2].tool_results
    assert result.is_error and "interrupted" in result.content
    assert texts(state)[-2:] == ["again", "AGAIN"]


# -- item 11: the history a crash left is shown valid ---------------------------------------------------------


async def test_turns_of_a_session_a_crash_left_show_no_unanswered_tool_call(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "c.db") as store:
        # What a process killed while a tool ran leaves: the model's call is stored, its result never was.
        await store.append(key("crashed"), 0, [user("wait 60", "m1"),
                                               Turn(Role.ASSISTANT, [ToolCall("c1", "wait", '{"seconds": 60}')])], {})
        async with in_process(Function(echo), store=store) as served:
            response = await served.client().get("/sessions/crashed/turns")
            assert response.status_code == 200
            turns = response.json()["turns"]
            assert [t["role"] for t in turns] == ["user", "assistant", "tool"]
            (result,) = turns[2]["parts"]
            assert result["call_id"] == "c1" and result["is_error"] and "interrupted" in result["content"]
            assert served.session("crashed") is None  # reading opens nothing
            history = await served.manager.history(key("crashed"))
        assert history is not None and history.pending_calls == ()
        assert [t["role"] for t in turns] == [t.role.value for t in history]


async def test_history_of_an_unknown_session_is_none() -> None:
    async with Manager(PROCESSOR, provider=Function(echo)) as manager:
        assert await manager.history("nobody") is None


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_posted_message_runs_and_leaves_nothing_waiting(kind: str, tmp_path: Path) -> None:
    from tests.session.store_kinds import opened_store

    async with opened_store(kind, tmp_path) as store:
        async with Manager(PROCESSOR, provider=Function(echo), store=store) as manager:
            session = await manager.open("s")
            message_id = await session.post("hello")
            await idle(session)
        stored = await store.load("s")
        assert stored is not None and stored[0].meta["message_id"] == message_id
        assert texts(stored) == ["hello", "HELLO"]
        assert await store.inbox("s") == ()  # type: ignore[attr-defined]


async def test_post_without_an_inbox_is_send() -> None:
    class PlainStore:
        def __init__(self) -> None:
            self.inner = MemoryStore()

        async def load(self, session_id: str) -> State | None:
            return await self.inner.load(session_id)

        async def append(self, session_id: str, start: int, turns: Sequence[Turn], meta: Mapping[str, Any]) -> None:
            await self.inner.append(session_id, start, turns, meta)

    async with Manager(PROCESSOR, provider=Function(echo), store=PlainStore()) as manager:
        session = await manager.open("s")
        await session.post("plain")
        await idle(session)
    assert texts(session.state) == ["plain", "PLAIN"]
