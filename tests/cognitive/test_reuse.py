"""ReuseResults: repeated identical calls to chosen tools answered from their earlier result."""

from __future__ import annotations

import anyio
import pytest

from cognitive import ReAct, WithBudget
from cognitive.context._reuse import REUSED_NOTE, ReuseResults
from loop import (Budget, Options, Role, State, Step, ToolCall, ToolResult, ToolSpec, TurnCompleted, TurnFailed,
                  UsageError, external_tools, recording, tool, turn_options)
from provider import Scripted, tool_call
from tests.cognitive._histories import ask, exchange


class Tools:
    """A search and a lookup tool that count their calls."""

    def __init__(self) -> None:
        self.ran: list[str] = []

        @tool
        async def search(q: str) -> str:
            """Search the web."""
            self.ran.append(f"search {q}")
            return f"pages about {q} #{len(self.ran)}"

        @tool
        async def lookup(key: str) -> str:
            """Look a key up."""
            self.ran.append(f"lookup {key}")
            return f"value of {key} #{len(self.ran)}"

        self.all = [search, lookup]


def results(state: State) -> list[ToolResult]:
    return [r for t in state for r in t.tool_results]


async def test_a_repeated_call_to_a_listed_tool_is_answered_from_the_earlier_result() -> None:
    tools = Tools()
    script = Scripted([tool_call("search", {"q": "x"}), tool_call("search", {"q": "x"}),
                       tool_call("lookup", {"key": "a"}), tool_call("lookup", {"key": "a"}), "done"])
    state = await ReAct(ReuseResults(Step(script, tools=tools.all), tools=["search"])).run(ask())
    assert tools.ran == ["search x", "lookup a", "lookup a"]
    first, again, *_ = results(state)
    assert again.content == REUSED_NOTE + first.content and not again.is_error
    assert again.call_id != first.call_id and again.name == "search"
    assert state.answer == "done" and state.outcome is None and not state.pending_calls


async def test_arguments_are_compared_as_canonical_json() -> None:
    tools = Tools()
    state = exchange(ask(), "old", "search", '{"q": "x"}', "earlier pages")
    step = Step(Scripted([ToolCall("new", "search", '{ "q":"x" }')]), tools=tools.all)
    state = await ReuseResults(step, tools=("search",)).turn(state)
    assert tools.ran == [] and results(state)[-1].content == REUSED_NOTE + "earlier pages"


async def test_reused_and_run_results_come_back_in_call_order() -> None:
    tools = Tools()
    state = exchange(ask(), "old", "search", {"q": "x"}, "earlier pages")
    step = Step(Scripted([[tool_call("search", {"q": "x"}), tool_call("lookup", {"key": "b"}),
                           tool_call("search", {"q": "y"})]]), tools=tools.all)
    state = await ReuseResults(step, tools=["search"]).turn(state)
    assert sorted(tools.ran) == ["lookup b", "search y"]  # run concurrently, in any order
    assert [r.content.rsplit(" #", 1)[0] for r in state.turns[-1].tool_results] == [
        REUSED_NOTE + "earlier pages", "value of b", "pages about y"]
    assert [r.call_id for r in state.turns[-1].tool_results] == [c.id for c in state.turns[-2].tool_calls]
    assert len([t for t in state if t.role is Role.TOOL]) == 2


async def test_an_earlier_error_is_not_reused() -> None:
    tools = Tools()
    state = exchange(ask(), "old", "search", {"q": "x"}, "error: timed out", error=True)
    state = await ReuseResults(Step(Scripted([tool_call("search", {"q": "x"})]), tools=tools.all),
                               tools=["search"]).turn(state)
    assert tools.ran == ["search x"] and not results(state)[-1].content.startswith(REUSED_NOTE)


async def test_a_reused_result_is_reused_again_without_a_second_note() -> None:
    tools = Tools()
    step = Step(Scripted([tool_call("search", {"q": "x"})] * 3 + ["done"]), tools=tools.all)
    state = await ReAct(ReuseResults(step, tools=["search"])).run(ask())
    first, second, third = results(state)
    assert second.content == third.content == REUSED_NOTE + first.content and tools.ran == ["search x"]


async def test_the_tool_turn_is_published_like_a_steps() -> None:
    tools = Tools()
    state = exchange(ask(), "old", "search", {"q": "x"}, "earlier pages")
    step = Step(Scripted([[tool_call("search", {"q": "x"}), tool_call("lookup", {"key": "k"})]]), tools=tools.all)
    with step.events.subscribe(buffer=None) as events:
        state = await ReuseResults(step, tools=["search"]).turn(state)
        turns = [e.turn for e in events.drain() if isinstance(e, TurnCompleted)]
    assert [t.role for t in turns] == [Role.ASSISTANT, Role.TOOL]
    assert turns[1] == state.turns[-1] and turns[1].tool_results[0].content.startswith(REUSED_NOTE)


async def test_a_reused_answer_is_not_charged_as_a_tool_call() -> None:
    tools = Tools()
    step = Step(Scripted([tool_call("search", {"q": "x"}), tool_call("search", {"q": "x"}), "done"]),
                tools=tools.all)
    state = await WithBudget(ReAct(ReuseResults(step, tools=["search"])), Budget(max_tool_calls=1), step=step).run(
        ask())
    assert state.answer == "done" and not state.degraded and tools.ran == ["search x"]


async def test_calls_the_caller_leaves_pending_stay_pending() -> None:
    tools = Tools()
    state = exchange(ask(), "old", "search", {"q": "x"}, "earlier pages")
    step = Step(Scripted([tool_call("search", {"q": "x"})]), tools=tools.all)
    state = await ReuseResults(step, tools=["search"]).turn(state, Options(run_tools=False))
    assert len(state.pending_calls) == 1 and state.outcome is not None and state.outcome.status == "pending"
    assert tools.ran == []


async def test_with_tools_off_every_call_gets_the_pipelines_error() -> None:
    tools = Tools()
    state = exchange(ask(), "old", "search", {"q": "x"}, "earlier pages")
    step = Step(Scripted([tool_call("search", {"q": "x"})]), tools=tools.all)
    state = await ReuseResults(step, tools=["search"]).turn(state, Options(tool_choice="none"))
    (result,) = state.turns[-1].tool_results
    assert result.is_error and "disabled" in result.content and tools.ran == []


async def test_a_cancelled_turn_answers_open_calls_and_reports_them() -> None:
    started = anyio.Event()

    @tool
    async def slow(n: int) -> str:
        """Take forever."""
        started.set()
        await anyio.sleep_forever()
        return "never"

    tools = Tools()
    state = exchange(ask(), "old", "search", {"q": "x"}, "earlier pages")
    step = Step(Scripted([[tool_call("search", {"q": "x"}), tool_call("slow", {"n": 1})]]), tools=[*tools.all, slow])
    reported: list[State] = []

    async def progress(partial: State) -> None:
        reported.append(partial)

    with step.events.subscribe(buffer=None) as events:
        async with anyio.create_task_group() as group:
            async def run() -> None:
                with recording(progress):
                    await ReuseResults(step, tools=["search"]).turn(state)

            group.start_soon(run)
            await started.wait()
            group.cancel_scope.cancel()
        seen = events.drain()
    last = reported[-1].turns[-1]
    assert [r.content.startswith(REUSED_NOTE) for r in last.tool_results] == [True, False]
    assert "cancelled" in last.tool_results[1].content and last.tool_results[1].is_error
    assert any(isinstance(e, TurnFailed) for e in seen)
    assert reported[0].last is not None and reported[0].last.role is Role.ASSISTANT


def test_reuse_results_rejects_what_it_cannot_use() -> None:
    step = Step(Scripted([]), tools=Tools().all)

    class NoPipeline:
        async def turn(self, state: State, options: Options | None = None) -> State:
            return state

    with pytest.raises(UsageError, match="pipeline"):
        ReuseResults(NoPipeline(), tools=["search"])
    with pytest.raises(UsageError, match="loop.Executor"):
        ReuseResults(object(), tools=["search"])  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"tools=\['search'\]"):
        ReuseResults(step, tools="search")
    with pytest.raises(UsageError, match="at least one"):
        ReuseResults(step, tools=[])
    with pytest.raises(UsageError, match="no tool 'serch'; it has search, lookup"):
        ReuseResults(step, tools=["serch"])


async def test_reuse_results_stands_in_for_the_step_as_a_turn_executor() -> None:
    step = Step(Scripted(["answer"]), tools=Tools().all)
    wrapper = ReuseResults(step, tools=["search"])
    state = await wrapper.submit(State(), Role.USER, *ask(system=None).turns[0].parts)
    state = await wrapper.turn(state)
    assert state.answer == "answer"


async def test_calls_to_tools_the_caller_answers_are_left_open_for_it() -> None:
    tools = Tools()
    notify = ToolSpec("notify", "Tell the user.", {"type": "object", "properties": {}})
    script = Scripted([tool_call("search", {"q": "x"}),
                       [ToolCall("s2", "search", '{"q": "x"}'), ToolCall("n1", "notify", "{}")],
                       [ToolCall("n2", "notify", "{}")]])
    step = ReuseResults(Step(script, tools=tools.all), tools=["search"])
    with external_tools([notify]):
        mixed = await ReAct(step).run(ask())
        alone = await ReAct(step).run(mixed.append(Role.TOOL, ToolResult("n1", "notify", "sent")))
    # The reused search is answered; the caller's call stays open, and the run returns for the caller.
    assert tools.ran == ["search x"]
    assert [c.id for c in mixed.pending_calls] == ["n1"]
    assert mixed.outcome is not None and mixed.outcome.status == "pending" and "notify" in mixed.outcome.reason
    assert results(mixed)[-1].content.startswith(REUSED_NOTE)
    assert [c.id for c in alone.pending_calls] == ["n2"] and alone.outcome is not None
    assert alone.outcome.status == "pending" and script.remaining == 0


async def test_tools_turned_off_for_the_whole_run_are_off_for_the_callers_tools_too() -> None:
    tools = Tools()
    notify = ToolSpec("notify", "Tell the user.", {"type": "object", "properties": {}})
    script = Scripted([[ToolCall("s1", "search", '{"q": "x"}'), ToolCall("n1", "notify", "{}")], "done"])
    step = ReuseResults(Step(script, tools=tools.all), tools=["search"])
    with external_tools([notify]), turn_options(Options(tool_choice="none")):
        state = await ReAct(step).run(ask())
    # The model called tools although told not to: none runs, and nothing is handed to the caller.
    assert tools.ran == [] and state.pending_calls == () and state.answer == "done"
    assert all(r.is_error for r in results(state))
