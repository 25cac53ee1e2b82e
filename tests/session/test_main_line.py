"""Only the main line reaches a session's store: branches, helper agents and tools' sub-agents never do.

Every scenario watches the session's events as well as the store: a branch turn written and later replaced
would leave the final conversation right, but its ``TurnStored`` event (and the crash window) gives it away.
"""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.text import TextReceiveStream

from cognitive import ReAct, new_turn_processor, react_factory
from loop import (
    BranchResult,
    Request,
    Role,
    Stamped,
    State,
    Step,
    Text,
    TextDelta,
    TurnCompleted,
    TurnExecutor,
    UsageError,
    as_completed,
    fan_out,
    tool,
)
from provider import Function, Scripted, tool_call
from session import (
    Interrupted,
    Manager,
    MemoryStore,
    MessageFailed,
    MessageFinished,
    Session,
    SQLiteStore,
    TurnStored,
    step_factory,
)
from tests.session.store_kinds import opened_store
from tests.session import blocking_sub_agent_program as program
from tests.session.models import echo

ROOT = Path(__file__).resolve().parents[2]
BRANCHES = 50


async def until(events: AsyncIterator[Any], kind: type, count: int = 1) -> list[Any]:
    """Every event up to and including the ``count``-th of ``kind`` (unwrapping stamped ones to match)."""
    seen: list[Any] = []
    with anyio.fail_after(5):
        async for event in events:
            seen.append(event)
            inner = event.event if isinstance(event, Stamped) else event
            if isinstance(inner, kind):
                count -= 1
                if count == 0:
                    return seen
    raise AssertionError(f"the events ended before {kind.__name__}")


def stored_texts(events: list[Any]) -> list[tuple[int, str, str]]:
    return [(e.index, e.turn.role.value, e.turn.text) for e in events if isinstance(e, TurnStored)]


def assert_stored_is(stored: State | None, state: State) -> None:
    """The stored conversation is the returned one, turn meta (message ids, outcomes) included."""
    assert stored is not None
    assert stored.to_json() == state.to_json()
    assert [t.to_dict() for t in stored] == [t.to_dict() for t in state]


class Gate:
    """Holds model calls made for side work until ``count`` of them are waiting at once (or forever), so a
    test knows they really ran concurrently, or can act while they are all blocked."""

    def __init__(self, count: int, *, release: bool = True) -> None:
        self.count = count
        self.release = release
        self.waiting = 0
        self.full = anyio.Event()

    async def __call__(self, request: Request) -> str:
        text = request.turns[-1].text
        if text.startswith("side "):
            self.waiting += 1
            if self.waiting == self.count:
                self.full.set()
            if not self.release:
                await anyio.sleep_forever()
            await self.full.wait()
        return text.upper()


async def side(executor: TurnExecutor, state: State, number: int) -> State:
    """One branch's work through the session's executor, on a state that extends the stored conversation."""
    state = await executor.submit(state, Role.SYSTEM, Text(f"side {number}"))
    return await executor.turn(state)


async def by_fan_out(executor: TurnExecutor, state: State) -> list[str]:
    results = await fan_out([functools.partial(side, executor, state, i) for i in range(BRANCHES)])
    assert all(isinstance(r, BranchResult) and r.ok for r in results)
    assert [r.path for r in results] == [f"branch {i + 1}" for i in range(BRANCHES)]
    return [r.state.answer for r in results]  # type: ignore[union-attr]


async def by_task_group(executor: TurnExecutor, state: State) -> list[str]:
    answers: list[str] = [""] * BRANCHES

    async def one(i: int) -> None:
        answers[i] = (await side(executor, state, i)).answer or ""

    async with anyio.create_task_group() as group:
        for i in range(BRANCHES):
            group.start_soon(one, i)
    return answers


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
@pytest.mark.parametrize("runner", [by_fan_out, by_task_group], ids=["fan_out", "task_group"])
async def test_fifty_concurrent_branches_are_never_stored(
        store_kind: str, runner: Callable[[TurnExecutor, State], Awaitable[list[str]]], tmp_path: Path) -> None:
    answers: list[list[str]] = []

    async def processor(executor: TurnExecutor, state: State) -> State:
        if state.last.text != "go":
            return await executor.turn(state)
        answers.append(await runner(executor, state))
        state = await executor.submit(state, Role.SYSTEM, Text(f"{BRANCHES} branches answered"))
        return await executor.turn(state)

    gate = Gate(BRANCHES)
    async with opened_store(store_kind, tmp_path) as store:
        async with Manager(processor, provider=Function(gate), store=store) as manager:
            session = await manager.open("s")
            with session.events.subscribe(buffer=None) as events:
                with anyio.fail_after(10):
                    state = await session.ask("go")
                seen = await until(events, MessageFinished)
            assert gate.full.is_set()  # all fifty model calls were waiting at once
            assert answers == [[f"SIDE {i}" for i in range(BRANCHES)]]
            branch_answers = [e.turn.text for e in seen if isinstance(e, TurnCompleted)
                              and e.turn.role is Role.ASSISTANT and e.turn.text.startswith("SIDE")]
            assert sorted(branch_answers) == sorted(f"SIDE {i}" for i in range(BRANCHES))
            assert stored_texts(seen) == [(0, "user", "go"), (1, "system", "50 branches answered"),
                                          (2, "assistant", "50 BRANCHES ANSWERED")]
            assert_stored_is(session.state, state)
            assert_stored_is(await store.load("s"), state)
            # The next message builds on the main line only.
            state = await session.ask("again")
            assert [t.text for t in state] == ["go", "50 branches answered", "50 BRANCHES ANSWERED", "again", "AGAIN"]
            assert_stored_is(await store.load("s"), state)


async def test_as_completed_branches_cancelled_early_are_never_stored() -> None:
    """A quorum: the first two branches to finish win; the rest are cancelled while their model calls wait."""
    gate = Gate(3, release=False)  # branches 2, 3 and 4 wait until cancelled

    async def fast_or_blocked(request: Request) -> str:
        text = request.turns[-1].text
        if text in ("side 0", "side 1"):
            return text.upper()
        return await gate(request)

    async def processor(executor: TurnExecutor, state: State) -> State:
        winners = []
        async with as_completed([functools.partial(side, executor, state, i) for i in range(5)]) as results:
            async for result in results:
                winners.append(result.state.answer)
                if len(winners) == 2:
                    break
        return await executor.submit(state, Role.SYSTEM, Text(" and ".join(sorted(winners))))

    store = MemoryStore()
    async with Manager(processor, provider=Function(fast_or_blocked), store=store) as manager:
        session = await manager.open("s")
        with session.events.subscribe(buffer=None) as events:
            state = await session.ask("go")
            seen = await until(events, MessageFinished)
    assert stored_texts(seen) == [(0, "user", "go"), (1, "system", "SIDE 0 and SIDE 1")]
    assert_stored_is(await store.load("s"), state)


# -- helper agents --------------------------------------------------------------------------------------------


def helper_model(request: Request) -> Any:
    last = request.turns[-1]
    if last.role is Role.USER and last.text == "use the tool":
        return tool_call("consult", {"question": "tool question"})
    if last.role is Role.TOOL:
        return f"the tool said {last.tool_results[0].content}"
    return echo(request)


async def test_a_helper_agent_on_a_fresh_state_in_the_processor_is_never_stored() -> None:
    helpers: list[State] = []

    async def processor(executor: TurnExecutor, state: State) -> State:
        helper = await ReAct(executor).run(State().append(Role.USER, Text(f"helper: {state.last.text}")))
        helpers.append(helper)
        state = await executor.submit(state, Role.SYSTEM, Text(f"the helper said {helper.answer}"))
        return await executor.turn(state)

    store = MemoryStore()
    async with Manager(processor, provider=Function(echo), store=store) as manager:
        session = await manager.open("s")
        with session.events.subscribe(buffer=None) as events:
            await session.ask("one")
            state = await session.ask("two")
            seen = await until(events, MessageFinished, 2)
    assert [h.answer for h in helpers] == ["HELPER: ONE", "HELPER: TWO"]
    assert stored_texts(seen) == [
        (0, "user", "one"), (1, "system", "the helper said HELPER: ONE"),
        (2, "assistant", "THE HELPER SAID HELPER: ONE"),
        (3, "user", "two"), (4, "system", "the helper said HELPER: TWO"),
        (5, "assistant", "THE HELPER SAID HELPER: TWO"),
    ]
    assert_stored_is(await store.load("s"), state)


async def test_a_helper_asked_the_users_very_words_on_a_fresh_state_is_never_stored() -> None:
    async def processor(executor: TurnExecutor, state: State) -> State:
        helper = await ReAct(executor).run(State().append(Role.USER, Text(state.last.text)))
        return await executor.submit(state, Role.SYSTEM, Text(f"the helper said {helper.answer}"))

    async with Manager(processor, provider=Function(echo)) as manager:
        session = await manager.open("s")
        with session.events.subscribe(buffer=None) as events:
            await session.ask("hello")
            seen = await until(events, MessageFinished)
    assert stored_texts(seen) == [(0, "user", "hello"), (1, "system", "the helper said HELLO")]


def consult_tool(run: Callable[[str], Awaitable[State]]) -> Any:
    @tool
    async def consult(question: str) -> str:
        """Ask a sub-agent."""
        return (await run(question)).answer or ""

    return consult


@pytest.mark.parametrize("sub_agent", ["own step", "session executor"])
async def test_a_sub_agent_run_inside_a_tool_is_never_stored(sub_agent: str) -> None:
    """The sub-agent runs on a step of its own sharing the session's provider or, harder, through the session's
    own executor on a state that extends the stored conversation: the tool's scope alone keeps it out."""
    provider = Function(helper_model)
    sessions: list[Session] = []
    executors: list[TurnExecutor] = []

    async def run_sub_agent(question: str) -> State:
        if sub_agent == "own step":
            return await ReAct(Step(provider)).run(State().append(Role.USER, Text(question)))
        extended = sessions[0].state.append(Role.USER, Text(question))
        return await ReAct(executors[0]).run(extended)

    def processor(executor: TurnExecutor, state: State) -> Awaitable[State]:
        executors[:] = [executor]
        return ReAct(executor).run(state)

    store = MemoryStore()
    async with Manager(processor, provider=provider, store=store,
                       make_step=step_factory([consult_tool(run_sub_agent)])) as manager:
        session = await manager.open("s")
        sessions.append(session)
        await session.ask("earlier")
        with session.events.subscribe(buffer=None) as events:
            state = await session.ask("use the tool")
            seen = await until(events, MessageFinished)
    assert state.answer == "the tool said TOOL QUESTION"
    assert [(r, t) for _, r, t in stored_texts(seen)] == [
        ("user", "use the tool"), ("assistant", ""), ("tool", ""), ("assistant", "the tool said TOOL QUESTION")]
    assert [t.role.value for t in state] == ["user", "assistant", "user", "assistant", "tool", "assistant"]
    assert [t.text for t in state][:3] == ["earlier", "EARLIER", "use the tool"]
    assert state[4].tool_results[0].content == "TOOL QUESTION"
    assert not any(t.text == "tool question" for t in state)
    assert_stored_is(await store.load("s"), state)


# -- processors that break the rule ---------------------------------------------------------------------------


@pytest.mark.parametrize("returned", ["fresh state", "history rewritten", "not a state"])
async def test_a_result_that_does_not_extend_its_input_fails_the_message_and_is_not_stored(returned: str) -> None:
    async def processor(executor: TurnExecutor, state: State) -> Any:
        if state.last.text != "bad":
            return await executor.turn(state)
        answered = await executor.turn(state)  # a draft, stored as it completes
        if returned == "fresh state":
            return State().append(Role.USER, Text("forged")).append(Role.ASSISTANT, Text("FORGED"))
        if returned == "history rewritten":
            return State(answered.turns[:-2]).append(Role.USER, Text("forged")).append(Role.ASSISTANT, Text("X"))
        return "FORGED"

    store = MemoryStore()
    async with Manager(processor, provider=Function(echo), store=store) as manager:
        session = await manager.open("s")
        await session.ask("fine")
        with session.events.subscribe(buffer=None) as events:
            with pytest.raises(UsageError, match="does not extend the conversation"):
                await session.ask("bad")
            seen = await until(events, MessageFailed)
        failed = seen[-1]
        assert failed.kind == "UsageError" and "does not extend" in failed.error
        stored = await store.load("s")
        assert stored is not None
        assert not any("forged" in t.text.lower() for t in stored)
        assert [t.text for t in stored][:4] == ["fine", "FINE", "bad", "BAD"]
        assert stored.outcome is not None and stored.outcome.status == "failed"
        assert "UsageError" in stored.outcome.reason and not stored.pending_calls
        state = await session.ask("after")
    assert [t.text for t in state][-2:] == ["after", "AFTER"] and state.outcome is None
    assert_stored_is(await store.load("s"), state)


# -- interrupts -----------------------------------------------------------------------------------------------


async def test_an_interrupt_during_a_fan_out_stores_no_branch_and_keeps_the_session_usable() -> None:
    gate = Gate(8, release=False)

    async def processor(executor: TurnExecutor, state: State) -> State:
        if state.last.text == "fan out":
            await fan_out([functools.partial(side, executor, state, i) for i in range(8)], limit=8)
        return await executor.turn(state)

    store = MemoryStore()
    async with Manager(processor, provider=Function(gate), store=store) as manager:
        session = await manager.open("s")
        await session.ask("before")
        with session.events.subscribe(buffer=None) as events:
            session.send("fan out")
            with anyio.fail_after(5):
                await gate.full.wait()
            assert session.interrupt() == 0
            seen = await until(events, Interrupted)
        assert seen[-1].message_id is not None
        assert stored_texts(seen) == [(2, "user", "fan out")]
        stored = await store.load("s")
        assert stored is not None and [t.text for t in stored] == ["before", "BEFORE", "fan out"]
        assert stored.pending_calls == ()
        state = await session.ask("next")
    assert [t.text for t in state] == ["before", "BEFORE", "fan out", "next", "NEXT"]
    assert_stored_is(await store.load("s"), state)


async def test_an_interrupt_during_a_fan_out_inside_a_tool_answers_the_open_call() -> None:
    gate = Gate(3, release=False)  # the fan-out's limit: three branches wait, three never start
    executors: list[TurnExecutor] = []
    sessions: list[Session] = []

    @tool
    async def consult(question: str) -> str:
        """Ask six branches."""
        base = sessions[0].state  # extends the stored conversation: only the scope keeps the branches out
        results = await fan_out([functools.partial(side, executors[0], base, i) for i in range(6)], limit=3)
        return ", ".join(r.state.answer for r in results)  # type: ignore[union-attr]

    async def model(request: Request) -> Any:
        last = request.turns[-1]
        if last.role is Role.USER and last.text == "consult":
            return tool_call("consult", {"question": "q"})
        return await gate(request)

    def processor(executor: TurnExecutor, state: State) -> Awaitable[State]:
        executors[:] = [executor]
        return ReAct(executor).run(state)

    store = MemoryStore()
    async with Manager(processor, provider=Function(model), store=store,
                       make_step=step_factory([consult])) as manager:
        session = await manager.open("s")
        sessions.append(session)
        with session.events.subscribe(buffer=None) as events:
            session.send("consult")
            with anyio.fail_after(5):
                await gate.full.wait()
            session.interrupt()
            seen = await until(events, Interrupted)
        assert [(i, r) for i, r, _ in stored_texts(seen)] == [(0, "user"), (1, "assistant"), (2, "tool")]
        stored = await store.load("s")
        assert stored is not None and stored.pending_calls == ()
        (result,) = stored[2].tool_results
        assert result.is_error and "cancelled" in result.content
        assert not any(t.text.startswith(("side", "SIDE")) for t in stored)
        state = await session.ask("next")
    assert state.answer == "NEXT" and len(state) == 5
    assert_stored_is(await store.load("s"), state)


# -- a process killed while a sub-agent runs ------------------------------------------------------------------


async def read_until(stream: Any, marker: str) -> list[str]:
    lines: list[str] = []
    buffer = ""
    async for text in TextReceiveStream(stream):
        buffer += text
        *done, buffer = buffer.split("\n")
        lines += done
        if marker in done:
            return lines
    raise AssertionError(f"the program ended before printing {marker!r}; it printed {lines + [buffer]}")


async def test_a_process_killed_during_a_sub_agent_run_resumes_with_the_users_history(tmp_path: Path) -> None:
    path = tmp_path / "conversations.db"
    command = [sys.executable, "-m", "tests.session.blocking_sub_agent_program", str(path)]
    async with await anyio.open_process(command, cwd=ROOT) as process:
        try:
            with anyio.fail_after(30):
                lines = await read_until(process.stdout, program.MARKER)
        finally:
            process.send_signal(signal.SIGKILL)
            await process.wait()
    assert process.returncode == -signal.SIGKILL
    assert "first answered" in lines

    store = SQLiteStore(path)
    try:
        before = await store.load(program.SESSION)
        assert before is not None and len(before.pending_calls) == 1  # killed while its tool ran
        async with program.make_manager(store) as manager:
            session = await manager.open(program.SESSION)
            with anyio.fail_after(5):
                state = await session.ask("third")
        stored = await store.load(program.SESSION)
    finally:
        await store.aclose()
    assert [t.role.value for t in state] == ["user", "assistant", "user", "assistant", "tool", "user", "assistant"]
    assert [t.text for t in state][:3] == ["first", "FIRST", "second"]
    (call,) = state[3].tool_calls
    assert call.name == "delegate"
    (result,) = state[4].tool_results
    assert result.call_id == call.id and result.is_error and "interrupted" in result.content
    assert state.answer == "THIRD" and state.pending_calls == ()
    assert not any(t.text == program.QUESTION for t in state)
    assert not any(c.name == "block" for t in state for c in t.tool_calls)
    assert_stored_is(stored, state)


# -- stamped events -------------------------------------------------------------------------------------------


async def test_stamped_events_tell_branch_deltas_from_the_main_lines() -> None:
    async def branch_agent(executor: TurnExecutor, state: State, number: int) -> State:
        return await ReAct(executor).run(await executor.submit(state, Role.SYSTEM, Text(f"side {number}")))

    async def processor(executor: TurnExecutor, state: State) -> State:
        await fan_out([functools.partial(branch_agent, executor, state, i) for i in (1, 2, 3)])
        return await ReAct(executor).run(state)

    async with Manager(processor, provider=Function(echo, chunk_size=3)) as manager:
        session = await manager.open("s")
        with session.step.events.subscribe(stamped=True, buffer=None) as events:  # type: ignore[attr-defined]
            await session.ask("the main answer")
            seen = await until(events, MessageFinished)
    assert session.step.events is session.events  # type: ignore[attr-defined]
    assert all(isinstance(e, Stamped) for e in seen)
    deltas = [e for e in seen if isinstance(e.event, TextDelta)]
    for number in (1, 2, 3):
        mine = [e for e in deltas if e.path == f"branch {number}/ReAct"]
        assert "".join(e.event.text for e in mine) == f"SIDE {number}"
        assert mine and not any(e.main for e in mine)
    main = [e for e in deltas if e.main]
    assert "".join(e.event.text for e in main) == "THE MAIN ANSWER"
    assert {e.path for e in main} == {"ReAct"} and len(main) > 1
    assert {e.path for e in deltas if not e.main} == {f"branch {n}/ReAct" for n in (1, 2, 3)}
    (finished,) = [e for e in seen if isinstance(e.event, MessageFinished)]
    assert finished.main and finished.event.answer == "THE MAIN ANSWER"


async def test_a_plain_subscription_gets_the_events_themselves() -> None:
    async with Manager(new_turn_processor(react_factory), provider=Scripted(["plain"])) as manager:
        session = await manager.open("s")
        with session.events.subscribe(buffer=None) as events:
            await session.ask("hi")
            seen = await until(events, MessageFinished)
    assert not any(isinstance(e, Stamped) for e in seen)
    assert [e.text for e in seen if isinstance(e, TextDelta)] == ["plain"]

