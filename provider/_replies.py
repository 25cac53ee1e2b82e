"""Replies for the offline providers, and how they become a stream of deltas."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any, Union

from loop import (
    Delta,
    Finish,
    Reasoning,
    ReasoningDelta,
    Text,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
    UsageDelta,
    UsageError,
)

ReplyPart = Union[Text, Reasoning, ToolCall, Usage]
Reply = Union[str, ReplyPart, Sequence[Union[str, ReplyPart]], BaseException]
_PARTS = (Text, Reasoning, ToolCall, Usage)


def tool_call(name: str, arguments: Mapping[str, Any] | str | None = None, *, id: str = "") -> ToolCall:
    """A ``ToolCall`` for a scripted reply. ``arguments`` is a dict (sent as JSON) or raw text, which may be
    deliberately malformed. An empty ``id`` is filled in by the provider."""
    raw = arguments if isinstance(arguments, str) else json.dumps(dict(arguments or {}))
    return ToolCall(id, name, raw)


def check_reply(reply: Any, where: str) -> tuple[ReplyPart, ...] | BaseException:
    """The reply as a tuple of parts (or the exception to raise); ``UsageError`` naming ``where`` if invalid."""
    if isinstance(reply, BaseException):
        return reply
    if isinstance(reply, str):
        return (Text(reply),)
    if isinstance(reply, _PARTS):
        return (reply,)
    if isinstance(reply, Sequence):
        parts: list[ReplyPart] = []
        for item in reply:
            if isinstance(item, str):
                parts.append(Text(item))
            elif isinstance(item, _PARTS):
                parts.append(item)
            else:
                raise UsageError(f"{where}: {item!r} is not a reply part (str, Text, Reasoning, ToolCall, Usage)")
        return tuple(parts)
    raise UsageError(
        f"{where}: {reply!r} is not a reply (a string, a part, a sequence of parts, or an exception to raise)"
    )


def chunks(text: str, size: int) -> list[str]:
    """``text`` in pieces of ``size`` characters, so consumers see a real stream."""
    if len(text) <= size:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]


def reply_deltas(parts: tuple[ReplyPart, ...], ids: itertools.count[int], chunk: int, choice: int = 0) -> list[Delta]:
    """The deltas a real provider would stream for ``parts``: text in chunks, each tool call as a header
    delta then its arguments in two fragments, usage, and a ``Finish`` that says whether tools were called;
    every one tagged with ``choice``."""
    deltas: list[Delta] = []
    index = 0
    for part in parts:
        if isinstance(part, Text):
            deltas.extend(TextDelta(piece, choice) for piece in chunks(part.text, chunk))
        elif isinstance(part, ToolCall):
            call_id = part.id or f"call_{next(ids)}"
            args = part.arguments
            half = len(args) // 2
            deltas.append(ToolCallDelta(index, call_id, part.name, args[:half], choice))
            if args[half:]:
                deltas.append(ToolCallDelta(index, None, None, args[half:], choice))
            index += 1
        elif isinstance(part, Reasoning):
            pieces = chunks(part.text, chunk)
            deltas.extend(ReasoningDelta(piece, None, choice) for piece in pieces[:-1])
            deltas.append(ReasoningDelta(pieces[-1], part.signature, choice))
        else:
            deltas.append(UsageDelta(part, None, choice))
    deltas.append(Finish("tool_calls" if index else "stop", choice))
    return deltas


def interleave(streams: list[list[Delta]]) -> list[Delta]:
    """The deltas of several choices as one stream: one delta of each choice in turn, as a real stream mixes
    them, then every ``Finish`` in choice order."""
    out: list[Delta] = []
    finishes: list[Delta] = []
    pending = [[d for d in stream if type(d) is not Finish] for stream in streams]
    for stream in streams:
        finishes.extend(d for d in stream if type(d) is Finish)
    for row in itertools.zip_longest(*pending):
        out.extend(d for d in row if d is not None)
    return out + finishes

