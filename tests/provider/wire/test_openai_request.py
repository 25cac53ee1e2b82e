"""The request ``OpenAICompatible`` sends: the JSON body for every role, the tools and every option, and the
key in its header (or no header, or a ``UsageError`` before anything is sent).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from loop import (
    Options,
    Reasoning,
    Request,
    Role,
    State,
    Step,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
    UsageError,
    UseTool,
)
from provider import OpenAICompatible, from_spec
from tests.provider.wire.openai_client import KEY, MODEL, TOOLS, ask, collect, connect
from tests.provider.wire.server import WireServer, fixture

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "temperature": {"type": "number"},
                                           "conditions": {"type": "array", "items": {"type": "string"}}},
          "required": ["city", "temperature", "conditions"], "additionalProperties": False}


# -- the request as sent ------------------------------------------------------------------------------------


def every_role() -> State:
    return (State()
            .append(Role.SYSTEM, Text("You are terse."))
            .append(Role.USER, Text("Weather in Paris, and the time in Tokyo?"))
            .append(Role.ASSISTANT, Text("Checking both."), ToolCall("call_1", "get_weather", '{"location": "Paris"}'),
                    ToolCall("call_2", "get_time", '{"timezone": "Asia/Tokio"}'), Usage(30, 12))
            .append(Role.TOOL, ToolResult("call_1", "get_weather", "18.5 celsius, cloudy in Paris"),
                    ToolResult("call_2", "get_time", "error: unknown time zone 'Asia/Tokio'", is_error=True))
            .append(Role.ASSISTANT, Reasoning("Tokio is a typo."), ToolCall("call_3", "get_time", '{"timezone": "Asi'))
            .append(Role.TOOL, ToolResult("call_3", "get_time", "error: the arguments are not valid JSON",
                                          is_error=True))
            .append(Role.ASSISTANT, Text("Paris: 18.5 °C. Tokyo: unknown."))
            .append(Role.USER, Text("Thanks!")))


async def test_the_request_body_carries_every_role_the_tools_and_every_option(wire: WireServer) -> None:
    wire.reply(fixture("openai/text.sse"))
    options = Options(model="gpt-4o", temperature=0.2, max_tokens=256, stop=("END", "STOP"), tool_choice="required")
    async with connect(wire) as provider:
        await Step(provider, tools=TOOLS, options=options).turn(every_role())
    (sent,) = wire.requests
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["content-type"] == "application/json"
    assert sent.json() == {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Weather in Paris, and the time in Tokyo?"},
            {"role": "assistant", "content": "Checking both.", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'}},
                {"id": "call_2", "type": "function",
                 "function": {"name": "get_time", "arguments": '{"timezone": "Asia/Tokio"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18.5 celsius, cloudy in Paris"},
            {"role": "tool", "tool_call_id": "call_2", "content": "error: unknown time zone 'Asia/Tokio'"},
            # Malformed arguments go back as {} (their error result says what was wrong): servers that parse
            # the history would otherwise reject every later request of the conversation.
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_3", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_3", "content": "error: the arguments are not valid JSON"},
            {"role": "assistant", "content": "Paris: 18.5 °C. Tokyo: unknown."},
            {"role": "user", "content": "Thanks!"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [{"type": "function", "function": {"name": t.spec.name, "description": t.spec.description,
                                                    "parameters": dict(t.spec.parameters)}} for t in TOOLS],
        "tool_choice": "required",
        "temperature": 0.2,
        "max_tokens": 256,
        "stop": ["END", "STOP"],
    }
    weather = sent.json()["tools"][0]["function"]
    assert weather["description"].startswith("The current weather at a place.")
    assert weather["parameters"]["required"] == ["location"]


async def test_defaults_send_only_the_model_messages_and_stream_settings(wire: WireServer) -> None:
    wire.reply(fixture("openai/text.sse"))
    async with connect(wire) as provider:
        await Step(provider, options=Options(tool_choice="required")).turn(ask("Hi"))
    # No tools, so no tool_choice either: the API refuses tool_choice without tools.
    assert wire.requests[0].json() == {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
                                       "stream": True, "stream_options": {"include_usage": True}}


@pytest.mark.parametrize(("choice", "sent"), [
    ("auto", "auto"), ("none", "none"), ("required", "required"),
    (UseTool("get_time"), {"type": "function", "function": {"name": "get_time"}}),
])
async def test_tool_choice_on_the_wire(wire: WireServer, choice: Any, sent: Any) -> None:
    wire.reply(fixture("openai/text.sse"))
    async with connect(wire) as provider:
        await Step(provider, tools=TOOLS).turn(ask(), Options(tool_choice=choice))
    assert wire.requests[0].json()["tool_choice"] == sent


async def test_frozen_schemas_are_sent_as_plain_json(wire: WireServer) -> None:
    wire.reply(fixture("openai/structured_output.sse"))
    frozen = MappingProxyType({**SCHEMA, "properties": MappingProxyType(SCHEMA["properties"]),
                               "required": ("city", "temperature", "conditions")})
    async with connect(wire, strict_output=False) as provider:
        await collect(provider, Request(ask().turns, (), Options(output_schema=frozen)))
    assert wire.requests[0].json()["response_format"]["json_schema"] == {"name": "output", "schema": SCHEMA,
                                                                         "strict": False}


# -- keys and headers ---------------------------------------------------------------------------------------


async def test_the_key_goes_in_a_bearer_header_with_any_extra_headers(wire: WireServer) -> None:
    wire.reply(fixture("openai/text.sse"))
    async with connect(wire, headers={"OpenAI-Organization": "org-test"}) as provider:
        await collect(provider)
    headers = wire.requests[0].headers
    assert headers["authorization"] == f"Bearer {KEY}"
    assert headers["openai-organization"] == "org-test"


async def test_the_key_comes_from_the_environment(wire: WireServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    wire.reply(fixture("openai/text.sse"))
    async with connect(wire, api_key=None) as provider:
        await collect(provider)
    assert wire.requests[0].headers["authorization"] == "Bearer sk-from-env"


async def test_a_local_server_without_a_key_gets_no_authorization(wire: WireServer,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    wire.reply(fixture("openai/text.sse"))
    async with connect(wire, api_key=None) as provider:
        assert (await collect(provider))[0] == TextDelta("Hello")
    assert "authorization" not in wire.requests[0].headers


def test_openai_itself_without_a_key_is_a_usage_error_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(UsageError, match="OPENAI_API_KEY"):
        OpenAICompatible("gpt-4o-mini")
    with pytest.raises(UsageError, match="OPENAI_API_KEY"):
        from_spec("openai:gpt-4o-mini")
    with pytest.raises(UsageError, match="OPENAI_API_KEY"):
        OpenAICompatible("gpt-4o-mini", api_key="")
