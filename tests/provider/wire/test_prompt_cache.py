"""Prompt caching on the wire: the ``cache_control`` breakpoints ``Anthropic`` sends (checked against the
Messages API's format, and billed by a loopback server that caches as Anthropic describes), the cache counts
read into ``Usage`` and priced, ``OpenAICompatible``'s ``prompt_cache_key``, and the switches that turn both off."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from cognitive import ReAct, WithBudget
from loop import (PRICES, Budget, Options, Request, Role, State, Step, Text, ToolCall, ToolResult, Turn, Usage,
                  UsageDelta, UsageError, tool)
from provider import Anthropic, OpenAICompatible
from provider._prompt_cache import minimum_tokens, place_breakpoints
from tests.provider.wire.anthropic_cache import CachingAnthropic, PromptCache
from tests.provider.wire.anthropic_setup import MODEL, anthropic, collect, get_time, get_weather, stream
from tests.provider.wire.openai_client import connect
from tests.provider.wire.openai_client import get_weather as weather
from tests.provider.wire.server import WireServer, fixture

EPHEMERAL = {"type": "ephemeral"}
# About 1,100 tokens of instructions: over the 1,024-token minimum of most models on its own.
LONG = ("Work step by step. Cite the tool results you rely on, say which sources disagree, and keep every "
        "figure with its unit. ") * 40


@pytest.fixture(scope="module")
def _caching() -> Iterator[CachingAnthropic]:
    server = CachingAnthropic()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def caching(_caching: CachingAnthropic) -> Iterator[CachingAnthropic]:
    """A loopback Messages API with a prompt cache, emptied for this test."""
    _caching.reset()
    yield _caching
    _caching.reset()


def turn(role: Role, *parts: Any) -> Turn:
    return Turn(role, parts)


def tool_loop(system: str = LONG) -> Request:
    """Two rounds of a tool loop under ``system``: the request for the third answer."""
    return Request((
        turn(Role.SYSTEM, Text(system)),
        turn(Role.USER, Text("Weather in Paris, and the time there?")),
        turn(Role.ASSISTANT, ToolCall("t1", "get_weather", '{"location": "Paris"}')),
        turn(Role.TOOL, ToolResult("t1", "get_weather", "18 degrees celsius, sunny in Paris")),
        turn(Role.ASSISTANT, Text("Now the time."), ToolCall("t2", "get_time", '{"timezone": "Europe/Paris"}')),
        turn(Role.TOOL, ToolResult("t2", "get_time", "14:05 in Europe/Paris")),
    ), (get_weather.spec, get_time.spec))


async def sent(wire: WireServer, request: Request, **settings: Any) -> dict[str, Any]:
    wire.reply(stream("text"))
    async with anthropic(wire, **settings) as provider:
        await collect(provider, request)
    return wire.requests[-1].json()


def marks(body: dict[str, Any]) -> list[str]:
    """Where ``body`` carries ``cache_control``, checked against the Messages API's format: at most four marks,
    each exactly ``{"type": "ephemeral"}`` (the 5-minute cache), on a tool, a system text block, or a message's
    text, tool_use or tool_result block, never on thinking."""
    found = []
    for i, spec in enumerate(body.get("tools") or ()):
        if "cache_control" in spec:
            assert spec["cache_control"] == EPHEMERAL
            found.append(f"tools[{i}]")
    system = body.get("system")
    if isinstance(system, list):
        for i, block in enumerate(system):
            assert block["type"] == "text" and set(block) <= {"type", "text", "cache_control"}
            if "cache_control" in block:
                assert block["cache_control"] == EPHEMERAL
                found.append(f"system[{i}]")
    for m, message in enumerate(body["messages"]):
        for b, block in enumerate(message["content"]):
            if "cache_control" in block:
                assert block["cache_control"] == EPHEMERAL
                assert block["type"] in ("text", "tool_use", "tool_result")
                found.append(f"messages[{m}][{b}]")
    assert len(found) <= 4, found
    return found


def unmarked(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with its marks taken out."""
    return json.loads(json.dumps(body).replace(', "cache_control": {"type": "ephemeral"}', ""))


# -- where the breakpoints go ---------------------------------------------------------------------------------


async def test_a_long_tool_loop_is_marked_at_its_end_the_previous_requests_end_and_system(wire: WireServer) -> None:
    body = await sent(wire, tool_loop())
    assert marks(body) == ["system[0]", "messages[2][0]", "messages[4][0]"]
    assert body["system"] == [{"type": "text", "text": LONG, "cache_control": EPHEMERAL}]
    assert body["messages"][4] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t2", "content": "14:05 in Europe/Paris", "cache_control": EPHEMERAL}]}
    # The marks are all that differs from the request sent without caching (whose system is a string).
    plain = await sent(wire, tool_loop(), prompt_cache=False)
    assert plain["system"] == LONG
    assert unmarked(body) == {**plain, "system": [{"type": "text", "text": LONG}]}


async def test_tools_long_enough_on_their_own_get_the_fourth_mark(wire: WireServer) -> None:
    @tool
    def handbook(section: str) -> str:
        """Reads a section of the handbook."""
        return section

    request = Request(tool_loop("Be terse.").turns, (get_weather.spec, attrs.evolve(handbook.spec, description=LONG)))
    body = await sent(wire, request)
    assert marks(body) == ["tools[1]", "system[0]", "messages[2][0]", "messages[4][0]"]


async def test_a_short_prompt_is_sent_unmarked(wire: WireServer) -> None:
    body = await sent(wire, tool_loop("Be terse."))
    assert marks(body) == [] and body["system"] == "Be terse."


async def test_the_minimum_is_the_models_and_can_be_set(wire: WireServer) -> None:
    assert minimum_tokens("claude-sonnet-4-5") == 1024
    assert minimum_tokens("claude-3-5-haiku-20241022") == minimum_tokens("claude-3-haiku-20240307") == 2048
    assert minimum_tokens("claude-haiku-4-5") == minimum_tokens("anthropic/claude-opus-4-5") == 4096
    # The same 1,100-token prompt is too short for Haiku 4.5 to cache, so it goes unmarked there.
    haiku = Request(tool_loop().turns, tool_loop().tools, Options(model="claude-haiku-4-5"))
    assert marks(await sent(wire, haiku)) == []
    assert marks(await sent(wire, haiku, cache_min_tokens=1024)) == ["system[0]", "messages[2][0]", "messages[4][0]"]
    short = await sent(wire, tool_loop("Be terse."), cache_min_tokens=1)
    assert marks(short) == ["tools[1]", "system[0]", "messages[2][0]", "messages[4][0]"]


async def test_marks_given_in_options_extra_are_kept_and_count_toward_the_four(wire: WireServer) -> None:
    own = [{"type": "text", "text": LONG, "cache_control": EPHEMERAL},
           {"type": "text", "text": "Today is Monday.", "cache_control": EPHEMERAL}]
    extra = {"system": own}
    request = Request(tool_loop().turns, tool_loop().tools, Options(extra=extra))
    body = await sent(wire, request)
    assert marks(body) == ["system[0]", "system[1]", "messages[2][0]", "messages[4][0]"]
    assert extra == {"system": own} and own[1] == {"type": "text", "text": "Today is Monday.",
                                                   "cache_control": EPHEMERAL}, "the caller's data is unchanged"
    full = Options(extra={"system": [{**own[0]}, {**own[1]}, {**own[1], "text": "a"}, {**own[1], "text": "b"}]})
    assert len(marks(await sent(wire, Request(tool_loop().turns, (), full)))) == 4


async def test_prompt_cache_off_sends_no_marks(wire: WireServer) -> None:
    body = await sent(wire, tool_loop(), prompt_cache=False, cache_min_tokens=1)
    assert "cache_control" not in json.dumps(body)


def test_thinking_is_never_marked_and_a_string_content_becomes_a_block() -> None:
    body: dict[str, Any] = {"messages": [
        {"role": "user", "content": LONG},
        {"role": "assistant", "content": [{"type": "text", "text": "Hm."},
                                          {"type": "thinking", "thinking": "...", "signature": "s"}]},
    ]}
    place_breakpoints(body, 1024)
    assert body["messages"][0]["content"] == [{"type": "text", "text": LONG, "cache_control": EPHEMERAL}]
    assert body["messages"][1]["content"][0] == {"type": "text", "text": "Hm.", "cache_control": EPHEMERAL}
    assert "cache_control" not in body["messages"][1]["content"][1]


@pytest.mark.parametrize(("settings", "complaint"), [
    ({"prompt_cache": "yes"}, "prompt_cache"), ({"prompt_cache": None}, "prompt_cache"),
    ({"cache_min_tokens": 0}, "cache_min_tokens"), ({"cache_min_tokens": 1024.0}, "cache_min_tokens"),
])
def test_bad_cache_settings_are_refused(settings: dict[str, Any], complaint: str) -> None:
    with pytest.raises(UsageError, match=complaint):
        Anthropic(MODEL, api_key="test-key", **settings)


# -- billed by a server that caches as Anthropic does ----------------------------------------------------------


@tool
def lookup(query: str) -> str:
    """Looks a query up in the reference library.

    Args:
        query: what to look for.
    """
    return f"Entry for {query}: " + "the figures in the library, with their sources and units. " * 8


def script(server: CachingAnthropic, calls: int) -> None:
    for n in range(calls):
        server.answer({"type": "tool_use", "id": f"toolu_{n:02}", "name": "lookup", "input": {"query": f"item {n}"}})
    server.answer({"type": "text", "text": "Here is what the library says."})


START = State().append(Role.SYSTEM, Text(LONG)).append(Role.USER, Text("Collect the entries for items 0 to 5."))


async def test_a_react_run_reads_its_history_back_from_the_cache_and_prices_it(caching: CachingAnthropic) -> None:
    script(caching, 6)
    budget = Budget(name="run")
    async with Anthropic(MODEL, api_key="test-key", base_url=caching.url) as model:
        step = Step(model, tools=[lookup])
        state = await WithBudget(ReAct(step), budget, step=step).run(START)
    assert state.answer == "Here is what the library says."
    bills = caching.billed
    assert len(bills) == 7 and all(b.marks for b in bills)
    assert bills[0].read == 0 and bills[0].written == bills[0].input_tokens  # the whole first prompt is written
    for before, bill in zip(bills, bills[1:]):
        # Each request reads back all of the one before it and writes only what the last turn added.
        assert bill.read == bill.repeated == before.input_tokens
        assert bill.written == bill.input_tokens - bill.read and bill.uncached == 0
    usages = [t.usage for t in state.turns if t.role is Role.ASSISTANT and t.usage is not None]
    assert usages == [Usage(b.input_tokens, u.output_tokens, b.read, b.written)
                      for b, u in zip(bills, usages, strict=True)]
    # The run's spend, in its outcome, is priced at Anthropic's rates: writes 1.25x input, reads 0.1x.
    price = PRICES["claude-sonnet-4"]
    assert (price.cache_write, price.cached_input) == (3.75, 0.30)
    assert state.outcome is not None
    spent = state.outcome.data["WithBudget"]["spent"]
    assert spent["cost"] == pytest.approx(sum(price.cost(u) for u in usages))
    assert spent["cached_tokens"] == sum(b.read for b in bills)
    uncached = sum(price.cost(Usage(u.input_tokens, u.output_tokens)) for u in usages)
    assert spent["cost"] < uncached


async def test_without_breakpoints_nothing_is_cached(caching: CachingAnthropic) -> None:
    script(caching, 2)
    async with Anthropic(MODEL, api_key="test-key", base_url=caching.url, prompt_cache=False) as model:
        step = Step(model, tools=[lookup])
        await ReAct(step).run(START)
    assert [(b.read, b.written, b.marks) for b in caching.billed] == [(0, 0, 0)] * 3
    assert caching.billed[2].repeated == caching.billed[1].input_tokens  # a cache could have read it all


async def test_the_previous_requests_end_is_read_back_after_a_turn_longer_than_the_apis_lookback(
    caching: CachingAnthropic,
) -> None:
    # Twelve parallel calls and their results add 24 blocks: more than the 20 the API looks back over from the
    # newest mark, so only the mark on the previous request's end finds what that request wrote.
    caching.answer(*({"type": "tool_use", "id": f"toolu_{n:02}", "name": "lookup", "input": {"query": f"item {n}"}}
                     for n in range(12)))
    caching.answer({"type": "text", "text": "Done."})
    async with Anthropic(MODEL, api_key="test-key", base_url=caching.url) as model:
        await ReAct(Step(model, tools=[lookup])).run(START)
    first, second = caching.billed
    assert second.read == first.input_tokens
    # Without that mark, only the tools and system prompt (marked on its own) would be read back.
    cache = PromptCache()
    cache.bill(caching.requests[0].json())
    body = caching.requests[1].json()
    body["messages"][0]["content"][-1].pop("cache_control")
    without = cache.bill(body)
    assert without.read < second.read


async def test_cache_counts_in_the_final_message_delta_replace_the_first_ones(wire: WireServer) -> None:
    # Newer API versions repeat every input count in message_delta, with the 5-minute and 1-hour split of the
    # writes beside them; Usage.input_tokens counts all input, which Anthropic's input_tokens does not.
    final = (b'"usage": {"input_tokens": 12, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 2000, '
             b'"cache_creation": {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 0}, '
             b'"output_tokens": 15}')
    wire.reply(stream("text").replace(b'"usage": {"output_tokens": 15}', final))
    async with anthropic(wire) as provider:
        usage = (await collect(provider))[-2]
    assert usage == UsageDelta(Usage(2312, 15, cache_read_tokens=2000, cache_write_tokens=300), MODEL)
    expected = (12 * 3.00 + 2000 * 0.30 + 300 * 3.75 + 15 * 15.00) / 1e6
    assert PRICES["claude-sonnet-4"].cost(usage.usage) == pytest.approx(expected)


# -- OpenAI-compatible ----------------------------------------------------------------------------------------


async def test_prompt_cache_key_is_sent_when_set_and_one_request_can_override_it(wire: WireServer) -> None:
    ask = Request((turn(Role.USER, Text("Hello?")),))
    chat = Options(extra={"prompt_cache_key": "chat-42"})
    cases: list[tuple[dict[str, Any], Options, str | None]] = [
        ({}, Options(), None),  # off by default
        ({"prompt_cache_key": "agent-7"}, Options(), "agent-7"),
        ({"prompt_cache_key": "agent-7"}, chat, "chat-42"),  # one request's own key wins
        ({}, chat, "chat-42"),
    ]
    for settings, options, expected in cases:
        wire.reply(fixture("openai/text.sse"))
        async with connect(wire, **settings) as provider:
            async for _ in provider.stream(Request(ask.turns, options=options)):
                pass
        assert wire.requests[-1].json().get("prompt_cache_key") == expected


@pytest.mark.parametrize("key", ["", "  ", 7, b"k"])
def test_a_bad_prompt_cache_key_is_refused(key: Any) -> None:
    with pytest.raises(UsageError, match="prompt_cache_key"):
        OpenAICompatible("gpt-4o-mini", api_key="k", prompt_cache_key=key)


async def test_each_openai_request_starts_as_the_previous_one_did(wire: WireServer) -> None:
    # OpenAI caches by prefix on its own: nothing that varies per turn may come before the history.
    wire.reply(fixture("openai/tool_call.sse"))
    wire.reply(fixture("openai/text.sse"))
    start = State().append(Role.SYSTEM, Text(LONG)).append(Role.USER, Text("What is the weather in Paris?"))
    async with connect(wire) as provider:
        step = Step(provider, tools=[weather])
        await step.turn(await step.turn(start))
    first, second = (r.json() for r in wire.requests)
    assert second["messages"][:len(first["messages"])] == first["messages"]
    assert {k: v for k, v in first.items() if k != "messages"} == {k: v for k, v in second.items() if k != "messages"}


async def test_openai_cache_reads_and_a_routers_cache_writes_are_read_into_usage(wire: WireServer) -> None:
    usage = {"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
             "prompt_tokens_details": {"cached_tokens": 1920, "cache_write_tokens": 80}}
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o-mini",
             "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}], "usage": usage}
    wire.reply(b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n")
    async with connect(wire) as provider:
        deltas = [d async for d in provider.stream(Request((turn(Role.USER, Text("Hello?")),)))]
    assert UsageDelta(Usage(2006, 300, cache_read_tokens=1920, cache_write_tokens=80), "gpt-4o-mini") in deltas
