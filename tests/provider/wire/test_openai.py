"""``OpenAICompatible`` against recorded Chat Completions streams served by a real HTTP server on 127.0.0.1:
the exact deltas of every fixture, the exact turn a ``Step`` builds from them, how the bytes may arrive, servers
that bend the format, and a whole ``ReAct`` run. The request as sent is in ``test_openai_request.py``, faults in
``test_openai_faults.py`` and ``test_openai_transport.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from cognitive import ReAct
from loop import (
    Finish,
    Options,
    Reasoning,
    ReasoningDelta,
    Role,
    Step,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    Usage,
    UsageDelta,
)
from provider._http import SSEEvent, sse_stream
from provider.testing import check_provider
from tests.provider.wire.openai_client import MODEL, TOOLS, ask, chunk, collect, connect, sse, text_reply
from tests.provider.wire.server import WireServer, fixture

CALL = "call_DdmO9pD3xa9XTPNJ32zg2hcA"
ANSWERED = "gpt-4o-mini-2024-07-18"  # the model the recorded responses name
P0, P1, P2 = "call_uN3Nq5pAbAAAbQgxSIWj1Ucy", "call_7Xp0bNa4ZxVhGrMMAeU0xI3c", "call_fQk9BEdJ1y2mnqh8UKq5SwYZ"
TEXT = ["Hello", "!", " How", " can", " I", " help", " you", " today", "?", " ☕", " Café"]
WEATHER_ARGS = ['{"', "location", '":"', "Paris", ",", " France", '","', "unit", '":"', "c", "elsius", '"}']
JSON_PIECES = ['{"', "city", '":"', "Paris", '","', "temperature", '":', "18", ".5", ',"', "conditions", '":["',
               "cloudy", '","', "windy", '"]}']
REASONING = ["Okay", ",", " the", " user", " wants", " 6", "×", "7", ".", " That", " is", " 42", "."]
ANSWER = ["6", " ×", " 7", " =", " **", "42", "**"]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "temperature": {"type": "number"},
                                           "conditions": {"type": "array", "items": {"type": "string"}}},
          "required": ["city", "temperature", "conditions"], "additionalProperties": False}

# fixture -> (the exact deltas, the parts of the assistant turn a Step builds, its finish reason)
EXPECTED: dict[str, tuple[list[Any], tuple[Any, ...], str]] = {
    "text": ([*map(TextDelta, TEXT), Finish("stop")], (Text("".join(TEXT)),), "stop"),
    "tool_call": (
        [ToolCallDelta(0, CALL, "get_weather", ""), *(ToolCallDelta(0, None, None, a) for a in WEATHER_ARGS),
         UsageDelta(Usage(82, 18), ANSWERED), Finish("tool_calls")],
        (ToolCall(CALL, "get_weather", '{"location":"Paris, France","unit":"celsius"}'), Usage(82, 18)),
        "tool_calls",
    ),
    "parallel_tool_calls": (
        [ToolCallDelta(0, P0, "get_weather", ""), ToolCallDelta(0, None, None, '{"location":'),
         ToolCallDelta(1, P1, "get_weather", ""), ToolCallDelta(0, None, None, ' "Paris"}'),
         ToolCallDelta(1, None, None, '{"location": "To'), ToolCallDelta(2, P2, "get_time", ""),
         ToolCallDelta(2, None, None, '{"timezone": '), ToolCallDelta(1, None, None, 'kyo"}'),
         ToolCallDelta(2, None, None, '"Asia/Tokyo"}'), UsageDelta(Usage(140, 73), ANSWERED),
         Finish("tool_calls")],
        (ToolCall(P0, "get_weather", '{"location": "Paris"}'), ToolCall(P1, "get_weather", '{"location": "Tokyo"}'),
         ToolCall(P2, "get_time", '{"timezone": "Asia/Tokyo"}'), Usage(140, 73)),
        "tool_calls",
    ),
    "usage": (
        [TextDelta("Cached"), TextDelta(" prompt"), TextDelta(" hit."),
         UsageDelta(Usage(2006, 300, cache_read_tokens=1920), ANSWERED), Finish("stop")],
        (Text("Cached prompt hit."), Usage(2006, 300, cache_read_tokens=1920)),
        "stop",
    ),
    "structured_output": (
        [*map(TextDelta, JSON_PIECES), UsageDelta(Usage(95, 17), ANSWERED), Finish("stop")],
        (Text("".join(JSON_PIECES)), Usage(95, 17)),
        "stop",
    ),
    "reasoning": (
        [*map(ReasoningDelta, REASONING), *map(TextDelta, ANSWER), UsageDelta(Usage(14, 64), "deepseek-reasoner"),
         Finish("stop")],
        (Reasoning("".join(REASONING)), Text("".join(ANSWER)), Usage(14, 64)),
        "stop",
    ),
    # Comments, id/retry fields, named events (one not even JSON), vendor and future fields: all ignored.
    "fault_unknown_fields": (
        [TextDelta("Known"), TextDelta(" fields"), UsageDelta(Usage(21, 2), ANSWERED), Finish("stop")],
        (Text("Known fields"), Usage(21, 2)),
        "stop",
    ),
}


@pytest.mark.parametrize("name", list(EXPECTED))
async def test_each_fixture_streams_exactly_its_deltas(wire: WireServer, name: str) -> None:
    wire.reply(fixture(f"openai/{name}.sse"))
    async with connect(wire) as provider:
        assert await collect(provider) == EXPECTED[name][0]
    assert len(wire.requests) == 1


@pytest.mark.parametrize("name", list(EXPECTED))
async def test_a_step_builds_exactly_the_assistant_turn_of_each_fixture(wire: WireServer, name: str) -> None:
    wire.reply(fixture(f"openai/{name}.sse"))
    async with connect(wire) as provider:
        state = await Step(provider, tools=TOOLS).turn(ask())
    _, parts, finish = EXPECTED[name]
    assistant = state[1]
    served = tuple(p for p in assistant.parts if not (isinstance(p, Usage) and p.estimated))
    assert assistant.role is Role.ASSISTANT and served == parts
    if not any(isinstance(p, Usage) for p in parts):  # the fixture reports no usage: it is estimated
        assert assistant.usage is not None and assistant.usage.estimated and assistant.usage.input_tokens > 0
    assert assistant.meta["finish_reason"] == finish
    calls = [p for p in parts if isinstance(p, ToolCall)]
    if calls:  # the step ran every call, concurrently, and answered them in call order
        assert [(r.call_id, r.is_error) for r in state[2].tool_results] == [(c.id, False) for c in calls]
        assert len(state) == 3 and not state.pending_calls
    else:
        assert len(state) == 2 and state.answer == assistant.text


async def test_the_parallel_calls_get_their_results_in_call_order(wire: WireServer) -> None:
    wire.reply(fixture("openai/parallel_tool_calls.sse"))
    async with connect(wire) as provider:
        state = await Step(provider, tools=TOOLS).turn(ask())
    assert state[2].parts == (
        ToolResult(P0, "get_weather", "18.5 celsius, cloudy in Paris"),
        ToolResult(P1, "get_weather", "18.5 celsius, cloudy in Tokyo"),
        ToolResult(P2, "get_time", "09:30 in Asia/Tokyo"),
    )
    assert state.usage == Usage(140, 73)


async def test_structured_output_is_asked_for_and_arrives_as_json_text(wire: WireServer) -> None:
    wire.reply(fixture("openai/structured_output.sse"))
    async with connect(wire) as provider:
        state = await Step(provider).turn(ask(), Options(output_schema=SCHEMA))
    assert json.loads(state.answer or "") == {"city": "Paris", "temperature": 18.5,
                                              "conditions": ["cloudy", "windy"]}
    assert wire.requests[0].json()["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "output", "schema": SCHEMA, "strict": True}}


async def test_reasoning_is_kept_in_the_turn_but_not_sent_back(wire: WireServer) -> None:
    wire.reply(fixture("openai/reasoning.sse"))
    wire.reply(text_reply("ok"))
    async with connect(wire) as provider:
        step = Step(provider)
        state = await step.turn(ask("6 x 7?"))
        await step.turn(state.append(Role.USER, Text("and 6 x 8?")))
    assert wire.requests[1].json()["messages"][1] == {"role": "assistant", "content": "6 × 7 = **42**"}


def arrive(data: bytes, arrival: str) -> list[bytes]:
    """``data`` as the writes of one way a server may send it."""
    if arrival == "7-byte writes":  # splits lines, JSON and the multi-byte characters across writes
        return [data[i:i + 7] for i in range(0, len(data), 7)]
    if arrival == "one write":
        return [data]
    if arrival == "CRLF split between writes":  # every CR ends one write, its LF starts the next
        return [piece + b"\r" for piece in data.replace(b"\n", b"\r\n").split(b"\r")[:-1]] + [b"\n"]
    if arrival == "CR line ends":
        return [data.replace(b"\n", b"\r")]
    if arrival == "a byte order mark first":
        return [b"\xef\xbb\xbf" + data]
    return [e + b"\n\n" for e in data.split(b"\n\n") if e]


@pytest.mark.parametrize("arrival", ["one write per event", "7-byte writes", "one write", "CRLF split between writes",
                                     "CR line ends", "a byte order mark first"])
async def test_the_same_deltas_however_the_bytes_arrive(wire: WireServer, arrival: str) -> None:
    wire.reply(arrive(fixture("openai/text.sse"), arrival))
    async with connect(wire) as provider:
        assert await collect(provider) == EXPECTED["text"][0]


async def test_unicode_line_separators_inside_json_do_not_split_the_line(wire: WireServer) -> None:
    # JSON may carry U+2028, U+2029 and U+0085 unescaped (servers writing raw UTF-8 do); only CR and LF end
    # an event stream's lines.
    text = "one\u2028two\u2029three\x85four"
    wire.reply(f"data: {json.dumps(chunk({'content': text}), ensure_ascii=False)}\n\ndata: [DONE]\n\n".encode())
    async with connect(wire) as provider:
        assert await collect(provider) == [TextDelta(text), Finish("stop")]


async def reads(*pieces: bytes) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


STREAM = "data: é\u2028x\r\n\r\n: c\rdata: a\ndata: b\r\n\nunfinished".encode()


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
async def test_the_parser_ends_lines_only_at_cr_lf_and_crlf_wherever_reads_split(cut: int) -> None:
    events = [e async for e in sse_stream(reads(STREAM[:cut], STREAM[cut:]))]
    # Lines: 1 data, 2 blank, 3 comment, 4 data, 5 data, 6 blank; the unfinished event is dropped. An event
    # is numbered by its last data line, which is where a complaint about its data points.
    assert events == [SSEEvent("message", "é\u2028x", 1), SSEEvent("message", "a\nb", 5)]


async def test_closing_the_parser_closes_what_it_reads() -> None:
    source = reads(b"data: 1\n\n", b"data: 2\n\n")
    events = sse_stream(source)
    assert (await events.__anext__()).data == "1"
    await events.aclose()  # type: ignore[attr-defined]
    assert source.ag_frame is None  # type: ignore[attr-defined]  # finished, not left to the GC


async def test_consecutive_turns_reuse_one_connection(wire: WireServer) -> None:
    addresses: list[Any] = []

    async def note_address(response: httpx.Response) -> None:
        addresses.append(response.extensions["network_stream"].get_extra_info("client_addr"))

    for _ in range(3):
        wire.reply(fixture("openai/usage.sse"))
    async with httpx.AsyncClient(event_hooks={"response": [note_address]}) as client:
        provider = connect(wire, client=client)
        for _ in range(3):
            assert (await collect(provider))[-1] == Finish("stop")
    # The body is read to its end after [DONE], so the connection goes back to the pool.
    assert len(addresses) == 3 and len(set(addresses)) == 1


async def test_the_provider_passes_the_conformance_check(wire: WireServer) -> None:
    for _ in range(16):  # the check sends at most 16 requests in all
        wire.reply(text_reply("Hello", " there."))
    async with httpx.AsyncClient() as client:
        await check_provider(lambda: connect(wire, client=client))
    assert len(wire.requests) == 16


# -- servers that bend the format ---------------------------------------------------------------------------


async def test_tool_calls_without_an_index_or_sharing_one_stay_separate_calls(wire: WireServer) -> None:
    # Some servers send each call whole without "index"; others send every call with index 0.
    whole = [{"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": '{"timezone": "UTC"}'}},
             {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": {"location": "Oslo"}}}]
    wire.reply(sse(chunk({"role": "assistant", "tool_calls": whole[:1]}), chunk({"tool_calls": whole[1:]}),
                   chunk(finish="tool_calls")))
    shared = [{"index": 0, "id": "c3", "function": {"name": "get_time", "arguments": '{"timezone": '}},
              {"index": 0, "function": {"arguments": '"UTC"}'}},
              {"index": 0, "id": "c4", "function": {"name": "get_time", "arguments": '{"timezone": "CET"}'}}]
    wire.reply(sse(*(chunk({"tool_calls": [c]}) for c in shared), chunk(finish="tool_calls")))
    async with connect(wire) as provider:
        first = await Step(provider, tools=TOOLS).turn(ask())
        second = await Step(provider, tools=TOOLS).turn(ask())
    assert first[1].tool_calls == (ToolCall("c1", "get_time", '{"timezone": "UTC"}'),
                                   ToolCall("c2", "get_weather", '{"location": "Oslo"}'))
    assert second[1].tool_calls == (ToolCall("c3", "get_time", '{"timezone": "UTC"}'),
                                    ToolCall("c4", "get_time", '{"timezone": "CET"}'))
    assert not any(r.is_error for s in (first, second) for r in s[2].tool_results)


async def test_a_refusal_is_the_answer_text_and_finishes_as_content_filter(wire: WireServer) -> None:
    wire.reply(sse(chunk({"role": "assistant", "content": None, "refusal": ""}),
                   chunk({"refusal": "I can't help"}), chunk({"refusal": " with that."}), chunk(finish="stop")))
    async with connect(wire) as provider:
        deltas = await collect(provider)
    assert deltas == [TextDelta("I can't help"), TextDelta(" with that."), Finish("content_filter")]


async def test_usage_reported_in_several_chunks_counts_once(wire: WireServer) -> None:
    # vLLM's continuous usage stats: every chunk carries the running total.
    def usage(prompt: int, completion: int) -> dict[str, int]:
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    wire.reply(sse(chunk({"content": "a"}, usage=usage(9, 1)), chunk({"content": "b"}, usage=usage(9, 2)),
                   chunk(finish="stop", usage=usage(9, 3))))
    async with connect(wire) as provider:
        deltas = await collect(provider)
    assert deltas == [TextDelta("a"), TextDelta("b"), UsageDelta(Usage(9, 3), MODEL), Finish("stop")]


# -- a whole ReAct run --------------------------------------------------------------------------------------


async def test_react_runs_tools_over_the_wire_and_sends_their_results_back(wire: WireServer) -> None:
    wire.reply(fixture("openai/parallel_tool_calls.sse"))
    wire.reply(text_reply("Paris: 18.5 °C and cloudy; ", "Tokyo: cloudy, 09:30."))
    async with connect(wire) as provider:
        state = await ReAct(Step(provider, tools=TOOLS)).run(ask("Weather in Paris and Tokyo, and Tokyo's time?"))
    assert state.answer == "Paris: 18.5 °C and cloudy; Tokyo: cloudy, 09:30."
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert not state.degraded and len(wire.requests) == 2
    messages = wire.requests[1].json()["messages"]
    assert messages[1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": P0, "type": "function", "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'}},
        {"id": P1, "type": "function", "function": {"name": "get_weather", "arguments": '{"location": "Tokyo"}'}},
        {"id": P2, "type": "function", "function": {"name": "get_time", "arguments": '{"timezone": "Asia/Tokyo"}'}},
    ]}
    assert messages[2:] == [
        {"role": "tool", "tool_call_id": P0, "content": "18.5 celsius, cloudy in Paris"},
        {"role": "tool", "tool_call_id": P1, "content": "18.5 celsius, cloudy in Tokyo"},
        {"role": "tool", "tool_call_id": P2, "content": "09:30 in Asia/Tokyo"},
    ]
