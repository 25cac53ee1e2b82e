"""``Step.turn``: one streamed response becomes one assistant turn."""

from collections.abc import AsyncIterator
from typing import Any

import pytest

from loop import (
    EventBus,
    Finish,
    Options,
    Reasoning,
    ReasoningDelta,
    Request,
    Role,
    State,
    Step,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    Turn,
    TurnExecutor,
    TurnFailed,
    Usage,
    UsageDelta,
    UsageError,
    tool,
)
from loop.errors import ProviderError, StreamError
from provider import Function, Scripted

START = State().append(Role.USER, Text("hi"))


@tool
def echo(text: str) -> str:
    """Say it back."""
    return text


async def test_streamed_text_accumulates_into_one_text_part() -> None:
    words = "The quick brown fox jumps over the lazy dog."
    step = Step(Scripted([words], chunk_size=3))
    with step.events.subscribe() as sub:
        state = await step.turn(START)
        deltas = [e for e in sub.drain() if isinstance(e, TextDelta)]
    assert len(deltas) > 1  # it really was streamed in pieces
    assert state.last is not None and state.last.parts == (Text(words),)
    assert state.last.role is Role.ASSISTANT
    assert state.answer == words
    assert len(state) == 2 and START.last == state[0]


async def test_reasoning_keeps_its_signature() -> None:
    step = Step(Scripted([[Reasoning("let me think about it", signature="sig-1"), "answer"]], chunk_size=4))
    state = await step.turn(START)
    assert state.last is not None
    assert state.last.parts == (Reasoning("let me think about it", "sig-1"), Text("answer"))


async def test_a_signature_closes_a_reasoning_block() -> None:
    async def blocks(request: Request) -> AsyncIterator[Any]:
        for delta in (ReasoningDelta("a"), ReasoningDelta("b", "s1"), ReasoningDelta("c"),
                      ReasoningDelta("", "s2"), TextDelta("x"), ReasoningDelta("d")):
            yield delta

    state = await Step(Function(blocks)).turn(START)
    assert state.last is not None
    assert state.last.parts == (Reasoning("ab", "s1"), Reasoning("c", "s2"), Text("x"), Reasoning("d"))


async def test_interleaved_tool_call_fragments_join_by_index_in_first_appearance_order() -> None:
    async def interleaved(request: Request) -> AsyncIterator[Any]:
        yield TextDelta("Checking.")
        yield ToolCallDelta(1, "call_b", "second", '{"x"')
        yield ToolCallDelta(0, "call_a", "first", '{"a": ')
        yield ToolCallDelta(1, arguments_fragment=": [1, ")
        yield ToolCallDelta(0, arguments_fragment='"one"')
        yield ToolCallDelta(1, arguments_fragment="2]}")
        yield ToolCallDelta(0, arguments_fragment="}")
        yield Finish("tool_calls")

    state = await Step(Function(interleaved)).turn(START)
    assistant = state[-2]
    assert assistant.role is Role.ASSISTANT
    assert assistant.parts == (
        Text("Checking."),
        ToolCall("call_b", "second", '{"x": [1, 2]}'),
        ToolCall("call_a", "first", '{"a": "one"}'),
    )
    assert [r.call_id for r in state[-1].tool_results] == ["call_b", "call_a"]


async def test_a_missing_call_id_gets_a_generated_one() -> None:
    async def no_id(request: Request) -> AsyncIterator[Any]:
        yield ToolCallDelta(0, name="echo", arguments_fragment='{"text": "x"}')
        yield ToolCallDelta(1, name="echo", arguments_fragment='{"text": "y"}')

    state = await Step(Function(no_id), tools=[echo]).turn(START)
    first, second = state[-2].tool_calls
    assert first.id and second.id and first.id != second.id
    assert first.id.startswith("call_")
    assert [(r.call_id, r.content) for r in state[-1].tool_results] == [(first.id, "x"), (second.id, "y")]


async def test_usage_deltas_become_a_usage_part_and_count_in_state_usage() -> None:
    async def with_usage(request: Request) -> AsyncIterator[Any]:
        yield UsageDelta(Usage(input_tokens=10))
        yield TextDelta("ok")
        yield UsageDelta(Usage(output_tokens=3, cache_read_tokens=2))

    before = START.append(Role.ASSISTANT, Text("earlier"), Usage(1, 1))
    state = await Step(Function(with_usage)).turn(before.append(Role.USER, Text("again")))
    assert state.last is not None
    assert state.last.parts == (Text("ok"), Usage(10, 3, 2, 0))
    assert state.last.usage == Usage(10, 3, 2, 0)
    assert state.usage == Usage(11, 4, 2, 0)


async def test_finish_reason_and_model_land_in_turn_meta() -> None:
    async def cut_off(request: Request) -> AsyncIterator[Any]:
        yield TextDelta("partial")
        yield Finish("stop")
        yield Finish("length")  # the last one wins

    state = await Step(Function(cut_off), options=Options(model="m-1")).turn(START)
    assert state.last is not None
    assert state.last.meta == {"finish_reason": "length", "model": "m-1"}


async def test_assistant_turns_that_agree_share_one_read_only_meta() -> None:
    step = Step(Scripted(["one", "two", "three"]))
    first = await step.turn(START)
    second = await step.turn(first.append(Role.USER, Text("more")))
    other = await Step(Scripted(["x"]), options=Options(model="m-2")).turn(START)
    assert first.last is not None and second.last is not None and other.last is not None
    assert first.last.meta is second.last.meta and first.last.meta == {"finish_reason": "stop"}
    assert other.last.meta == {"finish_reason": "stop", "model": "m-2"}
    with pytest.raises(TypeError):
        first.last.meta["finish_reason"] = "changed"  # type: ignore[index]


async def test_no_finish_and_no_model_leave_meta_empty() -> None:
    async def bare(request: Request) -> AsyncIterator[Any]:
        yield TextDelta("x")

    state = await Step(Function(bare)).turn(START)
    assert state.last is not None and state.last.meta == {}


async def test_options_for_one_turn_override_the_step_defaults_for_that_turn_only() -> None:
    provider = Scripted(["one", "two"])
    defaults = Options(model="base", temperature=0.1, max_tokens=50)
    step = Step(provider, options=defaults)
    state = await step.turn(START, Options(temperature=0.7, tool_choice="none"))
    await step.turn(state.append(Role.USER, Text("more")))
    first, second = provider.requests
    assert first.options == Options(model="base", temperature=0.7, max_tokens=50, tool_choice="none")
    assert second.options == defaults
    assert step.options == defaults


async def test_request_carries_the_tool_specs() -> None:
    provider = Scripted(["ok"])
    await Step(provider, tools=[echo]).turn(START)
    (request,) = provider.requests
    assert request.tools == (echo.spec,)
    assert request.turns == START.turns


async def test_transforms_change_only_the_models_view() -> None:
    def last_two(state: State) -> State:
        return State(state.turns[-2:], state.meta)

    def tag(state: State) -> State:
        return state.append(Role.SYSTEM, Text("view only"))

    provider = Scripted(["answer"])
    step = Step(provider, transforms=[last_two, tag])
    history = (
        State()
        .append(Role.USER, Text("a"))
        .append(Role.ASSISTANT, Text("b"))
        .append(Role.USER, Text("c"))
    )
    state = await step.turn(history)
    assert [t.text for t in provider.requests[0].turns] == ["b", "c", "view only"]
    assert [t.text for t in state] == ["a", "b", "c", "answer"]
    assert (await step.view(history)).turns == provider.requests[0].turns


async def test_a_provider_streaming_a_non_delta_raises_stream_error() -> None:
    async def wrong(request: Request) -> AsyncIterator[Any]:
        yield TextDelta("fine")
        yield Text("a part, not a delta")

    step = Step(Function(wrong))
    with step.events.subscribe() as sub:
        with pytest.raises(StreamError, match="not a Delta"):
            await step.turn(START)
        failed = [e for e in sub.drain() if isinstance(e, TurnFailed)]
    assert len(failed) == 1 and isinstance(failed[0].error, StreamError)


async def test_a_provider_error_propagates_and_is_published() -> None:
    step = Step(Scripted([ProviderError("overloaded", status=529, retryable=True)]))
    with step.events.subscribe() as sub:
        with pytest.raises(ProviderError, match="overloaded") as caught:
            await step.turn(START)
        events = sub.drain()
    assert caught.value.status == 529
    assert [type(e).__name__ for e in events] == ["TurnStarted", "TurnFailed"]
    assert events[1].error is caught.value


async def test_step_is_a_turn_executor_with_read_only_settings() -> None:
    provider = Scripted([])
    bus = EventBus()
    step = Step(provider, tools=[echo], events=bus)
    assert isinstance(step, TurnExecutor)
    assert step.provider is provider and step.tools == (echo,) and step.events is bus
    assert step.options == Options()


class Nameless:
    spec = "not a ToolSpec"

    async def call(self, arguments: Any) -> str:
        return ""


@tool(name="echo")
def other_echo(text: str) -> str:
    return text


BAD_STEPS: dict[str, tuple[dict[str, Any], str]] = {
    "provider without stream": ({"provider": object()}, "needs a provider with a stream"),
    "duplicate tool names": ({"tools": [echo, other_echo]}, "two tools are named 'echo'"),
    "plain function as a tool": ({"tools": [lambda: None]}, "is not a Tool"),
    "spec of the wrong type": ({"tools": [Nameless()]}, "is not a Tool"),
    "options of the wrong type": ({"options": {"model": "m"}}, "options must be loop.Options"),
    "non-callable transform": ({"transforms": ["window"]}, "a transform must be a function"),
    "zero tool timeout": ({"tool_timeout": 0}, "tool_timeout must be a positive number"),
    "text tool timeout": ({"tool_timeout": "5"}, "tool_timeout must be a positive number"),
    "negative max_result_chars": ({"max_result_chars": -1}, "max_result_chars must be a positive integer"),
    "float max_result_chars": ({"max_result_chars": 10.5}, "max_result_chars must be a positive integer"),
}


@pytest.mark.parametrize(("kwargs", "message"), BAD_STEPS.values(), ids=BAD_STEPS.keys())
def test_step_construction_errors(kwargs: dict[str, Any], message: str) -> None:
    provider = kwargs.pop("provider", Scripted([]))
    with pytest.raises(UsageError, match=message):
        Step(provider, **kwargs)


async def test_a_provider_stream_that_cannot_be_closed_is_named() -> None:
    from loop import TextDelta

    class Unclosable:
        def __init__(self) -> None:
            self.items = iter([TextDelta("hi")])

        def __aiter__(self) -> "Unclosable":
            return self

        async def __anext__(self) -> TextDelta:
            try:
                return next(self.items)
            except StopIteration:
                raise StopAsyncIteration from None

    class Provider:
        def stream(self, request: object) -> Unclosable:
            return Unclosable()

    with pytest.raises(UsageError, match=r"cannot be closed \(no aclose\(\)\).*loop.DeltaStream"):
        await Step(Provider()).turn(State().append(Role.USER, Text("hi")))


async def test_a_stream_that_is_not_an_async_generator_is_closed_once_it_ends() -> None:
    class Stream:
        closed = 0

        def __init__(self) -> None:
            self.items = iter([TextDelta("hi"), Finish("stop")])

        def __aiter__(self) -> "Stream":
            return self

        async def __anext__(self) -> Any:
            try:
                return next(self.items)
            except StopIteration:
                raise StopAsyncIteration from None

        async def aclose(self) -> None:
            Stream.closed += 1

    class Provider:
        def stream(self, request: object) -> Stream:
            return Stream()

    state = await Step(Provider()).turn(START)
    assert state.answer == "hi" and Stream.closed == 1


async def test_a_subscriber_that_joins_mid_stream_gets_the_deltas_after_it_joined() -> None:
    bus = EventBus()
    joined: list[Any] = []

    async def stream(request: Request) -> AsyncIterator[Any]:
        yield TextDelta("before ")
        joined.append(bus.subscribe())
        yield TextDelta("after")
        yield Finish("stop")

    state = await Step(Function(stream), events=bus).turn(START)
    assert state.answer == "before after"
    got = joined[0].drain()
    assert got[:2] == [TextDelta("after"), Finish("stop")]
    assert [type(e).__name__ for e in got[2:]] == ["TurnCompleted"]


async def test_the_turns_a_step_builds_are_the_turns_the_constructor_makes() -> None:
    reply = ["I'll look.", ToolCall("c1", "echo", '{"text": "x"}'), Usage(5, 2)]
    state = await Step(Scripted([reply, "done"]), tools=[echo]).turn(START)
    assistant, results = state[1], state[2]
    assert assistant == Turn(Role.ASSISTANT, (Text("I'll look."), ToolCall("c1", "echo", '{"text": "x"}'), Usage(5, 2)))
    assert results == Turn(Role.TOOL, (ToolResult("c1", "echo", "x"),))
    assert dict(assistant.meta) == {"finish_reason": "tool_calls"} and results.meta == {}
    assert hash(assistant) == hash(Turn(Role.ASSISTANT, assistant.parts)) and assistant.name is None
    for turn in (assistant, results):
        assert type(turn.parts) is tuple and turn.role in Role
        with pytest.raises(TypeError):
            turn.meta["kind"] = "x"  # type: ignore[index]
    assert state.usage == Usage(5, 2)
