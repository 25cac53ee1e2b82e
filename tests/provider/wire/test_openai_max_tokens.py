"""Which field carries ``Options.max_tokens``: ``max_completion_tokens`` for OpenAI's reasoning models on OpenAI
itself, ``max_tokens`` for other models and for compatible servers, or the one ``max_tokens_field`` names."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from loop import Finish, Options, Request, TextDelta, UsageError
from provider import OpenAICompatible
from tests.provider.wire.openai_client import KEY, ask, collect, connect
from tests.provider.wire.server import WireServer, fixture

LIMIT = Options(max_tokens=256)
REASONING = ["o1", "o1-mini", "o3", "o3-mini", "o3-pro", "o4-mini", "o4-mini-2025-04-16", "gpt-5", "gpt-5-mini",
             "gpt-5-nano", "gpt-5.1", "ft:o4-mini-2025-04-16:acme::abc123", "ft:gpt-5-mini:acme::abc123"]
OTHERS = ["gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4-turbo", "gpt-3.5-turbo", "ft:gpt-4o-mini:acme::abc123",
          "omni-moderation-latest", "llama3", "qwen2.5:7b"]


def limits(body: dict[str, Any]) -> dict[str, Any]:
    """The output-cap fields of a request body."""
    return {k: v for k, v in body.items() if k in ("max_tokens", "max_completion_tokens")}


def on_openai(model: str, **settings: Any) -> OpenAICompatible:
    return OpenAICompatible(model, api_key=KEY, **settings)


def request(options: Options = LIMIT) -> Request:
    return Request(ask().turns, (), options)


# -- OpenAI itself: the model decides -------------------------------------------------------------------


@pytest.mark.parametrize("model", REASONING)
def test_openai_reasoning_models_get_max_completion_tokens(model: str) -> None:
    assert limits(on_openai(model).body(request())) == {"max_completion_tokens": 256}


@pytest.mark.parametrize("model", OTHERS)
def test_other_openai_models_keep_max_tokens(model: str) -> None:
    assert limits(on_openai(model).body(request())) == {"max_tokens": 256}


def test_the_model_the_request_names_decides_not_the_providers_default() -> None:
    assert limits(on_openai("gpt-4o").body(request(Options(model="o3", max_tokens=256)))) == {
        "max_completion_tokens": 256}
    assert limits(on_openai("o3").body(request(Options(model="gpt-4o", max_tokens=256)))) == {"max_tokens": 256}


def test_without_a_cap_neither_field_is_sent() -> None:
    assert limits(on_openai("o3").body(request(Options()))) == {}
    assert limits(on_openai("gpt-4o").body(request(Options()))) == {}


async def test_a_reasoning_model_on_openai_is_sent_max_completion_tokens_on_the_wire() -> None:
    sent: list[httpx.Request] = []

    def answer(req: httpx.Request) -> httpx.Response:
        sent.append(req)
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              content=fixture("openai/text.sse"))

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        provider = on_openai("o4-mini", client=client)
        deltas = await collect(provider, request())
    assert any(type(d) is TextDelta for d in deltas) and deltas[-1] == Finish("stop")
    [req] = sent
    assert str(req.url) == "https://api.openai.com/v1/chat/completions"  # the mock's, not the network's
    assert limits(json.loads(req.content)) == {"max_completion_tokens": 256}


# -- compatible servers keep max_tokens ---------------------------------------------------------------------


@pytest.mark.parametrize("model", ["o3-mini", "gpt-5", "llama3"])
async def test_a_compatible_server_gets_max_tokens_whatever_the_model(wire: WireServer, model: str) -> None:
    wire.reply(fixture("openai/text.sse"))
    async with connect(wire) as provider:
        await collect(provider, request(Options(model=model, max_tokens=256)))
    assert limits(wire.requests[0].json()) == {"max_tokens": 256}


# -- max_tokens_field says otherwise --------------------------------------------------------------------


async def test_max_tokens_field_names_the_field_for_a_compatible_server(wire: WireServer) -> None:
    wire.reply(fixture("openai/text.sse"))
    async with connect(wire, max_tokens_field="max_completion_tokens") as provider:
        await collect(provider, request())
    assert limits(wire.requests[0].json()) == {"max_completion_tokens": 256}


@pytest.mark.parametrize(("model", "field"), [("o3", "max_tokens"), ("gpt-4o", "max_completion_tokens"),
                                              ("o3", "max_completion_tokens"), ("gpt-4o", "max_tokens")])
def test_max_tokens_field_overrides_the_model_rule_on_openai(model: str, field: str) -> None:
    assert limits(on_openai(model, max_tokens_field=field).body(request())) == {field: 256}


@pytest.mark.parametrize("field", ["max_completion", "MAX_TOKENS", "", "auto", 42, True, ["max_tokens"]])
def test_a_max_tokens_field_that_is_neither_field_is_a_usage_error(field: Any) -> None:
    with pytest.raises(UsageError, match="max_tokens_field must be one of 'max_tokens', 'max_completion_tokens'"):
        OpenAICompatible("gpt-4o", base_url="http://127.0.0.1:9/v1", max_tokens_field=field)

