"""The Responses API request ``OpenAIResponses`` builds: the conversation as ``instructions`` and ``input`` items,
tools, options and settings, and what it refuses (``UsageError`` naming the problem)."""

from __future__ import annotations

from typing import Any

import pytest

from loop import Options, Reasoning, Request, Role, Text, ToolCall, ToolResult, ToolSpec, Turn, UsageError, UseTool
from provider._responses import OpenAIResponses
from provider._responses_items import read_signature, reasoning_signature
from tests import both_backends
from tests.provider.wire.openai_client import collect
from tests.provider.wire.responses_client import CLIENT_STREAMS, connect, text_events
from tests.provider.wire.server import WireServer

anyio_backend = both_backends.anyio_backend  # every test here runs on asyncio and on trio
pytestmark = CLIENT_STREAMS

URL = "http://127.0.0.1:9/v1"
OPEN = {"type": "object", "properties": {"q": {"type": "string"}}}
CLOSED = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": False}
SIG = reasoning_signature("rs_1", "gAAAAB")


def provider(**settings: Any) -> OpenAIResponses:
    return OpenAIResponses("gpt-4.1-mini", base_url=URL, api_key="k", **settings)


def turn(role: Role, *parts: Any, name: str | None = None) -> Turn:
    return Turn(role, parts, name=name)


def body(*turns: Turn, tools: tuple[ToolSpec, ...] = (), options: Options = Options(), **settings: Any) -> Any:
    return provider(**settings).body(Request(turns, tools, options))


HI = turn(Role.USER, Text("hi"))


def test_a_plain_request_is_stateless_and_streamed() -> None:
    assert body(HI) == {"model": "gpt-4.1-mini", "input": [{"type": "message", "role": "user", "content": "hi"}],
                        "store": False, "include": ["reasoning.encrypted_content"], "stream": True}


def test_leading_system_turns_are_the_instructions_and_later_ones_stay_where_they_stand() -> None:
    sent = body(turn(Role.SYSTEM, Text("Be brief.")), turn(Role.SYSTEM, Text("Use metric units.")), HI,
                turn(Role.SYSTEM, Text("The check failed; try again.")))
    assert sent["instructions"] == "Be brief.\n\nUse metric units."
    assert sent["input"] == [{"type": "message", "role": "user", "content": "hi"},
                             {"type": "message", "role": "system", "content": "The check failed; try again."}]


def test_named_turns_have_the_name_before_their_text() -> None:
    sent = body(turn(Role.USER, Text("hi"), name="ann"), turn(Role.ASSISTANT, Text("hello"), name="bot"))
    assert [item["content"] for item in sent["input"]] == ["ann: hi", "bot: hello"]


def test_an_assistant_turn_keeps_its_parts_order_and_leaves_out_reasoning_it_cannot_send() -> None:
    assistant = turn(Role.ASSISTANT, Reasoning("from Anthropic", "EqQBCkYIBxgCKkD"), Reasoning("unsigned"),
                     Reasoning("mine", SIG), Text("Let me "), Text("look."),
                     ToolCall("c1", "search", '{"q": "x"}'), ToolCall("c2", "search", "{not json"))
    results = turn(Role.TOOL, ToolResult("c1", "search", "found"),
                   ToolResult("c2", "search", "invalid arguments", is_error=True))
    assert body(HI, assistant, results)["input"][1:] == [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "mine"}],
         "encrypted_content": "gAAAAB"},
        {"type": "message", "role": "assistant", "content": "Let me look."},
        {"type": "function_call", "call_id": "c1", "name": "search", "arguments": '{"q": "x"}'},
        {"type": "function_call", "call_id": "c2", "name": "search", "arguments": "{}"},  # answered with an error
        {"type": "function_call_output", "call_id": "c1", "output": "found"},
        {"type": "function_call_output", "call_id": "c2", "output": "invalid arguments"},
    ]


def test_stored_responses_send_reasoning_by_id_and_ask_for_no_encrypted_content() -> None:
    by_id = turn(Role.ASSISTANT, Reasoning("", reasoning_signature("rs_2", "")), Text("ok"))
    stateless = body(HI, by_id)
    assert [i["type"] for i in stateless["input"]] == ["message", "message"]  # the id names nothing unstored
    stored = body(HI, by_id, store=True)
    assert stored["input"][1] == {"type": "reasoning", "id": "rs_2", "summary": []}
    assert stored["store"] is True and "include" not in stored


def test_signatures_carry_the_item_id_and_encrypted_content_and_nothing_else_reads_as_one() -> None:
    assert read_signature(reasoning_signature("rs_9", "a:b=")) == ("rs_9", "a:b=")
    assert [read_signature(s) for s in (None, "", "EqQBCkYIBxgC", "redacted_thinking:abc", "openai-reasoning:")] == [
        None] * 5


def test_tools_are_strict_only_when_their_parameters_qualify() -> None:
    tools = (ToolSpec("open", "an open schema", OPEN), ToolSpec("closed", "a closed schema", CLOSED))
    sent = body(HI, tools=tools)
    assert sent["tools"] == [
        {"type": "function", "name": "open", "description": "an open schema", "parameters": OPEN, "strict": False},
        {"type": "function", "name": "closed", "description": "a closed schema", "parameters": CLOSED,
         "strict": True},
    ]
    assert "tool_choice" not in sent


@pytest.mark.parametrize(("choice", "sent"), [
    ("auto", "auto"), ("none", "none"), ("required", "required"),
    (UseTool("closed"), {"type": "function", "name": "closed"}),
])
def test_tool_choice_as_the_api_names_it(choice: Any, sent: Any) -> None:
    tools = (ToolSpec("closed", "a closed schema", CLOSED),)
    assert body(HI, tools=tools, options=Options(tool_choice=choice))["tool_choice"] == sent


@pytest.mark.parametrize(("schema", "strict_output", "strict"), [
    (CLOSED, True, True), (OPEN, True, False), (CLOSED, False, False)])
def test_an_output_schema_is_strict_when_asked_and_it_qualifies(schema: Any, strict_output: bool,
                                                                 strict: bool) -> None:
    sent = body(HI, options=Options(output_schema=schema), strict_output=strict_output)
    assert sent["text"] == {"format": {"type": "json_schema", "name": "output", "schema": schema, "strict": strict}}


def test_options_go_in_the_fields_the_api_names_and_extra_wins_last() -> None:
    options = Options(model="o4-mini", temperature=0.2, top_p=0.9, max_tokens=300, reasoning_effort="high",
                      seed=7, extra={"service_tier": "flex", "store": True})
    sent = body(HI, options=options, reasoning_summary="detailed", prompt_cache_key="chat-1")
    assert sent == {"model": "o4-mini", "input": [{"type": "message", "role": "user", "content": "hi"}],
                    "reasoning": {"effort": "high", "summary": "detailed"}, "temperature": 0.2, "top_p": 0.9,
                    "max_output_tokens": 300, "prompt_cache_key": "chat-1", "store": True,
                    "include": ["reasoning.encrypted_content"], "stream": True, "service_tier": "flex"}


@pytest.mark.parametrize(("options", "match"), [
    (Options(n=2), "one choice per request, and n=2"),
    (Options(stop=["\n"]), "no stop sequences"),
])
def test_what_the_api_cannot_do_is_refused(options: Options, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        body(HI, options=options)


@pytest.mark.parametrize(("args", "settings", "match"), [
    (("",), {"base_url": URL}, "needs a model name"),
    (("m",), {"base_url": "ftp://x"}, "base_url must be an http"),
    (("m",), {"base_url": URL, "reasoning_summary": "short"}, "reasoning_summary must be one of"),
    (("m",), {"base_url": URL, "store": "yes"}, "strict_output and store are True or False"),
    (("m",), {"base_url": URL, "prompt_cache_key": " "}, "prompt_cache_key must be a non-empty string"),
])
def test_bad_settings_are_refused_by_name(args: tuple[Any, ...], settings: dict[str, Any], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        OpenAIResponses(*args, **settings)


def test_openai_itself_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(UsageError, match="set OPENAI_API_KEY"):
        OpenAIResponses("gpt-4.1-mini")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    assert OpenAIResponses("gpt-4.1-mini").who == "OpenAI"


def test_info_says_one_choice_and_structured_output_beside_tools() -> None:
    info = provider().info
    assert (info.model, info.choices, info.json_schema, info.streams_usage) == ("gpt-4.1-mini", False, True, True)


async def test_a_server_without_a_key_gets_no_authorization_header(wire: WireServer,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    wire.reply(text_events("ok"))
    async with connect(wire, api_key=None, headers={"x-trace": "1"}) as p:
        await collect(p)
    headers = wire.requests[0].headers
    assert "authorization" not in headers and headers["x-trace"] == "1"
