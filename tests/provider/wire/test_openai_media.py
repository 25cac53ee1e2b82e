"""Images and files as ``OpenAICompatible`` sends them, byte for byte as the loopback server received them: a user
turn's content array, and a tool's picture following the tool messages in a user message (tool messages carry
text only); and what Chat Completions cannot carry, refused before anything is sent."""

from __future__ import annotations

from typing import Any

import pytest

from loop import File, Image, Request, Role, State, Step, Text, ToolCall, ToolResult, Turn, UsageError
from provider import OpenAICompatible
from tests import both_backends
from tests.provider.wire.media_setup import (CAT, PDF, PDF64, PNG, PNG64, QUESTION, RADAR, RADAR64,
                                             WEATHER_PARAMETERS, canonical, get_weather, shown)
from tests.provider.wire.openai_client import MODEL, ask, connect
from tests.provider.wire.server import WireServer, fixture

anyio_backend = both_backends.anyio_backend  # every test here runs on asyncio and on trio

CALL = "call_DdmO9pD3xa9XTPNJ32zg2hcA"  # the call openai/tool_call.sse makes
STREAMED = {"stream": True, "stream_options": {"include_usage": True}}


async def test_a_user_turn_with_images_and_a_file_is_a_content_array_in_its_order(wire: WireServer) -> None:
    wire.reply(fixture("openai/text.sse"))
    state = shown(Image(data=PNG), Image(CAT), File(data=PDF, name="notes.pdf"), Text("Be brief."), name="ann")
    async with connect(wire) as provider:
        await Step(provider).turn(state)
    (sent,) = wire.requests
    assert sent.body == canonical({
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "Describe briefly."},
            {"role": "user", "content": [
                {"type": "text", "text": QUESTION},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG64}"}},
                {"type": "image_url", "image_url": {"url": CAT}},
                {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF64}",
                                          "filename": "notes.pdf"}},
                {"type": "text", "text": "Be brief."},
            ], "name": "ann"},
        ],
        **STREAMED,
    }).encode()


async def test_a_tools_picture_follows_its_tool_message_in_a_user_message(wire: WireServer) -> None:
    wire.reply(fixture("openai/tool_call.sse"))
    wire.reply(fixture("openai/text.sse"))
    async with connect(wire) as provider:
        step = Step(provider, tools=[get_weather])
        state = await step.turn(ask())
        assert state[2].parts == (ToolResult(CALL, "get_weather", "Radar for Paris, France (celsius)",
                                             attachments=(Image(data=RADAR),)),)
        await step.turn(state)
    assert wire.requests[1].body == canonical({
        "model": MODEL,
        "messages": [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": CALL, "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"location":"Paris, France","unit":"celsius"}'}}]},
            {"role": "tool", "tool_call_id": CALL, "content": "Radar for Paris, France (celsius)"},
            {"role": "user", "content": [
                {"type": "text", "text": f"Attached to the result of get_weather ({CALL}):"},
                {"type": "image_url", "image_url": {"url": f"data:image/gif;base64,{RADAR64}"}},
            ]},
        ],
        **STREAMED,
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "description": "The weather radar at a place.", "parameters": WEATHER_PARAMETERS}}],
    }).encode()


def messages_of(*turns: Turn) -> Any:
    provider = OpenAICompatible(MODEL, base_url="http://127.0.0.1:9/v1", api_key="k")
    return provider.body(Request(turns))["messages"]


def test_every_result_with_attachments_is_introduced_and_a_tool_turns_own_media_follow_in_order() -> None:
    calls = Turn(Role.ASSISTANT, (ToolCall("a", "plot"), ToolCall("b", "plain"), ToolCall("c", "scan")))
    results = Turn(Role.TOOL, (ToolResult("a", "plot", "", attachments=(Image(CAT),)),
                               ToolResult("b", "plain", "42"),
                               ToolResult("c", "scan", "scanned", attachments=(File(data=PDF),)),
                               Image(data=PNG)))
    assert messages_of(Turn(Role.USER, (Text("go"),)), calls, results)[2:] == [
        {"role": "tool", "tool_call_id": "a", "content": ""},
        {"role": "tool", "tool_call_id": "b", "content": "42"},
        {"role": "tool", "tool_call_id": "c", "content": "scanned"},
        {"role": "user", "content": [
            {"type": "text", "text": "Attached to the result of plot (a):"},
            {"type": "image_url", "image_url": {"url": CAT}},
            {"type": "text", "text": "Attached to the result of scan (c):"},
            {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF64}", "filename": "file.pdf"}},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG64}"}},
        ]},
    ]


def test_turns_without_media_are_sent_as_before() -> None:
    assert messages_of(Turn(Role.USER, (Text("hi"),)), Turn(Role.TOOL, (ToolResult("a", "x", "r"),))) == [
        {"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "a", "content": "r"}]


REFUSED = {
    "a file URL": (Turn(Role.USER, (Text("read"), File("https://example.com/a.pdf"))),
                   "Chat Completions cannot send File(url='https://example.com/a.pdf'): its file inputs take the "
                   "bytes, not a URL"),
    "an attached file URL": (Turn(Role.TOOL, (ToolResult("a", "x", "", attachments=(File("https://x.io/b"),)),)),
                             "Chat Completions cannot send File(url='https://x.io/b')"),
    "an image in an assistant turn": (Turn(Role.ASSISTANT, (Text("look"), Image(CAT))),
                                      f"Chat Completions cannot send Image(url='{CAT}') in assistant turns: images "
                                      "and files go in user turns and tool results"),
    "a file in a system turn": (Turn(Role.SYSTEM, (File(data=PDF),)),
                                f"Chat Completions cannot send {File(data=PDF)!r} in system turns"),
}


@pytest.mark.parametrize(("turn", "message"), REFUSED.values(), ids=REFUSED.keys())
async def test_what_chat_completions_cannot_carry_is_refused_before_sending(wire: WireServer, turn: Turn,
                                                                            message: str) -> None:
    async with connect(wire) as provider:
        with pytest.raises(UsageError) as caught:
            await Step(provider).turn(State().append(Role.USER, Text("hi")).append_turn(turn))
    assert message in str(caught.value)
    assert wire.requests == []
