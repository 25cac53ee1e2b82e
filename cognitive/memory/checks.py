"""For writers of memory stores: what every store checks and converts the same way (scopes, texts, ``k``, meta,
and the vectors an embedder gives: one per text, of one length, finite, as 32-bit floats).

A vector of all zeros points nowhere (an embedder gives one for a text with nothing to go on, such as
``HashingEmbedder`` for ``"!!!"``): its cosine similarity to anything is undefined, so stores keep the item but
never recall it, and a query that embeds to zeros recalls nothing.
"""

from __future__ import annotations

import array
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from loop import UsageError, has
from loop.checks import positive_int
from cognitive.memory._protocol import Scope
from provider import PASSAGE, Embedder


def check_scope(who: str, scope: object) -> Scope:
    """``scope`` if it is a ``Scope``."""
    if not isinstance(scope, Scope):
        raise UsageError(f"{who} takes a cognitive Scope (Scope(user, namespace, space), or Scope.current()), "
                         f"got {type(scope).__name__}")
    return scope


def check_user(who: str, user: object, namespace: object) -> None:
    """``user`` and ``namespace`` are strings (``""`` is the anonymous or shared one)."""
    for name, value in (("user", user), ("namespace", namespace)):
        if not isinstance(value, str):
            raise UsageError(f"{who} {name} must be a string, got {type(value).__name__}")


def check_text(who: str, text: object, *, what: str = "text") -> str:
    """``text`` if it is a non-empty string."""
    if not isinstance(text, str):
        raise UsageError(f"{who} {what} must be a string, got {type(text).__name__}")
    if not text:
        raise UsageError(f"{who} {what} must not be empty")
    return text


def check_k(who: str, k: object) -> int:
    """``k`` if it is a positive int."""
    return positive_int(f"{who} k", k)


def check_source(who: str, source: object) -> str:
    if not isinstance(source, str):
        raise UsageError(f"{who} source must be a string (a conversation's id, or ''), got {type(source).__name__}")
    return source


def meta_text(who: str, meta: object) -> str:
    """``meta`` (a mapping of JSON values, or ``None``) as JSON text."""
    if meta is None:
        return "{}"
    if not isinstance(meta, Mapping):
        raise UsageError(f"{who} meta must be a mapping of JSON values, got {type(meta).__name__}")
    try:
        return json.dumps(dict(meta), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{who} meta must hold JSON values only: {exc}") from None


def check_ids(who: str, ids: Sequence[object]) -> list[str]:
    for item_id in ids:
        if not isinstance(item_id, str):
            raise UsageError(f"{who} ids must be strings (MemoryItem.id), got {type(item_id).__name__}")
    return list(dict.fromkeys(ids))  # type: ignore[arg-type]


def check_embedder(who: str, embedder: object) -> Embedder:
    if not has(embedder, Embedder):
        raise UsageError(f"{who} needs an Embedder (an object with async embed(texts, kind=...)), "
                         f"got {type(embedder).__name__}")
    return embedder  # type: ignore[return-value]


def floats(who: str, vector: object) -> array.array[float]:
    """``vector`` as 32-bit floats, checked finite (an ``array('f')`` is taken as it is)."""
    if isinstance(vector, array.array) and vector.typecode == "f":
        out = vector
    else:
        out = array.array("f")
        try:
            view = memoryview(vector)  # type: ignore[arg-type]
        except TypeError:
            view = None
        try:
            if view is not None and view.format == "f" and view.ndim == 1 and view.c_contiguous:
                out.frombytes(view.cast("B"))  # a float32 buffer (numpy's, say), copied as it is
            else:
                out.extend(vector)  # type: ignore[arg-type]
        except TypeError as exc:
            raise UsageError(f"{who}: the embedder gave {type(vector).__name__}, not a sequence of floats") \
                from exc
    if not out:
        raise UsageError(f"{who}: the embedder gave an empty vector")
    if not math.isfinite(math.fsum(out)):
        raise UsageError(f"{who}: the embedder gave a vector holding NaN or infinity")
    return out


async def embed(who: str, embedder: Embedder, texts: Sequence[str], kind: str = PASSAGE) -> list[array.array[float]]:
    """One checked vector per text, in order, of one length (``kind``: ``"query"`` or ``"passage"``)."""
    vectors = await embedder.embed(list(texts), kind=kind)
    listed = isinstance(vectors, Sequence) and not isinstance(vectors, (str, bytes))
    if not listed or len(vectors) != len(texts):
        got = len(vectors) if listed else type(vectors).__name__
        raise UsageError(f"{who}: the embedder gave {got} vectors for {len(texts)} texts")
    out = [floats(who, v) for v in vectors]
    if len({len(v) for v in out}) > 1:
        raise UsageError(f"{who}: the embedder gave vectors of different lengths in one call")
    return out


def check_dimensions(where: str, held: int, given: int) -> None:
    """Raise when a vector of ``given`` dimensions meets a memory holding ``held``-dimension ones."""
    if held != given:
        raise UsageError(f"{where} holds {held}-dimension vectors; the embedder gave {given} (a memory keeps the "
                         "vectors of one embedding model: use a new file or database for another)")


def pointless(vector: Sequence[float]) -> bool:
    """Whether ``vector`` is all zeros (similar to nothing, see the module's notes)."""
    return not any(vector)


def load_meta(text: str) -> Mapping[str, Any]:
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


def given_rows(who: str, texts: Sequence[object], vectors: Sequence[object]) -> list[tuple[str, str, str, Any]]:
    """Rows ``(text, source, meta, vector)`` for ``texts`` with ``vectors`` already made (no embedder: loading many
    items at once), checked: as many vectors as texts, all of one length."""
    if len(texts) != len(vectors):
        raise UsageError(f"{who}: {len(texts)} texts but {len(vectors)} vectors")
    rows = [(check_text(who, t), "", "{}", floats(who, v)) for t, v in zip(texts, vectors)]
    if len({len(row[3]) for row in rows}) > 1:
        raise UsageError(f"{who}: the vectors are not all of one length")
    return rows
