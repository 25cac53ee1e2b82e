"""Tool execution in ``Step.turn``: every call gets exactly one result, in call order, in one TOOL turn."""

import dataclasses
import enum
import json
import threading
from typing import Any

import anyio
import attrs
import pytest

from loop import Options, Role, State, Step, Text, ToolCall, ToolResult, Turn, tool
from provider import Scripted, tool_call

START = State().append(Role.USER, Text("go"))


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def fail(reason: str) -> str:
    """Always raises."""
    raise RuntimeError(f"broken: {reason}")


@tool
async def hang() -> str:
    """Never returns."""
    await anyio.sleep_forever()
    return "unreachable"


@tool(timeout=0.05)
async def quick_hang() -> str:
    """Never returns, with a short timeout of its own."""
    await anyio.sleep_forever()
    return "unreachable"


@tool
async def self_cancel() -> str:
    """Raises a cancellation exception although nobody cancelled the turn."""
    raise anyio.get_cancelled_exc_class()()


async def tool_turn(calls: list[ToolCall], *tools: Any, options: Options | None = None, **settings: Any) -> Turn:
    """Run one turn whose reply makes ``calls``; return the TOOL turn after checking the history shape."""
    provider = Scripted([calls])
    state = await Step(provider, tools=tools or (add,), **settings).turn(START, options)
    assert len(state) == 3
    assistant, results = state[1], state[2]
    assert assistant.role is Role.ASSISTANT and results.role is Role.TOOL
    assert [r.call_id for r in results.parts] == [c.id for c in assistant.tool_calls]
    assert all(isinstance(r, ToolResult) for r in results.parts)
    assert state.pending_calls == ()
    return results


async def test_success() -> None:
    results = await tool_turn([tool_call("add", {"a": 2, "b": 3}, id="c1")])
    assert results.parts == (ToolResult("c1", "add", "5"),)


async def test_every_kind_of_failure_is_an_error_result_in_call_order() -> None:
    calls = [
        tool_call("add", {"a": 1, "b": 1}),
        tool_call("nope", {}),
        tool_call("add", '{"a": 1,'),
        tool_call("fail", {"reason": "disk"}),
        tool_call("add", {"a": "one", "b": 2}),
        tool_call("add", {"a": 5, "b": 5}),
    ]
    results = await tool_turn(calls, add, fail)
    assert [(r.name, r.is_error) for r in results.tool_results] == [
        ("add", False), ("nope", True), ("add", True), ("fail", True), ("add", True), ("add", False),
    ]
    assert results.tool_results[0].content == "2" and results.tool_results[5].content == "10"
    assert all(r.content.startswith("error: ") for r in results.tool_results if r.is_error)


CASES = {
    "unknown tool": (tool_call("search", {"q": "x"}), "unknown tool 'search'; the tools you can call are: add"),
    "empty name": (tool_call("", {}), "a tool with no name; the tools you can call are: add"),
    "malformed JSON": (tool_call("add", '{"a": 1, "b":'), "the arguments are not valid JSON"),
    "array arguments": (tool_call("add", "[1, 2]"), "the arguments must be a JSON object, got list"),
    "number arguments": (tool_call("add", "7"), "the arguments must be a JSON object, got int"),
    "wrong type": (tool_call("add", {"a": "1", "b": 2}), "at a: '1' is not of type 'integer'"),
    "missing required": (tool_call("add", {"a": 1}), "'b' is a required property"),
    "extra property": (tool_call("add", {"a": 1, "b": 2, "c": 3}), "Additional properties are not allowed"),
    "tool raises": (tool_call("fail", {"reason": "disk"}), "the tool raised RuntimeError: broken: disk"),
    "self cancel": (tool_call("self_cancel"), "the tool was cancelled before it finished"),
}


@pytest.mark.parametrize(("call", "message"), CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # a tool can raise a cancellation itself only on asyncio
async def test_failures_tell_the_model_what_went_wrong(call: ToolCall, message: str) -> None:
    (result,) = (await tool_turn([call], add, fail, self_cancel)).tool_results
    assert result.is_error
    assert result.name == call.name
    assert message in result.content


async def test_empty_arguments_mean_no_arguments() -> None:
    @tool
    def now() -> str:
        """The time."""
        return "noon"

    (result,) = (await tool_turn([tool_call("now", "")], now)).tool_results
    assert result == ToolResult(result.call_id, "now", "noon")


async def test_step_tool_timeout_stops_a_slow_tool() -> None:
    results = await tool_turn([tool_call("hang"), tool_call("add", {"a": 1, "b": 2})], hang, add, tool_timeout=0.05)
    slow, fast = results.tool_results
    assert slow.is_error and "the tool timed out after 0.05 seconds" in slow.content
    assert not fast.is_error and fast.content == "3"


async def test_a_tools_own_timeout_overrides_the_steps() -> None:
    results = await tool_turn([tool_call("quick_hang")], quick_hang, tool_timeout=60)
    (result,) = results.tool_results
    assert result.is_error and "timed out after 0.05 seconds" in result.content


async def test_a_blocking_sync_tool_times_out_without_holding_the_turn() -> None:
    release = threading.Event()

    @tool(timeout=0.05)
    def stuck() -> str:
        release.wait(5)
        return "late"

    try:
        with anyio.fail_after(4):
            (result,) = (await tool_turn([tool_call("stuck")], stuck)).tool_results
    finally:
        release.set()  # let the abandoned worker thread finish
    assert result.is_error and "timed out after 0.05 seconds" in result.content


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # a tool can raise a cancellation itself only on asyncio
async def test_a_tool_cancelling_itself_does_not_end_the_turn() -> None:
    results = await tool_turn([tool_call("self_cancel"), tool_call("add", {"a": 1, "b": 1})], self_cancel, add)
    assert [r.is_error for r in results.tool_results] == [True, False]
    assert "cancelled" in results.tool_results[0].content


async def test_tool_choice_none_turns_every_call_into_an_error() -> None:
    ran = []

    @tool(blocking=False)
    def record() -> str:
        ran.append(True)
        return "ran"

    results = await tool_turn([tool_call("record"), tool_call("add", {"a": 1, "b": 1})], record, add,
                              options=Options(tool_choice="none"))
    assert ran == []
    assert all(r.is_error and "tools are disabled for this turn" in r.content for r in results.tool_results)


async def test_long_results_are_truncated_with_a_note() -> None:
    @tool
    def dump() -> str:
        return "x" * 1_000

    (result,) = (await tool_turn([tool_call("dump")], dump, max_result_chars=100)).tool_results
    assert not result.is_error
    assert result.content.startswith("x" * 100 + "\n[truncated")
    assert "x" * 101 not in result.content
    assert "1,000 characters; only the first 100 are shown" in result.content


async def test_long_error_messages_are_truncated_too() -> None:
    results = await tool_turn([tool_call("fail", {"reason": "y" * 500})], fail, max_result_chars=50)
    (result,) = results.tool_results
    assert result.is_error and "[truncated:" in result.content and "y" * 60 not in result.content


class Colour(enum.Enum):
    RED = "red"


@attrs.frozen
class Point:
    x: int
    y: int


@dataclasses.dataclass
class Box:
    label: str
    size: float


RETURNS = {
    "dict": ({"a": [1, 2], "ok": True, "none": None}, {"a": [1, 2], "ok": True, "none": None}),
    "attrs": (Point(1, 2), {"x": 1, "y": 2}),
    "dataclass": (Box("crate", 1.5), {"label": "crate", "size": 1.5}),
    "enum": (Colour.RED, "red"),
    "nested": ({"points": (Point(0, 1),), "colour": Colour.RED, "tags": {"only"}},
               {"points": [{"x": 0, "y": 1}], "colour": "red", "tags": ["only"]}),
    "int": (42, 42),
    "unicode": ({"city": "東京"}, {"city": "東京"}),
}


@pytest.mark.parametrize(("value", "expected"), RETURNS.values(), ids=RETURNS.keys())
async def test_non_string_results_are_rendered_as_json(value: Any, expected: Any) -> None:
    @tool
    def give() -> Any:
        return value

    (result,) = (await tool_turn([tool_call("give")], give)).tool_results
    assert not result.is_error
    assert json.loads(result.content) == expected
    if expected == {"city": "東京"}:
        assert "東京" in result.content


async def test_calls_run_concurrently() -> None:
    # Each tool announces itself and then waits for the other: run one after another, they would deadlock.
    ping_here, pong_here = anyio.Event(), anyio.Event()

    @tool
    async def ping() -> str:
        ping_here.set()
        await pong_here.wait()
        return "ping done"

    @tool
    async def pong() -> str:
        pong_here.set()
        await ping_here.wait()
        return "pong done"

    with anyio.fail_after(5):
        results = await tool_turn([tool_call("ping"), tool_call("pong")], ping, pong)
    assert [r.content for r in results.tool_results] == ["ping done", "pong done"]


async def test_blocking_sync_tools_run_concurrently_in_threads() -> None:
    barrier = threading.Barrier(2, timeout=5)

    @tool
    def left() -> str:
        barrier.wait()
        return "left"

    @tool
    def right() -> str:
        barrier.wait()
        return "right"

    results = await tool_turn([tool_call("left"), tool_call("right")], left, right)
    assert [(r.content, r.is_error) for r in results.tool_results] == [("left", False), ("right", False)]
