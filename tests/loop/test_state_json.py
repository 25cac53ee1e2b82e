"""``State.to_json`` / ``State.from_json``: the form stores and checkpoints keep."""

import json
from typing import Any

import pytest

from loop import Reasoning, Role, State, Text, ToolCall, ToolResult, Usage, UsageError


def full_state() -> State:
    return (
        State()
        .append(Role.SYSTEM, Text("You are terse."))
        .append(Role.USER, Text("Grüße 👋 — 東京の天気は?"), meta={"from": "ünïcode", "n": 1})
        .append(
            Role.ASSISTANT,
            Reasoning("need the weather", signature="c2lnbmF0dXJl=="),
            Reasoning("unsigned"),
            Text("Let me check."),
            ToolCall("call_1", "weather", '{"city": "東京"}'),
            ToolCall("call_2", "broken", '{"city": '),
            Usage(12, 34, cache_read_tokens=5, cache_write_tokens=6),
            meta={"finish_reason": "tool_calls", "model": "m-1"},
        )
        .append(
            Role.TOOL,
            ToolResult("call_1", "weather", "晴れ"),
            ToolResult("call_2", "broken", "error: bad JSON", is_error=True),
        )
        .append(Role.ASSISTANT, Text("Sunny ☀"))
        .with_meta({"run": {"id": "r-1", "tags": ["a", "b"]}, "degraded": False, "score": 0.5})
    )


def test_round_trip_of_every_part_type_unicode_and_meta() -> None:
    state = full_state()
    text = state.to_json()
    assert "東京" in text  # written as UTF-8 text, not escapes
    back = State.from_json(text)
    assert back == state
    assert back.meta == state.meta
    assert [t.meta for t in back] == [t.meta for t in state]
    assert back[2].parts[0] == Reasoning("need the weather", signature="c2lnbmF0dXJl==")
    assert back[2].parts[1].signature is None  # type: ignore[union-attr]
    assert back[3].tool_results[1].is_error is True
    assert back.usage == Usage(12, 34, 5, 6)
    assert back.pending_calls == () and back.answer == "Sunny ☀"


def test_round_trip_from_bytes_and_of_the_empty_state() -> None:
    assert State.from_json(full_state().to_json().encode()) == full_state()
    assert State.from_json(State().to_json()) == State()


def test_json_shape_is_versioned() -> None:
    data = json.loads(State().append(Role.USER, Text("x")).to_json())
    assert data == {"version": 2, "meta": {}, "turns": [{"role": "user", "parts": [{"type": "text", "text": "x"}]}]}


def test_to_json_with_meta_that_is_not_json_raises_usage_error() -> None:
    with pytest.raises(UsageError, match="cannot be written as JSON"):
        State().with_meta(tags={"a", "b"}).to_json()
    with pytest.raises(UsageError, match="cannot be written as JSON"):
        State().append(Role.USER, Text("x"), meta={"when": object()}).to_json()


def doc(*turns: Any, meta: Any = None, version: Any = 1) -> str:
    data: dict[str, Any] = {"version": version, "turns": list(turns)}
    if meta is not None:
        data["meta"] = meta
    return json.dumps(data)


def user(*parts: Any, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "parts": list(parts), **extra}


BAD = {
    "invalid JSON": ("{not json", "not valid JSON"),
    "not an object": ("[1, 2]", "expected a JSON object, got list"),
    "wrong version": (doc(version=3), "unsupported format version 3"),
    "missing version": (json.dumps({"turns": []}), "unsupported format version None"),
    "turns not a list": (json.dumps({"version": 1, "turns": {"0": {}}}), "'turns' must be a list"),
    "turns missing": (json.dumps({"version": 1}), "'turns' must be a list"),
    "meta not an object": (doc(meta=[1]), "state: 'meta' must be an object"),
    "turn not an object": (doc("hello"), "turn 0: expected an object, got str"),
    "unknown role": (doc(user(), {"role": "wizard", "parts": []}), "turn 1: unknown role 'wizard'"),
    "missing role": (doc({"parts": []}), "turn 0: unknown role None"),
    "parts not a list": (doc(user() | {"parts": "hi"}), "turn 0: 'parts' must be a list"),
    "turn meta not an object": (doc(user(meta="x")), "turn 0: 'meta' must be an object"),
    "part not an object": (doc(user("hi")), "turn 0, part 0: expected an object, got str"),
    "unknown part type": (doc(user({"type": "audio", "url": "x"})), "unknown part type 'audio'"),
    "missing part type": (doc(user({"text": "x"})), "unknown part type None"),
    "missing field": (doc(user({"type": "tool_call", "id": "c", "name": "t"})), "tool_call part is missing arguments"),
    "unknown field": (doc(user({"type": "text", "text": "x", "bold": True})), "unknown fields ['bold']"),
    "text not a string": (doc(user({"type": "text", "text": 5})), "text.text must be str, got int"),
    "signature not a string": (
        doc(user({"type": "reasoning", "text": "r", "signature": 1})), "reasoning.signature must be str | None"),
    "is_error not a bool": (
        doc(user({"type": "tool_result", "call_id": "c", "name": "t", "content": "x", "is_error": "yes"})),
        "tool_result.is_error must be bool, got str"),
    "tokens not an int": (doc(user({"type": "usage", "input_tokens": "3"})), "usage.input_tokens must be int"),
    "tokens a bool": (doc(user({"type": "usage", "output_tokens": True})), "usage.output_tokens must be int"),
}


@pytest.mark.parametrize(("text", "message"), BAD.values(), ids=BAD.keys())
def test_from_json_names_the_problem(text: str, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        State.from_json(text)
    assert message in str(caught.value)


def test_from_json_points_at_the_turn_and_part() -> None:
    good = {"role": "user", "parts": [{"type": "text", "text": "ok"}]}
    bad = {"role": "assistant", "parts": [{"type": "text", "text": "ok"}, {"type": "tool_call", "id": "c"}]}
    with pytest.raises(UsageError, match=r"^turn 1, part 1: tool_call part is missing name, arguments$"):
        State.from_json(doc(good, bad))


def test_a_version_1_document_moves_its_run_results_onto_the_last_answer() -> None:
    old = {"version": 1, "meta": {"user": "ada", "degraded": True, "degraded_reason": "cap",
                                  "verification": {"retries": 1}},
           "turns": [{"role": "user", "parts": [{"type": "text", "text": "q"}]},
                     {"role": "assistant", "parts": [{"type": "text", "text": "a"}]}]}
    state = State.from_json(json.dumps(old))
    assert state.meta == {"user": "ada"}
    assert state.outcome is not None and state.degraded and state.outcome.reason == "cap"
    assert state.outcome.data == {"WithVerification": {"retries": 1}}
    assert json.loads(state.to_json())["version"] == 2


def test_a_version_2_document_keeps_meta_keys_that_look_like_old_run_results() -> None:
    state = State().append(Role.USER, Text("q")).with_meta(degraded=False, verification="mine")
    assert State.from_json(state.to_json()).meta == {"degraded": False, "verification": "mine"}
