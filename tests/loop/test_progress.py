"""``on_progress``: partial states reported from inside a turn, and the ``State`` helpers stores use."""

from typing import Any

import anyio
import pytest

from loop import Role, State, Step, Text, ToolStarted, UsageError, on_progress, tool
from provider import Scripted, tool_call

START = State().append(Role.USER, Text("go"))


@tool
async def add(a: int, b: int) -> int:
    """Add."""
    return a + b


async def test_a_turn_with_tool_calls_reports_the_assistant_turn_before_the_tools_run() -> None:
    reported: list[State] = []

    async def record(state: State) -> None:
        reported.append(state)

    step = Step(Scripted([[tool_call("add", {"a": 1, "b": 2})], "plain answer"]), tools=[add])
    with on_progress(record):
        state = await step.turn(START)
        final = await step.turn(state.append(Role.USER, Text("thanks")))
    assert len(reported) == 1  # the text-only turn has nothing partial to report
    (partial,) = reported
    assert [t.role for t in partial] == [Role.USER, Role.ASSISTANT]
    assert partial.pending_calls == state[1].tool_calls
    assert final.answer == "plain answer"


async def test_nothing_is_reported_outside_the_block() -> None:
    reported: list[State] = []

    async def record(state: State) -> None:
        reported.append(state)

    with on_progress(record):
        pass
    await Step(Scripted([[tool_call("add", {"a": 1, "b": 2})]]), tools=[add]).turn(START)
    assert reported == []


async def test_an_error_in_the_callback_fails_the_turn() -> None:
    async def broken(state: State) -> None:
        raise RuntimeError("store is down")

    step = Step(Scripted([[tool_call("add", {"a": 1, "b": 2})]]), tools=[add])
    with on_progress(broken), pytest.raises(RuntimeError, match="store is down"):
        await step.turn(START)


async def test_a_turn_cancelled_while_tools_run_reports_the_answered_calls() -> None:
    reported: list[State] = []

    async def record(state: State) -> None:
        await anyio.sleep(0)  # a real store awaits; the report must survive the cancellation
        reported.append(state)

    @tool
    async def hang() -> str:
        await anyio.sleep_forever()
        return "unreachable"

    step = Step(Scripted([[tool_call("add", {"a": 1, "b": 2}, id="a"), tool_call("hang", id="h")]]),
                tools=[add, hang])
    scope = anyio.CancelScope()
    returned: list[Any] = []

    async def run() -> None:
        with scope, on_progress(record):
            returned.append(await step.turn(START))

    with step.events.subscribe(buffer=None) as watch, anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            async for event in watch:
                if isinstance(event, ToolStarted) and event.call.id == "h":
                    break
            await anyio.wait_all_tasks_blocked()
            scope.cancel()
    assert returned == []
    assert len(reported) == 2
    last = reported[-1]
    assert [t.role for t in last] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    assert last.pending_calls == ()
    a, h = last[-1].tool_results
    assert (a.content, a.is_error) == ("3", False)
    assert h.is_error and "cancelled" in h.content


async def test_progress_can_be_given_to_the_turn_itself() -> None:
    reported: list[State] = []

    async def record(state: State) -> None:
        reported.append(state)

    step = Step(Scripted([[tool_call("add", {"a": 1, "b": 2})]]), tools=[add])
    state = await step.turn(START, progress=record)
    assert [len(s) for s in reported] == [2] and len(state) == 3


def delegating_step() -> Step:
    """A step whose one tool runs a sub-agent: two turns of another step, on a conversation of its own."""
    inner = Step(Scripted([[tool_call("add", {"a": 2, "b": 2})], "four"]), tools=[add])

    @tool
    async def delegate(question: str) -> str:
        """Ask a sub-agent."""
        state = await inner.turn(State().append(Role.USER, Text(question)))
        state = await inner.turn(state)
        return state.answer

    return Step(Scripted([[tool_call("delegate", {"question": "2+2?"})], [tool_call("add", {"a": 0, "b": 1})]]),
                tools=[delegate, add])


@pytest.mark.parametrize("given", ["on_progress", "progress="])
async def test_steps_run_by_a_tool_do_not_report_into_the_outer_conversation(given: str) -> None:
    """The sub-agent's conversation must not be reported as the outer one's progress: a session would
    store it as its history."""
    reported: list[State] = []

    async def record(state: State) -> None:
        reported.append(state)

    step = delegating_step()
    if given == "on_progress":
        with on_progress(record):
            state = await step.turn(START)
            await step.turn(state)  # the next turn in the same block reports again
        assert [len(s) for s in reported] == [2, 4]
    else:
        state = await step.turn(START, progress=record)
        assert [len(s) for s in reported] == [2]
    assert state[2].tool_results[0].content == "four"
    assert [s[0].text for s in reported] == ["go"] * len(reported)


async def test_a_turn_given_its_own_callback_still_hides_the_enclosing_one_from_its_tools() -> None:
    enclosing: list[State] = []
    own: list[State] = []

    async def record_enclosing(state: State) -> None:
        enclosing.append(state)

    async def record_own(state: State) -> None:
        own.append(state)

    with on_progress(record_enclosing):
        await delegating_step().turn(START, progress=record_own)
    assert [s[0].text for s in own] == ["go"] and enclosing == []


async def test_steps_run_side_by_side_in_a_block_each_report() -> None:
    reported: list[State] = []

    async def record(state: State) -> None:
        reported.append(state)

    first = Step(Scripted([[tool_call("add", {"a": 1, "b": 1})]]), tools=[add])
    second = Step(Scripted([[tool_call("add", {"a": 2, "b": 2})]]), tools=[add])
    with on_progress(record):
        async with anyio.create_task_group() as group:
            group.start_soon(first.turn, START)
            group.start_soon(second.turn, START)
    assert sorted(s[-1].tool_calls[0].arguments for s in reported) == ['{"a": 1, "b": 1}', '{"a": 2, "b": 2}']


async def test_progress_must_be_callable() -> None:
    with pytest.raises(UsageError, match="async callback"):
        on_progress("not a function")  # type: ignore[arg-type]
    step = Step(Scripted(["never asked"]))
    with pytest.raises(UsageError, match="progress must be an async function"):
        await step.turn(START, progress="not a function")  # type: ignore[arg-type]
    assert step.provider.used == 0  # refused before the model was asked


def chat(n: int) -> State:
    state = State().with_meta(run="r")
    for i in range(n):
        state = state.append(Role.USER if i % 2 == 0 else Role.ASSISTANT, Text(f"t{i}"))
    return state


def test_prefix_keeps_the_first_turns_and_the_meta() -> None:
    state = chat(5)
    assert [t.text for t in state.prefix(2)] == ["t0", "t1"]
    assert state.prefix(2).meta == {"run": "r"}
    assert state.prefix(0) == State().with_meta(run="r")
    assert state.prefix(5) == state and state.prefix(99) == state
    assert len(state) == 5


@pytest.mark.parametrize("count", [-1, 1.5, "2", None, True])
def test_prefix_rejects_bad_counts(count: Any) -> None:
    with pytest.raises(UsageError, match="prefix's turn count must be an integer >= 0"):
        chat(2).prefix(count)


def test_common_prefix_of_forks_and_of_equal_copies() -> None:
    base = chat(4)
    left = base.append(Role.USER, Text("left")).append(Role.ASSISTANT, Text("more"))
    right = base.append(Role.USER, Text("right"))
    assert left.common_prefix(right) == right.common_prefix(left) == 4
    assert base.common_prefix(left) == 4 and left.common_prefix(left) == 6
    assert State().common_prefix(left) == 0
    copy = State.from_json(left.to_json())  # equal by value, no shared nodes
    assert copy.common_prefix(left) == 6
    assert copy.common_prefix(right) == 4
    assert chat(3).common_prefix(State().append(Role.ASSISTANT, Text("t0"))) == 0


def test_common_prefix_counts_turn_meta() -> None:
    one = State().append(Role.USER, Text("x"), meta={"id": 1})
    two = State().append(Role.USER, Text("x"), meta={"id": 2})
    assert one == two  # turn meta is not part of equality...
    assert one.common_prefix(two) == 0  # ...but a store must not treat these turns as the same
