"""The ``Pattern`` protocol, the glue that connects patterns to sessions, and the checks every pattern shares."""

from __future__ import annotations

import reprlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from loop import (Options, Role, State, TurnExecutor, TurnSubmitter, UsageError, current_scope, has, require,
                  run_path)


@runtime_checkable
class Pattern(Protocol):
    """A way of reasoning: turns a conversation ``State`` into a new ``State`` ending in a written answer.

    A pattern is stateless: settings go in ``__init__`` and nothing is kept between runs, so one instance can
    serve many conversations at once. The answer turn carries the run's ``Outcome`` (``state.outcome``): a run
    stopped by a budget or cap still writes an answer, marked ``degraded`` with the reason. A run whose turn
    left tool calls for the caller (``loop.external_tools``) returns at once with them open, its outcome
    ``pending`` (``left_open``); a wrapper returns such a state as it is. Cancellation propagates unchanged.
    """

    async def run(self, state: State) -> State: ...


def picked_up(state: State) -> Mapping[str, Any] | None:
    """When ``state`` ends in the caller's results for the calls a run left open, the data the pattern running
    now (by its run path) recorded on that run's answer, so that it goes on where it stopped (the stage it was
    in, the route it took); ``None`` otherwise."""
    last = state.last
    if last is None or last.role is not Role.TOOL or state.pending_calls:
        return None
    outcome = state.outcome
    if outcome is None or outcome.status != "pending":
        return None
    data = outcome.data.get(run_path())
    return data if isinstance(data, Mapping) else None


def left_open(state: State) -> bool:
    """Whether the run stopped with tool calls left for the caller to answer (outcome ``pending``, calls
    still open): the pattern returns, and every wrapper passes the state on untouched."""
    outcome = state.outcome
    return outcome is not None and outcome.status == "pending" and bool(state.pending_calls)


def check_start(state: object, who: str) -> None:
    """Refuse what no pattern can start from, before any model is called: something that is not a ``State``, and a
    ``State`` with no turns (the model would be asked with no messages). ``who`` names the pattern in the error."""
    if not isinstance(state, State):
        raise UsageError(f"{who}.run takes a loop.State, got {type(state).__name__}: {reprlib.repr(state)}; "
                         "start from State().append(Role.USER, Text(...))")
    if state.last is None:
        raise UsageError(f"{who}.run: the state has no turns, so the model would be called with no messages; "
                         "start from State().append(Role.USER, Text(...))")


PatternFactory = Callable[[TurnExecutor], Pattern]
"""Builds the pattern for a conversation from the executor that runs its turns."""

TurnProcessor = Callable[[TurnExecutor, State], Awaitable[State]]
"""Handles one user message: given the executor and the state ending in that message, returns the new state."""


def new_turn_processor(factory: PatternFactory) -> TurnProcessor:
    """A ``TurnProcessor`` that runs the pattern ``factory`` builds for each message."""
    if not callable(factory):
        raise UsageError(f"new_turn_processor needs a factory (executor -> Pattern), got {factory!r}")

    def process(executor: TurnExecutor, state: State) -> Awaitable[State]:
        # A plain function returning the run itself: one coroutine less per message than awaiting it here.
        pattern = factory(executor)
        if not has(pattern, Pattern):
            raise UsageError(f"the factory returned {pattern!r}, which is not a Pattern (no run(state) method)")
        return pattern.run(state)

    return process


def check_wiring(who: str, inner: Any, submitter: Any) -> None:
    """Refuse a wrapper built on something that is not a pattern, or without a step to submit its reports."""
    require(inner, Pattern, who, "a Pattern to wrap (something with run(state))")
    require(submitter, TurnSubmitter, who, "a TurnSubmitter (the step) to submit its reports")


def check_prompt(name: str, prompt: Any, *fields: str) -> str:
    """``prompt`` if it is a format string using exactly the named ``fields``."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise UsageError(f"{name} must be a non-empty string, got {prompt!r}")
    if not fields:
        return prompt  # sent as written, never formatted
    try:
        prompt.format(**{f: "" for f in fields})
    except (KeyError, IndexError, ValueError) as exc:
        raise UsageError(f"{name} may use only {', '.join('{' + f + '}' for f in fields)} as fields "
                         f"(double other braces); formatting it failed: {exc!r}") from None
    missing = [f for f in fields if "{" + f + "}" not in prompt]
    if missing:
        raise UsageError(f"{name} must contain {', '.join('{' + f + '}' for f in missing)}, got {prompt!r}")
    return prompt


def answering() -> Options | None:
    """The options that ask this run's main-line turns for the answer's schema (``loop.typed_answer``), if one is
    wanted: a pattern whose answer is a plain assistant turn can write it in that shape at once."""
    here = current_scope()
    if here.answer is None or not here.on_main_line:
        return None
    return Options(output_schema=here.answer)
