"""Guards: verifiers that read one text of a conversation (the message, the answer, or the tool results) and
say what they found in it, masked, so that the same check serves as a tripwire or as a verifier to repair by.

``TextCheck(find, name=..., where=...)`` is the shared mechanism: ``find(text)`` returns what it found in one
text, each described for people; the check FAILs when anything is found, with a report listing it. The shipped
guards (``MaxLength`` here, ``NoSecrets`` and ``NoPII`` in ``_privacy``, ``NoInjection`` in ``_injection``) are
a few lines on it, and so is a check of your own.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, Protocol, runtime_checkable

import anyio.lowlevel
import attrs

from loop import Role, State, UsageError
from loop.checks import positive_int
from verifier._core import Result, Status

Where = Literal["input", "output", "tool_output"]
"""Which text a guard reads: ``"input"`` the user's message the model has not answered yet, ``"output"`` the
answer, ``"tool_output"`` the tool results of the current run."""

WHERE: tuple[Where, ...] = ("input", "output", "tool_output")
_MAX_FINDINGS = 10  # a report lists the first few: a long list would bury what to do


@attrs.frozen
class Passage:
    """One text a guard reads: ``source`` says where it is, for the report ("the answer", "the result of
    search (call c1)"), and ``text`` is the text itself."""

    source: str
    text: str


def passages(state: State, where: Where) -> tuple[Passage, ...]:
    """The texts of ``state`` a guard reading ``where`` checks, oldest first.

    ``"input"``: each user turn after the last assistant turn (the message the model is about to see), or the
    last user turn when the model has answered them all. ``"output"``: the answer (``state.answer``), or nothing
    when there is none. ``"tool_output"``: every tool result since the last user turn (the results of the
    current run, which the model reads next). Raises ``UsageError`` for any other ``where``.
    """
    check_where(where, "passages")
    if where == "output":
        answer = state.answer
        return () if answer is None else (Passage("the answer", answer),)
    found: list[Passage] = []
    if where == "input":
        answered = False
        for turn in state.reversed():
            if turn.role is Role.ASSISTANT:
                if found:
                    break
                answered = True
            elif turn.role is Role.USER:
                found.append(Passage("the message", turn.text))
                if answered:
                    break
    else:
        for turn in state.reversed():
            if turn.role is Role.USER:
                break
            if turn.role is Role.TOOL:
                found.extend(Passage(f"the result of {r.name} (call {r.call_id})", r.content)
                             for r in reversed(turn.tool_results))
    return tuple(reversed(found))


def check_where(where: Any, who: str) -> Where:
    """``where`` when it is one of ``WHERE``; else ``UsageError`` naming ``who``."""
    if where not in WHERE:
        raise UsageError(f"{who}: where= must be one of {', '.join(map(repr, WHERE))}, got {where!r}")
    checked: Where = where  # one of WHERE
    return checked


def mask(value: str) -> str:
    """``value`` shown without giving it away: its first few characters (at most 4, and at most a quarter of it)
    and its length, as in ``sk-p…, 51 characters``."""
    keep = min(4, len(value) // 4)
    return f"{value[:keep]}…, {len(value)} characters"


@runtime_checkable
class Guard(Protocol):
    """A verifier that reads one text of a state, named by ``where`` (see ``Where``); ``at(where)`` is the same
    check reading another. ``cognitive.WithGuardrails`` and ``cognitive.ToolOutputGuard`` place each guard
    they are given at the text of the stage they run it in; a verifier that is not a ``Guard`` runs as it is."""

    name: str
    where: Where

    async def verify(self, state: State) -> Result: ...

    def at(self, where: Where) -> Guard: ...


_SAYS = {"input": "the message", "output": "the answer", "tool_output": "the tool results"}
FIX = "Rewrite it without them."


class TextCheck:
    """A ``Guard`` made of a function: ``find(text)`` returns what it found in one text (an iterable of short
    descriptions for people, each hiding any secret it describes: see ``mask``), and the check FAILs when it
    found anything in the texts ``where`` names (see ``passages``). A subclass may override the ``find`` method
    instead, and pass no function.

    The report lists the findings (the first 10; a tool result's say which result), then ``fix``: what the
    model should do, when the check is used to repair an answer. Nothing found, or no text to read, PASSes. ``find`` runs
    on the event loop, once per text, so it must be quick (a regular expression is); the check lets a
    cancellation through between texts. Raises ``UsageError`` for a ``find`` that is not callable, an empty
    ``name`` or an unknown ``where``.
    """

    __slots__ = ("name", "where", "fix", "_function")

    def __init__(self, find: Callable[[str], Iterable[str]] | None = None, *, name: str, where: Where = "output",
                 fix: str = FIX) -> None:
        if (find is None and type(self).find is TextCheck.find) or (find is not None and not callable(find)):
            raise UsageError(f"TextCheck needs a function find(text) returning what it found, got {find!r}")
        if not isinstance(name, str) or not name:
            raise UsageError(f"a guard's name= must be a non-empty string, got {name!r}")
        if not isinstance(fix, str):
            raise UsageError(f"a guard's fix= must be a string (what the model should do), got {fix!r}")
        self.name = name
        self.where: Where = check_where(where, name)
        self.fix = fix
        self._function = find

    def find(self, text: str) -> Iterable[str]:
        """What this check finds in ``text``, each described for people with any secret masked."""
        function = self._function
        return () if function is None else function(text)  # None only where a subclass overrides this

    def at(self, where: Where) -> TextCheck:
        """This check, reading ``where`` instead."""
        placed = copy.copy(self)
        placed.where = check_where(where, self.name)
        return placed

    async def verify(self, state: State) -> Result:
        found: list[str] = []
        several = self.where == "tool_output"  # one text for the others: naming it again says nothing
        for passage in passages(state, self.where):
            await anyio.lowlevel.checkpoint()  # many long tool results: stop promptly when cancelled
            found.extend(f"{finding}, in {passage.source}" if several else finding
                         for finding in self.find(passage.text))
        if not found:
            return Result(self.name, Status.PASS)
        shown = [f"- {finding}" for finding in found[:_MAX_FINDINGS]]
        if len(found) > _MAX_FINDINGS:
            shown.append(f"- … and {len(found) - _MAX_FINDINGS} more")
        report = f"Found in {_SAYS[self.where]}:\n\n" + "\n".join(shown)
        return Result(self.name, Status.FAIL, f"{report}\n\n{self.fix}" if self.fix else report)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, where={self.where!r})"


class MaxLength(TextCheck):
    """FAILs when a text is longer than ``chars`` characters: the message (a pasted document too large to
    send), the answer, or one tool result. ``where`` defaults to the answer."""

    __slots__ = ("chars",)

    def __init__(self, chars: int, *, where: Where = "output", name: str = "max-length") -> None:
        self.chars = positive_int("MaxLength's chars", chars)
        super().__init__(name=name, where=where, fix=f"Shorten it to at most {self.chars:,} characters.")

    def find(self, text: str) -> Iterable[str]:
        if len(text) > self.chars:
            yield f"{len(text):,} characters, over the limit of {self.chars:,}"


def compile_patterns(patterns: Mapping[str, str | re.Pattern[str]] | None, who: str) -> tuple[tuple[str, re.Pattern[str]], ...]:
    """A guard's ``patterns=`` (``{"what it finds": regex}``, or ``None``) compiled, each with its description;
    ``UsageError`` naming ``who`` for anything else."""
    if patterns is None:
        return ()
    if not isinstance(patterns, Mapping):
        raise UsageError(f"{who}'s patterns= maps what each finds to a regular expression, e.g. "
                         f"{{'an internal token': r'tok_[a-z0-9]{{32}}'}}; got {patterns!r}")
    compiled: list[tuple[str, re.Pattern[str]]] = []
    for kind, pattern in patterns.items():
        if not isinstance(kind, str) or not kind:
            raise UsageError(f"{who}'s patterns= needs a non-empty description for each pattern, got {kind!r}")
        try:
            compiled.append((kind, pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)))
        except (re.error, TypeError) as exc:
            raise UsageError(f"{who}'s pattern for {kind!r} is not a regular expression: {exc}") from None
    return tuple(compiled)
