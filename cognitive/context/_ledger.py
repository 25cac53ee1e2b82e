"""``Ledger``: earlier tool exchanges shown as one list of facts; ``AutoContext``: the full history until it grows
long, then the ledger."""

from __future__ import annotations

from cognitive.context._exchanges import (EXCHANGE, STRAY, Unit, answered, call_key, canonical_arguments, check_counter,
                                  count, excerpt, split_units, trailing_exchange, without)
from loop import Role, State, Text, TokenCounter, ToolCall, ToolResult, Turn, UsageError, approx_tokens
from loop.checks import positive_int

LEDGER_KIND = "ledger"
"""The ``meta["kind"]`` of the system turn a ``Ledger`` view shows (views are never stored)."""

HEADING = ("Facts from earlier tool calls, one a line as tool(arguments) = result (a repeated call shows its latest "
           "result). Use them rather than calling a tool again for a fact listed here.")


class _Fact:
    __slots__ = ("call", "result", "seen")

    def __init__(self, call: ToolCall, result: ToolResult, seen: int) -> None:
        self.call = call
        self.result = result
        self.seen = seen


class Ledger:
    """Shows earlier tool exchanges as one system turn of facts, ``tool(arguments) = result``.

    The view keeps every system turn, user turn and assistant answer as it is. The tool exchange the model is
    reacting to (the newest one, when nothing but system turns follows it) also stays as it is, call and
    results, so the model answers the newest results as it would without the ledger and a provider always sees
    the last assistant turn that called tools followed by its results. Every other exchange is left out and
    becomes facts, listed in one ``SYSTEM`` turn (``meta["kind"] == "ledger"``) that takes the place of the newest
    exchange it replaces. The assistant's text in those exchanges (its narration around the calls) is not shown.

    Facts are deduplicated by call: the same tool with the same arguments (compared as canonical JSON) is one fact
    holding its latest result, listed where it first appeared; a call the kept exchange repeats is not listed,
    since its newest result is shown there. Failed calls are listed as failed. A result longer than
    ``max_result_chars`` is excerpted (head and tail, with a note saying how much was cut). With ``max_chars``,
    the facts listed take at most that many characters: the facts least recently learned are dropped first, and
    the list says how many were; ``None`` lists every fact. A conversation with no earlier exchange is returned
    as it is.

    Raises ``UsageError`` when ``max_result_chars`` is not a positive integer, or ``max_chars`` neither one nor
    ``None``.
    """

    __slots__ = ("max_result_chars", "max_chars")

    def __init__(self, *, max_result_chars: int = 400, max_chars: int | None = 6_000) -> None:
        self.max_result_chars = positive_int("max_result_chars", max_result_chars)
        self.max_chars = positive_int("max_chars", max_chars, optional=True)

    def __call__(self, state: State) -> State:
        turns = state.turns
        units = split_units(turns)
        live = trailing_exchange(units)
        folded = [u for u in units if u.kind in (EXCHANGE, STRAY) and u is not live]
        if not folded:
            return state
        facts = self._facts(folded, turns, live)
        hidden = [i for u in folded for i in u.indices]
        if not facts:
            return without(state, turns, hidden)
        place = folded[-1].indices[0]
        ledger = Turn(Role.SYSTEM, (Text(self._render(facts)),), {"kind": LEDGER_KIND, "facts": len(facts)})
        skip = set(hidden)
        out = [ledger if i == place else t for i, t in enumerate(turns) if i == place or i not in skip]
        return State(out, state.meta)

    def _facts(self, folded: list[Unit], turns: tuple[Turn, ...], live: Unit | None) -> list[_Fact]:
        facts: dict[tuple[str, str], _Fact] = {}
        seen = 0
        for unit in folded:
            for call, result in answered(unit, turns):
                seen += 1
                key = call_key(call)
                fact = facts.get(key)
                if fact is None:
                    facts[key] = _Fact(call, result, seen)
                else:  # keeps its place in the list; the result and its recency are the newest
                    fact.call, fact.result, fact.seen = call, result, seen
        if live is not None:
            for call in turns[live.indices[0]].tool_calls:
                facts.pop(call_key(call), None)
        return list(facts.values())

    def _render(self, facts: list[_Fact]) -> str:
        lines = [self._line(f) for f in facts]
        omitted = 0
        if self.max_chars is not None:
            budget = self.max_chars
            keep: set[int] = set()
            for index in sorted(range(len(facts)), key=lambda i: facts[i].seen, reverse=True):
                size = len(lines[index]) + 1
                if size > budget:
                    break
                budget -= size
                keep.add(index)
            omitted = len(facts) - len(keep)
            lines = [line for i, line in enumerate(lines) if i in keep]
        text = "\n".join([HEADING, *lines])
        if omitted:
            text += (f"\n({omitted} older fact{'s are' if omitted > 1 else ' is'} not listed, to keep this list "
                     "short; call the tool again if you need one.)")
        return text

    def _line(self, fact: _Fact) -> str:
        call, result = fact.call, fact.result
        content = result.content
        if result.is_error and content.startswith("error: "):
            content = content[len("error: "):]
        content = excerpt(content, self.max_result_chars).replace("\n", "\n  ")
        verdict = "failed:" if result.is_error else "="
        return f"- {call.name}({canonical_arguments(call.arguments)}) {verdict} {content}"

    def __repr__(self) -> str:
        return f"Ledger(max_result_chars={self.max_result_chars}, max_chars={self.max_chars})"


class AutoContext:
    """The full history while it is short, and the ``ledger`` view once it is not: the default for tool loops.

    The view switches to ``ledger`` (``Ledger()`` unless given) once the conversation holds more than
    ``max_tool_results`` tool results, or once ``counter`` counts more than ``max_tokens`` tokens in it; a
    threshold set to ``None`` is not checked. Short tasks are shown exactly as stored; long tool loops see a
    bounded prompt. Since a conversation only grows, a conversation that switched stays switched, and its
    prompt prefix stays stable for provider prompt caching on either side of the switch.

    Raises ``UsageError`` when a threshold is neither a positive integer nor ``None``, when both are ``None``
    (it would never switch: use no view, or ``Ledger()``), or when ``counter`` or ``ledger`` cannot be called.
    """

    __slots__ = ("max_tool_results", "max_tokens", "counter", "ledger")

    def __init__(
        self,
        *,
        max_tool_results: int | None = 10,
        max_tokens: int | None = 20_000,
        counter: TokenCounter = approx_tokens,
        ledger: Ledger | None = None,
    ) -> None:
        self.max_tool_results = positive_int("max_tool_results", max_tool_results, optional=True)
        self.max_tokens = positive_int("max_tokens", max_tokens, optional=True)
        if max_tool_results is None and max_tokens is None:
            raise UsageError("AutoContext needs max_tool_results or max_tokens (both are None, so it would never "
                             "switch to the ledger); use Ledger() to always show the ledger")
        self.counter = check_counter(counter)
        if ledger is not None and not callable(ledger):
            raise UsageError(f"ledger must be a view (a function State -> State such as Ledger()), got {ledger!r}")
        self.ledger = ledger if ledger is not None else Ledger()

    def __call__(self, state: State) -> State:
        return self.ledger(state) if self.passed(state) else state

    def passed(self, state: State) -> bool:
        """Whether ``state`` has passed a threshold, so that the ledger is shown."""
        turns = state.turns
        if self.max_tool_results is not None:
            results = sum(len(t.tool_results) for t in turns if t.role is Role.TOOL)
            if results > self.max_tool_results:
                return True
        return self.max_tokens is not None and count(self.counter, turns, "AutoContext") > self.max_tokens

    def __repr__(self) -> str:
        return (f"AutoContext(max_tool_results={self.max_tool_results}, max_tokens={self.max_tokens}, "
                f"ledger={self.ledger!r})")
