"""``OpenAICompatible`` asked for structured output (``Options.output_schema``): when the schema is sent as
strict (``strict_compatible``), the body in both ``structured_output`` modes, and the forced output tool's
arguments streamed back as text.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from loop import (
    Finish,
    Options,
    OutputType,
    Request,
    Role,
    Step,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
    UsageDelta,
    UsageError,
    tool,
)
from provider import OpenAICompatible
from provider._openai import OUTPUT_TOOL
from provider._strict import strict_compatible
from tests.provider.wire.openai_client import MODEL, TOOLS, ask, chunk, collect, connect, sse
from tests.provider.wire.server import WireServer, fixture

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "temperature": {"type": "number"},
                                           "conditions": {"type": "array", "items": {"type": "string"}}},
          "required": ["city", "temperature", "conditions"], "additionalProperties": False}
OPEN = {"type": "object", "properties": {"city": {"type": "string"}, "note": {"type": "string"}},
        "required": ["city"], "additionalProperties": False}  # "note" is optional: not strict
JSON_PIECES = ['{"', "city", '":"', "Paris", '","', "temperature", '":', "18", ".5", ',"', "conditions", '":["',
               "cloudy", '","', "windy", '"]}']
ANSWER = {"city": "Paris", "temperature": 18.5, "conditions": ["cloudy", "windy"]}
SERVED = "qwen2.5-7b-instruct"  # the model the output-tool fixture names
OUTPUT_CALL = "call_Kx4mB7sQ2vN9pR1tW6yZ3hJd"


def asked(schema: Any = SCHEMA, **options: Any) -> Request:
    return Request(ask().turns, (), Options(output_schema=schema, **options))


def closed(properties: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False, **more}


# -- which schemas are strict ---------------------------------------------------------------------------------

STRING = {"type": "string"}


@pytest.mark.parametrize("schema", [
    SCHEMA,
    closed({}),
    closed({"inner": closed({"a": STRING})}),
    closed({"rows": {"type": "array", "items": closed({"a": STRING})}}),
    closed({"either": {"anyOf": [closed({"a": STRING}), {"type": "null"}]}}),
    closed({"pet": {"$ref": "#/$defs/Pet"}}, **{"$defs": {"Pet": closed({"name": STRING})}}),
    closed({"pet": {"$ref": "#/definitions/Pet"}}, definitions={"Pet": closed({"name": STRING})}),
    {**closed({"a": STRING}), "type": ["object", "null"]},
    closed({"pair": {"type": "array", "prefixItems": [STRING, closed({"b": STRING})]}}),
], ids=["flat", "empty", "nested", "items", "anyOf", "$defs", "definitions", "type list", "prefixItems"])
def test_schemas_whose_every_object_is_closed_and_fully_required_are_strict(schema: dict[str, Any]) -> None:
    assert strict_compatible(schema)


@pytest.mark.parametrize("schema", [
    None,
    OPEN,
    {"type": "object", "properties": {"a": STRING}, "required": ["a"]},
    {"type": "object", "properties": {"a": STRING}, "additionalProperties": False},
    {"properties": {"a": STRING}, "required": ["a"]},
    closed({"inner": {"type": "object", "properties": {"a": STRING}, "required": [],
                      "additionalProperties": False}}),
    closed({"rows": {"type": "array", "items": {"type": "object", "properties": {"a": STRING}}}}),
    closed({"either": {"anyOf": [{"type": "object", "properties": {"a": STRING}, "required": ["a"]},
                                 {"type": "null"}]}}),
    closed({"pet": {"$ref": "#/$defs/Pet"}}, **{"$defs": {"Pet": {**closed({"name": STRING}), "required": []}}}),
    closed({"pet": {"$ref": "#/definitions/Pet"}}, definitions={"Pet": {"type": "object"}}),
    closed({"scores": {"type": "object", "additionalProperties": {"type": "number"}}}),
    closed({"scores": {"type": "object", "additionalProperties": closed({"a": STRING})}}),
    {"type": "array", "items": closed({"a": STRING})},
], ids=["none", "optional field", "not closed", "optional by omission", "untyped object", "nested optional",
        "items", "anyOf", "$defs", "definitions", "map of numbers", "map of closed objects", "array root"])
def test_any_open_or_partly_required_object_makes_a_schema_not_strict(schema: Any) -> None:
    assert not strict_compatible(schema)


@attrs.frozen
class Place:
    city: str
    country: str


@attrs.frozen
class Forecast:
    place: Place
    conditions: tuple[str, ...]
    note: str = ""


@attrs.frozen
class Exact:
    place: Place
    conditions: tuple[str, ...]


def test_typed_answer_schemas_are_strict_only_without_defaults() -> None:
    assert strict_compatible(OutputType.of(Exact).schema)
    assert not strict_compatible(OutputType.of(Forecast).schema)


# -- the body: response_format -------------------------------------------------------------------------------


@pytest.mark.parametrize(("schema", "strict_output", "strict"), [
    (SCHEMA, True, True), (OPEN, True, False), (SCHEMA, False, False), (OPEN, False, False),
])
async def test_response_format_is_strict_only_when_asked_and_the_schema_allows(
        wire: WireServer, schema: dict[str, Any], strict_output: bool, strict: bool) -> None:
    wire.reply(fixture("openai/structured_output.sse"))
    async with connect(wire, strict_output=strict_output) as provider:
        await collect(provider, asked(schema))
    body = wire.requests[0].json()
    assert body["response_format"] == {"type": "json_schema",
                                       "json_schema": {"name": "output", "schema": schema, "strict": strict}}
    assert "tools" not in body and "tool_choice" not in body


async def test_a_typed_answer_with_optional_fields_is_sent_as_not_strict(wire: WireServer) -> None:
    wire.reply(fixture("openai/structured_output.sse"))
    schema = OutputType.of(Forecast).schema
    async with connect(wire) as provider:
        await collect(provider, asked(schema))
    assert wire.requests[0].json()["response_format"]["json_schema"] == {"name": "output", "schema": schema,
                                                                         "strict": False}


# -- the body: a forced output tool ---------------------------------------------------------------------------


def output_tool(schema: dict[str, Any], *, strict: bool) -> dict[str, Any]:
    function = {"name": "final_answer", "description": "Give the final answer in the required structure.",
                "parameters": schema}
    return {"type": "function", "function": {**function, "strict": True} if strict else function}


@pytest.mark.parametrize(("schema", "strict_output", "strict"), [
    (SCHEMA, True, True), (OPEN, True, False), (SCHEMA, False, False),
])
async def test_tool_mode_sends_the_schema_as_a_forced_tool(wire: WireServer, schema: dict[str, Any],
                                                           strict_output: bool, strict: bool) -> None:
    wire.reply(fixture("openai/output_tool.sse"))
    async with connect(wire, structured_output="tool", strict_output=strict_output) as provider:
        await collect(provider, asked(schema, temperature=0.0))
    assert wire.requests[0].json() == {
        "model": MODEL, "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "stream": True, "stream_options": {"include_usage": True},
        "tools": [output_tool(schema, strict=strict)],
        "tool_choice": {"type": "function", "function": {"name": "final_answer"}},
        "temperature": 0.0,
    }


async def test_tool_mode_adds_the_output_tool_after_the_request_s_tools_and_forces_it(wire: WireServer) -> None:
    wire.reply(fixture("openai/output_tool.sse"))
    async with connect(wire, structured_output="tool") as provider:
        await Step(provider, tools=TOOLS).turn(ask(), Options(output_schema=SCHEMA, tool_choice="required"))
    body = wire.requests[0].json()
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather", "get_time", OUTPUT_TOOL]
    assert body["tools"][-1] == output_tool(SCHEMA, strict=True)
    assert body["tool_choice"] == {"type": "function", "function": {"name": OUTPUT_TOOL}}
    assert "response_format" not in body


async def test_tool_mode_without_an_output_schema_sends_the_usual_body(wire: WireServer) -> None:
    wire.reply(fixture("openai/text.sse"))
    wire.reply(fixture("openai/text.sse"))
    async with connect(wire, structured_output="tool") as tool_mode, connect(wire) as default:
        await Step(tool_mode, tools=TOOLS).turn(ask(), Options(tool_choice="auto"))
        await Step(default, tools=TOOLS).turn(ask(), Options(tool_choice="auto"))
    assert wire.requests[0].json() == wire.requests[1].json()


@tool
async def final_answer(text: str) -> str:
    """A tool that happens to have the output tool's name."""
    return text


async def test_a_request_with_a_tool_of_the_output_tool_s_name_is_a_usage_error(wire: WireServer) -> None:
    async with connect(wire, structured_output="tool") as provider:
        with pytest.raises(UsageError, match="final_answer"):
            await collect(provider, Request(ask().turns, (final_answer.spec,), Options(output_schema=SCHEMA)))
    assert wire.requests == []


@pytest.mark.parametrize("choice", ["tools", "json_schema", "", None, "TOOL"])
def test_an_unknown_structured_output_mode_is_a_usage_error_naming_the_choices(choice: Any) -> None:
    with pytest.raises(UsageError, match="structured_output must be one of 'response_format', 'tool'"):
        OpenAICompatible(MODEL, base_url="http://127.0.0.1:9/v1", structured_output=choice)


# -- the stream: the forced call's arguments are the answer text ----------------------------------------------


async def test_the_output_tool_s_arguments_stream_as_text_and_finish_as_stop(wire: WireServer) -> None:
    wire.reply(fixture("openai/output_tool.sse"))
    async with connect(wire, structured_output="tool") as provider:
        deltas = await collect(provider, asked())
    assert deltas == [*map(TextDelta, JSON_PIECES), UsageDelta(Usage(121, 17), SERVED), Finish("stop")]


async def test_a_step_over_the_output_tool_gives_an_assistant_turn_whose_text_is_the_json(
        wire: WireServer) -> None:
    wire.reply(fixture("openai/output_tool.sse"))
    async with connect(wire, structured_output="tool") as provider:
        state = await Step(provider, tools=TOOLS).turn(ask(), Options(output_schema=SCHEMA))
    assistant = state[1]
    assert len(state) == 2 and assistant.role is Role.ASSISTANT
    assert assistant.parts == (Text("".join(JSON_PIECES)), Usage(121, 17))
    assert assistant.meta["finish_reason"] == "stop" and not state.pending_calls
    assert json.loads(assistant.text) == ANSWER and state.answer == assistant.text


async def test_in_response_format_mode_a_call_named_like_the_output_tool_is_an_ordinary_call(
        wire: WireServer) -> None:
    wire.reply(fixture("openai/output_tool.sse"))
    async with connect(wire) as provider:
        deltas = await collect(provider, asked())
    assert deltas[0] == ToolCallDelta(0, OUTPUT_CALL, OUTPUT_TOOL, "")
    assert deltas[-1] == Finish("tool_calls")


def call(index: int, fragment: str, *, call_id: str | None = None, name: str | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": fragment}
    if name is not None:
        function["name"] = name
    return {"index": index, **({"id": call_id, "type": "function"} if call_id else {}), "function": function}


async def test_a_server_finishing_the_forced_call_with_stop_still_finishes_with_stop(wire: WireServer) -> None:
    # OpenAI itself ends a forced call with "stop"; whole arguments, or an object, arrive as one text delta.
    wire.reply(sse(chunk({"role": "assistant", "tool_calls": [call(0, '{"city":"Oslo"}', call_id="c1",
                                                                   name=OUTPUT_TOOL)]}),
                   chunk(finish="stop")))
    wire.reply(sse(chunk({"tool_calls": [{"id": "c2", "function": {"name": OUTPUT_TOOL,
                                                                    "arguments": {"city": "Oslo"}}}]}),
                   chunk(finish="tool_calls")))
    async with connect(wire, structured_output="tool") as provider:
        first = await collect(provider, asked(OPEN))
        second = await collect(provider, asked(OPEN))
    assert first == [TextDelta('{"city":"Oslo"}'), Finish("stop")]
    assert second == [TextDelta('{"city": "Oslo"}'), Finish("stop")]


async def test_every_choice_s_output_call_streams_as_that_choice_s_text(wire: WireServer) -> None:
    def both(first: dict[str, Any], second: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return chunk(choices=[{"index": i, "delta": d, "logprobs": None, "finish_reason": finish}
                              for i, d in enumerate((first, second))])

    wire.reply(sse(both({"tool_calls": [call(0, "", call_id="a", name=OUTPUT_TOOL)]},
                        {"tool_calls": [call(0, '{"city":', call_id="b", name=OUTPUT_TOOL)]}),
                   both({"tool_calls": [call(0, '{"city":"Rome"}')]}, {"tool_calls": [call(0, '"Nice"}')]},
                        finish="tool_calls")))
    async with connect(wire, structured_output="tool") as provider:
        deltas = await collect(provider, asked(OPEN, n=2))
    assert deltas == [TextDelta('{"city":', 1), TextDelta('{"city":"Rome"}', 0), TextDelta('"Nice"}', 1),
                      Finish("stop", 0), Finish("stop", 1)]


async def test_other_calls_beside_the_output_call_pass_through_and_finish_stays_tool_calls(
        wire: WireServer) -> None:
    mixed = sse(*(chunk({"tool_calls": [c]}) for c in (
        call(0, '{"city":', call_id="out", name=OUTPUT_TOOL), call(1, "", call_id="t1", name="get_time"),
        call(0, '"Rome"}'), call(1, '{"timezone": "UTC"}'))), chunk(finish="tool_calls"))
    wire.reply(mixed)
    wire.reply(mixed)
    async with connect(wire, structured_output="tool") as provider:
        deltas = await collect(provider, asked(OPEN))
        state = await Step(provider, tools=TOOLS).turn(ask(), Options(output_schema=OPEN))
    assert deltas == [TextDelta('{"city":'), ToolCallDelta(1, "t1", "get_time", ""), TextDelta('"Rome"}'),
                      ToolCallDelta(1, None, None, '{"timezone": "UTC"}'), Finish("tool_calls")]
    assert state[1].text == '{"city":"Rome"}' and state[1].meta["finish_reason"] == "tool_calls"
    assert state[1].tool_calls == (ToolCall("t1", "get_time", '{"timezone": "UTC"}'),)
    assert state[2].tool_results[0].content == "09:30 in UTC"
