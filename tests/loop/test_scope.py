"""The run scope: run paths, the main line and branches, carrying a scope to another task, stamped events."""

from typing import Any

import anyio
import pytest

import loop
from loop import Request, Role, Stamped, State, Step, Text, TextDelta, TurnCompleted, UsageError, in_sample, tool
from provider import Function, Scripted, tool_call

START = State().append(Role.USER, Text("hi"))


def test_root_scope() -> None:
    here = loop.current_scope()
    assert here.path == "" and loop.run_path() == ""
    assert here.on_main_line and here.budgets == ()


def test_scope_nesting_builds_paths_and_restores_them() -> None:
    with loop.scope("WithVerification") as outer:
        assert outer.path == "WithVerification"
        with loop.scope("ReAct") as inner:
            assert inner.path == loop.run_path() == "WithVerification/ReAct"
            assert loop.current_scope() is inner
            assert inner.on_main_line, "a plain scope stays on the line it is in"
        assert loop.run_path() == "WithVerification"
    assert loop.run_path() == ""


def test_scope_is_restored_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError):
        with loop.scope("A"):
            raise RuntimeError
    assert loop.run_path() == ""


@pytest.mark.parametrize("name", ["", "a/b", "/", 3, None])
@pytest.mark.parametrize("opener", [loop.scope, loop.branch, loop.main_line])
def test_bad_names_are_refused(opener: Any, name: object) -> None:
    if opener is loop.main_line and name is None:
        return  # main_line() with no name is allowed: it keeps the path
    with pytest.raises(UsageError, match="segment"):
        opener(name)


async def test_branch_is_not_the_main_line() -> None:
    with loop.scope("Vote"):
        with loop.branch("sample 2") as here:
            assert here.path == "Vote/sample 2"
            assert not here.on_main_line
            with loop.scope("ReAct") as deeper:
                assert deeper.path == "Vote/sample 2/ReAct"
                assert not deeper.on_main_line, "a scope inside a branch is still the branch"
        assert loop.current_scope().on_main_line


async def test_a_branch_keeps_the_budgets_and_options_and_drops_what_only_the_main_line_has() -> None:
    spend = loop.Spend(None)
    schema = {"type": "object"}
    recorder = Recorder()
    spec = loop.ToolSpec("theirs", "the caller's", {"type": "object"})
    with loop.main_line(recorder=recorder), loop.charging(spend), loop.turn_options(loop.Options(seed=3)), \
            loop.external_tools([spec]), loop.typed_answer(schema):
        outer = loop.current_scope()
        with loop.branch("b 1") as here, loop.scope("Inner") as inner:
            assert type(here) is loop.RunScope
            assert (here.path, here.budgets, here.options) == ("b 1", (spend,), loop.Options(seed=3))
            assert (here.external, here.recorder, here.answer) == ((), None, None)
            assert here.line is not outer.line and not here.line.main and here.task is not None
            assert inner == here._replace(path="b 1/Inner") and type(inner) is loop.RunScope
        with loop.scope("Outer") as scoped:
            assert scoped == outer._replace(path="Outer") and type(scoped) is loop.RunScope
    with loop.branch("b 2") as first, loop.branch("c") as second:
        assert second.path == "b 2/c" and second.line is not first.line


class Recorder:
    async def __call__(self, state: State) -> None:
        pass


async def test_main_line_keeps_or_extends_the_path() -> None:
    with loop.scope("Session"):
        with loop.main_line() as same:
            assert same.path == "Session" and same.on_main_line
        with loop.main_line("message 3") as named:
            assert named.path == "Session/message 3" and named.on_main_line
        with loop.branch("b"), loop.main_line() as again:
            assert again.on_main_line, "main_line starts a main line even inside a branch"


async def test_a_plain_task_group_child_is_not_on_the_main_line() -> None:
    seen: dict[str, Any] = {}

    async def child() -> None:
        here = loop.current_scope()
        seen["child"] = (here.path, here.on_main_line)

    with loop.main_line("chat"):
        async with anyio.create_task_group() as group:
            group.start_soon(child)
            seen["owner"] = loop.current_scope().on_main_line
        seen["owner after"] = loop.current_scope().on_main_line
    assert seen == {"child": ("chat", False), "owner": True, "owner after": True}


async def test_at_the_root_every_task_is_on_the_main_line() -> None:
    # No line was opened: the root belongs to no task in particular.
    seen: list[bool] = []

    async def child() -> None:
        seen.append(loop.current_scope().on_main_line)

    async with anyio.create_task_group() as group:
        group.start_soon(child)
    assert seen == [True]


async def test_carry_lets_another_task_act_for_the_line() -> None:
    seen: dict[str, Any] = {}

    async def child(carried: loop.Carried) -> None:
        seen["before"] = loop.current_scope().on_main_line
        with carried as here:
            seen["carried"] = (here.path, here.on_main_line, loop.current_scope().on_main_line)
        seen["after"] = loop.current_scope().on_main_line

    with loop.main_line("chat"), loop.scope("ReAct"):
        carried = loop.carry()
        async with anyio.create_task_group() as group:
            group.start_soon(child, carried)
    assert seen == {"before": False, "carried": ("chat/ReAct", True, True), "after": False}


async def test_carry_reaches_a_task_that_already_exists() -> None:
    send, receive = anyio.create_memory_object_stream[loop.Carried](1)
    seen: list[tuple[str, bool]] = []

    async def worker() -> None:  # started before any line was opened, as a pool's worker is
        async with receive:
            async for carried in receive:
                seen.append((loop.run_path(), loop.current_scope().on_main_line))
                with carried:
                    seen.append((loop.run_path(), loop.current_scope().on_main_line))

    async with anyio.create_task_group() as group:
        group.start_soon(worker)
        with loop.main_line("chat"), loop.branch("sample 1"):
            branch_carried = loop.carry()
        with loop.main_line("chat"):
            main_carried = loop.carry()
        async with send:
            await send.send(main_carried)
            await send.send(branch_carried)
    assert seen == [("", True), ("chat", True), ("", True), ("chat/sample 1", False)]


async def test_a_tool_runs_in_a_branch_under_the_callers_path() -> None:
    seen: list[tuple[str, bool]] = []

    @tool
    async def probe() -> str:
        """Report where it runs."""
        here = loop.current_scope()
        seen.append((here.path, here.on_main_line))
        return "ok"

    step = Step(Scripted([[tool_call("probe", {}, id="c7")]]), tools=[probe])
    with loop.main_line("chat"), loop.scope("ReAct"):
        assert loop.current_scope().on_main_line
        await step.turn(START)
        assert loop.run_path() == "chat/ReAct" and loop.current_scope().on_main_line
    assert seen == [("chat/ReAct/tool:probe#c7", False)]


async def test_requests_carry_the_run_path() -> None:
    paths: list[str] = []

    def answer(request: loop.Request) -> str:
        paths.append(request.path)
        return f"from {request.path}"

    step = Step(Function(answer))
    with loop.scope("A"), loop.branch("b 1"):
        state = await step.turn(START)
    assert paths == ["A/b 1"] and state.answer == "from A/b 1"


async def test_stamped_subscriptions_get_path_and_line_plain_ones_bare_events() -> None:
    @tool
    async def probe() -> str:
        """Publishes nothing itself."""
        return "ok"

    step = Step(Scripted([[Text("calling"), tool_call("probe", {}, id="c1")]]), tools=[probe])
    with step.events.subscribe(buffer=None, stamped=True) as stamped, \
            step.events.subscribe(buffer=None) as plain:
        with loop.main_line("chat"):
            await step.turn(START)
        side = stamped.drain(), plain.drain()
    stamped_events, plain_events = side
    assert stamped_events and all(isinstance(e, Stamped) for e in stamped_events)
    assert not any(isinstance(e, Stamped) for e in plain_events)
    assert [e.event for e in stamped_events] == plain_events
    assert all(e.path == "chat" and e.main for e in stamped_events)
    texts = [e for e in stamped_events if isinstance(e.event, TextDelta)]
    assert texts == [Stamped(TextDelta("calling"), "chat", True)]
    completed = [e.event.turn.role for e in stamped_events if isinstance(e.event, TurnCompleted)]
    assert completed == [Role.ASSISTANT, Role.TOOL]


async def test_stamped_events_from_a_branch_and_a_side_task_are_not_main() -> None:
    step = Step(Function(lambda request: "x"))
    with step.events.subscribe(buffer=None, stamped=True) as sub:
        with loop.main_line("chat"):
            await step.turn(START)
            with loop.branch("sample 1"):
                await step.turn(START)
            async with anyio.create_task_group() as group:
                group.start_soon(step.turn, START)
        events = sub.drain()
    texts = [(e.path, e.main) for e in events if isinstance(e.event, TextDelta)]
    assert texts == [("chat", True), ("chat/sample 1", False), ("chat", False)]


async def test_publish_outside_any_step_is_stamped_with_the_publishers_scope() -> None:
    bus = loop.EventBus()
    with bus.subscribe(stamped=True) as sub:
        with loop.scope("X"), loop.branch("b"):
            bus.publish("event")
        bus.publish("root")
        assert sub.drain() == [Stamped("event", "X/b", False), Stamped("root", "", True)]



async def test_one_carried_scope_can_be_entered_by_two_tasks_at_once() -> None:
    with loop.scope("Plan"), loop.branch("step 1"):
        carried = loop.carry()
    seen: list[str] = []

    async def worker(start: float, hold: float) -> None:
        await anyio.sleep(start)
        with carried:
            await anyio.sleep(hold)
            seen.append(loop.run_path())
        seen.append(loop.run_path())

    async with anyio.create_task_group() as group:
        group.start_soon(worker, 0, 0.03)
        group.start_soon(worker, 0.01, 0.04)
    assert seen == ["Plan/step 1", "", "Plan/step 1", ""]


@pytest.mark.parametrize("path, sampled", [
    ("samples", True), ("ReAct/samples/sample 2", True), ("sample 3", True), ("SelfConsistency/sample 12/ReAct", True),
    ("", False), ("ReAct", False), ("sample", False), ("samples taken", False), ("my samples", False),
    ("resample 2", False), ("sample 2b", False),
])
def test_in_sample_names_the_paths_of_samples(path: str, sampled: bool) -> None:
    assert in_sample(path) is sampled


async def test_a_step_samples_in_paths_in_sample_says_are_samples() -> None:
    seen: list[str] = []

    def model(request: Request) -> str:
        seen.append(request.path)
        return "ok"

    await Step(Function(model)).sample(State().append(Role.USER, Text("hi")), 2)
    assert seen and all(in_sample(path) for path in seen)
