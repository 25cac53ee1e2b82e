"""``ToolPipeline``: tool calls without a model turn get every guarantee a turn gives them."""

from typing import Any

import anyio
import pytest

import loop
from loop import (
    Role,
    State,
    Step,
    Text,
    ToolCall,
    ToolFinished,
    ToolPipeline,
    ToolResult,
    ToolStarted,
    UsageError,
    tool,
)
from provider import Scripted, tool_call


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def fail(reason: str) -> str:
    """Always raises."""
    raise RuntimeError(f"broken: {reason}")


@tool
async def slow() -> str:
    """Takes far longer than any timeout here."""
    await anyio.sleep(10)
    return "late"


@tool
async def long_text(size: int) -> str:
    """Returns ``size`` characters."""
    return "x" * size


@tool
async def where() -> str:
    """Says where it runs."""
    here = loop.current_scope()
    return f"{here.path} main={here.on_main_line}"


def step(**settings: Any) -> Step:
    # The provider is never asked: these calls run without a model turn.
    return Step(Scripted([]), tools=[add, fail, slow, long_text, where], **settings)


async def test_run_without_a_model_turn_returns_results_in_call_order() -> None:
    s = step()
    calls = [ToolCall("c1", "add", '{"a": 1, "b": 2}'), ToolCall("c2", "add", '{"a": 3, "b": 4}')]
    assert await s.pipeline.run(calls) == (ToolResult("c1", "add", "3"), ToolResult("c2", "add", "7"))
    assert s.provider.requests == []  # type: ignore[attr-defined]
    assert s.pipeline.find("add") is add and s.pipeline.find("nope") is None
    assert {t.name for t in s.pipeline.tools} == {"add", "fail", "slow", "long_text", "where"}


async def test_call_runs_one_call() -> None:
    assert await step().pipeline.call(ToolCall("c", "add", '{"a": 2, "b": 2}')) == ToolResult("c", "add", "4")


@pytest.mark.parametrize(("arguments", "fragment"), [
    ('{"a": "one", "b": 2}', "a"),
    ('{"a": 1}', "b"),
    ('{"a": 1,', "JSON"),
])
async def test_arguments_are_checked_against_the_schema(arguments: str, fragment: str) -> None:
    result = await step().pipeline.call(ToolCall("c", "add", arguments))
    assert result.is_error and result.call_id == "c" and result.name == "add"
    assert result.content.startswith("error: ") and fragment in result.content


async def test_unknown_tool_is_an_error_result_naming_the_known_tools() -> None:
    result = await step().pipeline.call(ToolCall("c", "nope", "{}"))
    assert result.is_error
    assert "unknown tool 'nope'" in result.content
    assert "add, fail, long_text, slow, where" in result.content


async def test_timeout_is_an_error_result() -> None:
    with anyio.fail_after(1):
        result = await step(tool_timeout=0.05).pipeline.call(ToolCall("c", "slow", "{}"))
    assert result.is_error and "timed out after 0.05 seconds" in result.content


async def test_exception_is_an_error_result() -> None:
    result = await step().pipeline.call(ToolCall("c", "fail", '{"reason": "disk"}'))
    assert result == ToolResult("c", "fail", "error: the tool raised RuntimeError: broken: disk", is_error=True)


async def test_long_results_are_truncated_with_a_note() -> None:
    result = await step(max_result_chars=50).pipeline.call(ToolCall("c", "long_text", '{"size": 500}'))
    assert not result.is_error
    assert result.content.startswith("x" * 50 + "\n[truncated")
    assert "500 characters" in result.content and "first 50" in result.content
    short = await step(max_result_chars=50).pipeline.call(ToolCall("c", "long_text", '{"size": 50}'))
    assert short.content == "x" * 50


async def test_disabled_answers_every_call_without_running_it() -> None:
    results = await step().pipeline.run([ToolCall("c1", "add", '{"a": 1, "b": 2}')], disabled=True)
    assert results[0].is_error and "tools are disabled" in results[0].content


async def test_every_kind_of_call_gets_one_result_concurrently() -> None:
    calls = [ToolCall("c1", "add", '{"a": 1, "b": 1}'), ToolCall("c2", "nope", "{}"),
             ToolCall("c3", "slow", "{}"), ToolCall("c4", "fail", '{"reason": "r"}')]
    with anyio.fail_after(1):
        results = await step(tool_timeout=0.05).pipeline.run(calls)
    assert [(r.call_id, r.is_error) for r in results] == [("c1", False), ("c2", True), ("c3", True), ("c4", True)]


async def test_events_are_published_for_each_call() -> None:
    s = step()
    calls = [ToolCall("c1", "add", '{"a": 1, "b": 2}'), ToolCall("c2", "nope", "{}")]
    with s.events.subscribe(buffer=None) as sub:
        results = await s.pipeline.run(calls)
        events = sub.drain()
    started = [e.call for e in events if isinstance(e, ToolStarted)]
    finished = {e.call.id: e for e in events if isinstance(e, ToolFinished)}
    assert sorted(started, key=lambda c: c.id) == calls  # started concurrently, in any order
    assert set(finished) == {"c1", "c2"}
    assert finished["c1"].result == results[0] and finished["c2"].result == results[1]
    assert all(e.seconds >= 0 for e in finished.values())
    for call in calls:  # each call's start comes before its finish
        assert events.index(ToolStarted(call)) < events.index(finished[call.id])


async def test_a_pipeline_of_its_own_publishes_to_its_bus() -> None:
    bus = loop.EventBus()
    pipeline = ToolPipeline([add], events=bus)
    with bus.subscribe() as sub:
        await pipeline.call(ToolCall("c", "add", '{"a": 1, "b": 1}'))
        assert [type(e) for e in sub.drain()] == [ToolStarted, ToolFinished]


async def test_each_call_runs_in_a_tool_branch_under_the_callers_path() -> None:
    with loop.main_line("chat"), loop.scope("Planner"):
        result = await step().pipeline.call(ToolCall("w1", "where", "{}"))
    assert result.content == "chat/Planner/tool:where#w1 main=False"


@pytest.mark.parametrize("count", [1, 3])
async def test_calls_run_side_by_side_are_the_main_lines_events_while_each_tool_runs_in_a_branch(count: int) -> None:
    s = step()
    calls = [ToolCall(f"w{i}", "where", "{}") for i in range(count)]
    with s.events.subscribe(buffer=None, stamped=True, main_line=True) as main:
        with loop.main_line("chat"):
            results = await s.pipeline.run(calls)
        seen = main.drain()
    assert sorted((type(e.event).__name__, e.event.call.id) for e in seen) == sorted(
        [("ToolStarted", c.id) for c in calls] + [("ToolFinished", c.id) for c in calls])
    assert {e.path for e in seen} == {"chat"} and all(e.main for e in seen)
    assert [r.content for r in results] == [f"chat/tool:where#w{i} main=False" for i in range(count)]


async def test_cancelling_run_answers_every_call_through_on_cancel() -> None:
    got: list[tuple[ToolResult, ...]] = []

    async def on_cancel(answered: tuple[ToolResult, ...], exc: BaseException) -> None:
        got.append(answered)

    calls = [ToolCall("c1", "add", '{"a": 1, "b": 1}'), ToolCall("c2", "slow", "{}")]
    with anyio.move_on_after(0.05):
        await step().pipeline.run(calls, on_cancel=on_cancel)
    assert len(got) == 1
    first, second = got[0]
    assert first == ToolResult("c1", "add", "2")
    assert second.is_error and second.call_id == "c2" and "cancelled" in second.content


@pytest.mark.parametrize("settings", [{"timeout": 0}, {"timeout": -1}, {"timeout": True},
                                      {"max_result_chars": 0}, {"max_result_chars": 1.5}])
def test_bad_settings_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        ToolPipeline([add], **settings)


async def test_the_pipeline_is_what_turns_use() -> None:
    s = Step(Scripted([[tool_call("add", {"a": 2, "b": 5}, id="t1")]]), tools=[add])
    with s.events.subscribe(buffer=None) as sub:
        state = await s.turn(State().append(Role.USER, Text("go")))
        events = sub.drain()
    assert state.last.parts == (ToolResult("t1", "add", "7"),)  # type: ignore[union-attr]
    assert [type(e) for e in events if isinstance(e, (ToolStarted, ToolFinished))] == [ToolStarted, ToolFinished]


async def test_calls_are_charged_to_every_budget_and_refused_past_a_tool_call_limit() -> None:
    # The budgets a WithBudget would open, made by hand: the pipeline charges whatever the scope holds.
    from loop._spend import Spend
    from loop._scope import charging

    outer = Spend(loop.Budget(max_tool_calls=5, name="outer"))
    inner = Spend(loop.Budget(max_tool_calls=2, name="inner"))
    calls = [ToolCall(f"c{i}", "add", '{"a": 1, "b": 1}') for i in range(3)]
    with loop.scope("Worker"), charging(outer), charging(inner):
        results = await step().pipeline.run(calls)
    refused = [r for r in results if r.is_error]
    assert len(refused) == 1 and sum(not r.is_error for r in results) == 2
    assert refused[0].content == "error: not run: budget 'inner' ran out: max_tool_calls=2 reached"
    assert inner.exhausted == "max_tool_calls=2 reached" and outer.exhausted is None
    # A refused call is charged to no budget; the others to every one, under the caller's path.
    assert inner.spent == outer.spent == loop.Spent(tool_calls=2)
    assert dict(inner.by_path) == dict(outer.by_path) == {"Worker": loop.Spent(tool_calls=2)}
