"""Reading stored conversations over HTTP: a token's list of them, and one's history in pages: how much text turns
hold, a page's bounds, and a page as JSON chunks small enough that encoding one never holds the event loop long."""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Iterable, Sequence
from typing import Any

from starlette.requests import Request

from loop import Reasoning, Text, ToolCall, ToolResult, Turn
from session.http._guards import Problem
from session.stores import ListingStore, Store
from session.http._wire import dumps

OFF_LOOP_CHARS = 256 * 1024  # a page holding more text than this is encoded in a worker thread
_PAGE_CHARS = 16 * 1024 * 1024  # a page ends early past this much text (it always holds at least one turn)
_NUMBER = re.compile(r"[0-9]{1,18}")
LIST_SIZE = 50  # how many conversations ``GET /sessions`` lists unless asked for another number


async def listing(store: Store, prefix: str, limit: int) -> dict[str, Any]:
    """``GET /sessions``: the conversations stored under ``prefix`` (a token's namespace), most recently updated
    first, at most ``limit``, with their ids in the namespace; 501 when the store cannot list (it is not a
    ``ListingStore``)."""
    if not isinstance(store, ListingStore):
        raise Problem(501, "not_supported", f"this server's store ({type(store).__name__}) cannot list its "
                                            "conversations; open one by its id")
    listed = await store.list_sessions(prefix, limit=limit)
    return {"sessions": [{"id": s.id[len(prefix):], "title": s.title, "turns": s.turns, "updated": s.updated}
                         for s in listed]}


def utf8_size(text: str) -> int:
    # isascii() is O(1) on CPython's strings, so ASCII text (most of it) is measured without being encoded.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _texts(turns: Iterable[Turn]) -> Iterable[str]:
    """The text the turns hold: their parts' text, tool call arguments and tool results."""
    for turn in turns:
        for part in turn.parts:
            if isinstance(part, (Text, Reasoning)):
                yield part.text
            elif isinstance(part, ToolCall):
                yield part.arguments
            elif isinstance(part, ToolResult):
                yield part.content


def text_size(turns: Iterable[Turn]) -> int:
    """How many bytes of text (UTF-8) ``turns`` hold: what ``max_conversation_bytes`` counts."""
    return sum(utf8_size(text) for text in _texts(turns))


def page_number(request: Request, name: str, low: int, high: int) -> int | None:
    """The query parameter ``name`` as a whole number from ``low`` to ``high`` (``None`` if not given); else 400."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if not (_NUMBER.fullmatch(raw) and low <= int(raw) <= high):
        raise Problem(400, "bad_query", f"'{name}' must be a whole number from {low} to {high}, got {raw!r}"[:200])
    return int(raw)


def page_chunks(session_id: str, page: Sequence[Turn], after_page: int | None) -> list[bytes]:
    """A page of turns as JSON (as ``dumps`` writes it), a turn a chunk. No one call encodes more than a turn:
    in a worker thread, each holds the GIL, and so keeps the event loop waiting, no longer than one turn takes."""
    chunks = [f'{{"id": {dumps(session_id)}, "turns": ['.encode()]
    for i, turn in enumerate(page):
        if i:
            chunks.append(b", ")
        chunks.append(dumps(turn.to_dict()).encode())
    chunks.append(f'], "next": {dumps(after_page)}}}\n'.encode())
    return chunks


def fitting(turns: Sequence[Turn]) -> tuple[Sequence[Turn], int]:
    """The first of ``turns`` that hold at most ``_PAGE_CHARS`` of text (at least one), and how much they hold:
    one request's reply stays bounded however large the turns are."""
    chars = 0
    for count, turn in enumerate(turns):
        size = sum(len(text) for text in _texts((turn,)))
        if count and chars + size > _PAGE_CHARS:
            return turns[:count], chars
        chars += size
    return turns, chars


async def sent(chunks: list[bytes]) -> AsyncGenerator[bytes, None]:
    while chunks:
        yield chunks.pop(0)  # each chunk is let go once sent
