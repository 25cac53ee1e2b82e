"""Builds the assistant's turn from the deltas a provider streams (one turn per choice when several are asked)."""

from __future__ import annotations

import uuid
from types import MappingProxyType
from typing import Any

from loop._parts import Part, Reasoning, Role, Text, ToolCall, Usage
from loop._protocols import Finish, ReasoningDelta, TextDelta, ToolCallDelta, UsageDelta
from loop._turn import EMPTY, Turn, trusted_turn
from loop.errors import StreamError

_ASSISTANT = Role.ASSISTANT  # read once per turn: a global is read faster than an enum's member

REPLAYED = Usage()
"""The usage a response replayed from a cache (``loop.ResponseCache``) reports: no tokens, since the model was
not asked, so budgets charge nothing for it. Recognised by identity: the turn it ends up on, alone, is marked
``meta["cache"] == "hit"``."""


class _Call:
    __slots__ = ("id", "name", "fragments")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.fragments: list[str] = []


class Accumulator:
    """Collects deltas in stream order: runs of text or reasoning merge into one part each, tool call
    fragments gather by ``index`` (calls may interleave), usages add up, and the last ``Finish`` wins."""

    __slots__ = ("_blocks", "_calls", "_usage", "finish", "model")

    def __init__(self) -> None:
        # Each block is [kind, payload]: ["text", [fragments]], ["reasoning", [fragments], signature],
        # or ["call", _Call]; the order of blocks is the order the parts first appeared in.
        self._blocks: list[list[Any]] = []
        self._calls: dict[int, _Call] = {}
        self._usage: Usage | None = None
        self.finish: str | None = None
        self.model: str | None = None  # the model that answered, when the provider names it

    @property
    def usage(self) -> Usage | None:
        """The usage reported so far, added up."""
        return self._usage

    def add(self, delta: Any) -> None:
        kind = type(delta)
        blocks = self._blocks
        if kind is TextDelta:
            if blocks and blocks[-1][0] == "text":
                blocks[-1][1].append(delta.text)
            else:
                blocks.append(["text", [delta.text]])
        elif kind is ToolCallDelta:
            call = self._calls.get(delta.index)
            if call is None:
                call = self._calls[delta.index] = _Call()
                blocks.append(["call", call])
            if delta.id:
                call.id = delta.id
            if delta.name:
                call.name = delta.name
            if delta.arguments_fragment:
                call.fragments.append(delta.arguments_fragment)
        elif kind is ReasoningDelta:
            last = blocks[-1] if blocks else None
            if last is not None and last[0] == "reasoning" and last[2] is None:
                last[1].append(delta.text)
                last[2] = delta.signature
            else:
                blocks.append(["reasoning", [delta.text], delta.signature])
        elif kind is UsageDelta:
            self._usage = delta.usage if self._usage is None else self._usage + delta.usage
            if delta.model:
                self.model = delta.model
        elif kind is Finish:
            self.finish = delta.reason
        else:
            raise StreamError(f"provider streamed {delta!r}, which is not a Delta (TextDelta, ToolCallDelta, ...)")

    def turn(self, model: str | None = None) -> Turn:
        parts: list[Part] = []
        for block in self._blocks:
            kind = block[0]
            if kind == "text":
                parts.append(Text("".join(block[1])))
            elif kind == "reasoning":
                parts.append(Reasoning("".join(block[1]), block[2]))
            else:
                call: _Call = block[1]
                # Some OpenAI-compatible servers omit ids; the history still needs one to pair the result.
                parts.append(ToolCall(call.id or f"call_{uuid.uuid4().hex[:16]}", call.name or "", "".join(call.fragments)))
        usage = self._usage
        if usage is not None:
            parts.append(usage)
        model = self.model or model
        meta = _METAS.get((self.finish, model))  # read-only, so shared: see ``_meta``
        if meta is None:
            meta = _meta(self.finish, model)
        if usage is REPLAYED:
            meta = MappingProxyType({**meta, "cache": "hit"})
        return trusted_turn(_ASSISTANT, tuple(parts), meta)


_METAS: dict[tuple[str | None, str | None], Any] = {(None, None): EMPTY}


def _meta(finish: str | None, model: str | None) -> Any:
    """The assistant turn's meta. A turn's meta is read-only, so turns that agree share one (a long chat
    holds one per distinct finish reason and model, not one per turn); the cache stays small."""
    key = (finish, model)
    meta = _METAS.get(key)
    if meta is None:
        meta = MappingProxyType({k: v for k, v in (("finish_reason", finish), ("model", model)) if v is not None})
        if len(_METAS) < 256:  # finish reasons and model names are few; a provider inventing them is not
            _METAS[key] = meta
    return meta
