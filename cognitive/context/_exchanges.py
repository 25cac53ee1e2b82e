"""How a conversation splits into messages and tool exchanges, for the views that leave parts of it out.

A provider rejects a tool result whose call it was not shown, and a call that no result follows. So the views
never drop single turns: they drop *units*. A unit is one system turn, one user turn, one assistant answer (an
assistant turn with no tool calls), or one *exchange*: an assistant turn that called tools together with the
``TOOL`` turns that answer it. A ``TOOL`` turn that answers no open exchange (stored history can hold one after
an edit) is a *stray* unit; views that drop anything drop strays too, since no provider accepts them.
"""

from __future__ import annotations

import json
from typing import Any
from collections.abc import Callable, Iterable, Sequence

from loop import Role, State, TokenCounter, ToolCall, ToolResult, Turn, UsageError

SYSTEM = "system"
USER = "user"
ANSWER = "answer"
EXCHANGE = "exchange"
STRAY = "stray"


class Unit:
    """Turns that a view keeps or drops together: their ``indices`` in the conversation and what they are."""

    __slots__ = ("kind", "indices")

    def __init__(self, kind: str, index: int) -> None:
        self.kind = kind
        self.indices = [index]

    def __repr__(self) -> str:
        return f"Unit({self.kind}, {self.indices})"


def split_units(turns: Sequence[Turn]) -> list[Unit]:
    """``turns`` as units, in order. An exchange stays open across system turns (a note between a call and its
    results) and takes every ``TOOL`` turn up to the next user or assistant turn."""
    units: list[Unit] = []
    exchange: Unit | None = None
    for index, turn in enumerate(turns):
        role = turn.role
        if role is Role.TOOL:
            if exchange is not None:
                exchange.indices.append(index)
            else:
                units.append(Unit(STRAY, index))
        elif role is Role.ASSISTANT:
            if turn.tool_calls:
                exchange = Unit(EXCHANGE, index)
                units.append(exchange)
            else:
                exchange = None
                units.append(Unit(ANSWER, index))
        elif role is Role.USER:
            exchange = None
            units.append(Unit(USER, index))
        else:
            units.append(Unit(SYSTEM, index))
    return units


def answered(unit: Unit, turns: Sequence[Turn]) -> list[tuple[ToolCall, ToolResult]]:
    """The calls of an exchange that its tool turns answer, each with its result, in call order."""
    if unit.kind != EXCHANGE:
        return []
    results = {r.call_id: r for i in unit.indices[1:] for r in turns[i].tool_results}
    return [(call, results[call.id]) for call in turns[unit.indices[0]].tool_calls if call.id in results]


def complete(unit: Unit, turns: Sequence[Turn]) -> bool:
    """Whether every call of an exchange has a result."""
    calls = turns[unit.indices[0]].tool_calls
    return len(answered(unit, turns)) == len(calls)


def trailing_exchange(units: Sequence[Unit]) -> Unit | None:
    """The exchange the model is reacting to: the last exchange, when only system turns come after it."""
    for unit in reversed(units):
        if unit.kind == EXCHANGE:
            return unit
        if unit.kind != SYSTEM:
            return None
    return None


def sendable_exchanges(units: Sequence[Unit], turns: Sequence[Turn]) -> list[Unit]:
    """The exchanges a provider accepts in a view: complete ones, and the trailing one even if some of its calls
    are still open (the turn after it answers them)."""
    trailing = trailing_exchange(units)
    return [u for u in units if u.kind == EXCHANGE and (u is trailing or complete(u, turns))]


def without(state: State, turns: Sequence[Turn], hidden: Iterable[int]) -> State:
    """A state (``state``'s meta) holding ``turns`` except those at the ``hidden`` indices."""
    skip = set(hidden)
    if not skip:
        return state
    return State([t for i, t in enumerate(turns) if i not in skip], state.meta)


def canonical_arguments(raw: str, *, loose: bool = False) -> str:
    """A call's JSON arguments written one way (keys sorted, no spaces), so equal calls compare equal; text that is
    not JSON is kept as written, without surrounding whitespace. ``loose`` also compares strings without regard to
    letter case or runs of whitespace (in values, and in text that is not JSON)."""
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return " ".join(raw.split()) if loose else raw.strip()
    if loose:
        value = _loosened(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _loosened(value: Any) -> Any:
    if isinstance(value, str):
        return " ".join(value.split()).casefold()
    if isinstance(value, dict):
        return {key: _loosened(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_loosened(item) for item in value]
    return value


def call_key(call: ToolCall, *, loose: bool = False) -> tuple[str, str]:
    """What makes two calls the same call: the tool's name and the canonical arguments. The one key of the
    ledger, result reuse (exact: ``loose=False``, so a reused answer is the answer to that very call) and loop
    detection (``loose=True``: a model repeating itself rarely keeps the case and spacing of its strings)."""
    return call.name, canonical_arguments(call.arguments, loose=loose)


def excerpt(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters; otherwise its first two thirds and last third of ``limit``
    characters around a note saying how many were cut."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    cut = len(text) - limit
    return (f"{text[:head]}\n[... {cut:,} of {len(text):,} characters cut ...]\n"
            f"{text[len(text) - tail:] if tail else ''}")


def check_counter(counter: object) -> TokenCounter:
    """``counter`` if it can be called; ``UsageError`` naming the argument otherwise."""
    if not callable(counter):
        raise UsageError(f"counter must be a loop.TokenCounter (a function from turns to a token count), "
                         f"got {counter!r}")
    return counter


def count(counter: Callable[[Iterable[Turn]], int], turns: Iterable[Turn], who: str) -> int:
    """``counter(turns)``, checked to be a count: a ``UsageError`` naming ``who`` when it is not."""
    tokens = counter(turns)
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        raise UsageError(f"{who}: the token counter returned {tokens!r}, not a count (an int >= 0)")
    return tokens
