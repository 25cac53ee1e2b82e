"""The semantic cache's answer check: how well a remembered answer fits a new question, against how well it fits
the question it was written for (a question against the passage answering it: the task E5 was trained for).

So that a check embeds only the new question, a remembered answer keeps its vector (base64 float32) and its
score against its own question in the item's meta (``answer_vector``, ``answer_score``).
"""

from __future__ import annotations

import array
import base64
import math
import sys
from collections.abc import Mapping
from typing import Any

from cognitive.memory._protocol import Recalled
from cognitive.memory.checks import embed
from provider import PASSAGE, QUERY, Embedder, cosine

__all__ = ["answer_fits", "answer_scores", "encoded", "kept"]


async def answer_fits(embedder: Embedder, question: str, close: list[Recalled]) -> list[float]:
    """How much better each item's answer fits ``question`` than its own question: from the answer's vector and
    score kept with it, or embedded now for an item kept without them (or with another model's)."""
    [asked] = await embed("SemanticCache", embedder, [question], QUERY)
    found = [kept(r.item.meta, len(asked)) for r in close]
    missing = [(r.item.text, r.item.meta["answer"]) for r, k in zip(close, found) if k is None]
    made = iter(await answer_scores(embedder, missing) if missing else [])
    whole = [next(made) if k is None else k for k in found]
    return [cosine(asked, vector) - score for vector, score in whole]


async def answer_scores(embedder: Embedder, pairs: list[tuple[str, str]]) -> list[tuple[array.array[float], float]]:
    """For each (uniform question, answer): the answer's vector as a passage, and its score against the question
    as a query."""
    asked = await embed("SemanticCache", embedder, [q for q, _ in pairs], QUERY)
    passages = await embed("SemanticCache", embedder, [a for _, a in pairs], PASSAGE)
    return [(p, cosine(q, p)) for q, p in zip(asked, passages)]


def encoded(vector: array.array[float]) -> str:
    """``vector`` as base64 little-endian float32, to keep in an item's meta."""
    little = array.array("f", vector)
    if sys.byteorder == "big":
        little.byteswap()
    return base64.b64encode(little.tobytes()).decode("ascii")


def kept(meta: Mapping[str, Any], dimensions: int) -> tuple[array.array[float], float] | None:
    """The answer's vector and score kept in ``meta``, when they are there, whole and of ``dimensions``."""
    text, score = meta.get("answer_vector"), meta.get("answer_score")
    if not isinstance(text, str) or isinstance(score, bool) or not isinstance(score, (int, float)) \
            or not math.isfinite(score):
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        return None
    if len(raw) != 4 * dimensions:
        return None
    vector = array.array("f", raw)
    if sys.byteorder == "big":
        vector.byteswap()
    return (vector, float(score)) if all(map(math.isfinite, vector)) else None
