"""``Anthropic`` against recorded Messages API streams served on 127.0.0.1: the exact deltas of each stream, the
assistant turn a real ``Step`` builds from them, signatures that round-trip, and a whole ReAct run."""

from typing import Any

import httpx
import pytest

from cognitive import ReAct
from loop import (
    Finish,
    Options,
    Reasoning,
    ReasoningDelta,
    Request,
    Role,
    Step,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    Turn,
    Usage,
    UsageDelta,
)
from provider.testing import check_provider
from tests.provider.wire.anthropic_setup import (
    ASK,
    MODEL,
    REQUEST,
    START,
    anthropic,
    collect,
    get_time,
    get_weather,
    stream,
)
from tests.provider.wire.server import WireServer

HELLO = "Hello! ¿Qué tal? ☀"
TEXT_DELTAS = [TextDelta("Hello"), TextDelta("! ¿Qué tal? ☀"), UsageDelta(Usage(25, 15), MODEL), Finish("stop")]

SF_CALL = ToolCall("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather",
                   '{"location": "San Francisco, CA", "unit": "fahrenheit"}')
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds9/2wX8="
THOUGHT = "The user wants the weather in Paris. I should call get_weather."
PARIS_CALL = ToolCall("toolu_01CqJ7sTqXWyDUPt3sNzNcvz", "get_weather", '{"location": "Paris, France"}')
WEATHER_CALL = ToolCall("toolu_01A09q90qw90lq917835lq9", "get_weather", '{"location": "Paris"}')
TIME_CALL = ToolCall("toolu_01B19r81rx81mr826724mr8", "get_time", '{"timezone": "Europe/Paris"}')
VERDICT = {"type": "object", "properties": {"verdict": {"type": "string"}, "score": {"type": "number"}},
           "required": ["verdict", "score"]}


def assistant(*parts: Any) -> Turn:
    return Turn(Role.ASSISTANT, parts)


def results(*items: ToolResult) -> Turn:
    return Turn(Role.TOOL, items)


# -- each recorded stream: its exact deltas, and the turn a Step builds -------------------------------------


async def test_a_text_stream_gives_text_then_usage_then_stop(wire: WireServer) -> None:
    wire.reply(stream("text"))
    async with anthropic(wire) as provider:
        assert await collect(provider) == TEXT_DELTAS
        wire.reply(stream("text"))
        state = await Step(provider).turn(START)
    assert state.turns[1:] == (assistant(Text(HELLO), Usage(25, 15)),)
    assert state.last is not None and state.last.meta["finish_reason"] == "stop"
    assert state.answer == HELLO


async def test_a_stream_split_mid_line_and_mid_character_gives_the_same_deltas(wire: WireServer) -> None:
    data = stream("text")
    wire.reply([data[i:i + 7] for i in range(0, len(data), 7)])  # splits "☀" (3 bytes) and every line
    async with anthropic(wire) as provider:
        assert await collect(provider) == TEXT_DELTAS


async def test_a_tool_use_stream_gives_the_call_in_fragments_and_counts_cached_input(wire: WireServer) -> None:
    wire.reply(stream("tool_use"))
    async with anthropic(wire) as provider:
        deltas = await collect(provider)
    fragments = ['{"location":', ' "San', " Francisc", "o,", ' CA"', ", ", '"unit": "fah', 'renheit"}']
    assert deltas == [
        TextDelta("Okay"),
        TextDelta(", let's check the weather for San Francisco, CA:"),
        ToolCallDelta(1, SF_CALL.id, "get_weather", ""),
        *(ToolCallDelta(1, arguments_fragment=f) for f in fragments),
        # 472 fresh + 2000 read from the cache + 100 written to it
        UsageDelta(Usage(2572, 89, cache_read_tokens=2000, cache_write_tokens=100), MODEL),
        Finish("tool_calls"),
    ]


async def test_a_step_runs_the_streamed_tool_call(wire: WireServer) -> None:
    wire.reply(stream("tool_use"))
    async with anthropic(wire) as provider:
        state = await Step(provider, tools=[get_weather]).turn(START)
    assert state.turns[1:] == (
        assistant(Text("Okay, let's check the weather for San Francisco, CA:"), SF_CALL,
                  Usage(2572, 89, 2000, 100)),
        results(ToolResult(SF_CALL.id, "get_weather", "18 degrees fahrenheit, sunny in San Francisco, CA")),
    )
    assert state.turns[1].meta["finish_reason"] == "tool_calls"


async def test_thinking_comes_first_with_its_signature_then_text_then_the_call(wire: WireServer) -> None:
    wire.reply(stream("thinking_tool_use"))
    async with anthropic(wire, thinking_budget=2048) as provider:
        assert await collect(provider) == [
            ReasoningDelta("The user wants the weather in Paris."),
            ReasoningDelta(" I should call get_weather."),
            ReasoningDelta("", SIGNATURE),
            TextDelta("Let me look that up."),
            ToolCallDelta(2, PARIS_CALL.id, "get_weather", ""),
            ToolCallDelta(2, arguments_fragment='{"location": "Par'),
            ToolCallDelta(2, arguments_fragment='is, France"}'),
            UsageDelta(Usage(512, 112), MODEL),
            Finish("tool_calls"),
        ]
        wire.reply(stream("thinking_tool_use"))
        state = await Step(provider, tools=[get_weather]).turn(START)
    assert state.turns[1] == assistant(Reasoning(THOUGHT, SIGNATURE), Text("Let me look that up."), PARIS_CALL,
                                       Usage(512, 112))


async def test_two_parallel_calls_each_keep_their_own_id_name_and_arguments(wire: WireServer) -> None:
    wire.reply(stream("parallel_tools"))
    async with anthropic(wire) as provider:
        assert await collect(provider) == [
            TextDelta("I'll check both at once."),
            ToolCallDelta(1, WEATHER_CALL.id, "get_weather", ""),
            ToolCallDelta(1, arguments_fragment='{"location": "Pa'),
            ToolCallDelta(1, arguments_fragment='ris"}'),
            ToolCallDelta(2, TIME_CALL.id, "get_time", ""),
            ToolCallDelta(2, arguments_fragment='{"timezone": '),
            ToolCallDelta(2, arguments_fragment='"Europe/Paris"}'),
            UsageDelta(Usage(630, 141), MODEL),
            Finish("tool_calls"),
        ]
        wire.reply(stream("parallel_tools"))
        state = await Step(provider, tools=[get_weather, get_time]).turn(START)
    assert state.turns[1:] == (
        assistant(Text("I'll check both at once."), WEATHER_CALL, TIME_CALL, Usage(630, 141)),
        results(ToolResult(WEATHER_CALL.id, "get_weather", "18 degrees celsius, sunny in Paris"),
                ToolResult(TIME_CALL.id, "get_time", "14:05 in Europe/Paris")),
    )


async def test_structured_output_is_a_forced_tool_whose_input_arrives_as_text(wire: WireServer) -> None:
    wire.reply(stream("structured_output"))
    options = Options(output_schema=VERDICT)
    async with anthropic(wire) as provider:
        deltas = await collect(provider, Request(REQUEST.turns, (get_weather.spec,), options))
        wire.reply(stream("structured_output"))
        state = await Step(provider, tools=[get_weather]).turn(START, options)
    assert deltas == [TextDelta('{"verdict": "pa'), TextDelta('ss", "score": 0.9'), TextDelta("}"),
                      UsageDelta(Usage(388, 31), MODEL), Finish("stop")]
    body = wire.requests[0].json()
    assert body["tools"] == [{"name": "structured_output", "description": "Give the final answer in the required "
                              "structure.", "input_schema": VERDICT}]
    assert body["tool_choice"] == {"type": "tool", "name": "structured_output"}
    # No tool call reaches the step, so no tool turn: the structure is the written answer.
    assert state.turns[1:] == (assistant(Text('{"verdict": "pass", "score": 0.9}'), Usage(388, 31)),)
    assert state.turns[1].meta["finish_reason"] == "stop"


@pytest.mark.parametrize(("stop_reason", "finish"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"), ("tool_use", "tool_calls"),
    ("refusal", "content_filter"), ("a_reason_from_the_future", "a_reason_from_the_future"),
])
async def test_stop_reasons_map_to_finish_reasons(wire: WireServer, stop_reason: str, finish: str) -> None:
    wire.reply(stream("text").replace(b'"stop_reason": "end_turn"', f'"stop_reason": "{stop_reason}"'.encode()))
    async with anthropic(wire) as provider:
        assert (await collect(provider))[-1] == Finish(finish)


async def test_input_usage_repeated_in_message_delta_replaces_the_first_count(wire: WireServer) -> None:
    # Newer API versions repeat the input counts in message_delta; its counts are cumulative, not increments.
    final = b'"usage": {"input_tokens": 30, "cache_read_input_tokens": 10, "output_tokens": 15}'
    wire.reply(stream("text").replace(b'"usage": {"output_tokens": 15}', final))
    async with anthropic(wire) as provider:
        assert (await collect(provider))[-2] == UsageDelta(Usage(40, 15, cache_read_tokens=10), MODEL)


# -- what goes back on the next request -----------------------------------------------------------------------


async def test_the_thinking_signature_round_trips_on_the_next_request(wire: WireServer) -> None:
    wire.reply(stream("thinking_tool_use"))
    wire.reply(stream("text"))
    async with anthropic(wire, thinking_budget=2048) as provider:
        step = Step(provider, tools=[get_weather])
        state = await step.turn(START)
        state = await step.turn(state)
    assert state.answer == HELLO
    first, second = (r.json() for r in wire.requests)
    assert first["thinking"] == second["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert second["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": ASK}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": THOUGHT, "signature": SIGNATURE},
            {"type": "text", "text": "Let me look that up."},
            {"type": "tool_use", "id": PARIS_CALL.id, "name": "get_weather", "input": {"location": "Paris, France"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": PARIS_CALL.id,
             "content": "18 degrees celsius, sunny in Paris, France"},
        ]},
    ]


async def test_a_redacted_thinking_block_goes_back_unchanged(wire: WireServer) -> None:
    # The API refuses a tool loop whose assistant message lost its redacted_thinking block.
    secret = ("EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB9URj2pLmN3kF8"
              "/dW5hR7xJ0aP1oE3Iu")
    signature = "ErUBCkYIARgCIkAsW3lTr0mLZ5gQmXoCuJc8W7tN2hYqV6kDx4sEfPj1bRgHn9aQzL0cWvT3yMuK8oIe5rA2lSdNf7Jh="
    wire.reply(stream("redacted_thinking"))
    wire.reply(stream("text"))
    async with anthropic(wire, thinking_budget=2048) as provider:
        step = Step(provider, tools=[get_weather])
        state = await step.turn(START)
        await step.turn(state)
    call = ToolCall("toolu_01Rq8Vn3kB6xTz2Hd9Wf5YcJ", "get_weather", '{"location": "Oslo"}')
    assert state.turns[1] == assistant(Reasoning("I need the weather first.", signature),
                                       Reasoning("", "redacted_thinking:" + secret), call, Usage(540, 77))
    second = wire.requests[1].json()
    assert second["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "I need the weather first.", "signature": signature},
        {"type": "redacted_thinking", "data": secret},
        {"type": "tool_use", "id": call.id, "name": "get_weather", "input": {"location": "Oslo"}},
    ]
    assert second["thinking"]["type"] == "enabled"


# -- a whole agent run --------------------------------------------------------------------------------------


async def test_a_react_run_with_two_tools_sends_every_result_back(wire: WireServer) -> None:
    wire.reply(stream("tool_use"))
    wire.reply(stream("parallel_tools"))
    wire.reply(stream("text"))
    async with anthropic(wire) as provider:
        state = await ReAct(Step(provider, tools=[get_weather, get_time])).run(START)
    assert state.answer == HELLO
    assert not state.degraded
    assert len(wire.requests) == 3
    assert state.usage == Usage(2572 + 630 + 25, 89 + 141 + 15, 2000, 100)
    second, third = wire.requests[1].json(), wire.requests[2].json()
    for body in (second, third):
        assert [t["name"] for t in body["tools"]] == ["get_weather", "get_time"]
        assert "tool_choice" not in body
    assert second["messages"][-1] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": SF_CALL.id,
         "content": "18 degrees fahrenheit, sunny in San Francisco, CA"},
    ]}
    assert third["messages"][:3] == second["messages"]
    assert third["messages"][3:] == [
        {"role": "assistant", "content": [
            {"type": "text", "text": "I'll check both at once."},
            {"type": "tool_use", "id": WEATHER_CALL.id, "name": "get_weather", "input": {"location": "Paris"}},
            {"type": "tool_use", "id": TIME_CALL.id, "name": "get_time", "input": {"timezone": "Europe/Paris"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": WEATHER_CALL.id, "content": "18 degrees celsius, sunny in Paris"},
            {"type": "tool_result", "tool_use_id": TIME_CALL.id, "content": "14:05 in Europe/Paris"},
        ]},
    ]


async def test_the_provider_passes_the_shared_conformance_check(wire: WireServer) -> None:
    for _ in range(20):  # the check sends at most 16 requests
        wire.reply(stream("text"))
    async with httpx.AsyncClient() as client:
        await check_provider(lambda: anthropic(wire, client=client))
    assert len(wire.requests) >= 15
