"""``Scripted``: every reply form, the deltas it streams, its bookkeeping, and a real ``Step`` on top of it."""

from typing import Any

import pytest

import provider
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
    ToolCall,
    ToolCallDelta,
    ToolResult,
    Turn,
    Usage,
    UsageDelta,
    UsageError,
    tool,
)
from loop.errors import ProviderError, ScriptExhausted
from provider import Scripted, tool_call
from tests.provider.streams import collect


def test_the_offline_names_are_exported() -> None:
    # A subset: the wire providers are exported beside these and are tested with them.
    assert {"Function", "Reply", "ReplyFunction", "Scripted", "tool_call"} <= set(provider.__all__)
    assert all(hasattr(provider, name) for name in provider.__all__)


# -- reply forms ---------------------------------------------------------------------------------------


async def test_a_string_is_a_text_reply_that_stops() -> None:
    assert await collect(Scripted(["Hello"])) == [TextDelta("Hello"), Finish("stop")]


@pytest.mark.parametrize(
    ("part", "expected"),
    [
        (Text("plain"), [TextDelta("plain")]),
        (Reasoning("hmm", "sig-1"), [ReasoningDelta("hmm", "sig-1")]),
        (Usage(5, 7), [UsageDelta(Usage(5, 7))]),
    ],
)
async def test_one_part_is_a_whole_reply(part: Any, expected: list[Any]) -> None:
    assert await collect(Scripted([part])) == [*expected, Finish("stop")]


async def test_one_tool_call_part_finishes_with_tool_calls() -> None:
    deltas = await collect(Scripted([ToolCall("call_x", "ping", "{}")]))
    assert deltas[-1] == Finish("tool_calls")
    assert deltas[0] == ToolCallDelta(0, "call_x", "ping", "{}"[:1])


async def test_a_sequence_mixes_strings_and_parts_in_order() -> None:
    reply = ["Let me think.", Reasoning("2+3", "sig"), Text(" Adding."), tool_call("add", {"a": 2}, id="c1"),
             Usage(10, 3)]
    deltas = await collect(Scripted([reply], chunk_size=100))
    args = '{"a": 2}'
    assert deltas == [
        TextDelta("Let me think."),
        ReasoningDelta("2+3", "sig"),
        TextDelta(" Adding."),
        ToolCallDelta(0, "c1", "add", args[:4]),
        ToolCallDelta(0, None, None, args[4:]),
        UsageDelta(Usage(10, 3)),
        Finish("tool_calls"),
    ]


async def test_a_tuple_is_a_sequence_too() -> None:
    assert await collect(Scripted([("a", "b")])) == [TextDelta("a"), TextDelta("b"), Finish("stop")]


async def test_an_exception_is_raised_in_place_of_a_response() -> None:
    error = ProviderError("overloaded", status=529, retryable=True)
    p = Scripted([error, "recovered"])
    with pytest.raises(ProviderError) as caught:
        await collect(p)
    assert caught.value is error
    assert p.used == 1
    assert await collect(p) == [TextDelta("recovered"), Finish("stop")]


# -- streaming -----------------------------------------------------------------------------------------


async def test_text_streams_in_chunks_of_chunk_size() -> None:
    deltas = await collect(Scripted(["abcdefghij"], chunk_size=4))
    assert deltas == [TextDelta("abcd"), TextDelta("efgh"), TextDelta("ij"), Finish("stop")]


async def test_a_tool_call_streams_a_header_then_argument_fragments() -> None:
    call = tool_call("search", {"query": "weather in Paris", "limit": 3})
    deltas = await collect(Scripted([call]))
    fragments = [d for d in deltas if type(d) is ToolCallDelta]
    assert len(fragments) == 2
    head, rest = fragments
    assert (head.index, head.name) == (0, "search") and head.id
    assert (rest.index, rest.id, rest.name) == (0, None, None)
    assert head.arguments_fragment + rest.arguments_fragment == call.arguments


async def test_several_tool_calls_get_consecutive_indexes() -> None:
    deltas = await collect(Scripted([[tool_call("a"), "between", tool_call("b", "not json")]]))
    headers = [d for d in deltas if type(d) is ToolCallDelta and d.name]
    assert [(d.index, d.name) for d in headers] == [(0, "a"), (1, "b")]
    raw = "".join(d.arguments_fragment for d in deltas if type(d) is ToolCallDelta and d.index == 1)
    assert raw == "not json"  # malformed arguments pass through untouched


async def test_reasoning_carries_its_signature_on_the_last_fragment() -> None:
    deltas = await collect(Scripted([Reasoning("abcdefghij", "sig-9")], chunk_size=4))
    assert deltas == [ReasoningDelta("abcd"), ReasoningDelta("efgh"), ReasoningDelta("ij", "sig-9"), Finish("stop")]


async def test_tool_calls_without_an_id_get_unique_ids() -> None:
    p = Scripted([[tool_call("a"), tool_call("b")], tool_call("c"), tool_call("d", id="mine")])
    ids = []
    for _ in range(3):
        ids += [d.id for d in await collect(p) if type(d) is ToolCallDelta and d.id]
    assert ids[-1] == "mine"
    assert all(ids) and len(set(ids)) == 4


# -- bookkeeping ---------------------------------------------------------------------------------------


async def test_requests_records_every_request_in_order() -> None:
    p = Scripted(["one", "two"], chunk_size=2)
    first = Request((Turn(Role.USER, (Text("a"),)),), options=Options(temperature=0.5))
    second = Request((Turn(Role.USER, (Text("b"),)),))
    await collect(p, first)
    await collect(p, second)
    with pytest.raises(ScriptExhausted):
        await collect(p, first)
    assert p.requests == [first, second, first]


async def test_used_and_remaining_count_the_replies_handed_out() -> None:
    p = Scripted(["a", "b", "c"])
    assert (p.used, p.remaining) == (0, 3)
    await collect(p)
    assert (p.used, p.remaining) == (1, 2)
    await collect(p)
    await collect(p)
    assert (p.used, p.remaining) == (3, 0)
    assert repr(p) == "Scripted(used=3, remaining=0)"


async def test_running_out_raises_script_exhausted_naming_how_many_were_used() -> None:
    p = Scripted(["a", "b"])
    await collect(p)
    await collect(p)
    with pytest.raises(ScriptExhausted, match="all 2 were used") as caught:
        await collect(p)
    assert caught.value.used == 2
    assert isinstance(caught.value, ProviderError)
    assert (p.used, p.remaining) == (2, 0)


async def test_an_empty_script_is_exhausted_at_once() -> None:
    with pytest.raises(ScriptExhausted) as caught:
        await collect(Scripted([]))
    assert caught.value.used == 0


# -- misuse --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("replies", "where"),
    [(["ok", 42], "reply 1"), ([["ok", object()]], "reply 0"), (["a", "b", {"text": "x"}], "reply 2"),
     ([ValueError], "reply 0")],
)
def test_invalid_replies_are_rejected_at_construction_naming_the_reply(replies: list[Any], where: str) -> None:
    with pytest.raises(UsageError, match=where):
        Scripted(replies)


@pytest.mark.parametrize("replies", ["just one reply", b"bytes", 5, None])
def test_a_script_must_be_a_list_of_replies(replies: Any) -> None:
    with pytest.raises(UsageError, match="list of replies"):
        Scripted(replies)


@pytest.mark.parametrize("chunk_size", [0, -3, 1.5, True, "4", None])
def test_chunk_size_must_be_a_positive_integer(chunk_size: Any) -> None:
    with pytest.raises(UsageError, match="chunk_size"):
        Scripted(["x"], chunk_size=chunk_size)


# -- through a Step ------------------------------------------------------------------------------------


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_a_step_builds_the_turns_from_the_streamed_replies() -> None:
    script = Scripted(
        [
            [Reasoning("I should add.", "sig"), "Adding now.", tool_call("add", {"a": 2, "b": 3}), Usage(20, 8)],
            ["The sum is ", "5.", Usage(30, 4)],
        ],
        chunk_size=3,
    )
    step = Step(script, tools=[add])
    state = State().append(Role.USER, Text("What is 2 + 3?"))
    state = await step.turn(state)
    assistant, results = state.turns[1:]
    call = assistant.tool_calls[0]
    assert assistant.parts == (Reasoning("I should add.", "sig"), Text("Adding now."),
                               ToolCall(call.id, "add", '{"a": 2, "b": 3}'), Usage(20, 8))
    assert assistant.meta["finish_reason"] == "tool_calls"
    assert results.role is Role.TOOL and results.parts == (ToolResult(call.id, "add", "5"),)

    state = await step.turn(state)
    assert state.answer == "The sum is 5."
    assert state.last.meta["finish_reason"] == "stop"
    assert state.usage == Usage(50, 12)
    assert script.remaining == 0
    assert [len(r.turns) for r in script.requests] == [1, 3]
    assert script.requests[1].tools[0].name == "add"


async def test_a_step_turn_raises_the_scripted_exception() -> None:
    step = Step(Scripted([ProviderError("boom", status=500)]))
    with pytest.raises(ProviderError, match="boom"):
        await step.turn(State().append(Role.USER, Text("hi")))


# -- scripts per run path ------------------------------------------------------------------------------------


def at(path: str, n: int | None = None) -> Request:
    return Request((Turn(Role.USER, (Text("q"),)),), options=Options(n=n), path=path)


async def test_each_request_takes_its_reply_from_the_longest_matching_key() -> None:
    p = Scripted({
        "": ["main 1", "main 2"],
        "Vote/sample 1/": ["s1 a", "s1 b"],
        "Vote/sample 2/": ["s2 a"],
        "Vote/": ["vote"],
    })
    # Whatever order the branches ask in, each gets its own script's next reply.
    order = ["Vote/sample 2/ReAct", "Vote/sample 1/ReAct", "WithBudget/ReAct", "Vote/sample 1/ReAct", "Vote/judge",
             ""]
    texts = [(await collect(p, at(path)))[0].text for path in order]
    assert texts == ["s2 a", "s1 a", "main 1", "s1 b", "vote", "main 2"]
    assert (p.used, p.remaining) == (6, 0)
    assert [r.path for r in p.requests] == order


async def test_keys_are_plain_string_prefixes() -> None:
    p = Scripted({"Vote/sample 1": ["one"], "Vote/sample 10": ["ten"]})
    assert (await collect(p, at("Vote/sample 10/ReAct")))[0] == TextDelta("ten")
    assert (await collect(p, at("Vote/sample 1/ReAct")))[0] == TextDelta("one")


async def test_a_path_no_key_matches_is_a_usage_error_naming_the_path_and_the_keys() -> None:
    p = Scripted({"Vote/sample 1/": ["a"], "Vote/sample 2/": ["b"]})
    with pytest.raises(UsageError, match=r"run path 'Other/ReAct'.*keys: 'Vote/sample 1/', 'Vote/sample 2/'"):
        await collect(p, at("Other/ReAct"))
    assert p.used == 0 and len(p.requests) == 1


async def test_running_out_names_the_script() -> None:
    p = Scripted({"": ["main"], "Vote/": ["v"]})
    await collect(p, at("Vote/sample 1"))
    with pytest.raises(ScriptExhausted, match=r"script 'Vote/'.*all 1 were used.*run path 'Vote/sample 2'") as caught:
        await collect(p, at("Vote/sample 2"))
    assert caught.value.used == 1
    assert (p.used, p.remaining) == (1, 1)


def test_a_list_is_the_default_script() -> None:
    assert Scripted(["a", "b"]).remaining == 2
    with pytest.raises(UsageError, match=r"script 'x': reply 1"):
        Scripted({"x": ["ok", 42]})
    with pytest.raises(UsageError, match="list of replies"):
        Scripted({"x": "not a list"})
    with pytest.raises(UsageError, match="keyed by run path"):
        Scripted({3: ["a"]})


# -- several choices -----------------------------------------------------------------------------------------


async def test_several_choices_take_n_replies_in_order_each_tagged_with_its_choice() -> None:
    p = Scripted([["first", Usage(5, 1)], tool_call("add", {"a": 1}, id="c1"), "third", "left over"])
    assert p.info.choices is True
    deltas = await collect(p, at("", n=3))
    args = '{"a": 1}'
    assert deltas == [
        TextDelta("first", 0), ToolCallDelta(0, "c1", "add", args[:4], 1), TextDelta("third", 2),
        UsageDelta(Usage(5, 1), None, 0), ToolCallDelta(0, None, None, args[4:], 1),
        Finish("stop", 0), Finish("tool_calls", 1), Finish("stop", 2),
    ]
    assert (p.used, p.remaining) == (3, 1)
    assert await collect(p, at("")) == [TextDelta("left over"), Finish("stop")]


async def test_several_choices_from_a_path_script() -> None:
    p = Scripted({"": ["main"], "Vote/": ["a", "b"]})
    deltas = await collect(p, at("Vote/samples", n=2))
    assert [(d.text, d.choice) for d in deltas if type(d) is TextDelta] == [("a", 0), ("b", 1)]


async def test_too_few_replies_for_the_choices_raise_without_using_any() -> None:
    p = Scripted(["a", "b"])
    with pytest.raises(ScriptExhausted, match=r"0 of 2 were used.*asked for 3 \(one per choice\)"):
        await collect(p, at("", n=3))
    assert p.remaining == 2


async def test_an_exception_among_the_choices_is_raised_in_place_of_the_response() -> None:
    error = ProviderError("overloaded", status=529)
    p = Scripted(["a", error, "c"])
    with pytest.raises(ProviderError) as caught:
        await collect(p, at("", n=3))
    assert caught.value is error and p.used == 3
