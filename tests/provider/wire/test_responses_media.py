"""Images and files as ``OpenAIResponses`` sends them, byte for byte as the loopback server received them:
``input_image`` and ``input_file`` items in a user message, a ``function_call_output`` whose ``output`` is an
array when the tool returned a picture; and what the Responses API cannot carry, refused before sending."""

from __future__ import annotations

from typing import Any

import pytest

from loop import File, Image, Request, Role, State, Step, Text, ToolCall, ToolResult, Turn, UsageError
from provider._responses import OpenAIResponses
from tests import both_backends
from tests.provider.wire.media_setup import (CAT, PAPER, PDF, PDF64, PNG, PNG64, QUESTION, RADAR, RADAR64,
                                             WEATHER_PARAMETERS, canonical, get_weather, shown)
from tests.provider.wire.openai_client import ask, get_time
from tests.provider.wire.responses_client import CLIENT_STREAMS, MODEL, connect
from tests.provider.wire.server import WireServer, fixture

anyio_backend = both_backends.anyio_backend  # every test here runs on asyncio and on trio
pytestmark = CLIENT_STREAMS

CALL_W, CALL_T = "call_Wq8nX1pV3rT5yZ7bA9cD2eF4", "call_Hj6kL8mN0pQ2rS4tU6vW8xY0"  # responses/tool_calls.sse's
STATELESS = {"store": False, "include": ["reasoning.encrypted_content"], "stream": True}


def png(url: str = f"data:image/png;base64,{PNG64}") -> dict[str, Any]:
    return {"type": "input_image", "image_url": url, "detail": "auto"}


async def test_a_user_turn_with_images_and_files_is_content_items_in_its_order(wire: WireServer) -> None:
    wire.reply(fixture("responses/text.sse"))
    state = shown(Image(data=PNG), Image(CAT), File(data=PDF, name="report.pdf"), File(PAPER),
                  Text("Be brief."), name="ann")
    async with connect(wire) as provider:
        await Step(provider).turn(state)
    (sent,) = wire.requests
    assert sent.path == "/v1/responses"
    assert sent.body == canonical({
        "model": MODEL,
        "instructions": "Describe briefly.",
        "input": [{"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": f"ann: {QUESTION}"},
            png(),
            png(CAT),
            {"type": "input_file", "filename": "report.pdf", "file_data": f"data:application/pdf;base64,{PDF64}"},
            {"type": "input_file", "file_url": PAPER},
            {"type": "input_text", "text": "Be brief."},
        ]}],
        **STATELESS,
    }).encode()


async def test_a_tools_picture_makes_its_output_an_array_and_plain_text_stays_a_string(wire: WireServer) -> None:
    wire.reply(fixture("responses/tool_calls.sse"))
    wire.reply(fixture("responses/tool_answer.sse"))
    async with connect(wire) as provider:
        step = Step(provider, tools=[get_weather, get_time])
        state = await step.turn(ask("Weather in Paris, and the time in Tokyo?"))
        assert state[2].parts[0] == ToolResult(CALL_W, "get_weather", "Radar for Paris, France (celsius)",
                                               attachments=(Image(data=RADAR),))
        await step.turn(state)
    assert wire.requests[1].body == canonical({
        "model": MODEL,
        "input": [
            {"type": "message", "role": "user", "content": "Weather in Paris, and the time in Tokyo?"},
            {"type": "function_call", "call_id": CALL_W, "name": "get_weather",
             "arguments": '{"location":"Paris, France"}'},
            {"type": "function_call", "call_id": CALL_T, "name": "get_time", "arguments": '{"timezone":"Asia/Tokyo"}'},
            {"type": "function_call_output", "call_id": CALL_W, "output": [
                {"type": "input_text", "text": "Radar for Paris, France (celsius)"},
                {"type": "input_image", "image_url": f"data:image/gif;base64,{RADAR64}", "detail": "auto"},
            ]},
            {"type": "function_call_output", "call_id": CALL_T, "output": "09:30 in Asia/Tokyo"},
        ],
        "tools": [
            {"type": "function", "name": "get_weather", "description": "The weather radar at a place.",
             "parameters": WEATHER_PARAMETERS, "strict": False},
            {"type": "function", "name": "get_time", "description": "The local time in an IANA time zone.",
             "parameters": {"type": "object",
                            "properties": {"timezone": {"type": "string", "description": 'e.g. "Asia/Tokyo".'}},
                            "required": ["timezone"], "additionalProperties": False},
             "strict": True},
        ],
        **STATELESS,
    }).encode()


def items(*turns: Turn) -> Any:
    return OpenAIResponses(MODEL, base_url="http://127.0.0.1:9/v1", api_key="k").body(Request(turns))["input"]


def test_a_result_of_only_attachments_has_no_text_item_and_a_tool_turns_own_media_follow_as_user_content() -> None:
    assert items(Turn(Role.USER, (Text("go"),)),
                 Turn(Role.ASSISTANT, (ToolCall("a", "plot"), ToolCall("b", "scan"))),
                 Turn(Role.TOOL, (ToolResult("a", "plot", "", attachments=(Image(CAT),)),
                                  ToolResult("b", "scan", "", attachments=(File(data=PDF),)),
                                  Image(data=PNG))))[3:] == [
        {"type": "function_call_output", "call_id": "a", "output": [png(CAT)]},
        {"type": "function_call_output", "call_id": "b", "output": [
            {"type": "input_file", "filename": "file.pdf", "file_data": f"data:application/pdf;base64,{PDF64}"}]},
        {"type": "message", "role": "user", "content": [png()]},
    ]


def test_a_user_turn_of_only_an_image_is_one_item_and_text_alone_stays_a_string() -> None:
    assert items(Turn(Role.USER, (Image(data=PNG),)), Turn(Role.USER, (Text("and?"),))) == [
        {"type": "message", "role": "user", "content": [png()]},
        {"type": "message", "role": "user", "content": "and?"},
    ]


REFUSED = {
    "an image in an assistant turn": (Turn(Role.ASSISTANT, (Text("see"), Image(CAT))),
                                      f"the Responses API cannot take Image(url='{CAT}') in assistant turns: images "
                                      "and files go in user turns and tool results"),
    "a file in a later system turn": (Turn(Role.SYSTEM, (Text("Also:"), File(PAPER))),
                                      f"the Responses API cannot take File(url='{PAPER}') in system turns"),
}


@pytest.mark.parametrize(("turn", "message"), REFUSED.values(), ids=REFUSED.keys())
async def test_what_the_responses_api_cannot_carry_is_refused_before_sending(wire: WireServer, turn: Turn,
                                                                             message: str) -> None:
    async with connect(wire) as provider:
        with pytest.raises(UsageError) as caught:
            await Step(provider).turn(State().append(Role.USER, Text("hi")).append_turn(turn))
    assert message in str(caught.value)
    assert wire.requests == []
