"""What ``Anthropic`` sends: the turns as Messages API ``system`` and ``messages``, the request body and headers
as the loopback server received them, and the settings it refuses at construction."""

from typing import Any

import pytest

from loop import Options, Reasoning, Request, Role, Text, ToolCall, ToolResult, Turn, Usage, UsageError, UseTool
from provider import Anthropic
from provider._anthropic import messages
from tests.provider.wire.anthropic_setup import MODEL, REQUEST, anthropic, collect, get_time, get_weather, stream
from tests.provider.wire.server import WireServer

SIG = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds9/2wX8="


def turn(role: Role, *parts: Any) -> Turn:
    return Turn(role, parts)


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


# -- messages(): turns to system + messages ----------------------------------------------------------------


def test_leading_system_turns_become_system_and_a_later_one_becomes_user_text() -> None:
    system, msgs = messages((
        turn(Role.SYSTEM, Text("You are terse.")),
        turn(Role.SYSTEM, Text("Answer in French.")),
        turn(Role.USER, Text("Fix the test")),
        turn(Role.ASSISTANT, Text("Done.")),
        turn(Role.SYSTEM, Text("## tests\nFAIL: 1 failed")),  # a verification report
    ))
    assert system == "You are terse.\n\nAnswer in French."
    assert msgs == [
        {"role": "user", "content": [text("Fix the test")]},
        {"role": "assistant", "content": [text("Done.")]},
        {"role": "user", "content": [text("## tests\nFAIL: 1 failed")]},
    ]


def test_tool_results_go_in_a_user_message_before_text_merged_into_it() -> None:
    _, msgs = messages((
        turn(Role.USER, Text("Weather?")),
        turn(Role.ASSISTANT, ToolCall("t1", "get_weather", '{"location": "Paris"}'),
             ToolCall("t2", "get_time", "{}")),
        turn(Role.TOOL, ToolResult("t1", "get_weather", "sunny"),
             ToolResult("t2", "get_time", "error: the tool raised KeyError", is_error=True)),
        turn(Role.SYSTEM, Text("Report: try again")),
    ))
    assert msgs[2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "sunny"},
        {"type": "tool_result", "tool_use_id": "t2", "content": "error: the tool raised KeyError", "is_error": True},
        text("Report: try again"),
    ]}
    # Text given before the results in one merged message still goes after them.
    _, msgs = messages((turn(Role.USER, Text("a")), turn(Role.TOOL, ToolResult("t1", "x", "r"))))
    assert [b["type"] for b in msgs[0]["content"]] == ["tool_result", "text"]


def test_consecutive_turns_of_one_role_merge_into_one_message() -> None:
    _, msgs = messages((
        turn(Role.USER, Text("one")), turn(Role.USER, Text("two")),
        turn(Role.ASSISTANT, Text("three")), turn(Role.ASSISTANT, Text("four")),
    ))
    assert msgs == [{"role": "user", "content": [text("one"), text("two")]},
                    {"role": "assistant", "content": [text("three"), text("four")]}]


def test_an_assistant_turn_sends_signed_thinking_first_then_text_then_calls() -> None:
    _, msgs = messages((
        turn(Role.USER, Text("go")),
        turn(Role.ASSISTANT, ToolCall("t1", "get_weather", '{"location": "Paris"}'), Text("Checking."),
             Reasoning("unsigned, from another provider"), Reasoning("signed", SIG), Usage(5, 6)),
    ))
    assert msgs[1] == {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "signed", "signature": SIG},
        text("Checking."),
        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"location": "Paris"}},
    ]}


@pytest.mark.parametrize("arguments", ['{"location": "Par', "[1, 2]", "", "null"])
def test_call_arguments_that_are_not_a_json_object_are_sent_as_an_empty_input(arguments: str) -> None:
    _, msgs = messages((turn(Role.USER, Text("go")), turn(Role.ASSISTANT, ToolCall("t1", "f", arguments))))
    assert msgs[1]["content"] == [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]


def test_parts_the_api_would_refuse_are_left_out() -> None:
    _, msgs = messages((
        turn(Role.USER, Text("go"), Text("  \n")),  # whitespace-only text blocks are refused
        turn(Role.ASSISTANT, Reasoning("thinking alone, cut off", SIG)),  # a message may not end in thinking
        turn(Role.ASSISTANT, Reasoning("never signed")),
        turn(Role.USER, Text("again")),
    ))
    assert msgs == [{"role": "user", "content": [text("go"), text("again")]}]


# -- the request on the wire ------------------------------------------------------------------------------


async def sent(wire: WireServer, request: Request = REQUEST, **settings: Any) -> dict[str, Any]:
    """The body the server received for ``request``."""
    wire.reply(stream("text"))
    async with anthropic(wire, **settings) as provider:
        await collect(provider, request)
    return wire.requests[-1].json()


def with_options(options: Options, *tools: Any) -> Request:
    return Request(REQUEST.turns, tuple(t.spec for t in tools), options)


async def test_the_request_carries_the_key_version_model_and_stream_flag(wire: WireServer) -> None:
    body = await sent(wire)
    received = wire.requests[0]
    assert (received.method, received.path) == ("POST", "/v1/messages")
    assert received.headers["x-api-key"] == "test-key"
    assert received.headers["anthropic-version"] == "2023-06-01"
    assert received.headers["content-type"] == "application/json"
    assert body == {"model": MODEL, "max_tokens": 4096, "stream": True,
                    "messages": [{"role": "user", "content": [text("What is the weather in Paris?")]}]}


async def test_the_key_comes_from_the_environment_and_a_base_path_is_kept(
    wire: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    wire.reply(stream("text"))
    async with Anthropic(MODEL, base_url=wire.url + "/proxy/anthropic/") as provider:
        await collect(provider)
    assert wire.requests[0].path == "/proxy/anthropic/v1/messages"
    assert wire.requests[0].headers["x-api-key"] == "env-key"


async def test_max_tokens_has_a_default_a_provider_setting_and_a_per_turn_override(wire: WireServer) -> None:
    assert (await sent(wire))["max_tokens"] == 4096
    assert (await sent(wire, max_tokens=512))["max_tokens"] == 512
    assert (await sent(wire, with_options(Options(max_tokens=64)), max_tokens=512))["max_tokens"] == 64
    assert (await sent(wire, with_options(Options(model="claude-haiku-4-5"))))["model"] == "claude-haiku-4-5"


@pytest.mark.parametrize(("choice", "wire_choice"), [
    ("auto", {"type": "auto"}), ("required", {"type": "any"}), ("none", {"type": "none"}),
    (UseTool("get_time"), {"type": "tool", "name": "get_time"}), (None, None),
])
async def test_tool_choice_and_tools(wire: WireServer, choice: Any, wire_choice: Any) -> None:
    body = await sent(wire, with_options(Options(tool_choice=choice), get_weather, get_time))
    assert body.get("tool_choice") == wire_choice
    assert body["tools"] == [
        {"name": "get_weather", "description": "The current weather somewhere.",
         "input_schema": dict(get_weather.spec.parameters)},
        {"name": "get_time", "description": "The local time in a time zone.",
         "input_schema": dict(get_time.spec.parameters)},
    ]


async def test_without_tools_no_tool_choice_is_sent(wire: WireServer) -> None:
    body = await sent(wire, with_options(Options(tool_choice="required")))
    assert "tools" not in body and "tool_choice" not in body


async def test_temperature_is_capped_at_the_apis_maximum_and_stop_sequences_are_sent(wire: WireServer) -> None:
    body = await sent(wire, with_options(Options(temperature=0.7, stop=("\n\nHuman:", "END"))))
    assert body["temperature"] == 0.7
    assert body["stop_sequences"] == ["\n\nHuman:", "END"]
    assert (await sent(wire, with_options(Options(temperature=1.6))))["temperature"] == 1.0


async def test_a_thinking_budget_turns_thinking_on_with_room_to_answer(wire: WireServer) -> None:
    body = await sent(wire, thinking_budget=8000)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 8000}
    assert body["max_tokens"] == 8001  # the API needs max_tokens above the budget
    assert (await sent(wire, thinking_budget=2048, max_tokens=16000))["max_tokens"] == 16000


@pytest.mark.parametrize("options", [
    Options(output_schema={"type": "object"}), Options(tool_choice="required"),
    Options(tool_choice=UseTool("get_time")),
])
async def test_thinking_is_left_off_a_turn_that_forces_a_tool(wire: WireServer, options: Options) -> None:
    # "Thinking may not be enabled when tool_choice forces tool use": the forced turn goes without it.
    body = await sent(wire, with_options(options, get_time), thinking_budget=2048)
    assert "thinking" not in body
    assert body["tool_choice"]["type"] in ("any", "tool")
    assert "thinking" in await sent(wire, with_options(Options(tool_choice="auto"), get_time), thinking_budget=2048)


async def test_with_thinking_on_the_temperature_is_not_sent(wire: WireServer) -> None:
    body = await sent(wire, with_options(Options(temperature=0.7)), thinking_budget=2048)
    assert "temperature" not in body and "thinking" in body


async def test_thinking_is_left_off_a_tool_loop_whose_assistant_turn_has_no_signed_thinking(
    wire: WireServer,
) -> None:
    # Otherwise: "a final assistant message must start with a thinking block ... To avoid this requirement,
    # disable thinking".
    def loop(*assistant_parts: Any) -> Request:
        return Request((
            turn(Role.USER, Text("Weather?")),
            turn(Role.ASSISTANT, *assistant_parts, ToolCall("t1", "get_weather", '{"location": "Paris"}')),
            turn(Role.TOOL, ToolResult("t1", "get_weather", "sunny")),
        ), (get_weather.spec,))

    assert "thinking" not in await sent(wire, loop(Reasoning("from another provider")), thinking_budget=2048)
    assert "thinking" in await sent(wire, loop(Reasoning("signed", SIG)), thinking_budget=2048)


# -- settings refused at construction -----------------------------------------------------------------------


def test_a_missing_api_key_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(UsageError, match="ANTHROPIC_API_KEY"):
        Anthropic(MODEL)
    with pytest.raises(UsageError, match="ANTHROPIC_API_KEY"):
        Anthropic(MODEL, api_key="  ")


@pytest.mark.parametrize(("settings", "complaint"), [
    ({"thinking_budget": 1023}, "thinking_budget"),
    ({"thinking_budget": 2048.0}, "thinking_budget"),
    ({"thinking_budget": True}, "thinking_budget"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"max_tokens": "4096"}, "max_tokens"),
    ({"base_url": "ftp://127.0.0.1"}, "base_url"),
    ({"base_url": "127.0.0.1:8080"}, "base_url"),
    ({"base_url": "http://"}, "base_url"),
    ({"base_url": "http://[::1"}, "base_url"),
    ({"base_url": None}, "base_url"),
])
def test_bad_settings_are_refused(settings: dict[str, Any], complaint: str) -> None:
    with pytest.raises(UsageError, match=complaint):
        Anthropic(MODEL, api_key="test-key", **settings)


@pytest.mark.parametrize("model", ["", None])
def test_a_model_name_is_required(model: Any) -> None:
    with pytest.raises(UsageError, match="model"):
        Anthropic(model, api_key="test-key")
