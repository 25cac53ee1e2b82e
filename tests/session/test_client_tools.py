"""Tools the client answers: ``ask(message, tools=..., output=..., options=...)`` leaves their calls open, a message
of ``ToolResult`` parts answers them and the run goes on, and the stored conversation stays valid throughout."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from cognitive import answer_value, new_turn_processor, react_factory
from loop import Options, Request, Role, State, Text, ToolCall, ToolResult, ToolSpec, UsageError, tool
from provider import Function, tool_call
from session import Manager, MemoryStore, MessageFinished, SQLiteStore, Store, step_factory

WEATHER = ToolSpec("weather", "The weather in a city, from the client's app.",
                   {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
CALL = tool_call("weather", {"city": "Oslo"}, id="w1")
BERGEN = tool_call("weather", {"city": "Bergen"}, id="w2")
RESULT = ToolResult("w1", "weather", "rain all day")
UNANSWERED = "error: not answered: the conversation went on without this call's result"


@attrs.frozen
class Advice:
    umbrella: bool


@tool
async def clock() -> str:
    """The time now."""
    return "09:00"


class Model:
    """Replies in order, keeping every request (for ``provider.Function``)."""

    def __init__(self, *replies: Any) -> None:
        self.replies: Iterator[Any] = iter(replies)
        self.requests: list[Request] = []

    def __call__(self, request: Request) -> Any:
        self.requests.append(request)
        return next(self.replies)


def manager(model: Model, store: Store | None = None) -> Manager:
    return Manager(new_turn_processor(react_factory), provider=Function(model), store=store or MemoryStore(),
                   make_step=step_factory([clock]))


def roles(state: State) -> list[str]:
    return [t.role.value for t in state]


async def stored(manager: Manager, session_id: str) -> State:
    state = await manager.store.load(session_id)
    assert state is not None
    return state


def assert_once_each(state: State) -> None:
    """Every message and every call appears exactly once, and every call has exactly one result or is still open."""
    message_ids = [t.meta["message_id"] for t in state if "message_id" in t.meta]
    assert len(message_ids) == len(set(message_ids))
    calls = [c.id for t in state for c in t.tool_calls]
    results = [r.call_id for t in state for r in t.tool_results]
    assert len(calls) == len(set(calls))
    assert sorted(results + [c.id for c in state.pending_calls]) == sorted(calls)


# -- the round trip --------------------------------------------------------------------------------------


async def test_a_typed_question_with_client_tools_goes_round_trip() -> None:
    model = Model([tool_call("clock", {}, id="c1"), CALL], "Rain all day, so yes.", '{"umbrella": true}')
    async with manager(model) as m:
        session = await m.open("s")
        with session.events.subscribe() as events:
            left = await session.ask("Umbrella today?", tools=[WEATHER], output=Advice)
            finished = [e for e in events.drain() if isinstance(e, MessageFinished)]
        assert [s.name for s in model.requests[0].tools] == ["clock", "weather"]
        assert roles(left) == ["user", "assistant", "tool"], "the own call ran; the client's is open"
        assert left[2].tool_results == (ToolResult("c1", "clock", "09:00"),)
        assert left.pending_calls == (ToolCall("w1", "weather", '{"city": "Oslo"}'),)
        assert left.outcome is not None and left.outcome.status == "pending"
        assert left.outcome.reason == "left for the caller to answer: weather"
        assert len(model.requests) == 1, "no formatting turn while the call is open"
        assert [(f.status, f.reason) for f in finished] == [("pending", "left for the caller to answer: weather")]
        assert await stored(m, "s") == left

        state = await session.ask(RESULT, tools=[WEATHER], output=Advice)
        assert model.requests[1].turns[-1].tool_results == (RESULT,), "the model saw the client's result"
        assert model.requests[2].options.tool_choice == "none", "then the formatting turn"
        assert answer_value(state, Advice) == Advice(umbrella=True)
        assert state.outcome is not None and state.outcome.ok and state.pending_calls == ()
        results = state[3]
        assert results.role is Role.TOOL and results.tool_results == (RESULT,)
        assert results.meta["message_id"] != left[0].meta["message_id"]
        saved = await stored(m, "s")
    assert saved == state
    # The answer was asked in the schema and came as prose: the report on it, the formatting prompt, the JSON.
    assert roles(saved) == ["user", "assistant", "tool", "tool", "assistant", "system", "system", "assistant"]
    assert_once_each(saved)


async def test_results_given_as_a_list_answer_several_calls_in_any_order() -> None:
    model = Model([CALL, BERGEN], "Both wet.")
    async with manager(model) as m:
        session = await m.open("s")
        left = await session.ask("Oslo and Bergen?", tools=[WEATHER])
        assert [c.id for c in left.pending_calls] == ["w1", "w2"]
        state = await session.ask([ToolResult("w2", "weather", "drizzle"), RESULT])
        assert state.answer == "Both wet."
        assert [r.call_id for r in model.requests[1].turns[-1].tool_results] == ["w2", "w1"]
        assert await stored(m, "s") == state
    assert_once_each(state)


async def test_the_continuation_may_leave_calls_open_again_and_each_answer_is_stored_once() -> None:
    model = Model([CALL], [BERGEN], "Rain in both.")
    async with manager(model) as m:
        session = await m.open("s")
        await session.ask("Oslo, then Bergen?", tools=[WEATHER])
        middle = await session.ask(RESULT, tools=[WEATHER])
        assert [c.id for c in middle.pending_calls] == ["w2"]
        assert middle.outcome is not None and middle.outcome.status == "pending"
        state = await session.ask(ToolResult("w2", "weather", "rain"))
        saved = await stored(m, "s")
    assert state.answer == "Rain in both." and state.outcome is None
    assert saved == state
    assert roles(saved) == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert_once_each(saved)


async def test_tools_are_offered_only_to_the_message_that_names_them() -> None:
    model = Model("plain", "again plain")
    async with manager(model) as m:
        session = await m.open("s")
        await session.ask("one", tools=[WEATHER])
        await session.ask("two")
    assert [[s.name for s in r.tools] for r in model.requests] == [["clock", "weather"], ["clock"]]


async def test_options_are_laid_over_every_turn_and_tools_off_answers_the_calls_instead() -> None:
    model = Model([CALL], "No tools then: take one anyway.")
    async with manager(model) as m:
        session = await m.open("s")
        state = await session.ask("Umbrella?", tools=[WEATHER], options=Options(tool_choice="none", temperature=0.2))
    assert [(r.options.tool_choice, r.options.temperature) for r in model.requests] == [("none", 0.2)] * 2
    assert state.pending_calls == () and state.outcome is None
    (result,) = state[2].tool_results
    assert result.call_id == "w1" and result.is_error and "tools are disabled" in result.content
    assert state.answer == "No tools then: take one anyway."


# -- results that do not fit -------------------------------------------------------------------------------


MISFITS = {
    "only-one-of-two": ([CALL, BERGEN], [RESULT]),
    "unknown-id": ([CALL], [ToolResult("w9", "weather", "sun")]),
    "one-too-many": ([CALL], [RESULT, ToolResult("w9", "weather", "sun")]),
    "wrong-tool-name": ([CALL], [ToolResult("w1", "clock", "rain all day")]),
    "twice": ([CALL], [RESULT, RESULT]),
}


@pytest.mark.parametrize(("calls", "results"), MISFITS.values(), ids=MISFITS.keys())
async def test_results_that_do_not_answer_exactly_the_open_calls_fail_the_message(
        calls: list[ToolCall], results: list[ToolResult]) -> None:
    model = Model(calls, "after all")
    async with manager(model) as m:
        session = await m.open("s")
        left = await session.ask("Umbrella?", tools=[WEATHER])
        with pytest.raises(UsageError, match="tool results"):
            await session.ask(results)
        assert session.state == left and await stored(m, "s") == left, "nothing of the failed message is stored"
        assert len(model.requests) == 1
        # The session is usable, the calls still open for the right answer.
        state = await session.ask([ToolResult(c.id, c.name, "rain") for c in calls])
    assert state.answer == "after all"
    assert_once_each(state)


async def test_results_when_no_call_is_open_fail_the_message() -> None:
    async with manager(Model("hello")) as m:
        session = await m.open("s")
        await session.ask("hi")
        with pytest.raises(UsageError, match="the calls open in the conversation are: none"):
            await session.ask(RESULT)
        assert roles(await stored(m, "s")) == ["user", "assistant"]


@pytest.mark.parametrize("message", [[Text("here:"), RESULT], [RESULT, "rain"]], ids=["text-and-result", "str"])
async def test_results_mixed_with_text_are_refused_at_once(message: list[Any]) -> None:
    async with manager(Model()) as m:
        session = await m.open("s")
        with pytest.raises(UsageError, match="ToolResult parts"):
            session.send(message)


@pytest.mark.parametrize("tools", [WEATHER, [WEATHER, "calendar"], "weather"], ids=["bare-spec", "mixed", "str"])
async def test_tools_that_are_not_a_list_of_specs_are_refused_at_once(tools: Any) -> None:
    async with manager(Model()) as m:
        session = await m.open("s")
        with pytest.raises(UsageError, match="tools takes (a list of )?loop.ToolSpec"):
            session.send("hi", tools=tools)
        assert len(session.state) == 0


async def test_a_client_tool_named_like_a_step_tool_fails_the_message() -> None:
    clash = ToolSpec("clock", "The client's clock.", {"type": "object"})
    model = Model("never asked", "fine")
    async with manager(model) as m:
        session = await m.open("s")
        with pytest.raises(UsageError, match="share names with this step's own tools: 'clock'"):
            await session.ask("time?", tools=[clash])
        assert model.requests == []
        failed = await stored(m, "s")
        assert failed.outcome is not None and failed.outcome.status == "failed"
        state = await session.ask("time?")
    assert state.answer == "never asked"


async def test_a_client_tool_name_given_twice_fails_the_message() -> None:
    model = Model("never asked")
    async with manager(model) as m:
        session = await m.open("s")
        with pytest.raises(UsageError, match="'weather' is given twice"):
            await session.ask("hi", tools=[WEATHER, WEATHER])
    assert model.requests == []


async def test_a_client_tool_name_given_twice_is_refused_when_sent() -> None:
    async with manager(Model("never asked")) as m:
        session = await m.open("s")
        with pytest.raises(UsageError, match="given twice"):
            session.send("hi", tools=[WEATHER, WEATHER])


# -- the conversation going on without the results ----------------------------------------------------------


async def test_a_user_message_while_calls_are_open_answers_them_as_not_answered() -> None:
    model = Model([CALL], "Hello again.")
    async with manager(model) as m:
        session = await m.open("s")
        await session.ask("Umbrella?", tools=[WEATHER])
        state = await session.ask("Never mind that. Hello!")
        saved = await stored(m, "s")
    assert roles(state) == ["user", "assistant", "tool", "user", "assistant"]
    assert state[2].tool_results == (ToolResult("w1", "weather", UNANSWERED, is_error=True),)
    assert [t.role.value for t in model.requests[1].turns] == ["user", "assistant", "tool", "user"]
    assert model.requests[1].turns[2].tool_results[0].content == UNANSWERED
    assert state.answer == "Hello again." and state.outcome is None
    assert saved == state
    assert_once_each(saved)


async def test_results_after_the_conversation_went_on_fail_the_message() -> None:
    model = Model([CALL], "Hello again.")
    async with manager(model) as m:
        session = await m.open("s")
        await session.ask("Umbrella?", tools=[WEATHER])
        await session.ask("Never mind.")
        with pytest.raises(UsageError, match="are: none"):
            await session.ask(RESULT)
        assert_once_each(await stored(m, "s"))


async def test_post_refuses_results_but_takes_a_user_message_while_calls_are_open() -> None:
    model = Model([CALL], "Posted and answered.")
    async with manager(model) as m:
        session = await m.open("s")
        await session.ask("Umbrella?", tools=[WEATHER])
        with pytest.raises(UsageError, match="post takes a user's message"):
            await session.post(RESULT)
        assert await m.store.inbox("s") == ()  # type: ignore[attr-defined]  # MemoryStore keeps an inbox
        with session.events.subscribe() as events:
            message_id = await session.post("Moving on.")
            with anyio.fail_after(5):
                async for event in events:
                    if isinstance(event, MessageFinished) and event.message_id == message_id:
                        break
        saved = await stored(m, "s")
    assert roles(saved) == ["user", "assistant", "tool", "user", "assistant"]
    assert saved[2].tool_results[0].content == UNANSWERED
    assert saved.answer == "Posted and answered."
    assert_once_each(saved)


# -- a conversation taken up again --------------------------------------------------------------------------


async def test_a_reopened_session_keeps_the_calls_left_for_the_client_open() -> None:
    store = MemoryStore()
    half = State().append(Role.USER, Text("go")).append(Role.ASSISTANT, ToolCall("c9", "clock", "{}"))
    await store.append("cut", 0, half.turns, {})  # a process stopped mid-turn: not left open on purpose
    async with manager(Model([CALL]), store) as m:
        left = await (await m.open("s")).ask("Umbrella?", tools=[WEATHER])
    model = Model("Rain: take one.", "Back.")
    async with manager(model, store) as m:
        history = await m.history("s")
        assert history == left and history.pending_calls == left.pending_calls
        session = await m.open("s")
        assert session.state == left, "nothing was answered 'interrupted'"
        cut = await m.open("cut")
        state = await session.ask(RESULT)
        await cut.ask("still there?")
        cut_state = await stored(m, "cut")
    assert model.requests[0].turns[-1].tool_results == (RESULT,)
    assert state.answer == "Rain: take one." and roles(state) == ["user", "assistant", "tool", "assistant"]
    (interrupted,) = cut_state[2].tool_results
    assert interrupted.is_error and "interrupted" in interrupted.content, "calls cut short are still repaired"


async def test_a_conversation_reopened_from_sqlite_keeps_them_open_and_goes_on(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "c.db")
    async with manager(Model([tool_call("clock", {}, id="c1"), CALL]), store) as m:
        left = await (await m.open("s")).ask("Umbrella?", tools=[WEATHER], output=Advice)
    await store.aclose()
    store = SQLiteStore(tmp_path / "c.db")
    model = Model('{"umbrella": true}')
    try:
        async with manager(model, store) as m:
            session = await m.open("s")
            assert session.state == left
            assert session.state.outcome is not None and session.state.outcome.status == "pending"
            state = await session.ask([RESULT], output=Advice)
            saved = await stored(m, "s")
    finally:
        await store.aclose()
    assert answer_value(state, Advice) == Advice(umbrella=True)
    assert saved == state and roles(saved) == ["user", "assistant", "tool", "tool", "assistant"]
    assert_once_each(saved)



async def test_an_interrupt_while_the_own_calls_of_a_mixed_turn_run_answers_the_callers_calls_too() -> None:
    running = anyio.Event()

    @tool(name="work")
    async def work() -> str:
        """Works until interrupted."""
        running.set()
        await anyio.sleep_forever()
        return "never"

    model = Model([tool_call("work", {}, id="a1"), CALL])
    m = Manager(new_turn_processor(react_factory), provider=Function(model), store=MemoryStore(),
                make_step=step_factory([work]))
    async with m:
        session = await m.open("s")
        session.send("Umbrella today?", tools=[WEATHER])
        await running.wait()
        session.interrupt()
        with anyio.fail_after(5):
            while session.busy:
                await anyio.sleep(0.01)
        saved = await stored(m, "s")
    # The caller will never be handed w1 now: it is answered "cancelled" with a1, so no call is left without a result.
    assert roles(saved) == ["user", "assistant", "tool"]
    assert {r.call_id: r.content.startswith("error: cancelled") for r in saved[2].tool_results} == {"a1": True,
                                                                                                  "w1": True}
    assert saved.pending_calls == () and saved.outcome is None
