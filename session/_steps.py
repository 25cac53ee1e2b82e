"""What a ``Manager`` runs each session's messages with: the turn processor it is given (``check_processor``), the
executor (made by a ``StepFactory``; ``agent_tool_names`` says which tools it offers) and the store's checkpoints
(``current_checkpoints``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, cast

from cognitive import Checkpoints, Pattern
from loop import EventBus, Provider, Step, Tool, ToolRunner, TurnExecutor, UsageError, has

if TYPE_CHECKING:
    from session._manager import Manager

StepFactory = Callable[[Provider, EventBus], TurnExecutor]
checkpoints_var: ContextVar[Checkpoints | None] = ContextVar("session_checkpoints", default=None)


def step_factory(tools: Sequence[Tool] = (), **settings: Any) -> StepFactory:
    """A factory making ``Step(provider, tools=tools, events=events, **settings)`` for each session."""
    tools = tuple(tools)

    def make(provider: Provider, events: EventBus) -> Step:
        return Step(provider, tools=tools, events=events, **settings)

    return make


def agent_tool_names(manager: Manager) -> frozenset[str]:
    """The names of the tools a step the manager makes offers (none when its steps run no tools): what a
    conduit's client may not name a tool of its own."""
    step = manager.make_step(manager.provider, EventBus())
    if not has(step, ToolRunner):
        return frozenset()
    return frozenset(t.spec.name for t in cast(ToolRunner, step).pipeline.tools)


def current_checkpoints() -> Checkpoints | None:
    """The checkpoints of the manager whose session is running this code (its ``Manager.checkpoints``), for a
    pattern factory that is given only a step, as ``python -m session serve MODULE:FACTORY`` gives one::

        def make_agent(step):
            return MCTS(step, checkpoints=session.current_checkpoints())

    The factory is called for each message, in the session's worker, so a search a stopped process left
    half done goes on where it stopped when the message runs again. ``None`` outside a session's run (as when
    the command line tries the factory at start-up) and with a store that keeps no checkpoints: the pattern
    then saves none."""
    return checkpoints_var.get()


def check_processor(processor: Any) -> None:
    """Refuse what is not a turn processor, naming the fix for the usual mix-up: a pattern factory (or a
    pattern) passed where ``new_turn_processor(factory)`` belongs."""
    if not callable(processor):
        if has(processor, Pattern):
            raise UsageError(f"Manager takes a turn processor, and {processor!r} is a pattern; pass "
                             "new_turn_processor(factory) with a factory building the pattern from its executor")
        raise UsageError(f"Manager needs a turn processor (see cognitive.new_turn_processor), got {processor!r}")
    try:
        signature = inspect.signature(processor)
    except (TypeError, ValueError):
        return  # a callable without a signature to read: taken on trust
    if _binds(signature, 1) and not _binds(signature, 2):
        name = getattr(processor, "__name__", None) or repr(processor)
        raise UsageError(f"Manager takes a turn processor (executor, state) -> state; {name} takes one argument, "
                         f"like a pattern factory (executor -> pattern): pass new_turn_processor({name})")


def _binds(signature: inspect.Signature, count: int) -> bool:
    try:
        signature.bind(*([None] * count))
    except TypeError:
        return False
    return True
