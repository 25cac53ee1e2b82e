"""``Function``: a Python function as a provider, sync, async, or streaming its own deltas."""

import functools
import itertools
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from loop import (
    Delta,
    Finish,
    Options,
    Reasoning,
    Request,
    Role,
    State,
    Step,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
    UsageDelta,
    UsageError,
    UseTool,
    tool,
)
from loop.errors import ProviderError
from provider import Function, Scripted, tool_call
from provider._replies import check_reply, reply_deltas
from tests.provider.streams import REQUEST, collect


async def test_a_sync_function_replies() -> None:
    p = Function(lambda request: "Hello there", chunk_size=5)
    assert await collect(p) == [TextDelta("Hello"), TextDelta(" ther"), TextDelta("e"), Finish("stop")]


async def test_an_async_function_replies() -> None:
    async def reply(request: Request) -> list[Any]:
        await anyio.lowlevel.checkpoint()
        return ["Calling.", tool_call("lookup", {"q": "x"}, id="c7"), Usage(1, 2)]

    deltas = await collect(Function(reply, chunk_size=100))
    assert deltas[0] == TextDelta("Calling.")
    assert [d for d in deltas if type(d) is ToolCallDelta][0].id == "c7"
    assert deltas[-2:] == [UsageDelta(Usage(1, 2)), Finish("tool_calls")]


async def test_an_async_generator_streams_its_own_deltas_untouched() -> None:
    async def stream(request: Request) -> AsyncIterator[Delta]:
        yield TextDelta("a")
        yield ToolCallDelta(3, "id", "f", '{"x"')
        yield ToolCallDelta(3, arguments_fragment=": 1}")
        yield Finish("length")

    deltas = await collect(Function(stream))
    assert deltas == [TextDelta("a"), ToolCallDelta(3, "id", "f", '{"x"'), ToolCallDelta(3, None, None, ": 1}"),
                      Finish("length")]


async def test_a_function_returning_another_providers_stream_is_streamed_from() -> None:
    inner = Scripted(["delegated"])
    assert await collect(Function(lambda request: inner.stream(request))) == [TextDelta("delegated"),
                                                                            Finish("stop")]
    assert inner.requests == [REQUEST]


async def test_a_partial_of_an_async_generator_still_streams() -> None:
    async def stream(request: Request, word: str) -> AsyncIterator[Delta]:
        yield TextDelta(word)

    assert await collect(Function(functools.partial(stream, word="bound"))) == [TextDelta("bound")]


async def test_an_invalid_reply_is_a_usage_error_naming_the_function() -> None:
    def broken(request: Request) -> Any:
        return 42

    with pytest.raises(UsageError, match="reply of broken: 42 is not a reply"):
        await collect(Function(broken))


async def test_an_exception_the_function_raises_propagates() -> None:
    def fails(request: Request) -> str:
        raise RuntimeError("model on fire")

    with pytest.raises(RuntimeError, match="model on fire"):
        await collect(Function(fails))


async def test_an_exception_instance_returned_is_raised() -> None:
    error = ProviderError("rate limited", status=429, retryable=True)
    with pytest.raises(ProviderError) as caught:
        await collect(Function(lambda request: error))
    assert caught.value is error


async def test_an_async_generator_that_raises_mid_stream_propagates() -> None:
    async def stream(request: Request) -> AsyncIterator[Delta]:
        yield TextDelta("partial")
        raise ProviderError("connection reset")

    seen = []
    with pytest.raises(ProviderError, match="connection reset"):
        async for delta in Function(stream).stream(REQUEST):
            seen.append(delta)
    assert seen == [TextDelta("partial")]


@tool
def clock() -> str:
    """The current time."""
    return "noon"


async def test_the_function_sees_the_request_turns_tools_and_options() -> None:
    seen: list[Request] = []

    def reply(request: Request) -> str:
        seen.append(request)
        return f"you said {request.turns[-1].text!r}"

    step = Step(Function(reply), tools=[clock], options=Options(model="m-1", temperature=0.2))
    state = await step.turn(State().append(Role.USER, Text("hello")), Options(tool_choice=UseTool("clock")))
    assert state.answer == "you said 'hello'"
    (request,) = seen
    assert [t.text for t in request.turns] == ["hello"]
    assert [t.name for t in request.tools] == ["clock"]
    assert request.options == Options(model="m-1", temperature=0.2, tool_choice=UseTool("clock"))


async def test_tool_calls_without_an_id_get_unique_ids_across_responses() -> None:
    p = Function(lambda request: [tool_call("a"), tool_call("b")])
    ids = [d.id for _ in range(2) for d in await collect(p) if type(d) is ToolCallDelta and d.id]
    assert len(ids) == 4 and len(set(ids)) == 4


@pytest.mark.parametrize("reply", [
    "", "short", "a reply longer than one chunk of text", tool_call("lookup", {"q": "x"}, id="c1"),
    tool_call("lookup", {"q": "x"}), tool_call("ping", "", id="c2"), ToolCall("c3", "f", "{"), Text("a part"),
    Reasoning("thinking", "sig"), Usage(3, 4), ["text", tool_call("a")], (tool_call("a"), tool_call("b")),
])
async def test_a_reply_streams_the_deltas_reply_deltas_makes_of_it(reply: Any) -> None:
    parts = check_reply(reply, "reply")
    assert not isinstance(parts, BaseException)
    for fn in (lambda request: reply, functools.partial(_later, reply)):  # taken at once, and awaited
        assert await collect(Function(fn, chunk_size=8)) == reply_deltas(parts, itertools.count(), 8)


async def _later(reply: Any, request: Request) -> Any:
    return reply


async def test_a_sync_function_gives_the_event_loop_a_turn_per_reply() -> None:
    ran: list[str] = []

    async def beside() -> None:
        ran.append("the other task")

    async with anyio.create_task_group() as group:
        group.start_soon(beside)
        assert await collect(Function(lambda request: tool_call("f"))) != []
        assert ran == ["the other task"], "the reply was streamed without the event loop running anything else"


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])  # each has its own way to yield
async def test_a_cancelled_consumer_of_a_sync_function_is_interrupted(anyio_backend: str) -> None:
    with anyio.CancelScope() as scope:
        scope.cancel()
        await collect(Function(lambda request: "hi"))
    assert scope.cancelled_caught, "the stream never gave the cancellation a chance to arrive"


@pytest.mark.parametrize("fn", [None, "reply", 3])
def test_fn_must_be_callable(fn: Any) -> None:
    with pytest.raises(UsageError, match="callable"):
        Function(fn)


@pytest.mark.parametrize("chunk_size", [0, -1, 2.0, False])
def test_chunk_size_must_be_a_positive_integer(chunk_size: Any) -> None:
    with pytest.raises(UsageError, match="chunk_size"):
        Function(lambda request: "x", chunk_size=chunk_size)


def test_repr_names_the_function() -> None:
    def my_model(request: Request) -> str:
        return "x"

    assert repr(Function(my_model)) == "Function('my_model')"


# -- run paths and several choices ------------------------------------------------------------------------------


async def test_the_function_sees_the_run_path_of_the_request() -> None:
    p = Function(lambda request: "sample" if "sample" in request.path else "main")
    assert await collect(p, Request(REQUEST.turns, path="SelfConsistency/sample 3/ReAct")) == [
        TextDelta("sample"), Finish("stop")]
    assert await collect(p) == [TextDelta("main"), Finish("stop")]


async def test_several_choices_call_the_function_once_per_choice_with_the_same_request() -> None:
    seen: list[Request] = []

    def reply(request: Request) -> Any:
        seen.append(request)
        if len(seen) == 2:
            return ["answer 2", tool_call("clock", id="c2")]
        return f"answer {len(seen)}"

    p = Function(reply, chunk_size=4)
    assert p.info.choices is True
    request = Request(REQUEST.turns, options=Options(n=3))
    deltas = await collect(p, request)
    assert seen == [request] * 3
    # Interleaved one delta of each choice at a time, then one Finish per choice in choice order.
    assert deltas == [
        TextDelta("answ", 0), TextDelta("answ", 1), TextDelta("answ", 2),
        TextDelta("er 1", 0), TextDelta("er 2", 1), TextDelta("er 3", 2),
        ToolCallDelta(0, "c2", "clock", "{", 1), ToolCallDelta(0, None, None, "}", 1),
        Finish("stop", 0), Finish("tool_calls", 1), Finish("stop", 2),
    ]


async def test_several_choices_of_an_async_function() -> None:
    count = 0

    async def reply(request: Request) -> str:
        nonlocal count
        count += 1
        await anyio.lowlevel.checkpoint()
        return f"#{count}"

    deltas = await collect(Function(reply), Request(REQUEST.turns, options=Options(n=2)))
    assert deltas == [TextDelta("#1", 0), TextDelta("#2", 1), Finish("stop", 0), Finish("stop", 1)]


async def test_deltas_a_function_streams_itself_are_tagged_with_their_choice() -> None:
    async def stream(request: Request) -> AsyncIterator[Delta]:
        yield TextDelta("a")
        yield UsageDelta(Usage(3, 1), "m-1")
        yield Finish("length")

    deltas = await collect(Function(stream), Request(REQUEST.turns, options=Options(n=2)))
    assert deltas == [TextDelta("a", 0), TextDelta("a", 1), UsageDelta(Usage(3, 1), "m-1", 0),
                      UsageDelta(Usage(3, 1), "m-1", 1), Finish("length", 0), Finish("length", 1)]


async def test_one_choice_asked_is_the_plain_stream() -> None:
    p = Function(lambda request: "x")
    assert await collect(p, Request(REQUEST.turns, options=Options(n=1))) == [TextDelta("x"), Finish("stop")]


async def test_an_exception_in_any_choice_propagates() -> None:
    calls = 0

    def reply(request: Request) -> Any:
        nonlocal calls
        calls += 1
        return ProviderError("second failed", status=500) if calls == 2 else "fine"

    with pytest.raises(ProviderError, match="second failed"):
        await collect(Function(reply), Request(REQUEST.turns, options=Options(n=3)))
