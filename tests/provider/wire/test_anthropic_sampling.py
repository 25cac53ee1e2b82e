"""``Anthropic`` and the sampling options, provider ``extra`` fields, the answering model and speaker names: what
the loopback server receives, and what is refused before anything is sent."""

from __future__ import annotations

from typing import Any

import pytest

from loop import Finish, Options, Request, Role, Text, TextDelta, Turn, Usage, UsageDelta, UsageError
from provider import Anthropic
from provider._anthropic import messages
from tests.provider.wire.anthropic_setup import MODEL, REQUEST, anthropic, collect, stream
from tests.provider.wire.server import WireServer


async def sent(wire: WireServer, options: Options, **settings: Any) -> dict[str, Any]:
    """The body the server received for the one-question request with ``options``."""
    wire.reply(stream("text"))
    async with anthropic(wire, **settings) as provider:
        await collect(provider, Request(REQUEST.turns, (), options))
    return wire.requests[-1].json()


async def test_top_p_and_extra_fields_are_sent_and_extra_comes_last(wire: WireServer) -> None:
    body = await sent(wire, Options(top_p=0.8, temperature=0.5,
                                    extra={"top_k": 40, "metadata": {"user_id": "u-1"}, "temperature": 0.2}))
    assert body["top_p"] == 0.8 and body["top_k"] == 40 and body["metadata"] == {"user_id": "u-1"}
    assert body["temperature"] == 0.2  # extra wins over what the provider wrote


async def test_a_seed_is_not_part_of_the_messages_api_and_is_left_out(wire: WireServer) -> None:
    body = await sent(wire, Options(seed=7))
    assert "seed" not in body and body == {"model": MODEL, "max_tokens": 4096, "stream": True,
                                           "messages": body["messages"]}


@pytest.mark.parametrize("n", [2, 5])
async def test_several_choices_are_refused_before_anything_is_sent(wire: WireServer, n: int) -> None:
    async with anthropic(wire) as provider:
        assert not provider.info.choices
        with pytest.raises(UsageError, match="one choice per request.*Step.sample"):
            await collect(provider, Request(REQUEST.turns, (), Options(n=n)))
    assert wire.requests == []


async def test_one_choice_is_fine(wire: WireServer) -> None:
    assert "n" not in await sent(wire, Options(n=1))


@pytest.mark.parametrize(("effort", "budget"), [("low", 1024), ("medium", 4096), ("high", 16384)])
async def test_reasoning_effort_turns_thinking_on_with_its_budget(wire: WireServer, effort: str, budget: int) -> None:
    body = await sent(wire, Options(reasoning_effort=effort, temperature=0.5))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert body["max_tokens"] == max(4096, budget + 1)
    assert "temperature" not in body  # the API refuses it with thinking


async def test_reasoning_effort_overrides_the_providers_thinking_budget(wire: WireServer) -> None:
    body = await sent(wire, Options(reasoning_effort="high"), thinking_budget=2048)
    assert body["thinking"]["budget_tokens"] == 16384
    body = await sent(wire, Options(reasoning_effort="minimal", temperature=0.5), thinking_budget=2048)
    assert "thinking" not in body and body["temperature"] == 0.5


async def test_with_thinking_on_only_a_top_p_the_api_allows_is_sent(wire: WireServer) -> None:
    assert "top_p" not in await sent(wire, Options(top_p=0.5), thinking_budget=2048)
    assert (await sent(wire, Options(top_p=0.95), thinking_budget=2048))["top_p"] == 0.95


async def test_the_usage_names_the_model_that_answered(wire: WireServer) -> None:
    wire.reply(stream("text").replace(b'"model": "claude-sonnet-4-5"', b'"model": "claude-sonnet-4-5-20250929"'))
    async with anthropic(wire) as provider:
        deltas = await collect(provider)
    assert deltas[-2:] == [UsageDelta(Usage(25, 15), "claude-sonnet-4-5-20250929"), Finish("stop")]
    assert all(d.choice == 0 for d in deltas)


def test_the_class_documents_what_it_does_with_each_sampling_option() -> None:
    doc = Anthropic.__doc__ or ""
    for said in ("seed", "ignored", "top_p", "reasoning_effort", "1024", "4096", "16384", "minimal", "name"):
        assert said in doc


# -- speaker names ----------------------------------------------------------------------------------------------


def test_a_named_user_or_assistant_turn_has_its_first_text_block_prefixed() -> None:
    _, msgs = messages((
        Turn(Role.SYSTEM, (Text("Referee."),), name="rules"),
        Turn(Role.USER, (Text("I say yes."), Text("Twice.")), name="alice"),
        Turn(Role.USER, (Text("I say no."),), name="carol"),
        Turn(Role.ASSISTANT, (Text("Noted."),), name="bob"),
        Turn(Role.USER, (Text("And you?"),)),
    ))
    assert msgs == [
        {"role": "user", "content": [{"type": "text", "text": "alice: I say yes."}, {"type": "text", "text": "Twice."},
                                     {"type": "text", "text": "carol: I say no."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "bob: Noted."}]},
        {"role": "user", "content": [{"type": "text", "text": "And you?"}]},
    ]


async def test_names_reach_the_wire(wire: WireServer) -> None:
    wire.reply(stream("text"))
    async with anthropic(wire) as provider:
        deltas = await collect(provider, Request((Turn(Role.USER, (Text("Hi"),), name="Dr. Zola"),)))
    assert deltas[0] == TextDelta("Hello")
    assert wire.requests[0].json()["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Dr. Zola: Hi"}]}]
