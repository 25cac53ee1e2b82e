"""``Embedder``: text to vectors, the one seam memory and the semantic cache stand on; ``HashingEmbedder``, a
deterministic one for tests; ``SymmetricEmbedder``, which embeds stored texts and searches alike.

Embedding models that are trained for retrieval read a search query and the passage answering it differently
(E5 wants ``query: `` and ``passage: `` before them), so ``embed`` says which it is given: ``kind="query"`` for
what is searched with, ``kind="passage"`` (the default) for what is stored and searched. A model without such
modes ignores ``kind``.
"""

from __future__ import annotations

import array
import hashlib
import math
import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from loop import UsageError, require
from loop.checks import positive_int

QUERY = "query"
PASSAGE = "passage"
KINDS = (QUERY, PASSAGE)

Vector = Sequence[float]
"""One embedding: a sequence of floats (``array.array("f")`` for the bundled embedders: 4 bytes a dimension)."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of one fixed length, one vector per text, in order.

    ``kind`` is ``"query"`` or ``"passage"`` (``QUERY``, ``PASSAGE``). Vectors are compared by cosine
    similarity; the bundled embedders return them normalised to length 1.
    """

    async def embed(self, texts: Sequence[str], *, kind: str = PASSAGE) -> list[Vector]: ...


def check_texts(who: str, texts: object, kind: object) -> list[str]:
    """``texts`` as a list, checked: a sequence of strings (not one string), with ``kind`` one of ``KINDS``."""
    if kind not in KINDS:
        raise UsageError(f"{who}.embed kind must be 'query' or 'passage', got {kind!r}")
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
        raise UsageError(f"{who}.embed takes a sequence of strings (a list, even of one), got {type(texts).__name__}")
    out = list(texts)
    for index, text in enumerate(out):
        if not isinstance(text, str):
            raise UsageError(f"{who}.embed texts[{index}] must be a string, got {type(text).__name__}")
    return out


def normalised(values: Sequence[float]) -> array.array[float]:
    """``values`` scaled to length 1 as 32-bit floats (all zeros stay zeros)."""
    norm = math.sqrt(sum(v * v for v in values))
    return array.array("f", (v / norm for v in values) if norm else values)


def cosine(a: Vector, b: Vector) -> float:
    """The cosine similarity of two vectors of one length (0 when either is all zeros)."""
    if len(a) != len(b):
        raise UsageError(f"cannot compare vectors of {len(a)} and {len(b)} dimensions")
    dot = sum(x * y for x, y in zip(a, b))
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norms if norms else 0.0


_WORD = re.compile(r"\w+", re.UNICODE)


class HashingEmbedder:
    """A deterministic embedder for tests: each lower-cased word (and each pair of neighbouring words) is hashed
    into one of ``dimensions`` buckets with a sign, and the counts are normalised.

    Two texts score high when they share words, so it measures **word overlap, not meaning**: "how tall is the
    tower" and "the tower's height" barely match. Use it where a test needs fixed, fast vectors; use a real model
    (``provider.LocalE5``, or ``OpenAIEmbeddings`` against a server) where meaning matters. ``kind`` is ignored.
    """

    __slots__ = ("dimensions",)

    def __init__(self, dimensions: int = 256) -> None:
        self.dimensions = positive_int("HashingEmbedder dimensions", dimensions)

    def vector(self, text: str) -> array.array[float]:
        counts = [0.0] * self.dimensions
        words = _WORD.findall(text.lower())
        for feature in (*words, *(f"{a} {b}" for a, b in zip(words, words[1:]))):
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dimensions
            counts[bucket] += 1.0 if digest[4] & 1 else -1.0
        return normalised(counts)

    async def embed(self, texts: Sequence[str], *, kind: str = PASSAGE) -> list[Vector]:
        return [self.vector(text) for text in check_texts("HashingEmbedder", texts, kind)]

    def __repr__(self) -> str:
        return f"HashingEmbedder({self.dimensions})"


class SymmetricEmbedder:
    """Embeds every text as ``kind`` (``"query"`` unless told), whatever kind ``embed`` is asked for.

    For a store whose stored texts and searches are the same sort of text, as a semantic cache's questions are:
    E5-style models read a query and a passage differently, and score a text against itself as the other kind
    well below 1. E5's authors advise ``"query: "`` on both sides for such symmetric tasks."""

    __slots__ = ("inner", "kind")

    def __init__(self, inner: Embedder, *, kind: str = QUERY) -> None:
        require(inner, Embedder, "SymmetricEmbedder", "an Embedder (async embed(texts, kind=...))")
        if kind not in KINDS:
            raise UsageError(f"SymmetricEmbedder kind must be 'query' or 'passage', got {kind!r}")
        self.inner = inner
        self.kind = kind

    async def embed(self, texts: Sequence[str], *, kind: str = PASSAGE) -> list[Vector]:
        return await self.inner.embed(check_texts("SymmetricEmbedder", texts, kind), kind=self.kind)

    def __repr__(self) -> str:
        return f"SymmetricEmbedder({self.inner!r}, kind={self.kind!r})"
