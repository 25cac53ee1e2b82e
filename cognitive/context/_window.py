"""Views that keep a conversation short: ``SlidingWindow``, ``TruncateToolResults`` and ``FitToWindow``.

Each is a transform (``Step(provider, transforms=[...])``): a function from the stored ``State`` to the ``State``
the model is shown. The stored history is never rewritten, and a view that leaves turns out leaves out whole
tool exchanges (a call with its results), so no provider is ever sent a call without its results or a result
without its call.
"""

from __future__ import annotations

import attrs

from cognitive.context._exchanges import (ANSWER, EXCHANGE, STRAY, SYSTEM, USER, Unit, check_counter, count, excerpt,
                                  sendable_exchanges, split_units, without)
from loop import Role, State, TokenCounter, ToolResult, Turn, UsageError, approx_tokens
from loop.checks import positive_int


class SlidingWindow:
    """Shows the conversation with only the newest ``keep_pairs`` tool exchanges.

    Kept: every system turn, every user turn, every assistant answer written without tool calls, and the last
    ``keep_pairs`` exchanges (an assistant turn that called tools, with the ``TOOL`` turns holding their
    results). Older exchanges are left out whole. Also left out: a ``TOOL`` turn that answers no call shown, and
    an earlier exchange whose calls were never all answered (no provider accepts either). A conversation with
    nothing to leave out is returned as it is.

    It bounds the tool part of a long loop; a long chat of many messages still grows (``FitToWindow`` bounds
    that). Raises ``UsageError`` when ``keep_pairs`` is not a positive integer: the exchange the model is
    reacting to is always kept.
    """

    __slots__ = ("keep_pairs",)

    def __init__(self, keep_pairs: int = 2) -> None:
        self.keep_pairs = positive_int("keep_pairs", keep_pairs)

    def __call__(self, state: State) -> State:
        turns = state.turns
        units = split_units(turns)
        kept = {id(u) for u in sendable_exchanges(units, turns)[-self.keep_pairs:]}
        hidden = [i for u in units if u.kind in (EXCHANGE, STRAY) and id(u) not in kept for i in u.indices]
        return without(state, turns, hidden)

    def __repr__(self) -> str:
        return f"SlidingWindow(keep_pairs={self.keep_pairs})"


class TruncateToolResults:
    """Shows every tool result longer than ``max_chars`` characters as an excerpt: its first two thirds and last
    third of ``max_chars`` around a note saying how many characters were cut. Nothing is left out, so call
    and result always stay together. Raises ``UsageError`` when ``max_chars`` is not a positive integer."""

    __slots__ = ("max_chars",)

    def __init__(self, max_chars: int) -> None:
        self.max_chars = positive_int("max_chars", max_chars)

    def __call__(self, state: State) -> State:
        limit = self.max_chars
        turns = state.turns
        out: list[Turn] | None = None
        for index, turn in enumerate(turns):
            if turn.role is not Role.TOOL or not any(len(r.content) > limit for r in turn.tool_results):
                if out is not None:
                    out.append(turn)
                continue
            if out is None:
                out = list(turns[:index])
            parts = tuple(attrs.evolve(p, content=excerpt(p.content, limit)) if isinstance(p, ToolResult) else p
                          for p in turn.parts)
            out.append(Turn(turn.role, parts, turn.meta, turn.name))
        return state if out is None else State(out, state.meta)

    def __repr__(self) -> str:
        return f"TruncateToolResults({self.max_chars})"


class FitToWindow:
    """Shows as much of the conversation as fits in ``max_tokens`` tokens, as ``counter`` counts them.

    A conversation that fits is returned as it is. Otherwise units are left out, oldest first, until it fits:
    first tool exchanges (each with its results), then older user messages, each with the answers to it (so no
    answer is shown without its question). Never left out: the
    system turns, the latest user message, the answers after it, and the newest exchange when it comes after
    that message (the results the model is reacting to). The view that is returned never counts more than
    ``max_tokens``.

    If even what is never left out does not fit, it raises ``UsageError`` naming the sizes, before any model
    is called; the latest message is not cut, since a model answering half a question does worse than one that
    is not asked. Put ``TruncateToolResults`` first to shorten long results. Raises ``UsageError`` for a
    ``max_tokens`` that is not a positive integer or a ``counter`` that cannot be called.
    """

    __slots__ = ("max_tokens", "counter")

    def __init__(self, max_tokens: int, *, counter: TokenCounter = approx_tokens) -> None:
        self.max_tokens = positive_int("max_tokens", max_tokens)
        self.counter = check_counter(counter)

    def __call__(self, state: State) -> State:
        turns = state.turns
        limit = self.max_tokens
        if count(self.counter, turns, "FitToWindow") <= limit:
            return state
        units = split_units(turns)
        candidates = self._drop_order(units, turns)

        def leaving_out(dropped: int) -> tuple[State, int]:
            view = without(state, turns, [i for u in candidates[:dropped] for i in u.indices])
            return view, count(self.counter, view.turns, "FitToWindow")

        fitted, needed = leaving_out(len(candidates))
        if needed > limit:
            raise UsageError(self._too_big(units, turns, needed, candidates))
        # The fewest units to leave out, found by bisection: leaving out more never makes a view longer, and
        # each probe counts one whole view, so counters that do not add up turn by turn are honoured too.
        low, high = 0, len(candidates)  # leaving out ``low`` does not fit; leaving out ``high`` does
        while high - low > 1:
            middle = (low + high) // 2
            view, needed = leaving_out(middle)
            if needed <= limit:
                high, fitted = middle, view
            else:
                low = middle
        return fitted

    def _drop_order(self, units: list[Unit], turns: tuple[Turn, ...]) -> list[Unit]:
        """The units that may be left out, in the order they go: unsendable ones, exchanges, then older messages."""
        latest_user = max((i for i, u in enumerate(units) if u.kind == USER), default=-1)
        sendable = sendable_exchanges(units, turns)
        newest = sendable[-1] if sendable else None
        protected_exchange = newest if newest is not None and units.index(newest) > latest_user else None
        broken = [u for u in units if u.kind == STRAY or (u.kind == EXCHANGE and u not in sendable)]
        exchanges = [u for u in sendable if u is not protected_exchange]
        # An older message goes with the answers to it, so that no answer is left without its question.
        messages: list[Unit] = []
        for unit in units[:max(latest_user, 0)]:
            if unit.kind == USER or (unit.kind == ANSWER and not messages):
                messages.append(Unit(unit.kind, unit.indices[0]))
            elif unit.kind == ANSWER:
                messages[-1].indices.extend(unit.indices)
        return broken + exchanges + messages

    def _too_big(self, units: list[Unit], turns: tuple[Turn, ...], needed: int, dropped: list[Unit]) -> str:
        gone = {i for u in dropped for i in u.indices}
        system = [turns[i] for u in units if u.kind == SYSTEM for i in u.indices]
        rest = [turns[i] for u in units if u.kind != SYSTEM for i in u.indices if i not in gone]
        counter = self.counter
        return (f"FitToWindow(max_tokens={self.max_tokens}): the conversation needs {needed} tokens even with every "
                f"older exchange and message left out: the system turns take {count(counter, system, 'FitToWindow')} "
                f"and the latest user message with what follows it {count(counter, rest, 'FitToWindow')}; raise "
                "max_tokens, shorten them, or put TruncateToolResults before FitToWindow")

    def __repr__(self) -> str:
        return f"FitToWindow({self.max_tokens})"
