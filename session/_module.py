"""What ``python -m session`` reads from the module it serves (``MODULE:FACTORY``): the pattern factory, checked at
start-up, and the module's own hooks: ``demo_provider()``, ``make_step(provider, events)`` (or ``TOOLS``) and
``make_deps()``."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from loop import EventBus, Provider, UsageError, has
from session._steps import StepFactory, step_factory
from cognitive import Pattern


def load_factory(target: str) -> tuple[Any, Callable[..., Any]]:
    """The module and the factory ``MODULE:FACTORY`` names."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"expected MODULE:FACTORY (like examples.quickstart:make_agent), got {target!r}")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import {module_name!r}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UsageError(f"{module_name} has no callable {attr!r} (a function taking a TurnExecutor, "
                         "returning a Pattern)")
    return module, factory


def check_factory(target: str, factory: Callable[..., Any], make_step: StepFactory, provider: Provider) -> None:
    """Build the pattern once, with a step like the ones sessions get, so that a factory that cannot be called
    with a step, or returns no pattern, is refused at start-up rather than at the first message."""
    step = make_step(provider, EventBus())
    try:
        pattern = factory(step)
    except TypeError as exc:
        raise UsageError(f"{target} cannot be called with a step: {exc} (MODULE:FACTORY names a callable taking "
                         "the step and returning a pattern)") from exc
    except Exception as exc:
        raise UsageError(f"{target} failed when called with a step: {type(exc).__name__}: {exc}") from exc
    if not has(pattern, Pattern):
        raise UsageError(f"{target} returned {pattern!r}, which is not a pattern (it has no run(state) method); "
                         "MODULE:FACTORY names a callable taking the step and returning a pattern, like "
                         "examples.quickstart:make_agent")


def describe_provider(model: Provider) -> str:
    """What a provider is, in a few words for the start-up line: offline when it is a demo model."""
    from provider import Function, Scripted

    kind = type(model)
    package = sys.modules.get(kind.__module__.split(".")[0])
    public = getattr(package, kind.__qualname__, None) is kind
    name = f"{package.__name__ if public and package else kind.__module__}.{kind.__qualname__}"
    if isinstance(model, Function):
        return f"offline demo model, {name}"
    if isinstance(model, Scripted):
        return f"offline scripted replies, {name}"
    return name


def choose_provider(module: Any, spec: str | None, say: Callable[[str], None]) -> Provider:
    """``--provider`` when given; otherwise the module's own ``demo_provider()``."""
    if spec:
        from provider import from_spec

        return from_spec(spec)
    demo = getattr(module, "demo_provider", None)
    if not callable(demo):
        raise UsageError(f"no --provider given and {module.__name__} defines no demo_provider(); "
                         "pass --provider openai:gpt-4o-mini (or anthropic:..., openai-compatible:MODEL@URL)")
    model: Provider = demo()
    say(f"no --provider given: using {module.__name__}.demo_provider() ({describe_provider(model)})")
    return model


def step_maker(module: Any) -> StepFactory:
    """The module's ``make_step(provider, events)`` if it has one, else a step with its ``TOOLS``."""
    make: StepFactory | None = getattr(module, "make_step", None)  # taken on trust, as Manager(make_step=) takes it
    if callable(make):
        return make
    return step_factory(getattr(module, "TOOLS", ()))


def deps_of(module: Any) -> Any:
    """What the module's ``make_deps()`` returns, if it has one: the application's dependencies every run sees
    (``loop.RunContext.deps``); else ``None``."""
    make = getattr(module, "make_deps", None)  # a module's own hook, as make_step is
    if make is None:
        return None
    if not callable(make):
        raise UsageError(f"{module.__name__}.make_deps must be a function returning the agent's dependencies, "
                         f"got {make!r}")
    return make()
