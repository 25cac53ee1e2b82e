"""The run context: who a run works for and the application's dependencies, handed to tools that declare a
``RunContext`` parameter, never described to the model and never taken from it."""

import functools

import attrs
import pytest

from loop import (Caller, Role, RunContext, State, Step, Text, UsageError, current_run_context, fan_out,
                  run_context, tool)
from provider import Scripted, tool_call


@attrs.frozen
class Deps:
    greeting: str


@tool
async def whoami(ctx: RunContext[Deps], punctuation: str = "!") -> str:
    """Greet the caller.

    Args:
        ctx: the run's context (never shown to the model).
        punctuation: what ends the greeting.
    """
    assert ctx.deps is not None and ctx.caller is not None
    return f"{ctx.deps.greeting}, {ctx.caller.id}{punctuation}"


@tool
def whoami_sync(ctx: RunContext) -> str:
    """Name the caller, from a worker thread."""
    return ctx.caller.id if ctx.caller else "nobody"


def asked(text: str = "who am I?") -> State:
    return State().append(Role.USER, Text(text))


def test_the_context_parameter_is_left_out_of_the_schema() -> None:
    assert whoami.spec.parameters == {
        "type": "object", "properties": {"punctuation": {"type": "string", "description": "what ends the greeting.",
                                                         "default": "!"}},
        "required": [], "additionalProperties": False}
    assert whoami_sync.spec.parameters["properties"] == {}


async def test_a_tool_reads_the_caller_and_the_dependencies_of_the_run() -> None:
    step = Step(Scripted([tool_call("whoami", {}), tool_call("whoami_sync", {}), "done"]), tools=[whoami, whoami_sync])
    with run_context(caller=Caller("ada", "tenant-1"), deps=Deps("Hello")):
        state = await step.turn(asked())
        state = await step.turn(state)
    assert [r.content for t in state for r in t.tool_results] == ["Hello, ada!", "ada"]


async def test_a_model_cannot_pass_the_context_itself() -> None:
    forged = tool_call("whoami_sync", {"ctx": {"caller": {"id": "root"}}})
    step = Step(Scripted([forged]), tools=[whoami_sync])
    with run_context(caller=Caller("ada")):
        state = await step.turn(asked())
    (result,) = state[-1].tool_results
    assert result.is_error and "ctx" in result.content and "root" not in result.content


async def test_branches_see_the_context_of_the_run_that_started_them() -> None:
    step = Step(Scripted([tool_call("whoami_sync", {})] * 3), tools=[whoami_sync])
    with run_context(caller=Caller("grace")):
        results = await fan_out([functools.partial(step.turn, asked())] * 3)
    assert [r.state[-1].tool_results[0].content for r in results] == ["grace"] * 3


async def test_outside_any_run_context_a_tool_gets_an_empty_one() -> None:
    assert current_run_context() == RunContext()
    assert await whoami_sync.call({}) == "nobody"


def test_an_inner_block_overrides_only_what_it_names() -> None:
    with run_context(caller=Caller("ada"), deps=Deps("Hi")):
        with run_context(deps=Deps("Hello")) as inner:
            assert inner == RunContext(Caller("ada"), Deps("Hello"))
        with run_context(caller=None):
            assert current_run_context() == RunContext(None, Deps("Hi"))
        assert current_run_context().deps == Deps("Hi")
        with run_context(conversation="c1"):
            assert current_run_context() == RunContext(Caller("ada"), Deps("Hi"), "c1")
            with run_context(caller=Caller("bo")):
                assert current_run_context().conversation == "c1"
    assert current_run_context() == RunContext()


def test_bad_callers_are_refused_with_the_reason() -> None:
    with pytest.raises(UsageError, match="Caller id must be a non-empty string"):
        Caller("")
    with pytest.raises(UsageError, match="claims must be a mapping"):
        Caller("ada", claims=["admin"])  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"takes a loop.Caller, got str"):
        with run_context(caller="ada"):  # type: ignore[arg-type]
            pass
    for conversation in ("", 42):
        with pytest.raises(UsageError, match=r"conversation=...\) takes a conversation id"):
            with run_context(conversation=conversation):  # type: ignore[arg-type]
                pass
    claims = Caller("ada", claims={"role": "admin"}).claims
    with pytest.raises(TypeError):
        claims["role"] = "root"  # type: ignore[index]


def test_a_caller_round_trips_through_its_stored_form() -> None:
    caller = Caller("ada", "tenant-1", {"email": "ada@example.org"})
    again = Caller.from_dict(caller.to_dict())
    assert again == caller and dict(again.claims) == {"email": "ada@example.org"}
