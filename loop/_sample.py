"""``Step.sample``: several answers to one state, as branches, with the prompt paid once where the provider can."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio
import attrs

from loop.checks import positive_int
from loop._events import TurnCompleted
from loop._fanout import fan_out
from loop._outcome import PENDING
from loop._parts import Role
from loop._protocols import Options
from loop._scope import branch, current_scope
from loop._state import State
from loop._turn import Turn
from loop.errors import UsageError

if TYPE_CHECKING:
    from loop._step import Step


async def sample_states(step: Step, state: State, n: int, options: Options | None) -> tuple[State, ...]:
    """``Step.sample``."""
    positive_int("n (how many samples to take)", n)
    if not isinstance(state, State):
        raise UsageError(f"sample runs on a loop.State, got {state!r}")
    scope_options = current_scope().options
    opts = step._options if scope_options is None else step._options.merge(scope_options)
    opts = attrs.evolve(opts.merge(options), n=None)
    if n > 1 and step.samples_in_one_request:
        return await _sample_natively(step, state, n, opts)
    def job(index: int) -> Callable[[], Awaitable[State]]:
        seeded = opts if opts.seed is None else attrs.evolve(opts, seed=opts.seed + index)
        return functools.partial(step.turn, state, seeded)

    results = await fan_out([job(i) for i in range(n)], name="sample")
    states: list[State] = []
    for result in results:
        if result.error is not None:
            raise result.error
        assert result.state is not None  # a branch without an error ended in a state
        states.append(result.state)
    return tuple(states)



async def _sample_natively(step: Step, state: State, n: int, opts: Options) -> tuple[State, ...]:
    with branch("samples") as scope:
        got = await step._respond_choices(state, opts, scope, n)
    missing = [index for index, turn in enumerate(got) if turn is None]
    if missing:
        # A compatible server that ignores n answers once: the other samples are asked for one by one.
        async def ask(index: int) -> None:
            with branch(f"sample {index + 1}"):
                got[index] = (await _answer_only(step, state, opts)).last

        async with anyio.create_task_group() as group:
            for index in missing:
                group.start_soon(ask, index)
    turns = [turn for turn in got if turn is not None]
    assert len(turns) == n  # every missing sample was asked for again
    states: list[State] = [state.append_turn(turn) for turn in turns]
    if opts.run_tools is False:  # as Step.turn does: the calls stay open for someone else to decide on
        return tuple(s.with_outcome(PENDING, "tool calls left pending: the sample was asked not to run tools")
                     if s.pending_calls else s for s in states)

    async def tools(index: int) -> None:
        with branch(f"sample {index + 1}"):
            calls = turns[index].tool_calls
            results = await step._pipeline.run(calls, disabled=opts.tool_choice == "none")
            tool_turn = Turn(Role.TOOL, results)
            step.events.publish(TurnCompleted(tool_turn))
            states[index] = states[index].append_turn(tool_turn)

    calling = [i for i, turn in enumerate(turns) if turn.tool_calls]
    if calling:
        async with anyio.create_task_group() as group:
            for index in calling:
                group.start_soon(tools, index)
    return tuple(states)

async def _answer_only(step: Step, state: State, opts: Options) -> State:
    """``state`` with the model's next turn appended, its tool calls not run (a sample's tools run later)."""
    turn, _ = await step._respond(state, opts, current_scope(), step._specs)
    return state.append_turn(turn)
