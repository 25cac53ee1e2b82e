"""Cassettes: ``Recording`` writes one JSON line per exchange, ``Replay`` serves them back and fails loudly."""

import datetime
import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import anyio
import attrs
import pytest

from cognitive import ReAct
from loop import (
    Finish,
    Options,
    Reasoning,
    ReasoningDelta,
    Request,
    Role,
    State,
    Step,
    Text,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    Turn,
    Usage,
    UsageDelta,
    UsageError,
    UseTool,
    tool,
)
from loop.errors import (
    AuthenticationError,
    OverloadedError,
    ProviderError,
    RateLimitError,
    StreamError,
)
from provider import CassetteMismatch, Function, Recording, Replay, Retry, Scripted, tool_call
from provider.testing import check_provider
from tests.provider.streams import REQUEST, Held, collect


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def no_sleep(seconds: float) -> None:
    pass


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


# -- recording -----------------------------------------------------------------------------------------


async def test_each_exchange_is_written_as_one_line_when_it_completes(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    step = Step(Recording(Scripted(["first answer", "second answer"]), path))
    state = await step.turn(State().append(Role.USER, Text("one")))
    # Readable after the first turn, before the second.
    first = lines(path)
    assert len(first) == 1
    assert first[0]["request"]["turns"] == [{"role": "user", "parts": [{"type": "text", "text": "one"}]}]
    assert first[0]["deltas"] == [{"type": "text", "text": "first answer"}, {"type": "finish", "reason": "stop"}]
    assert "error" not in first[0] and "incomplete" not in first[0]

    await step.turn(state.append(Role.USER, Text("two")))
    both = lines(path)
    assert len(both) == 2 and both[0] == first[0]
    assert [t["role"] for t in both[1]["request"]["turns"]] == ["user", "assistant", "user"]
    assert both[1]["deltas"][0] == {"type": "text", "text": "second answer"}


async def test_recording_passes_the_stream_through_unchanged(tmp_path: Path) -> None:
    direct = await collect(Scripted([[Reasoning("hmm", "sig"), "x" * 40, tool_call("add", {"a": 1}, id="c")]]))
    recorded = await collect(Recording(Scripted([[Reasoning("hmm", "sig"), "x" * 40,
                                                   tool_call("add", {"a": 1}, id="c")]]), tmp_path / "c.jsonl"))
    assert recorded == direct


async def test_the_cassette_directory_is_created(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "c.jsonl"
    await collect(Recording(Scripted(["hi"]), path))
    assert len(lines(path)) == 1


# -- replay reproduces a run ---------------------------------------------------------------------------


async def test_a_react_run_with_tools_replays_to_the_same_final_state(tmp_path: Path) -> None:
    path = tmp_path / "react.jsonl"
    script = Scripted([
        [Reasoning("I should add.", "sig-1"), tool_call("add", {"a": 2, "b": 3}), Usage(10, 5)],
        [tool_call("add", {"a": 5, "b": 10}), tool_call("add", {"a": 1, "b": 1}), Usage(20, 6)],
        ["The answers are 15 and 2.", Usage(30, 7)],
    ])
    start = State().append(Role.SYSTEM, Text("Be brief.")).append(Role.USER, Text("Add things."))
    recorded = await ReAct(Step(Recording(script, path), tools=[add])).run(start)
    assert script.remaining == 0
    assert len(lines(path)) == 3

    replay = Replay(path)
    assert replay.remaining == 3
    replayed = await ReAct(Step(replay, tools=[add])).run(start)
    assert replay.remaining == 0
    assert replayed == recorded
    assert replayed.to_json() == recorded.to_json()  # meta (finish reasons) and ids too
    assert replayed.answer == "The answers are 15 and 2."
    assert [r.content for t in replayed.turns if t.role is Role.TOOL for r in t.tool_results] == ["5", "15", "2"]


async def test_the_same_request_twice_gets_the_exchanges_in_recorded_order(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    recording = Recording(Scripted(["first", "second"]), path)
    assert await collect(recording) == [TextDelta("first"), Finish("stop")]
    assert await collect(recording) == [TextDelta("second"), Finish("stop")]
    replay = Replay(path)
    assert await collect(replay) == [TextDelta("first"), Finish("stop")]
    assert await collect(replay) == [TextDelta("second"), Finish("stop")]


async def test_requests_replayed_in_another_order_than_they_finished_still_find_theirs(tmp_path: Path) -> None:
    # Concurrent streams are written in the order they finish, which need not be the order they start.
    path = tmp_path / "c.jsonl"
    recording = Recording(Function(lambda request: f"answer to {request.turns[0].text}"), path)
    a = Request((Turn(Role.USER, (Text("a"),)),))
    b = Request((Turn(Role.USER, (Text("b"),)),))
    await collect(recording, b)
    await collect(recording, a)
    replay = Replay(path)
    assert await collect(replay, a) == [TextDelta("answer to a"), Finish("stop")]
    assert await collect(replay, b) == [TextDelta("answer to b"), Finish("stop")]
    assert replay.remaining == 0


async def test_a_turns_meta_is_not_part_of_the_request(tmp_path: Path) -> None:
    # Meta is bookkeeping no provider sends to a model; a timestamp in it must neither break the recording
    # (it is not JSON) nor the replay (it differs every run).
    path = tmp_path / "c.jsonl"
    stamped = Request((Turn(Role.USER, (Text("hi"),), {"at": datetime.datetime(2024, 1, 1)}),))
    await collect(Recording(Scripted(["hello"]), path), stamped)
    assert "meta" not in lines(path)[0]["request"]["turns"][0]
    later = Request((Turn(Role.USER, (Text("hi"),), {"at": "another time"}),))
    assert await collect(Replay(path), later) == [TextDelta("hello"), Finish("stop")]


async def test_a_cassette_written_with_turn_meta_still_replays(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    entry = {"request": {"turns": [{"role": "user", "parts": [{"type": "text", "text": "hi"}],
                                    "meta": {"at": "2024-01-01"}}], "tools": [], "options": {}},
             "deltas": [{"type": "text", "text": "hello"}]}
    path.write_text(json.dumps(entry) + "\n", encoding="utf-8")
    assert await collect(Replay(path)) == [TextDelta("hello")]


# -- every delta and every option round-trips ----------------------------------------------------------

EVERY_DELTA = [
    ReasoningDelta("Let me think"),
    ReasoningDelta(" about it.", "sig-abc=="),
    ReasoningDelta("", "sig-only"),
    TextDelta("Héllo ✓ \"quoted\"\n\tand a newline"),
    ToolCallDelta(0, "call_1", "add", '{"a": '),
    ToolCallDelta(1, "call_2", "mul", ""),
    ToolCallDelta(0, arguments_fragment="2, \"b\": 3}"),
    ToolCallDelta(1, None, None, "{}"),
    UsageDelta(Usage(input_tokens=11, output_tokens=22, cache_read_tokens=3, cache_write_tokens=4)),
    UsageDelta(Usage(output_tokens=1)),
    Finish("tool_calls"),
]


async def test_every_delta_type_round_trips_exactly(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"

    async def everything(request: Request) -> AsyncIterator[Any]:
        for delta in EVERY_DELTA:
            yield delta

    assert await collect(Recording(Function(everything), path)) == EVERY_DELTA
    assert [d["type"] for d in lines(path)[0]["deltas"]] == [
        "reasoning", "reasoning", "reasoning", "text", "tool_call", "tool_call", "tool_call", "tool_call",
        "usage", "usage", "finish"]
    replayed = await collect(Replay(path))
    assert replayed == EVERY_DELTA
    assert [type(d) for d in replayed] == [type(d) for d in EVERY_DELTA]


FULL = Request(
    turns=(
        Turn(Role.SYSTEM, (Text("sys"),)),
        Turn(Role.USER, (Text("q"),)),
    ),
    tools=(ToolSpec("add", "Add two integers.", MappingProxyType({
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ("a", "b"),
    })),),
    options=Options(model="m-1", temperature=0.7, max_tokens=64, tool_choice=UseTool("add"),
                    output_schema={"type": "object", "properties": {"answer": {"type": "string",
                                                                               "enum": ("yes", "no")}}},
                    stop=("END", "STOP")),
)


async def test_options_and_tools_round_trip_in_the_request_comparison(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    await collect(Recording(Scripted(["ok"]), path), FULL)
    stored = lines(path)[0]["request"]
    assert stored["options"] == {
        "model": "m-1", "temperature": 0.7, "max_tokens": 64, "tool_choice": {"tool": "add"},
        "output_schema": {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}}},
        "stop": ["END", "STOP"],
    }
    assert stored["tools"][0]["parameters"]["required"] == ["a", "b"]
    assert await collect(Replay(path), FULL) == [TextDelta("ok"), Finish("stop")]


@pytest.mark.parametrize(
    ("options", "where"),
    [
        (Options(tool_choice=UseTool("mul")), "at request.options.tool_choice.tool"),
        (Options(tool_choice="required"), "at request.options.tool_choice"),
        (Options(stop=("END", "HALT")), "at request.options.stop[1]"),
        (Options(stop="END"), "at request.options.stop: recorded 2 items, got 1"),
        (Options(output_schema={"type": "object", "properties": {"answer": {"type": "string",
                                                                           "enum": ["yes", "maybe"]}}}),
         "at request.options.output_schema.properties.answer.enum[1]"),
        (Options(temperature=0.2), "at request.options.temperature"),
        (Options(max_tokens=65), "at request.options.max_tokens"),
        (Options(model="m-2"), "at request.options.model"),
    ],
)
async def test_a_changed_option_is_named_in_the_mismatch(tmp_path: Path, options: Options, where: str) -> None:
    path = tmp_path / "c.jsonl"
    await collect(Recording(Scripted(["ok"]), path), FULL)
    changed = attrs.evolve(FULL, options=FULL.options.merge(options))
    with pytest.raises(CassetteMismatch) as caught:
        await collect(Replay(path), changed)
    assert where in str(caught.value)


async def test_a_removed_option_is_named_in_the_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    await collect(Recording(Scripted(["ok"]), path), FULL)
    with pytest.raises(CassetteMismatch, match=r"at request\.options\.stop: recorded .*missing now"):
        await collect(Replay(path), attrs.evolve(FULL, options=attrs.evolve(FULL.options, stop=None)))


# -- mismatches ----------------------------------------------------------------------------------------


async def test_a_changed_user_message_names_the_first_differing_field(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    await collect(Recording(Scripted(["hello"]), path))
    replay = Replay(path)
    with pytest.raises(CassetteMismatch) as caught:
        await collect(replay, Request((Turn(Role.USER, (Text("hi there"),)),)))
    message = str(caught.value)
    assert "at request.turns[0].parts[0].text" in message
    assert "'hi'" in message and "'hi there'" in message
    assert str(path) in message
    assert isinstance(caught.value, UsageError)
    assert replay.remaining == 1  # a mismatch uses nothing up
    assert await collect(replay) == [TextDelta("hello"), Finish("stop")]


@pytest.mark.parametrize(
    ("request_", "where"),
    [
        (Request((Turn(Role.SYSTEM, (Text("hi"),)),)), "at request.turns[0].role"),
        (Request((Turn(Role.USER, (Text("hi"),)), Turn(Role.USER, (Text("more"),)))),
         "at request.turns: recorded 1 items, got 2"),
        (Request((Turn(Role.USER, (Text("hi"), Text("again"))),)), "at request.turns[0].parts: recorded 1 items"),
        (Request((Turn(Role.USER, (Reasoning("hi"),)),)), "at request.turns[0].parts[0].type"),
        (Request(REQUEST.turns, tools=(add.spec,)), "at request.tools: recorded 0 items, got 1"),
        (Request(REQUEST.turns, options=Options(temperature=1)), "at request.options.temperature: not recorded"),
    ],
)
async def test_other_differences_are_named(tmp_path: Path, request_: Request, where: str) -> None:
    path = tmp_path / "c.jsonl"
    await collect(Recording(Scripted(["hello"]), path))
    with pytest.raises(CassetteMismatch) as caught:
        await collect(Replay(path), request_)
    assert where in str(caught.value)


async def test_an_exhausted_cassette_raises_a_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    await collect(Recording(Scripted(["only one"]), path))
    replay = Replay(path)
    await collect(replay)
    assert replay.remaining == 0
    with pytest.raises(CassetteMismatch, match=r"holds 1 exchanges and all were used; request 2"):
        await collect(replay)


async def test_an_empty_cassette_is_exhausted_at_once(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(CassetteMismatch, match="holds 0 exchanges"):
        await collect(Replay(path))


async def test_a_numerically_equal_option_matches(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    await collect(Recording(Scripted(["ok"]), path), Request(REQUEST.turns, options=Options(temperature=1)))
    assert await collect(Replay(path), Request(REQUEST.turns, options=Options(temperature=1.0))) == [
        TextDelta("ok"), Finish("stop")]


# -- errors --------------------------------------------------------------------------------------------


async def test_a_provider_error_is_recorded_with_the_deltas_before_it_and_replayed(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"

    async def breaks(request: Request) -> AsyncIterator[Any]:
        yield TextDelta("partial")
        raise OverloadedError("busy", status=529, body='{"error": "overloaded"}', retry_after=2.5)

    seen: list[Any] = []
    with pytest.raises(OverloadedError):
        async for delta in Recording(Function(breaks), path).stream(REQUEST):
            seen.append(delta)
    assert seen == [TextDelta("partial")]
    [entry] = lines(path)
    assert entry["deltas"] == [{"type": "text", "text": "partial"}]
    assert entry["error"]["type"] == "OverloadedError"
    assert entry["error"]["status"] == 529

    replayed: list[Any] = []
    with pytest.raises(ProviderError) as caught:
        async for delta in Replay(path).stream(REQUEST):
            replayed.append(delta)
    assert replayed == [TextDelta("partial")]
    error = caught.value
    assert isinstance(error, OverloadedError)  # the same class, so callers decide as they did when recording
    assert "busy" in str(error)
    assert (error.status, error.body, error.retryable, error.retry_after) == (
        529, '{"error": "overloaded"}', True, 2.5)


async def test_an_error_before_any_delta_is_replayed_with_its_class(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    with pytest.raises(AuthenticationError):
        await collect(Recording(Scripted([AuthenticationError("bad key", status=401)]), path))
    assert lines(path)[0]["deltas"] == []
    with pytest.raises(AuthenticationError, match="bad key") as caught:
        await collect(Replay(path))
    assert caught.value.status == 401 and not caught.value.retryable


async def test_retry_over_a_replay_retries_as_it_did_over_the_recording(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    inner = Scripted([RateLimitError("slow", retry_after=0.25), StreamError("cut", retryable=True), "ok"])
    assert await collect(Retry(Recording(inner, path), sleep=sleep)) == [TextDelta("ok"), Finish("stop")]
    assert len(lines(path)) == 3
    assert await collect(Retry(Replay(path), sleep=sleep)) == [TextDelta("ok"), Finish("stop")]
    assert waits[0] == waits[2] == 0.25 and len(waits) == 4


async def test_an_exception_that_is_no_provider_error_is_recorded_as_an_error(tmp_path: Path) -> None:
    # Recorded as a normal (empty) exchange, it would replay as a silent empty answer.
    path = tmp_path / "c.jsonl"

    def crashes(request: Request) -> str:
        raise RuntimeError("a bug in the provider")

    with pytest.raises(RuntimeError):
        await collect(Recording(Function(crashes), path))
    assert lines(path)[0]["error"]["type"] == "RuntimeError"
    with pytest.raises(ProviderError, match="RuntimeError: a bug in the provider"):
        await collect(Replay(path))


# -- early close and cancellation ----------------------------------------------------------------------


async def test_closing_a_recording_early_closes_the_inner_stream_and_marks_the_exchange(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    inner = Held(TextDelta("one"), TextDelta("two"), Finish("stop"))
    stream = Recording(inner, path).stream(REQUEST)
    assert await stream.__anext__() == TextDelta("one")
    await stream.aclose()  # type: ignore[attr-defined]
    assert inner.closed == 1
    [entry] = lines(path)
    assert entry["deltas"] == [{"type": "text", "text": "one"}]
    assert entry["incomplete"] is True

    # A replay that stops where the recording stopped is served; one that reads on is told why it cannot be.
    replay = Replay(path)
    again = replay.stream(REQUEST)
    assert await again.__anext__() == TextDelta("one")
    with pytest.raises(CassetteMismatch, match="cut short"):
        await again.__anext__()


async def test_a_cancelled_recording_still_writes_its_line(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"

    async def hangs(request: Request) -> AsyncIterator[Any]:
        yield TextDelta("started")
        await anyio.sleep_forever()

    with anyio.CancelScope() as scope:
        async for _ in Recording(Function(hangs), path).stream(REQUEST):
            scope.cancel()
    assert scope.cancelled_caught
    [entry] = lines(path)
    assert entry["deltas"] == [{"type": "text", "text": "started"}] and entry["incomplete"] is True


# -- concurrency ---------------------------------------------------------------------------------------


async def test_concurrent_recordings_do_not_interleave_lines(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    # Long lines (well past any buffer size) make a torn write show up as invalid JSON.
    texts = {f"user {n}": f"{n:03d}" * 30_000 for n in range(12)}

    def answer(request: Request) -> str:
        return texts[request.turns[0].text]

    # Two Recording objects on one file: each has its own lock, so only the write itself keeps lines whole.
    recordings = [Recording(Function(answer, chunk_size=4096), path) for _ in range(2)]

    async def one(n: int) -> None:
        request = Request((Turn(Role.USER, (Text(f"user {n}"),)),))
        deltas = await collect(recordings[n % 2], request)
        assert "".join(d.text for d in deltas if type(d) is TextDelta) == texts[f"user {n}"]

    async with anyio.create_task_group() as group:
        for n in range(12):
            group.start_soon(one, n)
    entries = lines(path)
    assert len(entries) == 12
    got = {e["request"]["turns"][0]["parts"][0]["text"]: "".join(d.get("text", "") for d in e["deltas"])
           for e in entries}
    assert got == texts

    replay = Replay(path)
    async with anyio.create_task_group() as group:
        for n in range(12):
            group.start_soon(_replay_one, replay, n, texts)
    assert replay.remaining == 0


async def _replay_one(replay: Replay, n: int, texts: dict[str, str]) -> None:
    request = Request((Turn(Role.USER, (Text(f"user {n}"),)),))
    deltas = await collect(replay, request)
    assert "".join(d.text for d in deltas if type(d) is TextDelta) == texts[f"user {n}"]


# -- bad cassette files --------------------------------------------------------------------------------


def test_a_missing_cassette_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.jsonl"
    with pytest.raises(UsageError, match="nowhere.jsonl") as caught:
        Replay(path)
    assert not isinstance(caught.value, CassetteMismatch)


GOOD = json.dumps({"request": {"turns": [], "tools": [], "options": {}}, "deltas": []})


@pytest.mark.parametrize(
    ("bad_line", "says"),
    [
        ('{"request": {}, "deltas": [', "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"deltas": []}', "missing request"),
        ('{"request": {}}', "missing deltas"),
        ('{"request": "hi", "deltas": []}', "'request' must be an object"),
        ('{"request": {}, "deltas": {"type": "text"}}', "'deltas' must be a list"),
        ('{"request": {}, "deltas": [{"type": "video", "url": "x"}]}', "unknown delta type 'video'"),
        ('{"request": {}, "deltas": [{"text": "no type"}]}', "unknown delta type None"),
        ('{"request": {}, "deltas": ["text"]}', "expected an object, got str"),
        ('{"request": {}, "deltas": [{"type": "text"}]}', "text delta is missing text"),
        ('{"request": {}, "deltas": [{"type": "text", "text": 5}]}', "text.text must be str, got int"),
        ('{"request": {}, "deltas": [{"type": "text", "text": "a", "extra": 1}]}', "unknown fields ['extra']"),
        ('{"request": {}, "deltas": [{"type": "tool_call", "index": "0"}]}', "tool_call.index"),
        ('{"request": {}, "deltas": [{"type": "usage"}]}', "usage delta is missing usage"),
        ('{"request": {}, "deltas": [{"type": "usage", "usage": {"tokens": 3}}]}', "usage part has unknown fields ['tokens']"),
        ('{"request": {}, "deltas": [{"type": "usage", "usage": {"input_tokens": "3"}}]}', "usage.input_tokens must be int"),
        ('{"request": {}, "deltas": [], "error": "boom"}', "'error' must be an object"),
    ],
)
def test_a_bad_line_names_the_file_and_line(tmp_path: Path, bad_line: str, says: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(f"{GOOD}\n\n{bad_line}\n{GOOD}\n", encoding="utf-8")
    with pytest.raises(UsageError) as caught:
        Replay(path)
    message = str(caught.value)
    assert f"{path}:3" in message
    assert says in message


def test_a_cassette_that_is_not_text_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "binary.jsonl"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(UsageError, match="binary.jsonl"):
        Replay(path)


def test_non_providers_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="provider"):
        Recording(object(), tmp_path / "c.jsonl")  # type: ignore[arg-type]


# -- conformance ---------------------------------------------------------------------------------------


async def test_recording_and_replay_keep_the_provider_contract(tmp_path: Path) -> None:
    path = tmp_path / "conformance.jsonl"
    await check_provider(lambda: Recording(Scripted(["Hello there."] * 10), path))

    # A cassette holding ten whole answers to the check's request, as check_provider sends at most ten.
    answers = tmp_path / "answers.jsonl"
    recording = Recording(Scripted(["Hello there."] * 10), answers)
    request = Request((Turn(Role.USER, (Text("Say hello."),)),))
    for _ in range(10):
        await collect(recording, request)
    await check_provider(lambda: Replay(answers))


# -- choices, the answering model, sampling options and run paths ---------------------------------------------

CHOICE_DELTAS = [
    TextDelta("a", 0),
    ReasoningDelta("hmm", "sig", 2),
    TextDelta("b", 1),
    ToolCallDelta(0, "call_1", "add", "{}", 1),
    UsageDelta(Usage(10, 6), "gpt-4o-mini-2024-07-18"),
    UsageDelta(Usage(1, 1), None, 2),
    Finish("stop", 0),
    Finish("tool_calls", 1),
    Finish("length", 2),
]


async def test_choices_and_the_answering_model_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"

    async def choices(request: Request) -> AsyncIterator[Any]:
        for delta in CHOICE_DELTAS:
            yield delta

    assert await collect(Recording(Function(choices), path), REQUEST) == CHOICE_DELTAS
    stored = lines(path)[0]["deltas"]
    # Defaults are left out, so one-choice cassettes read as they always did.
    assert stored[0] == {"type": "text", "text": "a"}
    assert stored[2] == {"type": "text", "text": "b", "choice": 1}
    assert stored[4] == {"type": "usage", "usage": {"input_tokens": 10, "output_tokens": 6, "cache_read_tokens": 0,
                                                    "cache_write_tokens": 0}, "model": "gpt-4o-mini-2024-07-18"}
    assert await collect(Replay(path), REQUEST) == CHOICE_DELTAS


async def test_a_cassette_written_before_choices_and_models_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    entry = {"request": {"turns": [{"role": "user", "parts": [{"type": "text", "text": "hi"}]}], "tools": [],
                         "options": {}},
             "deltas": [{"type": "text", "text": "hello"}, {"type": "usage", "usage": {"input_tokens": 3}},
                        {"type": "finish", "reason": "stop"}]}
    path.write_text(json.dumps(entry) + "\n", encoding="utf-8")
    assert await collect(Replay(path), REQUEST) == [TextDelta("hello"), UsageDelta(Usage(3)), Finish("stop")]


@pytest.mark.parametrize(("delta", "complaint"), [
    ({"type": "text", "text": "a", "choice": "1"}, "text.choice must be int, got str"),
    ({"type": "finish", "reason": "stop", "choice": -1}, "finish.choice must not be negative"),
    ({"type": "usage", "usage": {}, "model": 5}, r"usage.model must be str \| None, got int"),
])
async def test_bad_choice_and_model_fields_are_named(tmp_path: Path, delta: dict[str, Any], complaint: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"request": {}, "deltas": [delta]}) + "\n", encoding="utf-8")
    with pytest.raises(UsageError, match=complaint):
        Replay(path)


SAMPLED = attrs.evolve(REQUEST, options=Options(n=3, seed=7, top_p=0.9, reasoning_effort="high",
                                                extra=MappingProxyType({"logit_bias": {"1": -5}})))


async def test_sampling_options_are_part_of_the_request_but_the_run_path_is_not(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    await collect(Recording(Scripted(["a", "b", "c"]), path), attrs.evolve(SAMPLED, path="Vote/samples"))
    stored = lines(path)[0]["request"]
    assert stored["options"] == {"n": 3, "seed": 7, "top_p": 0.9, "reasoning_effort": "high",
                                 "extra": {"logit_bias": {"1": -5}}}
    assert "path" not in stored
    # Replayed from another place in a run: the path is not what the model saw, so it does not matter.
    replayed = await collect(Replay(path), attrs.evolve(SAMPLED, path="Elsewhere/ReAct"))
    assert [d.choice for d in replayed if type(d) is Finish] == [0, 1, 2]


@pytest.mark.parametrize(("options", "where"), [
    (Options(seed=8), "at request.options.seed"),
    (Options(top_p=0.5), "at request.options.top_p"),
    (Options(extra={"logit_bias": {"1": -6}}), "at request.options.extra.logit_bias.1"),
    (Options(n=2), "at request.options.n"),
])
async def test_a_changed_sampling_option_is_named_in_the_mismatch(tmp_path: Path, options: Options,
                                                                  where: str) -> None:
    path = tmp_path / "c.jsonl"
    await collect(Recording(Scripted(["a", "b", "c"]), path), SAMPLED)
    with pytest.raises(CassetteMismatch) as caught:
        await collect(Replay(path), attrs.evolve(SAMPLED, options=SAMPLED.options.merge(options)))
    assert where in str(caught.value)


async def test_a_speakers_name_is_part_of_the_request(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    named = Request((Turn(Role.USER, (Text("hi"),), name="alice"),))
    await collect(Recording(Scripted(["ok"]), path), named)
    assert lines(path)[0]["request"]["turns"][0]["name"] == "alice"
    with pytest.raises(CassetteMismatch, match=r"at request\.turns\[0\]\.name"):
        await collect(Replay(path), Request((Turn(Role.USER, (Text("hi"),), name="bob"),)))


async def test_several_choices_are_supported_by_a_recording_or_replay_exactly_where_they_can_be(
    tmp_path: Path,
) -> None:
    class OneChoice:
        def stream(self, request: Request) -> AsyncIterator[Any]:
            return Scripted(["x"]).stream(request)

    plain, sampled = tmp_path / "plain.jsonl", tmp_path / "sampled.jsonl"
    assert Recording(Scripted(["a"]), plain).info.choices is True
    assert Recording(OneChoice(), plain).info.choices is False
    await collect(Recording(Scripted(["a"]), plain), REQUEST)
    await collect(Recording(Scripted(["a", "b", "c"]), sampled), SAMPLED)
    assert Replay(plain).info.choices is False
    assert Replay(sampled).info.choices is True
