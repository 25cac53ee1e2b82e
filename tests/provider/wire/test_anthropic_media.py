"""Images and documents as ``Anthropic`` sends them, byte for byte as the loopback server received them: image
and document blocks in a user message, a tool's picture inside its ``tool_result`` content; and what the Messages
API cannot carry, refused before anything is sent."""

from __future__ import annotations

from typing import Any

import pytest

from loop import File, Image, Role, State, Step, Text, ToolCall, ToolResult, Turn, UsageError
from provider._anthropic import messages
from tests import both_backends
from tests.provider.wire.anthropic_setup import ASK, MODEL, START, anthropic, stream
from tests.provider.wire.media_setup import (CAT, NOTES, PAPER, PDF, PDF64, PNG, PNG64, QUESTION, RADAR, RADAR64,
                                             WEATHER_PARAMETERS, canonical, get_weather, shown)
from tests.provider.wire.server import WireServer

anyio_backend = both_backends.anyio_backend  # every test here runs on asyncio and on trio

CALL = "toolu_01T1x1fJ34qAmk2tNTrN7Up6"  # the call anthropic/tool_use.sse makes
CSV = File(data=b"1", media_type="text/csv")


def image(data: str) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}


async def test_a_user_turn_with_images_and_documents_is_blocks_in_its_order(wire: WireServer) -> None:
    wire.reply(stream("text"))
    state = shown(Image(data=PNG), Image(CAT), File(data=PDF, name="report.pdf"), File(PAPER),
                  File(data=NOTES, media_type="text/plain", name="notes.txt"), name="ann")
    async with anthropic(wire) as provider:
        await Step(provider).turn(state)
    (sent,) = wire.requests
    assert sent.path == "/v1/messages"
    assert sent.body == canonical({
        "model": MODEL,
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": f"ann: {QUESTION}"},
            image(PNG64),
            {"type": "image", "source": {"type": "url", "url": CAT}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF64},
             "title": "report.pdf"},
            {"type": "document", "source": {"type": "url", "url": PAPER}},
            {"type": "document",
             "source": {"type": "text", "media_type": "text/plain", "data": "Paris: 18.5 °C, cloudy.\n"},
             "title": "notes.txt"},
        ]}],
        "stream": True,
        "system": "Describe briefly.",
    }).encode()


async def test_a_tools_picture_goes_inside_its_tool_result(wire: WireServer) -> None:
    wire.reply(stream("tool_use"))
    wire.reply(stream("text"))
    async with anthropic(wire) as provider:
        step = Step(provider, tools=[get_weather])
        state = await step.turn(START)
        assert state[2].parts == (ToolResult(CALL, "get_weather", "Radar for San Francisco, CA (fahrenheit)",
                                             attachments=(Image(data=RADAR),)),)
        await step.turn(state)
    assert wire.requests[1].body == canonical({
        "model": MODEL,
        "max_tokens": 4096,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": ASK}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Okay, let's check the weather for San Francisco, CA:"},
                {"type": "tool_use", "id": CALL, "name": "get_weather",
                 "input": {"location": "San Francisco, CA", "unit": "fahrenheit"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": CALL, "content": [
                    {"type": "text", "text": "Radar for San Francisco, CA (fahrenheit)"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": RADAR64}},
                ]}]},
        ],
        "stream": True,
        "tools": [{"name": "get_weather", "description": "The weather radar at a place.",
                   "input_schema": WEATHER_PARAMETERS}],
    }).encode()


def test_a_result_of_only_attachments_has_no_empty_text_block_and_an_error_keeps_its_flag() -> None:
    _, msgs = messages((
        Turn(Role.USER, (Text("go"),)),
        Turn(Role.ASSISTANT, (ToolCall("a", "plot"), ToolCall("b", "scan"))),
        Turn(Role.TOOL, (ToolResult("a", "plot", "", attachments=(Image(CAT),)),
                         ToolResult("b", "scan", "partly unreadable", is_error=True, attachments=(File(data=PDF),)),
                         Image(data=PNG), Text("Compare them."))),
    ))
    assert msgs[2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "a",
         "content": [{"type": "image", "source": {"type": "url", "url": CAT}}]},
        {"type": "tool_result", "tool_use_id": "b", "is_error": True, "content": [
            {"type": "text", "text": "partly unreadable"},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF64}}]},
        image(PNG64),  # a tool turn's own image and text follow the results, in their order
        {"type": "text", "text": "Compare them."},
    ]}


REFUSED = {
    "a csv document": (Turn(Role.USER, (File(data=b"a,b\n", media_type="text/csv", name="t.csv"),)),
                       "Anthropic cannot send File(text/csv, 4 bytes"),
    "a text file by URL": (Turn(Role.USER, (File("https://x.io/a.txt", media_type="text/plain"),)),
                           "Anthropic cannot send File(url='https://x.io/a.txt'): its documents are PDFs (by bytes "
                           "or URL) and text/plain files (by bytes)"),
    "text that is not UTF-8": (Turn(Role.USER, (File(data=b"\xff\xfe", media_type="text/plain"),)),
                               "a text/plain document must be UTF-8"),
    "an attached csv": (Turn(Role.TOOL, (ToolResult("a", "x", "", attachments=(CSV,)),)),
                        "Anthropic cannot send File(text/csv, 1 bytes"),
    "an image in an assistant turn": (Turn(Role.ASSISTANT, (Text("see"), Image(CAT))),
                                      f"Anthropic cannot send Image(url='{CAT}') in assistant turns: images and "
                                      "files go in user turns and tool results"),
    "an image in the system prompt": (Turn(Role.SYSTEM, (Text("Style:"), Image(data=PNG))),
                                      "in system turns: images and files go in user turns"),
}


@pytest.mark.parametrize(("turn", "message"), REFUSED.values(), ids=REFUSED.keys())
async def test_what_the_messages_api_cannot_carry_is_refused_before_sending(wire: WireServer, turn: Turn,
                                                                             message: str) -> None:
    state = State().append_turn(turn) if turn.role is Role.SYSTEM else START.append_turn(turn)
    async with anthropic(wire) as provider:
        with pytest.raises(UsageError) as caught:
            await Step(provider).turn(state)
    assert message in str(caught.value)
    assert wire.requests == []
