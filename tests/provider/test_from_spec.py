"""``from_spec``: the provider a short string names, its key checks, and the forms it refuses."""

import json
from typing import Any

import httpx
import pytest

from loop import Finish, Options, Request, Role, Text, TextDelta, Turn, UsageError
from provider import Anthropic, OpenAICompatible, from_spec
from provider._spec import FORMS
from tests.provider.streams import collect


OPENAI_SSE = (
    'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant",'
    '"content":"Hello from the mock"},"finish_reason":null}]}\n\n'
    'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},'
    '"finish_reason":"stop"}]}\n\n'
    "data: [DONE]\n\n"
)

ANTHROPIC_SSE = (
    'event: message_start\ndata: {"type":"message_start","message":{"id":"m1","type":"message",'
    '"role":"assistant","content":[],"usage":{"input_tokens":3,"output_tokens":1}}}\n\n'
    'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    '"content_block":{"type":"text","text":""}}\n\n'
    'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    '"delta":{"type":"text_delta","text":"Hello from the mock"}}\n\n'
    'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
    '"usage":{"output_tokens":4}}\n\n'
    'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)


class Mock:
    """An ``httpx.AsyncClient`` on a ``MockTransport`` that answers every request with ``body`` as SSE."""

    def __init__(self, body: str) -> None:
        self.requests: list[httpx.Request] = []
        self._body = body
        self.client = httpx.AsyncClient(transport=httpx.MockTransport(self._handle))

    def _handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=self._body)


# -- the forms -----------------------------------------------------------------------------------------


def test_openai_gives_an_openai_provider_for_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    made = from_spec("openai:gpt-4o-mini")
    assert isinstance(made, OpenAICompatible)
    assert made.model == "gpt-4o-mini"
    assert made.base_url == "https://api.openai.com/v1"


@pytest.mark.parametrize(("spec", "variable", "key"), [("openai:m", "OPENAI_BASE_URL", "OPENAI_API_KEY"),
                                                      ("anthropic:m", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY")])
def test_a_base_url_in_the_environment_points_the_provider_elsewhere(
    monkeypatch: pytest.MonkeyPatch, spec: str, variable: str, key: str
) -> None:
    monkeypatch.setenv(key, "k")
    monkeypatch.setenv(variable, "http://127.0.0.1:9/v1")
    assert from_spec(spec).base_url == "http://127.0.0.1:9/v1"
    for bad in ("not a url", "ftp://127.0.0.1/v1", "http://"):
        monkeypatch.setenv(variable, bad)
        with pytest.raises(UsageError, match=f"{variable}=.* is not an http"):
            from_spec(spec)
    monkeypatch.setenv(variable, "  ")
    assert from_spec(spec).base_url.startswith("https://api.")


def test_openai_without_a_key_fails_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(UsageError, match="OPENAI_API_KEY"):
        from_spec("openai:gpt-4o-mini")
    monkeypatch.setenv("OPENAI_API_KEY", "")
    with pytest.raises(UsageError, match="OPENAI_API_KEY"):
        from_spec("openai:gpt-4o-mini")


def test_anthropic_gives_an_anthropic_provider_for_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    made = from_spec("anthropic:claude-sonnet-4-5")
    assert isinstance(made, Anthropic)
    assert made.model == "claude-sonnet-4-5"


def test_anthropic_without_a_key_fails_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # the other provider's key does not count
    with pytest.raises(UsageError, match="ANTHROPIC_API_KEY"):
        from_spec("anthropic:claude-sonnet-4-5")


def test_openai_compatible_takes_the_base_url_and_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    made = from_spec("openai-compatible:llama3@http://127.0.0.1:11434/v1")
    assert isinstance(made, OpenAICompatible)
    assert made.model == "llama3"
    assert made.base_url == "http://127.0.0.1:11434/v1"


@pytest.mark.parametrize(
    ("spec", "model", "base_url"),
    [
        ("openai-compatible:org/model@v2@http://127.0.0.1:8000/v1", "org/model@v2", "http://127.0.0.1:8000/v1"),
        ("openai-compatible:m@https://user@example.test/v1/", "m", "https://user@example.test/v1"),
        ("  openai-compatible:qwen2.5:7b@http://localhost:8080/v1  ", "qwen2.5:7b", "http://localhost:8080/v1"),
    ],
)
def test_the_model_ends_at_the_at_sign_that_starts_the_url(spec: str, model: str, base_url: str) -> None:
    made = from_spec(spec)
    assert isinstance(made, OpenAICompatible)
    assert (made.model, made.base_url) == (model, base_url)


@pytest.mark.parametrize(
    "spec",
    [
        "gpt-4o-mini",
        "",
        "openai:",
        "openai:   ",
        "anthropic:",
        ":gpt-4o-mini",
        "mistral:large",
        "OPENAI-ish:gpt",
        "openai-compatible:llama3",
        "openai-compatible:llama3@",
        "openai-compatible:@http://127.0.0.1:8000/v1",
        "openai-compatible:llama3@127.0.0.1:8000/v1",
        "openai-compatible:llama3@ftp://127.0.0.1/v1",
        "openai-compatible:",
        None,
        42,
        b"openai:gpt-4o-mini",
        ("openai", "gpt-4o-mini"),
    ],
)
def test_a_bad_spec_raises_usage_error_listing_the_accepted_forms(spec: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    with pytest.raises(UsageError) as caught:
        from_spec(spec)
    message = str(caught.value)
    assert all(form in message for form in FORMS), message


def test_the_accepted_forms_are_the_four_documented_ones() -> None:
    assert FORMS == ("openai:MODEL", "anthropic:MODEL", "openai-compatible:MODEL@BASE_URL",
                     "openai-responses:MODEL[@BASE_URL]")


def test_openai_responses_goes_to_openai_the_environment_or_the_url_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from provider import OpenAIResponses

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    vendor = from_spec("openai-responses:gpt-4.1")
    assert isinstance(vendor, OpenAIResponses) and vendor.model == "gpt-4.1"
    assert str(vendor.base_url).startswith("https://api.openai.com")
    local = from_spec("openai-responses:qwen@http://127.0.0.1:8080/v1")
    assert isinstance(local, OpenAIResponses) and str(local.base_url) == "http://127.0.0.1:8080/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9000/v1")
    assert str(from_spec("openai-responses:gpt-4.1").base_url) == "http://127.0.0.1:9000/v1"  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match="MODEL@BASE_URL"):
        from_spec("openai-responses:gpt-4.1@not-a-url")


def test_a_client_that_is_not_an_async_client_is_refused() -> None:
    with httpx.Client() as sync_client, pytest.raises(UsageError, match="AsyncClient"):
        from_spec("openai-compatible:m@http://127.0.0.1:1/v1", client=sync_client)  # type: ignore[arg-type]


# -- an injected client carries the requests -----------------------------------------------------------


async def test_an_injected_client_carries_an_openai_compatible_request() -> None:
    mock = Mock(OPENAI_SSE)
    async with mock.client:
        made = from_spec("openai-compatible:llama3@http://127.0.0.1:9/v1", client=mock.client)
        assert made._client is mock.client  # type: ignore[attr-defined]
        assert await collect(made) == [TextDelta("Hello from the mock"), Finish("stop")]
    [sent] = mock.requests
    assert (sent.method, str(sent.url)) == ("POST", "http://127.0.0.1:9/v1/chat/completions")
    assert "authorization" not in sent.headers
    body = json.loads(sent.content)
    assert body["model"] == "llama3" and body["stream"] is True
    assert body["messages"] == [{"role": "user", "content": "hi"}]


async def test_an_injected_client_carries_an_openai_request_with_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    mock = Mock(OPENAI_SSE)
    async with mock.client:
        made = from_spec("openai:gpt-4o-mini", client=mock.client)
        assert await collect(made) == [TextDelta("Hello from the mock"), Finish("stop")]
    [sent] = mock.requests
    assert str(sent.url) == "https://api.openai.com/v1/chat/completions"  # reached the mock, not the network
    assert sent.headers["authorization"] == "Bearer sk-test-123"
    assert json.loads(sent.content)["model"] == "gpt-4o-mini"


async def test_an_injected_client_carries_an_anthropic_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    mock = Mock(ANTHROPIC_SSE)
    async with mock.client:
        made = from_spec("anthropic:claude-sonnet-4-5", client=mock.client)
        deltas = await collect(made)
    assert [d for d in deltas if type(d) is TextDelta] == [TextDelta("Hello from the mock")]
    assert deltas[-1] == Finish("stop")
    [sent] = mock.requests
    assert str(sent.url) == "https://api.anthropic.com/v1/messages"
    assert sent.headers["x-api-key"] == "sk-ant-test"
    assert json.loads(sent.content)["model"] == "claude-sonnet-4-5"


async def test_closing_the_provider_leaves_a_shared_client_open() -> None:
    mock = Mock(OPENAI_SSE)
    async with mock.client:
        made = from_spec("openai-compatible:m@http://127.0.0.1:9/v1", client=mock.client)
        await made.aclose()  # type: ignore[attr-defined]
        assert not mock.client.is_closed
        assert await collect(made) == [TextDelta("Hello from the mock"), Finish("stop")]


# -- where each form sends its requests ----------------------------------------------------------------

ELSEWHERE = "http://127.0.0.1:9/v1"
EXPLICIT = "http://127.0.0.1:8000/v1"


@pytest.mark.parametrize(
    ("spec", "environment", "base_url"),
    [
        ("openai:gpt-4o-mini", {}, "https://api.openai.com/v1"),
        ("openai:gpt-4o-mini", {"OPENAI_BASE_URL": ELSEWHERE}, ELSEWHERE),
        ("openai:gpt-4o-mini", {"OPENAI_BASE_URL": ELSEWHERE + "/"}, ELSEWHERE),
        ("openai:gpt-4o-mini", {"ANTHROPIC_BASE_URL": ELSEWHERE}, "https://api.openai.com/v1"),
        ("anthropic:claude-sonnet-4-5", {}, "https://api.anthropic.com"),
        ("anthropic:claude-sonnet-4-5", {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}, "http://127.0.0.1:9"),
        ("anthropic:claude-sonnet-4-5", {"OPENAI_BASE_URL": ELSEWHERE}, "https://api.anthropic.com"),
        (f"openai-compatible:llama3@{EXPLICIT}", {}, EXPLICIT),
        (f"openai-compatible:llama3@{EXPLICIT}", {"OPENAI_BASE_URL": ELSEWHERE}, EXPLICIT),
        (f"openai-compatible:llama3@{EXPLICIT}", {"OPENAI_BASE_URL": "not a url"}, EXPLICIT),
        ("openai-compatible:llama3", {"OPENAI_BASE_URL": ELSEWHERE}, ELSEWHERE),
        ("openai-compatible:qwen2.5:7b", {"OPENAI_BASE_URL": ELSEWHERE}, ELSEWHERE),
    ],
)
def test_a_url_in_the_spec_wins_then_the_environment_then_the_vendor(
    monkeypatch: pytest.MonkeyPatch, spec: str, environment: dict[str, str], base_url: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert from_spec(spec).base_url == base_url  # type: ignore[attr-defined]


def test_openai_compatible_without_a_url_needs_openai_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    for unset in (None, "", "  "):
        if unset is None:
            monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
        else:
            monkeypatch.setenv("OPENAI_BASE_URL", unset)
        with pytest.raises(UsageError, match="needs MODEL@BASE_URL .*OPENAI_BASE_URL") as caught:
            from_spec("openai-compatible:llama3")
        assert all(form in str(caught.value) for form in FORMS)


@pytest.mark.parametrize("spec", ["openai-compatible:llama3@", "openai-compatible:llama3@127.0.0.1:8000/v1",
                                  "openai-compatible:@http://127.0.0.1:8000/v1", "openai-compatible:org/model@v2"])
def test_a_broken_url_is_refused_even_when_openai_base_url_could_stand_in(
    monkeypatch: pytest.MonkeyPatch, spec: str
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", ELSEWHERE)
    with pytest.raises(UsageError, match="needs MODEL@BASE_URL"):
        from_spec(spec)


@pytest.mark.parametrize("bad", ["not a url", "ftp://127.0.0.1/v1", "http://", "http://host:port/v1"])
@pytest.mark.parametrize("spec", ["openai:m", "openai-compatible:m"])
def test_a_bad_openai_base_url_is_refused_wherever_it_is_used(
    monkeypatch: pytest.MonkeyPatch, spec: str, bad: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.setenv("OPENAI_BASE_URL", bad)
    with pytest.raises(UsageError, match="OPENAI_BASE_URL=.* is not an http"):
        from_spec(spec)


@pytest.mark.parametrize(("spec", "variable"), [("openai:gpt-4o-mini@http://127.0.0.1:9/v1", "OPENAI_BASE_URL"),
                                                ("anthropic:claude@https://example.test", "ANTHROPIC_BASE_URL")])
def test_a_vendor_form_refuses_a_url_instead_of_sending_it_as_the_model(
    monkeypatch: pytest.MonkeyPatch, spec: str, variable: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv(variable, ELSEWHERE)
    with pytest.raises(UsageError, match=f"does not take; set {variable} or use openai-compatible") as caught:
        from_spec(spec)
    assert all(form in str(caught.value) for form in FORMS)


def test_a_bad_base_url_in_the_spec_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="base_url must be an http"):
        from_spec("openai-compatible:m@http://host:port/v1")


async def test_openai_through_openai_base_url_needs_no_key_and_sends_one_if_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", ELSEWHERE)
    mock = Mock(OPENAI_SSE)
    async with mock.client:
        assert await collect(from_spec("openai:gpt-4o-mini", client=mock.client)) == [
            TextDelta("Hello from the mock"), Finish("stop")]
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
        await collect(from_spec("openai:gpt-4o-mini", client=mock.client))
    keyless, keyed = mock.requests
    assert [str(r.url) for r in mock.requests] == [f"{ELSEWHERE}/chat/completions"] * 2
    assert "authorization" not in keyless.headers
    assert keyed.headers["authorization"] == "Bearer sk-test-123"


def test_openai_base_url_naming_openai_itself_still_needs_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.openai.com/v1")
    with pytest.raises(UsageError, match="OPENAI_API_KEY"):
        from_spec("openai:gpt-4o-mini")


async def test_openai_compatible_through_openai_base_url_carries_the_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", ELSEWHERE)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    mock = Mock(OPENAI_SSE)
    async with mock.client:
        made = from_spec("openai-compatible:llama3", client=mock.client)
        assert await collect(made) == [TextDelta("Hello from the mock"), Finish("stop")]
    [sent] = mock.requests
    assert str(sent.url) == f"{ELSEWHERE}/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test-123"
    assert json.loads(sent.content)["model"] == "llama3"


@pytest.mark.parametrize(("environment", "field"), [({}, "max_completion_tokens"),
                                                    ({"OPENAI_BASE_URL": ELSEWHERE}, "max_tokens")])
def test_a_reasoning_model_gets_max_completion_tokens_only_from_openai_itself(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], field: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    made = from_spec("openai:o4-mini")
    assert isinstance(made, OpenAICompatible)
    body = made.body(Request((Turn(Role.USER, (Text("hi"),)),), (), Options(max_tokens=64)))
    assert body[field] == 64 and len({"max_tokens", "max_completion_tokens"} & body.keys()) == 1


def test_from_environment_gives_the_default_unless_a_model_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from provider import Function, Retry, from_environment

    demo = Function(lambda request: "hi")
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "ANTHROPIC_API_KEY", "ANTHROPIC_MODEL"):
        monkeypatch.delenv(name, raising=False)
    assert from_environment(demo) is demo
    monkeypatch.setenv("OPENAI_API_KEY", "")  # empty counts as unset
    assert from_environment(demo) is demo
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    monkeypatch.setenv("ANTHROPIC_MODEL", "claude-x")
    chosen = from_environment(demo)
    assert isinstance(chosen, Retry) and "Anthropic('claude-x'" in repr(chosen)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # OpenAI wins when both are named
    chosen = from_environment(demo)
    assert "OpenAICompatible('gpt-4o-mini', base_url='http://127.0.0.1:9/v1')" in repr(chosen)
    with pytest.raises(UsageError, match="default provider"):
        from_environment(object())  # type: ignore[arg-type]
