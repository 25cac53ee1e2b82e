"""The JSON form of parts and deltas: one codec for stored turns, the event wire and cassettes."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from loop import Finish, Reasoning, ReasoningDelta, Text, TextDelta, ToolCall, ToolCallDelta, ToolResult, Turn, Usage
from loop import UsageDelta, UsageError
from loop.codec import delta_from_dict, delta_to_dict, part_from_dict, part_to_dict
from loop.codec import _DELTAS, _PARTS

# The forms stored turns and recorded cassettes hold today, to the key order: these must always read back.
PARTS: list[tuple[Any, str]] = [
    (Text("hi"), '{"type": "text", "text": "hi"}'),
    (Reasoning("r", "sig"), '{"type": "reasoning", "text": "r", "signature": "sig"}'),
    (Reasoning("r"), '{"type": "reasoning", "text": "r", "signature": null}'),
    (ToolCall("c1", "add", '{"a": 1}'),
     '{"type": "tool_call", "id": "c1", "name": "add", "arguments": "{\\"a\\": 1}"}'),
    (ToolResult("c1", "add", "2"),
     '{"type": "tool_result", "call_id": "c1", "name": "add", "content": "2", "is_error": false}'),
    (Usage(3, 4), '{"type": "usage", "input_tokens": 3, "output_tokens": 4, "cache_read_tokens": 0, '
                  '"cache_write_tokens": 0}'),
]
DELTAS: list[tuple[Any, str]] = [
    (TextDelta("he"), '{"text": "he", "type": "text"}'),
    (TextDelta("he", 2), '{"text": "he", "choice": 2, "type": "text"}'),
    (ReasoningDelta("hm", "sig"), '{"text": "hm", "signature": "sig", "type": "reasoning"}'),
    (ToolCallDelta(0, "c1", "add", '{"a"'),
     '{"index": 0, "id": "c1", "name": "add", "arguments_fragment": "{\\"a\\"", "type": "tool_call"}'),
    (UsageDelta(Usage(3, 4)), '{"usage": {"input_tokens": 3, "output_tokens": 4, "cache_read_tokens": 0, '
                              '"cache_write_tokens": 0}, "type": "usage"}'),
    (UsageDelta(Usage(3), "gpt-4o", 1), '{"usage": {"input_tokens": 3, "output_tokens": 0, "cache_read_tokens": 0, '
                                        '"cache_write_tokens": 0}, "model": "gpt-4o", "choice": 1, "type": "usage"}'),
    (Finish("stop"), '{"reason": "stop", "type": "finish"}'),
]


@pytest.mark.parametrize(("part", "text"), PARTS, ids=lambda v: type(v).__name__ if not isinstance(v, str) else "")
def test_every_part_is_written_as_it_always_was_and_reads_back(part: Any, text: str) -> None:
    assert json.dumps(part_to_dict(part)) == text
    assert part_from_dict(json.loads(text)) == part


@pytest.mark.parametrize(("delta", "text"), DELTAS, ids=lambda v: type(v).__name__ if not isinstance(v, str) else "")
def test_every_delta_is_written_as_it_always_was_and_reads_back(delta: Any, text: str) -> None:
    assert json.dumps(delta_to_dict(delta)) == text
    assert delta_from_dict(json.loads(text)) == delta


def test_a_turn_writes_its_parts_with_the_codec() -> None:
    turn = Turn("assistant", [part for part, _ in PARTS])
    assert turn.to_dict()["parts"] == [part_to_dict(part) for part, _ in PARTS]
    assert Turn.from_dict(turn.to_dict()) == turn


def test_the_table_names_every_field_of_every_class() -> None:
    for form in (*_PARTS, *_DELTAS):
        fields = {f.name for f in attrs.fields(form.cls)}
        assert set(form.required) | set(form.optional) == fields, form.cls.__name__
        assert form.names == tuple(f.name for f in attrs.fields(form.cls))


def test_a_subclass_is_written_as_the_class_it_extends() -> None:
    class Shout(Text):
        pass

    class Louder(TextDelta):
        pass

    assert part_to_dict(Shout("HI")) == {"type": "text", "text": "HI"}
    assert delta_to_dict(Louder("HI")) == {"text": "HI", "type": "text"}


def test_what_is_not_a_part_or_a_delta_is_refused() -> None:
    with pytest.raises(UsageError, match="is not a part"):
        part_to_dict(TextDelta("x"))  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="is not a delta"):
        delta_to_dict(Text("x"))  # type: ignore[arg-type]


BAD_PARTS: dict[str, tuple[Any, str]] = {
    "not an object": ("hi", "part: expected an object, got str"),
    "unknown type": ({"type": "audio"}, "part: unknown part type 'audio' (expected one of"),
    "a delta's tag only": ({"type": "finish", "reason": "stop"}, "unknown part type 'finish'"),
    "missing": ({"type": "tool_call", "id": "c"}, "part: tool_call part is missing name, arguments"),
    "unknown field": ({"type": "text", "text": "x", "bold": True}, "text part has unknown fields ['bold']"),
    "wrong type": ({"type": "tool_result", "call_id": "c", "name": "t", "content": 1}, "tool_result.content must "
                                                                                        "be str, got int"),
    "a bool for an int": ({"type": "usage", "input_tokens": True}, "usage.input_tokens must be int, got bool"),
}


@pytest.mark.parametrize(("data", "message"), BAD_PARTS.values(), ids=BAD_PARTS.keys())
def test_a_bad_part_names_the_problem(data: Any, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        part_from_dict(data)
    assert message in str(caught.value)


BAD_DELTAS: dict[str, tuple[Any, str]] = {
    "not an object": ([1], "at x: expected an object, got list"),
    "unknown type": ({"type": "tool_result"}, "at x: unknown delta type 'tool_result'"),
    "missing": ({"type": "tool_call"}, "at x: tool_call delta is missing index"),
    "unknown field": ({"type": "finish", "reason": "stop", "why": 1}, "finish delta has unknown fields ['why']"),
    "negative choice": ({"type": "text", "text": "", "choice": -1}, "text.choice must not be negative, got -1"),
    "a bool choice": ({"type": "text", "text": "", "choice": True}, "text.choice must be int, got bool"),
    "usage not an object": ({"type": "usage", "usage": 3}, "usage.usage must be object, got int"),
    "bad usage": ({"type": "usage", "usage": {"output_tokens": "2"}}, "at x, usage: usage.output_tokens must be int"),
}


@pytest.mark.parametrize(("data", "message"), BAD_DELTAS.values(), ids=BAD_DELTAS.keys())
def test_a_bad_delta_names_the_problem_and_where(data: Any, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        delta_from_dict(data, where="at x")
    assert message in str(caught.value)


def test_a_delta_written_before_choice_and_model_existed_reads() -> None:
    assert delta_from_dict({"type": "usage", "usage": {"input_tokens": 3}}) == UsageDelta(Usage(3))
    assert delta_from_dict({"type": "reasoning"}) == ReasoningDelta()
