"""The registry: every pattern and wrapper by name, built from a step and keyword settings."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from typing import Any

from cognitive._pattern import Pattern
from loop import UsageError

Builder = Callable[..., Pattern]
"""``builder(step, **settings) -> Pattern``; its keyword-only parameters are the settings it accepts."""


class RegistryError(UsageError, ValueError):
    """Raised when ``cognitive.build`` is given a name or a setting it does not know, or lacks a required
    setting; the message lists the valid ones. A ``ValueError`` too, as a bad value passed in."""


_BUILDERS: dict[str, Builder] = {}


def register(name: str, builder: Builder) -> None:
    """Add ``builder`` under ``name`` (lower case, words joined by ``-``). Its keyword-only parameters are the
    settings ``build`` accepts for it; a parameter without a default is a setting that must be given."""
    if not isinstance(name, str) or not name or name != name.strip().lower() or " " in name:
        raise UsageError(f"a pattern name is lower case with no spaces, like 'self-consistency'; got {name!r}")
    if not callable(builder):
        raise UsageError(f"register needs a builder function (step, **settings) -> Pattern, got {builder!r}")
    if name in _BUILDERS:
        raise UsageError(f"a pattern named {name!r} is already registered")
    _BUILDERS[name] = builder


def names() -> tuple[str, ...]:
    """Every name ``build`` knows, sorted."""
    return tuple(sorted(_BUILDERS))


def settings(name: str) -> dict[str, Any]:
    """The settings the pattern ``name`` accepts, each with its default (``inspect.Parameter.empty`` for one
    that must be given)."""
    return {p.name: p.default for p in _keywords(_builder(name))}


def build(name: str, step: Any, **settings: Any) -> Pattern:
    """The pattern registered as ``name``, built on ``step`` with ``settings``.

    ``build("self-consistency", step, n=7)`` is ``SelfConsistency(ReAct(step), n=7)``. A wrapper's ``inner``
    setting takes a pattern or another name (built on the same step with its defaults). Raises
    ``RegistryError`` (a ``ValueError``) for an unknown name or setting, listing the valid ones, and for a
    missing required setting.
    """
    builder = _builder(name)
    accepted = {p.name: p for p in _keywords(builder)}
    unknown = sorted(set(settings) - set(accepted))
    if unknown:
        valid = ", ".join(accepted) or "none"
        raise RegistryError(f"{name!r} has no setting {', '.join(map(repr, unknown))}; its settings are: {valid}")
    missing = [n for n, p in accepted.items() if p.default is inspect.Parameter.empty and n not in settings]
    if missing:
        raise RegistryError(f"{name!r} needs the setting{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(map(repr, missing))}")
    if "inner" in settings and isinstance(settings["inner"], str):
        settings["inner"] = build(settings["inner"], step)
    return builder(step, **settings)


def _builder(name: str) -> Builder:
    if not isinstance(name, str):
        raise RegistryError(f"a pattern name is a string; got {name!r}. Valid names: {', '.join(names())}")
    try:
        return _BUILDERS[name]
    except KeyError:
        close = difflib.get_close_matches(name, _BUILDERS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise RegistryError(f"no pattern is named {name!r}{hint}; valid names: {', '.join(names())}") from None


def _keywords(builder: Builder) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(builder).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
