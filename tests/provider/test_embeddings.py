"""``OpenAIEmbeddings`` off the wire: what its constructor and ``embed`` refuse, the backoff rules it shares with
``Retry``, and the test guard stopping a call to a host off this machine before it connects."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest

from loop import Closable, UsageError
from loop.errors import ProviderUnreachable, RateLimitError, ServerError, StreamError
from provider import Retry, Scripted
from provider._embedder import Embedder
from provider._embeddings import OpenAIEmbeddings
from provider._retry import Backoff
from provider.testing import ModelCallBlocked

LOCAL = "http://127.0.0.1:9/v1"


@pytest.mark.parametrize(("settings", "match"), [
    ({"model": ""}, "needs a model name"),
    ({"model": None}, "needs a model name"),
    ({"base_url": "ftp://127.0.0.1/v1"}, "base_url must be an http"),
    ({"base_url": "127.0.0.1:8000"}, "base_url must be an http"),
    ({"base_url": 8000}, "base_url must be an http"),
    ({"dimensions": 0}, "dimensions"),
    ({"dimensions": 1.5}, "dimensions"),
    ({"dimensions": True}, "dimensions"),
    ({"batch_size": 0}, "batch_size"),
    ({"batch_size": 2049}, "batch_size must be at most 2048"),
    ({"batch_size": "32"}, "batch_size"),
    ({"attempts": 0}, "attempts"),
    ({"base_delay": -1}, "base_delay"),
    ({"max_delay": math.nan}, "max_delay"),
    ({"max_total": "forever"}, "max_total"),
    ({"sleep": 3}, "sleep"),
    ({"clock": "monotonic"}, "clock"),
    ({"query_prefix": None}, "query_prefix"),
    ({"passage_prefix": b"passage: "}, "passage_prefix"),
    ({"query_model": ""}, "query_model"),
    ({"client": object()}, "client must be an httpx.AsyncClient"),
], ids=lambda v: repr(v) if isinstance(v, dict) else "")
def test_bad_settings_raise_usage_error(settings: dict[str, Any], match: str) -> None:
    model = settings.pop("model", "text-embedding-3-small")
    settings.setdefault("base_url", LOCAL)
    with pytest.raises(UsageError, match=match):
        OpenAIEmbeddings(model, **settings)


def test_openai_itself_needs_a_key_and_local_servers_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(UsageError, match="OPENAI_API_KEY"):
        OpenAIEmbeddings("text-embedding-3-small")
    local = OpenAIEmbeddings("e5", base_url=LOCAL)
    assert "authorization" not in local._headers and local.who == "OpenAI-compatible server at 127.0.0.1"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    hosted = OpenAIEmbeddings("text-embedding-3-small", headers={"x-team": "search"})
    assert hosted._headers["authorization"] == "Bearer sk-from-env" and hosted._headers["x-team"] == "search"
    assert hosted.who == "OpenAI" and hosted.base_url == "https://api.openai.com/v1"
    assert repr(hosted) == "OpenAIEmbeddings('text-embedding-3-small', base_url='https://api.openai.com/v1')"


async def test_it_is_an_embedder_and_closable() -> None:
    embedder = OpenAIEmbeddings("e5", base_url=LOCAL)
    assert isinstance(embedder, Embedder) and isinstance(embedder, Closable)
    await embedder.aclose()
    await embedder.aclose()  # closing twice is harmless


@pytest.mark.parametrize(("texts", "kind", "match"), [
    ("one text", "passage", "a sequence of strings"),
    ([b"bytes"], "passage", r"texts\[0\] must be a string"),
    (["a", None], "passage", r"texts\[1\] must be a string"),
    (["a"], "question", "kind must be 'query' or 'passage'"),
])
async def test_bad_texts_raise_usage_error_before_any_request(texts: Any, kind: str, match: str) -> None:
    sent: list[httpx.Request] = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: sent.append(r))) as client:  # type: ignore[arg-type]
        embedder = OpenAIEmbeddings("e5", base_url=LOCAL, client=client)
        with pytest.raises(UsageError, match=match):
            await embedder.embed(texts, kind=kind)
    assert sent == []


def test_the_body_names_the_model_of_the_kind_and_asks_for_base64() -> None:
    embedder = OpenAIEmbeddings("e5-passage", base_url=LOCAL, query_model="e5-query", dimensions=256)
    assert embedder.body(["x"]) == {"model": "e5-passage", "input": ["x"], "encoding_format": "base64",
                                    "dimensions": 256}
    assert embedder.body(["x"], kind="query")["model"] == "e5-query"
    assert OpenAIEmbeddings("e5", base_url=LOCAL).body(["x"], kind="query")["model"] == "e5"


def test_an_answer_parsed_alone_is_checked_against_the_count() -> None:
    embedder = OpenAIEmbeddings("e5", base_url=LOCAL)
    assert [list(v) for v in embedder.vectors('{"data": [{"index": 0, "embedding": [0, 2]}]}', 1)] == [[0.0, 1.0]]
    with pytest.raises(StreamError, match="answered 1 embeddings for 2 texts"):
        embedder.vectors('{"data": [{"index": 0, "embedding": [0, 2]}]}', 2)


# -- the backoff it shares with Retry ------------------------------------------------------------------------


def test_it_backs_off_by_the_same_rules_as_retry() -> None:
    embedder = OpenAIEmbeddings("e5", base_url=LOCAL, attempts=3, base_delay=0.25, max_delay=2.0, max_total=30.0)
    retry = Retry(Scripted([]), attempts=3, base_delay=0.25, max_delay=2.0, max_total=30.0)
    assert embedder.backoff == retry.backoff == Backoff(3, 0.25, 2.0, 30.0)


def test_backoff_waits_honour_retry_after_and_give_up_by_the_rules() -> None:
    rules = Backoff(attempts=3, base_delay=1.0, max_delay=3.0, max_total=10.0)
    assert rules.wait(1, RateLimitError("slow down", retry_after=4), elapsed=0) == 4.0
    assert rules.wait(1, RateLimitError("slow down", retry_after=4), elapsed=6.5) is None  # would end past 10 s
    assert rules.wait(3, ServerError("failed"), elapsed=0) is None  # the third try was the last
    assert rules.wait(1, StreamError("malformed"), elapsed=0) is None  # not retryable
    for attempt, cap in ((1, 1.0), (2, 2.0), (3, 3.0), (6, 3.0)):
        for _ in range(20):
            assert 0 <= rules.delay(attempt, ProviderUnreachable("refused")) <= cap


@pytest.mark.parametrize("settings", [{"attempts": 0}, {"base_delay": math.inf}, {"max_total": -1}])
def test_backoff_refuses_bad_settings(settings: dict[str, Any]) -> None:
    with pytest.raises(UsageError, match=next(iter(settings))):
        Backoff(**settings)


# -- the offline guard ----------------------------------------------------------------------------------------


async def test_the_guard_stops_a_call_to_a_host_off_this_machine_before_it_connects(no_model_calls: None) -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    # A reserved name that never resolves: nothing could leave the machine even without the guard.
    async with OpenAIEmbeddings("text-embedding-3-small", base_url="https://model.invalid/v1", api_key="sk-test",
                                sleep=sleep) as embedder:
        with pytest.raises(ModelCallBlocked, match="https://model.invalid"):
            await embedder.embed(["a"])
    assert waits == []  # refused outright, not retried as a failed connection
