"""``NoSecrets`` and ``NoPII``: guards that find credentials and personal data in a text, and never repeat them."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping

from loop import UsageError
from verifier._guards import TextCheck, Where, compile_patterns, mask

_TOKEN = r"[A-Za-z0-9_-]"
_DIGIT_AHEAD = rf"(?={_TOKEN}*?\d)"  # generated keys hold digits; words joined by dashes do not
_FREE = r"(?<![A-Za-z0-9_-])"  # not the tail of a longer word ("task-..." is no key)

SECRET_PATTERNS: Mapping[str, str] = {
    "an Anthropic API key": rf"{_FREE}sk-ant-{_DIGIT_AHEAD}{_TOKEN}{{20,}}",
    "an OpenAI API key": rf"{_FREE}sk-(?!ant-){_DIGIT_AHEAD}{_TOKEN}{{20,}}",
    "an AWS access key ID": r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    "a GitHub token": r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})\b",
    "a Slack token": rf"{_FREE}xox[baprs]-{_DIGIT_AHEAD}[A-Za-z0-9-]{{10,}}",
    "a Stripe secret key": r"\b(?:sk|rk)_live_[A-Za-z0-9]{20,}\b",
    "a Google API key": rf"{_FREE}AIza[0-9A-Za-z_-]{{35}}",
    "a private key": r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----",
    "a JSON Web Token": r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+",
}
"""The credential formats ``NoSecrets`` finds, by what each is: the common API keys and tokens by their fixed
prefixes, a PEM private key by its header, and a JSON Web Token by its shape. Generic high-entropy strings
are not looked for: too many ids and hashes look the same."""

_EMAIL = re.compile(r"(?<![\w.+-])([A-Za-z0-9._%+-]+)@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,})\b")
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")


def _spans(text: str, finders: Iterable[tuple[str, Callable[[str], Iterator[re.Match[str]]], Callable[[re.Match[str]], str | None]]]) -> list[str]:
    """What the finders found in ``text``, in order of position; a match overlapping an earlier one (an OpenAI
    key inside a longer token another pattern found) is reported once."""
    found: list[tuple[int, int, str]] = []
    for kind, matches, show in finders:
        for match in matches(text):
            shown = show(match)
            if shown is not None:
                found.append((match.start(), match.end(), f"{kind} ({shown})"))
    found.sort()
    kept: list[str] = []
    end = -1
    for start, stop, what in found:
        if start >= end:
            kept.append(what)
            end = stop
    return kept


def _masked(match: re.Match[str]) -> str:
    return mask(match.group(0))


class NoSecrets(TextCheck):
    """FAILs when a text holds a credential: an API key or token of a common service, a private key, a JSON Web
    Token (see ``SECRET_PATTERNS``), or a match of one of your ``patterns`` (``{"what it is": regex}``). The
    report names each kind and shows it masked (``sk-p…, 51 characters``), never whole. ``where`` defaults to
    the answer; as an input check it stops a pasted key before it is sent to a model."""

    __slots__ = ("_patterns",)

    def __init__(self, *, patterns: Mapping[str, str | re.Pattern[str]] | None = None, where: Where = "output",
                 name: str = "no-secrets") -> None:
        own = compile_patterns(patterns, "NoSecrets")
        self._patterns = tuple((kind, re.compile(p)) for kind, p in SECRET_PATTERNS.items()) + own
        super().__init__(name=name, where=where,
                         fix="Never repeat a credential: remove it, or write a placeholder such as [API key].")

    def find(self, text: str) -> list[str]:
        return _spans(text, ((kind, p.finditer, _pem_or_masked) for kind, p in self._patterns))


def _pem_or_masked(match: re.Match[str]) -> str:
    text = match.group(0)
    return "PEM header" if text.startswith("-----BEGIN") else mask(text)


def _luhn(digits: str) -> bool:
    """Whether ``digits`` (digits only) pass the Luhn checksum every payment card number carries."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _card(match: re.Match[str]) -> str | None:
    digits = re.sub(r"[ -]", "", match.group(0))
    if not 13 <= len(digits) <= 19 or not _luhn(digits):
        return None
    return f"ending {digits[-4:]}"


def _email(match: re.Match[str]) -> str:
    return f"{match.group(1)[0]}***@{match.group(2)}"


class NoPII(TextCheck):
    """FAILs when a text holds personal data: an e-mail address (``emails``), a payment card number
    (``cards``: 13 to 19 digits, grouped by spaces or dashes or not, that pass the Luhn checksum, so most other
    long numbers do not count), or a match of one of your ``patterns`` (``{"a phone number": regex}``). The
    report shows each masked: ``j***@example.com``, a card by its last four digits. ``where`` defaults to the
    answer. A number that passes Luhn by chance (one in ten does) is taken for a card."""

    __slots__ = ("_finders",)

    def __init__(self, *, emails: bool = True, cards: bool = True,
                 patterns: Mapping[str, str | re.Pattern[str]] | None = None, where: Where = "output",
                 name: str = "no-pii") -> None:
        finders: list[tuple[str, re.Pattern[str], Callable[[re.Match[str]], str | None]]] = []
        if emails:
            finders.append(("an e-mail address", _EMAIL, _email))
        if cards:
            finders.append(("a card number", _CARD, _card))
        finders.extend((kind, pattern, _masked) for kind, pattern in compile_patterns(patterns, "NoPII"))
        if not finders:
            raise UsageError("NoPII with emails=False, cards=False and no patterns= would find nothing")
        self._finders = tuple(finders)
        super().__init__(name=name, where=where,
                         fix="Leave personal data out: remove it, or write a placeholder such as [e-mail].")

    def find(self, text: str) -> list[str]:
        return _spans(text, ((kind, p.finditer, show) for kind, p, show in self._finders))
