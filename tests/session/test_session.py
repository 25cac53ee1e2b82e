"""Sessions: FIFO messages, persistence after every turn, interrupts, failures, resume."""

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from cognitive import ReAct, new_turn_processor, react_factory
from loop import (
    Caller,
    EventBus,
    Finish,
    Request,
    Role,
    State,
    Step,
    Text,
    TextDelta,
    ToolCall,
    TurnExecutor,
    current_run_context,
    tool,
)
from provider import Function, tool_call
from session import (
    Interrupted,
    Manager,
    MemoryStore,
    MessageFailed,
    MessageFinished,
    MessageQueued,
    MessageStarted,
    SQLiteStore,
    SessionBusy,
    SessionLimit,
    StoreError,
    TurnStored,
    TurnUpdated,
    step_factory,
)
from tests.session.models import echo

release = anyio.Event()


@tool
async def slow(label: str) -> str:
    """Waits until the test releases it."""
    await release.wait()
    return f"done {label}"


@tool
async def hang(label: str) -> str:
    """Never finishes."""
    await anyio.sleep_forever()
    return label


async def events_until(events: AsyncIterator, kind: type, count: int = 1) -> list:
    seen = []
    with anyio.fail_after(5):
        async for event in events:
            seen.append(event)
            if sum(isinstance(e, kind) for e in seen) >= count:
                return seen
    raise AssertionError(f"the stream ended before {count} {kind.__name__}")


async def test_an_outcome_written_on_the_stored_answer_is_an_update_not_another_stored_turn() -> None:
    class Graded:
        """A pattern that grades its inner run's answer after it was stored, as wrappers do."""

        def __init__(self, step: object) -> None:
            self.inner = ReAct(step)  # type: ignore[arg-type]

        async def run(self, state: State) -> State:
            return (await self.inner.run(state)).with_outcome("degraded", "graded")

    store = MemoryStore()
    async with Manager(new_turn_processor(Graded), provider=Function(echo), store=store) as manager:
        session = await manager.open("s1")
        with session.events.subscribe() as events:
            await session.ask("hello")
            seen = await events_until(events, MessageFinished)
    stored = await store.load("s1")
    assert stored is not None and len(stored) == 2
    assert [e.index for e in seen if isinstance(e, TurnStored)] == [0, 1], "one TurnStored per stored turn"
    (updated,) = [e for e in seen if isinstance(e, TurnUpdated)]
    assert updated.index == 1 and updated.turn == stored[1] and stored.outcome is not None
    assert stored.outcome.reason == "graded"


async def test_a_message_is_processed_persisted_and_answered() -> None:
    store = MemoryStore()
    async with Manager(new_turn_processor(react_factory), provider=Function(echo), store=store) as manager:
        session = await manager.open("s1")
        with session.events.subscribe() as events:
            state = await session.ask("hello")
            seen = await events_until(events, MessageFinished)
    assert state.answer == "HELLO"
    assert [type(e).__name__ for e in seen if not isinstance(e, TextDelta)][:2] == ["MessageQueued", "MessageStarted"]
    assert [e.index for e in seen if isinstance(e, TurnStored)] == [0, 1]
    finished = [e for e in seen if isinstance(e, MessageFinished)]
    assert finished[0].answer == "HELLO" and not finished[0].degraded
    stored = await store.load("s1")
    assert stored is not None and [t.text for t in stored] == ["hello", "HELLO"]
    assert stored[0].meta["message_id"] == finished[0].message_id


async def test_messages_sent_while_a_turn_runs_are_queued_in_order() -> None:
    global release
    release = anyio.Event()
    replies = iter([tool_call("slow", {"label": "a"}), "first", "second", "third"])
    provider = Function(lambda request: next(replies))
    async with Manager(new_turn_processor(react_factory), provider=provider,
                       make_step=step_factory([slow])) as manager:
        session = await manager.open()
        with session.events.subscribe() as events:
            session.send("one")
            session.send("two")
            session.send("three")
            queued = [e for e in await events_until(events, MessageQueued, 3) if isinstance(e, MessageQueued)]
            assert [q.position for q in queued] == [0, 1, 2]
            assert session.busy
            release.set()
            seen = await events_until(events, MessageFinished, 3)
    answers = [e.answer for e in seen if isinstance(e, MessageFinished)]
    assert answers == ["first", "second", "third"]
    assert [t.text for t in session.state if t.role is Role.USER] == ["one", "two", "three"]


async def test_interrupt_during_tools_answers_every_open_call_and_keeps_the_session_usable() -> None:
    replies = iter([[tool_call("hang", {"label": "x"}), tool_call("hang", {"label": "y"})], "after"])
    store = MemoryStore()
    async with Manager(new_turn_processor(react_factory), provider=Function(lambda r: next(replies)),
                       store=store, make_step=step_factory([hang])) as manager:
        session = await manager.open("s")
        with session.events.subscribe() as events:
            session.send("start")
            seen = await events_until(events, TurnStored, 2)  # the user turn, then the assistant's calls
            assert seen[-1].turn.role is Role.ASSISTANT
            assert session.interrupt() == 0
            seen = await events_until(events, TurnStored, 1)
        tool_turn = seen[-1].turn
        assert tool_turn.role is Role.TOOL and all(r.is_error and "cancelled" in r.content
                                                   for r in tool_turn.tool_results)
        assert len(tool_turn.tool_results) == 2
        state = await session.ask("next")
    assert state.answer == "after"
    stored = await store.load("s")
    assert stored is not None and stored.turns == state.turns
    assert not stored.pending_calls


async def test_interrupt_mid_stream_keeps_only_completed_turns() -> None:
    started = anyio.Event()

    async def stalls(request: Request):
        yield TextDelta("partial ")
        started.set()
        await anyio.sleep_forever()
        yield Finish("stop")

    store = MemoryStore()
    async with Manager(new_turn_processor(react_factory), provider=Function(stalls), store=store) as manager:
        session = await manager.open("s")
        with session.events.subscribe() as events:
            session.send("go")
            with anyio.fail_after(5):
                await started.wait()
            session.interrupt()
            seen = await events_until(events, Interrupted)
    assert seen[-1].message_id is not None
    stored = await store.load("s")
    assert stored is not None and [t.role for t in stored] == [Role.USER]


async def test_interrupt_can_drop_or_keep_waiting_messages() -> None:
    global release
    release = anyio.Event()
    replies = iter([tool_call("slow", {"label": "a"}), "first", tool_call("slow", {"label": "b"}), "kept"])
    async with Manager(new_turn_processor(react_factory), provider=Function(lambda r: next(replies)),
                       make_step=step_factory([slow])) as manager:
        session = await manager.open()
        with session.events.subscribe() as events:
            session.send("one")
            session.send("two")
            session.send("three")
            await events_until(events, TurnStored, 2)
            assert session.interrupt(drop_queued=True) == 2
            release.set()
            session.send("four")
            seen = await events_until(events, MessageFinished, 1)
    assert [e.answer for e in seen if isinstance(e, MessageFinished)] == ["first"]
    assert [t.text for t in session.state if t.role is Role.USER] == ["one", "four"]


async def test_a_processor_that_raises_leaves_the_session_usable() -> None:
    calls = 0

    async def flaky(executor: TurnExecutor, state: State) -> State:
        nonlocal calls
        calls += 1
        if calls == 1:
            state = await executor.turn(state)
            raise RuntimeError("pattern bug")
        return await executor.turn(state)

    async with Manager(flaky, provider=Function(echo)) as manager:
        session = await manager.open()
        with session.events.subscribe() as events:
            with pytest.raises(RuntimeError, match="pattern bug"):
                await session.ask("first")
            failed = [e for e in await events_until(events, MessageFailed) if isinstance(e, MessageFailed)]
        assert failed[0].kind == "RuntimeError" and "pattern bug" in failed[0].error
        state = await session.ask("second")
    assert [t.text for t in state] == ["first", "FIRST", "second", "SECOND"]


async def test_a_store_failure_fails_the_message_without_half_writing() -> None:
    class Failing(MemoryStore):
        fail = False

        async def append(self, session_id, start, turns, meta):  # type: ignore[no-untyped-def]
            if self.fail:
                raise StoreError("disk full")
            await super().append(session_id, start, turns, meta)

    store = Failing()
    async with Manager(new_turn_processor(react_factory), provider=Function(echo), store=store) as manager:
        session = await manager.open("s")
        await session.ask("kept")
        store.fail = True
        with pytest.raises(StoreError, match="disk full"):
            await session.ask("lost")
        store.fail = False
        state = await session.ask("again")
    stored = await store.load("s")
    assert stored is not None and [t.text for t in stored] == ["kept", "KEPT", "again", "AGAIN"]
    assert stored.turns == state.turns


async def test_an_interrupt_landing_during_the_last_write_still_reports_and_leaves_the_session_usable() -> None:
    """The answer's write is shielded, so the message finishes anyway; the interrupt is still answered
    with ``Interrupted`` (nothing cut short) and the next message is served normally."""

    class Slow(MemoryStore):
        writing = anyio.Event()
        go_on = anyio.Event()

        async def append(self, session_id, start, turns, meta):  # type: ignore[no-untyped-def]
            if turns[-1].role is Role.ASSISTANT and not self.go_on.is_set():
                self.writing.set()
                await self.go_on.wait()
            await super().append(session_id, start, turns, meta)

    store = Slow()
    async with Manager(new_turn_processor(react_factory), provider=Function(echo), store=store) as manager:
        session = await manager.open("s")
        with session.events.subscribe(buffer=None) as events:
            session.send("one")
            with anyio.fail_after(5):
                await store.writing.wait()
            assert session.interrupt() == 0
            store.go_on.set()
            seen = await events_until(events, Interrupted)
            assert [type(e).__name__ for e in seen if isinstance(e, (MessageFinished, Interrupted))] == [
                "MessageFinished", "Interrupted"]
            assert seen[-1].message_id is None and seen[-1].dropped == 0
            state = await session.ask("two")
    assert [t.text for t in state] == ["one", "ONE", "two", "TWO"]


async def test_a_full_queue_is_refused_clearly() -> None:
    global release
    release = anyio.Event()
    replies = iter([tool_call("slow", {"label": "a"})] + ["ok"] * 10)
    async with Manager(new_turn_processor(react_factory), provider=Function(lambda r: next(replies)),
                       make_step=step_factory([slow]), queue_size=2) as manager:
        session = await manager.open()
        with session.events.subscribe() as events:
            session.send("1")
            await events_until(events, MessageStarted)  # the worker took the first message off the queue
        session.send("2")
        session.send("3")
        with pytest.raises(SessionBusy, match="2 messages waiting"):
            session.send("4")
        release.set()


async def test_a_session_resumes_from_sqlite_after_a_restart(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "c.db")
    async with Manager(new_turn_processor(react_factory), provider=Function(echo), store=store) as manager:
        await (await manager.open("kept")).ask("before")
    await store.aclose()
    store = SQLiteStore(tmp_path / "c.db")
    async with Manager(new_turn_processor(react_factory), provider=Function(echo), store=store) as manager:
        session = await manager.open("kept")
        assert [t.text for t in session.state] == ["before", "BEFORE"]
        state = await session.ask("after")
    assert [t.text for t in state] == ["before", "BEFORE", "after", "AFTER"]
    await store.aclose()


async def test_tool_calls_left_open_by_a_dead_process_are_answered_on_resume() -> None:
    store = MemoryStore()
    half = State().append(Role.USER, Text("go")).append(Role.ASSISTANT, ToolCall("c1", "hang", "{}"))
    await store.append("s", 0, half.turns, {})
    async with Manager(new_turn_processor(react_factory), provider=Function(echo), store=store) as manager:
        session = await manager.open("s")
        state = await session.ask("are you there?")
    (result,) = state[2].tool_results
    assert result.is_error and "interrupted" in result.content and result.call_id == "c1"
    assert state.answer == "ARE YOU THERE?"


async def test_a_branching_processor_stores_the_branch_it_returns() -> None:
    async def best_of_two(executor: TurnExecutor, state: State) -> State:
        await executor.turn(state)  # a first draft, stored as it completes, then abandoned
        return await executor.turn(state)

    replies = iter(["draft one", "draft two"])
    store = MemoryStore()
    async with Manager(best_of_two, provider=Function(lambda r: next(replies)), store=store) as manager:
        state = await (await manager.open("s")).ask("write")
    stored = await store.load("s")
    assert stored is not None and [t.text for t in stored] == ["write", "draft two"] == [t.text for t in state]


async def test_a_sub_agent_run_by_a_tool_never_touches_the_stored_conversation() -> None:
    sub_step = Step(Function(lambda r: tool_call("slow", {"label": "x"}) if r.turns[-1].role is Role.USER
                             else "sub answer"), tools=[slow])

    @tool
    async def delegate(question: str) -> str:
        """Ask a sub-agent."""
        return (await ReAct(sub_step).run(State().append(Role.USER, Text(question)))).answer

    global release
    release = anyio.Event()
    release.set()
    model = Function(lambda r: tool_call("delegate", {"question": "q"}) if r.turns[-1].role is Role.USER
                     else r.turns[-1].tool_results[0].content.upper())
    store = MemoryStore()
    async with Manager(new_turn_processor(react_factory), provider=model, store=store,
                       make_step=step_factory([delegate])) as manager:
        session = await manager.open("s")
        with session.events.subscribe(buffer=None) as events:
            state = await session.ask("hello")
            seen = await events_until(events, MessageFinished)
    stored_events = [(e.index, e.turn.role.value) for e in seen if isinstance(e, TurnStored)]
    assert stored_events == [(0, "user"), (1, "assistant"), (2, "tool"), (3, "assistant")]
    assert state.answer == "SUB ANSWER"
    stored = await store.load("s")
    assert stored is not None and [t.text for t in stored][0] == "hello" and len(stored) == 4


async def test_a_degraded_outcome_is_not_reported_as_a_success() -> None:
    provider = Function(lambda r: tool_call("slow", {"label": "x"}) if r.options.tool_choice != "none" else "gave up")
    global release
    release = anyio.Event()
    release.set()
    processor = new_turn_processor(lambda step: ReAct(step, max_turns=1))
    async with Manager(processor, provider=provider, make_step=step_factory([slow])) as manager:
        session = await manager.open()
        with session.events.subscribe() as events:
            session.send("go")
            seen = await events_until(events, MessageFinished)
    finished = seen[-1]
    assert finished.degraded and "max_turns=1" in finished.reason and finished.answer == "gave up"


async def test_the_manager_limits_reuses_and_closes_sessions() -> None:
    async with Manager(new_turn_processor(react_factory), provider=Function(echo), max_sessions=2) as manager:
        a = await manager.open()
        b = await manager.open()
        assert a.id != b.id and len(a.id) >= 24
        assert await manager.open(a.id) is a
        with pytest.raises(SessionLimit):
            await manager.open()
        assert await manager.close(a.id) is True and await manager.close(a.id) is False
        assert manager.get(a.id) is None and manager.open_sessions == 1


async def test_idle_sessions_are_closed_but_their_conversations_kept() -> None:
    store = MemoryStore()
    async with Manager(new_turn_processor(react_factory), provider=Function(echo), store=store,
                       idle_timeout=0.05) as manager:
        session = await manager.open("idle")
        await session.ask("hi")
        with anyio.fail_after(5):
            while manager.get("idle") is not None:
                await anyio.sleep(0.02)
        assert session.closed
        again = await manager.open("idle")
        assert [t.text for t in again.state] == ["hi", "HI"]


async def test_each_session_gets_its_own_step_and_events() -> None:
    buses: list[EventBus] = []

    def make(provider, events):  # type: ignore[no-untyped-def]
        buses.append(events)
        return Step(provider, events=events)

    async with Manager(new_turn_processor(react_factory), provider=Function(echo), make_step=make) as manager:
        a, b = await manager.open(), await manager.open()
        assert a.events is buses[0] and b.events is buses[1] and buses[0] is not buses[1]


async def test_a_new_session_can_start_from_given_history() -> None:
    store = MemoryStore()
    history = (State().append(Role.SYSTEM, Text("be loud")).append(Role.USER, Text("earlier"))
               .append(Role.ASSISTANT, Text("EARLIER"))).turns
    async with Manager(new_turn_processor(react_factory), provider=Function(echo), store=store) as manager:
        session = await manager.open("h", history=history)
        state = await session.ask("now")
        assert [t.text for t in state] == ["be loud", "earlier", "EARLIER", "now", "NOW"]
        await manager.close("h")
        again = await manager.open("h", history=history[:1])  # an existing conversation keeps its own
        assert len(again.state) == 5


async def test_a_run_knows_the_conversation_it_answers_in() -> None:
    seen: list[str | None] = []

    async def processor(executor: TurnExecutor, state: State) -> State:
        seen.append(current_run_context().conversation)
        return await react_factory(executor).run(state)

    async with Manager(processor, provider=Function(echo)) as manager:
        await (await manager.open("s1")).ask("hello")
        await (await manager.open("s2")).ask("hello", caller=Caller("ada"))
    assert seen == ["s1", "s2"]
    assert current_run_context().conversation is None, "outside a session's run, no conversation"
