"""``stop``: validated as OpenAI validates it (400 naming ``stop``), and applied to the final answer only, streamed
or not: the content ends just before the first stop sequence; the agent's own turns are never cut."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from loop import Request, Role
from provider import Function, tool_call
from session.http._openapi import OPENAPI
from session.openai._stop import StopCut, cut
from tests.session.openai.test_api import ASK, add, collect, content, finishes, reasoning, serving
from tests.session.models import echo

CHAT_REQUEST = jsonschema.Draft202012Validator({**json.loads(json.dumps(OPENAPI)),
                                                "$ref": "#/components/schemas/ChatRequest"})

REFUSED = [
    # (stop, response_format, the param the error names)
    (["a", "b", "c", "d", "e"], None, "stop"),
    (123, None, "stop"),
    ({"a": 1}, None, "stop"),
    (True, None, "stop"),
    ([1], None, "stop[0]"),
    (["ok", None], None, "stop[1]"),
    ("", None, "stop"),
    (["a", ""], None, "stop[1]"),
    ("x", {"type": "json_object"}, "stop"),
    (["x"], {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}, "stop"),
]
TAKEN = [(None, None), ([], None), ("x", None), (["a", "b", "c", "d"], None), (["a", "a"], None),
         ("x", {"type": "text"}), ([], {"type": "json_object"}), (None, {"type": "json_object"})]


def body(stop: Any, response_format: Any) -> dict[str, Any]:
    request: dict[str, Any] = {"model": "agent", "messages": ASK, "stop": stop}
    if response_format is not None:
        request["response_format"] = response_format
    return request


@pytest.mark.parametrize(("stop", "response_format", "param"), REFUSED, ids=[json.dumps(c[:2]) for c in REFUSED])
async def test_a_stop_the_endpoint_cannot_apply_is_a_400_naming_it(stop: Any, response_format: Any,
                                                                   param: str) -> None:
    async with serving(Function(lambda r: '{"a": 1}')) as s:
        response = await s.http.post("/v1/chat/completions", json=body(stop, response_format))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and param in error["message"]
    assert not CHAT_REQUEST.is_valid(body(stop, response_format))  # the document refuses it too


@pytest.mark.parametrize(("stop", "response_format"), TAKEN, ids=[json.dumps(c) for c in TAKEN])
async def test_the_document_and_the_endpoint_take_the_same_stops(stop: Any, response_format: Any) -> None:
    assert CHAT_REQUEST.is_valid(body(stop, response_format))
    async with serving(Function(lambda r: '{"a": 1}')) as s:
        response = await s.http.post("/v1/chat/completions", json=body(stop, response_format))
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(("stop", "expected"), [
    ("LO T", "HEL"),  # the sequence spans streamed chunks ("HE", "LL", "O ", "TH" ...)
    (["ERE", "L"], "HE"),  # the first place any sequence starts
    ("HELLO", ""),
    ("nowhere", "HELLO THERE"),
    (["E", "ELLO"], "H"),
])
async def test_stop_cuts_the_answer_the_same_streamed_or_not(stop: Any, expected: str) -> None:
    async with serving(Function(echo, chunk_size=2)) as s:
        reply = await s.client.chat.completions.create(model="agent", messages=ASK, stop=stop)
        chunks = await collect(s.client, stop=stop)
    assert reply.choices[0].message.content == content(chunks) == expected
    assert reply.choices[0].finish_reason == "stop" and finishes(chunks) == ["stop"]


def working(request: Request) -> Any:
    """Writes a line holding the stop sequence before calling a tool, then answers with it too."""
    if request.turns[-1].role is Role.USER:
        return ["Adding. END of plan.", tool_call("add", {"a": 2, "b": 3})]
    return "The sum is 5. END of answer."


async def test_only_the_final_answer_is_cut_never_the_agents_own_turns() -> None:
    async with serving(Function(working, chunk_size=3), tools=(add,)) as s:
        reply = await s.client.chat.completions.create(model="agent", messages=ASK, stop=[" END"])
        chunks = await collect(s.client, stop=" END")
    message = reply.choices[0].message
    assert message.content == content(chunks) == "The sum is 5."
    trace = 'Adding. END of plan.\n→ calling add({"a": 2, "b": 3})\n← add: 5\n'  # the tool still ran
    assert message.model_extra["reasoning_content"] == reasoning(chunks) == trace


def test_a_cut_in_pieces_is_the_cut_of_the_whole() -> None:
    text = "one two <stop> three"
    for stop in [("<stop>",), ("two", "<st"), ("three",), ("absent",), ("e",), ("<<",)]:
        for size in range(1, len(text) + 1):
            pieces = [text[i:i + size] for i in range(0, len(text), size)]
            streaming = StopCut(stop)
            sent = "".join(streaming.feed(piece) for piece in pieces) + streaming.flush()
            assert sent == cut(text, stop), (stop, size)


def test_what_could_still_become_a_stop_sequence_is_held_until_it_cannot() -> None:
    streaming = StopCut(("</answer>",))
    assert streaming.feed("42 </ans") == "42 "
    assert streaming.feed("wer>ignored") == "" and streaming.stopped
    assert streaming.feed("more") == "" and streaming.flush() == ""
    other = StopCut(("</answer>",))
    assert other.feed("a </an") == "a " and other.feed("d b") == "</and b" and other.flush() == ""
    assert StopCut(()).feed("anything") == "anything"
