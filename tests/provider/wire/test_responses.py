"""``OpenAIResponses`` against recorded Responses API streams served by a real HTTP server on 127.0.0.1: the exact
deltas of every fixture, the turns a ``Step`` builds from them, the next request's body field for field (tool
calls and reasoning sent back), structured output, and the provider conformance check; on asyncio and trio.
Faults are in ``test_responses_faults.py``, the body built for each option in ``test_responses_request.py``.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from loop import (Finish, Options, Reasoning, ReasoningDelta, Role, State, Step, Text, TextDelta, ToolCall,
                  ToolCallDelta, ToolResult, Usage, UsageDelta)
from provider.testing import check_provider
from tests import both_backends
from tests.provider.wire.openai_client import TOOLS, collect, get_weather
from tests.provider.wire.responses_client import (CLIENT_STREAMS, KEY, MODEL, canonical, connect, events,
                                                  expected_body, sent, text_events)
from tests.provider.wire.server import WireServer, fixture

anyio_backend = both_backends.anyio_backend  # every test here runs on asyncio and on trio
pytestmark = CLIENT_STREAMS

ANSWERED = "gpt-4.1-mini-2025-04-14"  # the model the recorded responses name
REASONER = "o4-mini-2025-04-16"
CALL_W, CALL_T = "call_Wq8nX1pV3rT5yZ7bA9cD2eF4", "call_Hj6kL8mN0pQ2rS4tU6vW8xY0"
CALL_R = "call_Rz4tY6uI8oP0aS2dF4gH6jK8"
TEXT = ["Hello", "!", " How", " can", " I", " help", " you", " today", "?", " ☕", " Café"]
WEATHER_ARGS = ['{"', "location", '":"', "Paris", ",", " France", '"}']
TIME_ARGS = ['{"timezone":', '"Asia/', 'Tokyo"}']
SUMMARY = ["**Checking", " the weather**", "\n\nThe user", " asks about", " Paris", ".", "\n\nI'll", " call",
           " get_weather", "."]  # the second summary part starts after a blank line
RS1, RS2 = "rs_68af0c3e1b3c8192f6a7b8c9d0e1f2a30d2e3f4a5b6c7d8e", "rs_68af0c4b0f708192c9d0e1f2a3b4c5d60d2e3f4a5b6c7d8e"
ENC1 = ("gAAAAABor_8QvXk3bY2mN5pL7qR9sT1uV3wX5yZ7aB9cD1eF3gH5iJ7kL9mN1oP3qR5sT7uV9wX1yZ3aB5cD7eF9gH1iJ3kL5mN7oP9qR1sT3u"
        "V5wX7yZ9aB1cD3eF5gH7iJ9kL1mN3oP5qR7sT9uV1wX3yZ5aB7cD9eF1gH3iJ5kL7mN9oP1qR3sT5uV7wX9yZ1aB3cD5eF7gH9iJ1kL3m=")
ENC2 = "gAAAAABor_8ZcD3eF5gH7iJ9kL1mN3oP5qR7sT9uV1wX3yZ5aB7cD9eF1gH3iJ5kL7mN9oP1qR3sT5uV7wX9yZ1aB3cD5eF7gH9iJ1kL3mN5o=="
SIG1, SIG2 = f"openai-reasoning:{RS1}:{ENC1}", f"openai-reasoning:{RS2}:{ENC2}"
ANSWER = ["It is", " 18.5 °C", " and cloudy", " in Paris."]
JSON_PIECES = ['{"', "city", '":"', "Paris", '","', "temperature", '":', "18", ".5", ',"', "conditions", '":["',
               "cloudy", '","', "windy", '"]}']
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "temperature": {"type": "number"},
                                           "conditions": {"type": "array", "items": {"type": "string"}}},
          "required": ["city", "temperature", "conditions"], "additionalProperties": False}

# fixture -> (the exact deltas, the parts of the assistant turn a Step builds)
EXPECTED: dict[str, tuple[list[Any], tuple[Any, ...]]] = {
    "text": ([*map(TextDelta, TEXT), UsageDelta(Usage(12, 11), ANSWERED), Finish("stop")],
             (Text("".join(TEXT)), Usage(12, 11))),
    "tool_calls": (
        [ToolCallDelta(0, CALL_W, "get_weather", ""), *(ToolCallDelta(0, None, None, a) for a in WEATHER_ARGS),
         ToolCallDelta(1, CALL_T, "get_time", ""), *(ToolCallDelta(1, None, None, a) for a in TIME_ARGS),
         UsageDelta(Usage(141, 52), ANSWERED), Finish("tool_calls")],
        (ToolCall(CALL_W, "get_weather", '{"location":"Paris, France"}'),
         ToolCall(CALL_T, "get_time", '{"timezone":"Asia/Tokyo"}'), Usage(141, 52)),
    ),
    "reasoning_tool_call": (
        [*map(ReasoningDelta, SUMMARY), ReasoningDelta("", SIG1), ToolCallDelta(0, CALL_R, "get_weather", ""),
         ToolCallDelta(0, None, None, '{"location":"Paris, France"}'), UsageDelta(Usage(88, 214), REASONER),
         Finish("tool_calls")],
        (Reasoning("".join(SUMMARY), SIG1), ToolCall(CALL_R, "get_weather", '{"location":"Paris, France"}'),
         Usage(88, 214)),
    ),
    "reasoning_answer": (
        [ReasoningDelta("", SIG2), *map(TextDelta, ANSWER), UsageDelta(Usage(322, 80), REASONER), Finish("stop")],
        (Reasoning("", SIG2), Text("".join(ANSWER)), Usage(322, 80)),
    ),
    "structured_output": ([*map(TextDelta, JSON_PIECES), UsageDelta(Usage(95, 17), ANSWERED), Finish("stop")],
                          (Text("".join(JSON_PIECES)), Usage(95, 17))),
    # input_tokens counts the cached ones too, as Usage.input_tokens does.
    "usage_cached": ([TextDelta("Cached"), TextDelta(" prompt"), TextDelta(" hit."),
                      UsageDelta(Usage(2006, 300, cache_read_tokens=1920), ANSWERED), Finish("stop")],
                     (Text("Cached prompt hit."), Usage(2006, 300, cache_read_tokens=1920))),
    "incomplete": ([*map(TextDelta, ["Once", " upon", " a", " time"]), UsageDelta(Usage(14, 16), ANSWERED),
                    Finish("length")],
                   (Text("Once upon a time"), Usage(14, 16))),
}
FINISH = {"tool_calls": "tool_calls", "reasoning_tool_call": "tool_calls", "incomplete": "length"}


def ask(text: str, system: str | None = None) -> State:
    state = State()
    if system is not None:
        state = state.append(Role.SYSTEM, Text(system))
    return state.append(Role.USER, Text(text))


@pytest.mark.parametrize("name", list(EXPECTED))
async def test_each_fixture_streams_exactly_its_deltas(wire: WireServer, name: str) -> None:
    wire.reply(fixture(f"responses/{name}.sse"))
    async with connect(wire) as provider:
        assert await collect(provider) == EXPECTED[name][0]
    (request,) = wire.requests
    assert (request.method, request.path) == ("POST", "/v1/responses")
    assert request.headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("name", list(EXPECTED))
async def test_a_step_builds_exactly_the_assistant_turn_of_each_fixture(wire: WireServer, name: str) -> None:
    wire.reply(fixture(f"responses/{name}.sse"))
    async with connect(wire) as provider:
        state = await Step(provider, tools=TOOLS).turn(ask("What is the weather in Paris?"))
    assistant = state[1]
    assert assistant.role is Role.ASSISTANT and assistant.parts == EXPECTED[name][1]
    assert assistant.meta["finish_reason"] == FINISH.get(name, "stop")
    assert assistant.meta["model"] == (REASONER if name.startswith("reasoning") else ANSWERED)


async def test_tool_calls_and_their_results_go_back_as_items_paired_by_call_id(wire: WireServer) -> None:
    wire.reply(fixture("responses/tool_calls.sse"))
    wire.reply(fixture("responses/tool_answer.sse"))
    async with connect(wire) as provider:
        step = Step(provider, tools=TOOLS)
        state = await step.turn(ask("Weather in Paris, and the time in Tokyo?", system="Answer briefly."))
        assert state[3].parts == (ToolResult(CALL_W, "get_weather", "18.5 celsius, cloudy in Paris, France"),
                                  ToolResult(CALL_T, "get_time", "09:30 in Asia/Tokyo"))
        state = await step.turn(state)
    assert state.answer == "Paris: 18.5 °C and cloudy; Tokyo: 09:30."
    assert state.usage == Usage(141 + 236, 52 + 17)
    first, second = wire.requests
    assert first.json()["input"] == [{"type": "message", "role": "user",
                                      "content": "Weather in Paris, and the time in Tokyo?"}]
    assert sent(second) == canonical(expected_body("tool_round_trip"))


async def test_reasoning_goes_back_with_its_id_and_encrypted_content(wire: WireServer) -> None:
    wire.reply(fixture("responses/reasoning_tool_call.sse"))
    wire.reply(fixture("responses/reasoning_answer.sse"))
    wire.reply(text_events("Yes."))
    async with connect(wire, model="o4-mini", reasoning_summary="auto") as provider:
        step = Step(provider, tools=[get_weather], options=Options(reasoning_effort="medium"))
        state = await step.turn(ask("Is it cold in Paris?"))
        state = await step.turn(state)
        assert state.answer == "It is 18.5 °C and cloudy in Paris."
        await step.turn(state.append(Role.USER, Text("Should I take a coat?")))
    assert sent(wire.requests[1]) == canonical(expected_body("reasoning_round_trip"))
    # The answer's reasoning had no summary: it goes back with an empty one, before the message it preceded.
    assert wire.requests[2].json()["input"][4:] == [
        {"type": "reasoning", "id": RS2, "summary": [], "encrypted_content": ENC2},
        {"type": "message", "role": "assistant", "content": "It is 18.5 °C and cloudy in Paris."},
        {"type": "message", "role": "user", "content": "Should I take a coat?"},
    ]


async def test_structured_output_is_asked_for_as_text_format_and_arrives_as_json_text(wire: WireServer) -> None:
    wire.reply(fixture("responses/structured_output.sse"))
    async with connect(wire) as provider:
        state = await Step(provider).turn(ask("Weather in Paris, as JSON."), Options(output_schema=SCHEMA))
    assert json.loads(state.answer or "") == {"city": "Paris", "temperature": 18.5, "conditions": ["cloudy", "windy"]}
    assert sent(wire.requests[0]) == canonical({
        "model": MODEL,
        "input": [{"type": "message", "role": "user", "content": "Weather in Paris, as JSON."}],
        "text": {"format": {"type": "json_schema", "name": "output", "schema": SCHEMA, "strict": True}},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "stream": True,
    })


async def test_cached_tokens_are_read_and_priced_as_cache_reads(wire: WireServer) -> None:
    wire.reply(fixture("responses/usage_cached.sse"))
    async with connect(wire, prompt_cache_key="chat-7") as provider:
        state = await Step(provider).turn(ask("Again?"))
    assert state.usage == Usage(input_tokens=2006, output_tokens=300, cache_read_tokens=1920)
    assert wire.requests[0].json()["prompt_cache_key"] == "chat-7"


async def test_items_sent_whole_in_their_done_events_are_streamed_then(wire: WireServer) -> None:
    # A compatible server that streams no deltas, only finished items: the content still arrives.
    wire.reply(events(
        {"type": "response.output_item.done", "output_index": 0,
         "item": {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Think."}]}},
        {"type": "response.output_item.done", "output_index": 1,
         "item": {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi."}]}},
        {"type": "response.output_item.done", "output_index": 2,
         "item": {"type": "function_call", "call_id": "c1", "name": "get_time", "arguments": {"timezone": "UTC"}}},
        {"type": "response.completed",
         "response": {"model": "local", "usage": {"input_tokens": 5, "output_tokens": 3}}},
    ))
    async with connect(wire) as provider:
        assert await collect(provider) == [
            ReasoningDelta("Think."), ReasoningDelta("", "openai-reasoning:rs_1:"), TextDelta("Hi."),
            ToolCallDelta(0, "c1", "get_time", ""), ToolCallDelta(0, None, None, '{"timezone": "UTC"}'),
            UsageDelta(Usage(5, 3), "local"), Finish("tool_calls")]


async def test_a_refusal_is_the_answer_text_and_finishes_as_content_filter(wire: WireServer) -> None:
    wire.reply(events({"type": "response.refusal.delta", "output_index": 0, "delta": "I can't help"},
                      {"type": "response.refusal.delta", "output_index": 0, "delta": " with that."},
                      {"type": "response.completed", "response": {"usage": {"input_tokens": 9, "output_tokens": 4}}}))
    async with connect(wire) as provider:
        assert await collect(provider) == [TextDelta("I can't help"), TextDelta(" with that."),
                                           UsageDelta(Usage(9, 4)), Finish("content_filter")]


async def test_no_usage_reported_is_estimated_and_said_so(wire: WireServer) -> None:
    wire.reply(events({"type": "response.output_text.delta", "output_index": 0, "delta": "abcdefgh"},
                      {"type": "response.completed", "response": {"status": "completed"}}))
    async with connect(wire) as provider:
        assert provider.info.streams_usage
        deltas = await collect(provider, estimates=True)
        assert not provider.info.streams_usage
    assert deltas[0] == TextDelta("abcdefgh") and deltas[-1] == Finish("stop")
    usage = deltas[1].usage
    assert usage.estimated and usage.output_tokens == 2 and usage.input_tokens > 0


async def test_consecutive_turns_reuse_one_connection(wire: WireServer) -> None:
    addresses: list[Any] = []

    async def note_address(response: httpx.Response) -> None:
        addresses.append(response.extensions["network_stream"].get_extra_info("client_addr"))

    for _ in range(3):
        wire.reply(fixture("responses/text.sse"))
    async with httpx.AsyncClient(event_hooks={"response": [note_address]}) as client:
        provider = connect(wire, client=client)
        for _ in range(3):
            assert (await collect(provider))[-1] == Finish("stop")
    assert len(addresses) == 3 and len(set(addresses)) == 1


async def test_the_provider_passes_the_conformance_check(wire: WireServer) -> None:
    for _ in range(16):  # the check sends at most 16 requests in all
        wire.reply(text_events("Hello", " there."))
    async with httpx.AsyncClient() as client:
        await check_provider(lambda: connect(wire, client=client))
    assert len(wire.requests) == 16
