"""``Step.derive``: a step for one stage of a pattern, sharing what it is not told to change."""

from typing import Any

import pytest

from loop import (Options, Request, Role, State, Step, Text, TextDelta, ToolStarted, TurnCompleted, UsageError,
                  tool)
from provider import Function, Scripted, tool_call

START = State().append(Role.USER, Text("hi"))


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def mul(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


@tool
def neg(a: int) -> int:
    """Negate an integer."""
    return -a


def names(request: Request) -> list[str]:
    return [spec.name for spec in request.tools]


def marked(text: str) -> Any:
    """A transform adding a system turn saying ``text`` to the model's view."""
    def transform(state: State) -> State:
        return state.append(Role.SYSTEM, Text(text))
    return transform


async def test_options_are_laid_over_the_parents() -> None:
    script = Scripted(["a", "b"])
    parent = Step(script, options=Options(model="big", temperature=0.2, max_tokens=100))
    cheap = parent.derive(options=Options(model="small", max_tokens=20))
    assert cheap.options == Options(model="small", temperature=0.2, max_tokens=20)
    assert parent.options == Options(model="big", temperature=0.2, max_tokens=100)
    await cheap.turn(START)
    await parent.turn(START)
    assert [r.options.model for r in script.requests] == ["small", "big"]
    assert script.requests[0].options.temperature == 0.2


async def test_per_call_options_still_win_over_the_derived_steps() -> None:
    script = Scripted(["a"])
    await Step(script).derive(options=Options(model="small")).turn(START, Options(model="once"))
    assert script.requests[0].options.model == "once"


async def test_another_provider_answers_the_derived_step_only() -> None:
    main, cheap = Scripted(["from main"]), Scripted(["from cheap"])
    parent = Step(main)
    derived = parent.derive(provider=cheap)
    assert derived.provider is cheap and parent.provider is main
    assert (await derived.turn(START)).answer == "from cheap"
    assert (await parent.turn(START)).answer == "from main"


async def test_a_tool_subset_is_all_the_derived_step_offers_and_runs() -> None:
    script = Scripted([[tool_call("add", {"a": 1, "b": 2}, id="c1"), tool_call("mul", {"a": 2, "b": 3}, id="c2")],
                       "done"])
    parent = Step(script, tools=[add, mul, neg])
    derived = parent.derive(tools=["neg", "add"])
    assert [t.spec.name for t in derived.tools] == ["add", "neg"]  # in the parent's order
    assert [t.spec.name for t in parent.tools] == ["add", "mul", "neg"]
    state = await derived.turn(START)
    assert names(script.requests[0]) == ["add", "neg"]
    added, multiplied = state[-1].tool_results
    assert (added.content, added.is_error) == ("3", False)
    assert multiplied.is_error and "unknown tool 'mul'" in multiplied.content  # not run, though the parent has it
    # The derived pipeline is the one that runs calls without a model turn too.
    (result,) = await derived.pipeline.run([tool_call("mul", {"a": 2, "b": 3}, id="c3")])
    assert result.is_error
    await parent.turn(START)
    assert names(script.requests[1]) == ["add", "mul", "neg"]


async def test_no_tools_at_all() -> None:
    script = Scripted(["a"])
    derived = Step(script, tools=[add]).derive(tools=())
    assert derived.tools == ()
    await derived.turn(START)
    assert script.requests[0].tools == ()


async def test_a_subset_keeps_the_parents_tool_limits() -> None:
    parent = Step(Scripted([]), tools=[add, mul], tool_timeout=3.0, max_result_chars=50)
    derived = parent.derive(tools=["add"])
    assert (derived.pipeline.timeout, derived.pipeline.max_result_chars) == (3.0, 50)


async def test_without_tools_given_the_pipeline_is_shared() -> None:
    parent = Step(Scripted([]), tools=[add])
    assert parent.derive().pipeline is parent.pipeline
    assert parent.derive(options=Options(model="x")).tools == parent.tools


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        (["add", "sub", "div"], "this step has no tool 'sub', 'div'; it has add, mul"),
        (["ADD"], "no tool 'ADD'; it has add, mul"),
    ],
)
def test_an_unknown_tool_name_is_refused_naming_what_exists(tools: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        Step(Scripted([]), tools=[add, mul]).derive(tools=tools)


def test_a_step_without_tools_says_it_has_none() -> None:
    with pytest.raises(UsageError, match="no tool 'add'; it has none"):
        Step(Scripted([])).derive(tools=["add"])


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ("add", r"got the string 'add'; write tools=\['add'\]"),
        (3, "takes a list of tool names, got 3"),
        ([add], "takes tool names \\(strings\\)"),
    ],
)
def test_tools_must_be_a_list_of_names(tools: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        Step(Scripted([]), tools=[add]).derive(tools=tools)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"options": {"model": "x"}}, "loop.Options"),
        ({"provider": object()}, "stream"),
        ({"transforms": "window"}, "transforms"),
        ({"transforms": [3]}, "transform"),
    ],
)
def test_other_bad_arguments_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        Step(Scripted([])).derive(**kwargs)


async def test_the_event_bus_is_shared() -> None:
    parent = Step(Function(lambda request: [tool_call("add", {"a": 1, "b": 1})] if len(request.turns) == 1
                           else "two"), tools=[add])
    derived = parent.derive(options=Options(model="small"), tools=["add"])
    assert derived.events is parent.events
    with parent.events.subscribe(buffer=None) as sub:
        await derived.turn(START)
        await derived.submit(START, Role.SYSTEM, Text("a note"))
        events = sub.drain()
    assert not any(isinstance(e, TextDelta) for e in events)  # the first reply is a call only
    assert [e.call.name for e in events if isinstance(e, ToolStarted)] == ["add"]
    completed = [e.turn.role for e in events if isinstance(e, TurnCompleted)]
    assert completed == [Role.ASSISTANT, Role.TOOL, Role.SYSTEM]
    with parent.events.subscribe(buffer=None) as sub:
        await derived.turn(START.append(Role.ASSISTANT, Text("x")))
        assert TextDelta("two") in sub.drain()


async def test_transforms_are_shared_by_identity_unless_given() -> None:
    script = Scripted(["a", "b", "c"])
    parent = Step(script, transforms=[marked("parent view")])
    same = parent.derive(options=Options(model="small"))
    other = parent.derive(transforms=[marked("stage view")])
    bare = parent.derive(transforms=())
    assert same.transforms is parent.transforms
    assert len(other.transforms) == 1 and other.transforms[0] is not parent.transforms[0]
    await same.turn(START)
    await other.turn(START)
    await bare.turn(START)
    views = [[t.text for t in r.turns] for r in script.requests]
    assert views == [["hi", "parent view"], ["hi", "stage view"], ["hi"]]


async def test_an_async_transform_given_to_derive_is_awaited() -> None:
    async def later(state: State) -> State:
        return state.append(Role.SYSTEM, Text("async view"))

    script = Scripted(["a"])
    await Step(script).derive(transforms=[later]).turn(START)
    assert [t.text for t in script.requests[0].turns] == ["hi", "async view"]


async def test_a_derived_step_can_be_derived_again() -> None:
    first, second = Scripted(["a"]), Scripted(["b"])
    root = Step(first, tools=[add, mul, neg], options=Options(model="big", temperature=0.3),
                transforms=[marked("view")])
    stage = root.derive(options=Options(model="mid", max_tokens=10), tools=["add", "mul"])
    leaf = stage.derive(provider=second, options=Options(model="small"), tools=["mul"])
    assert leaf.options == Options(model="small", temperature=0.3, max_tokens=10)
    assert [t.spec.name for t in leaf.tools] == ["mul"]
    assert leaf.events is root.events and leaf.transforms is root.transforms
    with pytest.raises(UsageError, match="no tool 'neg'; it has add, mul"):
        stage.derive(tools=["neg"])  # only what the stage it derives from has
    await leaf.turn(START)
    (request,) = second.requests
    assert names(request) == ["mul"] and request.options.model == "small"
    assert [t.text for t in request.turns] == ["hi", "view"]
    assert first.requests == []
