"""The registry: every pattern and wrapper by name, built from a step and keyword settings."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from cognitive._pattern import Pattern
from loop import UsageError

Factory = Callable[..., Pattern]
"""A pattern class (or a function) registered by name. Its parameters say how ``build`` calls it: ``step`` and
``submitter`` receive the step, ``inner`` the wrapped pattern (a pattern or a name, ``"react"`` by default),
``*stages`` the ``stages`` setting; every other parameter is a setting, required when it has no default."""

_STEP = ("step", "submitter")
_DEFAULT_INNER = "react"


class RegistryError(UsageError, ValueError):
    """Raised when ``cognitive.build`` is given a name or a setting it does not know, or lacks a required
    setting; the message lists the valid ones. A ``ValueError`` too, as a bad value passed in."""


_FACTORIES: dict[str, Factory] = {}


def register(name: str, factory: Factory) -> None:
    """Make ``factory`` (a pattern class, or a function returning a pattern) buildable as ``name`` (lower case,
    words joined by ``-``); see ``Factory`` for how its parameters are filled."""
    if not isinstance(name, str) or not name or name != name.strip().lower() or " " in name:
        raise UsageError(f"a pattern name is lower case with no spaces, like 'self-consistency'; got {name!r}")
    if not callable(factory):
        raise UsageError(f"register needs a pattern class or a function returning a pattern, got {factory!r}")
    if name in _FACTORIES:
        raise UsageError(f"a pattern named {name!r} is already registered")
    _FACTORIES[name] = factory


def names() -> tuple[str, ...]:
    """Every name ``build`` knows, sorted."""
    return tuple(sorted(_FACTORIES))


def settings(name: str) -> dict[str, Any]:
    """The settings the pattern ``name`` takes, each with its default (``inspect.Parameter.empty`` for one that
    must be given)."""
    return dict(_settings(_factory(name)))


def build(name: str, step: Any, **settings: Any) -> Pattern:
    """The pattern registered as ``name``, built on ``step`` with ``settings``.

    ``build("self-consistency", step, n=7)`` is ``SelfConsistency(ReAct(step), n=7)``. A wrapper's ``inner``
    takes a pattern or a name (built on the same step with its defaults); ``"react"`` when not given. Router's
    ``choices`` may name patterns the same way. Raises ``RegistryError`` (a ``ValueError``) for an unknown name
    or setting, listing the valid ones, and for a missing required setting.
    """
    factory = _factory(name)
    accepted = _settings(factory)
    unknown = sorted(set(settings) - set(accepted))
    if unknown:
        valid = ", ".join(accepted) or "none"
        raise RegistryError(f"{name!r} has no setting {', '.join(map(repr, unknown))}; its settings are: {valid}")
    missing = [n for n, default in accepted.items() if default is inspect.Parameter.empty and n not in settings]
    if missing:
        raise RegistryError(f"{name!r} needs the setting{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(map(repr, missing))}")
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for param in inspect.signature(factory).parameters.values():
        if param.name in _STEP and param.name not in settings:
            value: Any = step
        elif param.name == "inner":
            value = _pattern(settings.get("inner", _DEFAULT_INNER), step)
        elif param.name == "choices" and isinstance(settings.get("choices"), Mapping):
            value = {key: _pattern(choice, step) for key, choice in settings["choices"].items()}
        elif param.kind is inspect.Parameter.VAR_POSITIONAL:
            args.extend(settings[param.name])
            continue
        elif param.name in settings:
            value = settings[param.name]
        else:
            continue
        if param.kind is inspect.Parameter.KEYWORD_ONLY:
            kwargs[param.name] = value
        else:
            args.append(value)
    return factory(*args, **kwargs)


def _pattern(value: Any, step: Any) -> Any:
    return build(value, step) if isinstance(value, str) else value


def _factory(name: str) -> Factory:
    if not isinstance(name, str):
        raise RegistryError(f"a pattern name is a string; got {name!r}. Valid names: {', '.join(names())}")
    try:
        return _FACTORIES[name]
    except KeyError:
        close = difflib.get_close_matches(name, _FACTORIES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise RegistryError(f"no pattern is named {name!r}{hint}; valid names: {', '.join(names())}") from None


def _settings(factory: Factory) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for param in inspect.signature(factory).parameters.values():
        if param.name in _STEP and param.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue
        if param.name == "inner":
            found["inner"] = _DEFAULT_INNER
        elif param.kind is inspect.Parameter.VAR_POSITIONAL:
            found[param.name] = inspect.Parameter.empty
        elif param.kind is not inspect.Parameter.VAR_KEYWORD:
            found[param.name] = param.default
    return found
