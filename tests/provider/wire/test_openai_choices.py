"""``OpenAICompatible`` asked for several choices (``Options.n``) and the sampling options: the body it sends,
the recorded stream of three interleaved choices (one calling a tool) read choice by choice, and speaker names.
"""

from __future__ import annotations

from typing import Any

import pytest

from loop import (
    Finish,
    Options,
    Request,
    Role,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Turn,
    Usage,
    UsageDelta,
)
from loop._accumulate import Accumulator
from loop.errors import StreamError
from provider import OpenAICompatible
from provider._openai_messages import wire_name
from tests.provider.wire.openai_client import ASK, MODEL, TOOLS, ask, chunk, collect, connect, sse
from tests.provider.wire.server import WireServer, fixture

ANSWERED = "gpt-4o-mini-2024-07-18"
CALL = "call_Wq8dZr3MxP0bN5tYk2LhV7cE"
THREE = Request(ask().turns, tuple(t.spec for t in TOOLS), Options(n=3, temperature=0.9))


# -- the body -------------------------------------------------------------------------------------------------


async def test_sampling_options_are_sent_as_the_api_names_them(wire: WireServer) -> None:
    wire.reply(fixture("openai/text.sse"))
    options = Options(n=3, seed=42, top_p=0.9, reasoning_effort="low", temperature=0.7)
    async with connect(wire) as provider:
        await collect(provider, Request(ASK.turns, (), options))
    body = wire.requests[0].json()
    assert {k: body[k] for k in ("n", "seed", "top_p", "reasoning_effort", "temperature")} == {
        "n": 3, "seed": 42, "top_p": 0.9, "reasoning_effort": "low", "temperature": 0.7}


@pytest.mark.parametrize("options", [Options(), Options(n=1)])
async def test_one_choice_sends_no_n(wire: WireServer, options: Options) -> None:
    wire.reply(fixture("openai/text.sse"))
    async with connect(wire) as provider:
        await collect(provider, Request(ASK.turns, (), options))
    assert "n" not in wire.requests[0].json() and "seed" not in wire.requests[0].json()


async def test_extra_fields_are_merged_into_the_body_last(wire: WireServer) -> None:
    wire.reply(fixture("openai/text.sse"))
    extra = {"logit_bias": {"50256": -100}, "temperature": 0.1, "stream_options": {"include_usage": False}}
    async with connect(wire) as provider:
        await collect(provider, Request(ASK.turns, (), Options(temperature=0.9, extra=extra)))
    body = wire.requests[0].json()
    assert body["logit_bias"] == {"50256": -100}
    assert body["temperature"] == 0.1 and body["stream_options"] == {"include_usage": False}  # extra wins


def test_the_provider_says_it_can_return_several_choices() -> None:
    provider = OpenAICompatible(MODEL, base_url="http://127.0.0.1:9/v1", api_key="k")
    assert provider.info.choices is True


# -- the recorded stream of three choices ----------------------------------------------------------------------

EXPECTED = [
    ToolCallDelta(0, CALL, "get_weather", "", 1),
    TextDelta("Paris", 0),
    TextDelta("It", 2),
    ToolCallDelta(0, None, None, '{"', 1),
    TextDelta(" is", 0),
    ToolCallDelta(0, None, None, "location", 1),
    TextDelta(" is", 2),
    TextDelta(" 18.5 °C", 0),
    TextDelta(" cloudy", 2),
    ToolCallDelta(0, None, None, '":"', 1),
    TextDelta(".", 0),
    TextDelta(" in", 2),
    ToolCallDelta(0, None, None, "Paris, France", 1),
    ToolCallDelta(0, None, None, '"}', 1),
    # One usage for the whole response (the prompt is paid once), then one Finish per choice, in choice order.
    UsageDelta(Usage(82, 31), ANSWERED),
    Finish("stop", 0),
    Finish("tool_calls", 1),
    Finish("length", 2),
]


async def test_every_choice_of_the_stream_arrives_tagged_with_its_index(wire: WireServer) -> None:
    wire.reply(fixture("openai/choices.sse"))
    async with connect(wire) as provider:
        assert await collect(provider, THREE) == EXPECTED
    assert wire.requests[0].json()["n"] == 3


async def test_each_choice_builds_its_own_turn(wire: WireServer) -> None:
    wire.reply(fixture("openai/choices.sse"))
    async with connect(wire) as provider:
        deltas = await collect(provider, THREE)
    turns: dict[int, Accumulator] = {}
    for delta in deltas:
        turns.setdefault(delta.choice, Accumulator()).add(delta)
    built = {choice: acc.turn() for choice, acc in sorted(turns.items())}
    assert [t.parts for t in built.values()] == [
        (Text("Paris is 18.5 °C."), Usage(82, 31)),
        (ToolCall(CALL, "get_weather", '{"location":"Paris, France"}'),),
        (Text("It is cloudy in"),),
    ]
    assert [t.meta["finish_reason"] for t in built.values()] == ["stop", "tool_calls", "length"]


async def test_tool_calls_are_numbered_per_choice(wire: WireServer) -> None:
    # Two choices both call a tool on wire index 0 with their own ids: shared bookkeeping would take the second
    # id for a second call sent on a used index and move it to slot 1.
    def call(choice: int, call_id: str, args: str) -> dict[str, Any]:
        first = {"index": 0, "id": call_id, "type": "function", "function": {"name": "get_time", "arguments": args}}
        return {**chunk(), "choices": [{"index": choice, "delta": {"tool_calls": [first]}, "finish_reason": None}]}

    ends = {**chunk(), "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"},
                                   {"index": 1, "delta": {}, "finish_reason": "tool_calls"}]}
    wire.reply(sse(call(0, "call_a", '{"timezone": "UTC"}'), call(1, "call_b", '{"timezone": "Asia/Tokyo"}'), ends))
    async with connect(wire) as provider:
        deltas = await collect(provider, THREE)
    assert deltas == [ToolCallDelta(0, "call_a", "get_time", '{"timezone": "UTC"}', 0),
                      ToolCallDelta(0, "call_b", "get_time", '{"timezone": "Asia/Tokyo"}', 1),
                      Finish("tool_calls", 0), Finish("tool_calls", 1)]


async def test_one_chunk_may_carry_several_choices(wire: WireServer) -> None:
    both = {**chunk(), "choices": [{"index": 1, "delta": {"content": "b"}, "finish_reason": "stop"},
                                   {"index": 0, "delta": {"content": "a"}, "finish_reason": "length"}]}
    wire.reply(sse(both))
    async with connect(wire) as provider:
        assert await collect(provider, THREE) == [TextDelta("b", 1), TextDelta("a", 0),
                                                  Finish("length", 0), Finish("stop", 1)]


async def test_choice_0_always_finishes_even_when_only_others_were_seen(wire: WireServer) -> None:
    only = {**chunk(), "choices": [{"index": 2, "delta": {"content": "c"}, "finish_reason": "stop"}]}
    wire.reply(sse(only))
    async with connect(wire) as provider:
        assert await collect(provider, THREE) == [TextDelta("c", 2), Finish("stop", 0), Finish("stop", 2)]


async def test_a_refusal_in_one_choice_filters_only_that_choice(wire: WireServer) -> None:
    refused = {**chunk(), "choices": [{"index": 1, "delta": {"refusal": "No."}, "finish_reason": "stop"}]}
    wire.reply(sse(chunk({"content": "Yes."}, "stop"), refused))
    async with connect(wire) as provider:
        deltas = await collect(provider, THREE)
    assert deltas[-2:] == [Finish("stop", 0), Finish("content_filter", 1)]


@pytest.mark.parametrize("index", ["1", -1, 1.5, True])
async def test_a_choice_index_that_is_not_a_whole_number_is_a_stream_error(wire: WireServer, index: Any) -> None:
    wire.reply(sse({**chunk(), "choices": [{"index": index, "delta": {"content": "x"}}]}))
    async with connect(wire) as provider:
        with pytest.raises(StreamError, match="choice index"):
            await collect(provider, THREE)


# -- speaker names ----------------------------------------------------------------------------------------------


async def test_a_turns_name_is_the_messages_name(wire: WireServer) -> None:
    wire.reply(fixture("openai/text.sse"))
    turns = (Turn(Role.SYSTEM, (Text("Referee."),), name="rules"),
             Turn(Role.USER, (Text("I say yes."),), name="alice"),
             Turn(Role.ASSISTANT, (Text("Noted."),), name="bob"),
             Turn(Role.USER, (Text("And you?"),)))
    async with connect(wire) as provider:
        await collect(provider, Request(turns))
    assert wire.requests[0].json()["messages"] == [
        {"role": "system", "content": "Referee.", "name": "rules"},
        {"role": "user", "content": "I say yes.", "name": "alice"},
        {"role": "assistant", "content": "Noted.", "name": "bob"},
        {"role": "user", "content": "And you?"},
    ]


@pytest.mark.parametrize(("name", "sent"), [
    ("alice", "alice"),
    ("Agent_7-b", "Agent_7-b"),
    ("Dr. Émile Zola", "Dr___mile_Zola"),
    ("critic/1", "critic_1"),
    ("x" * 80, "x" * 64),
    ("日本", "__"),
])
def test_names_the_api_refuses_are_made_valid(name: str, sent: str) -> None:
    assert wire_name(name) == sent
