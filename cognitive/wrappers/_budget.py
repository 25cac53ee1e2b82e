"""``WithBudget``: run a pattern within limits, and still end in a written answer when they run out."""

from __future__ import annotations

from typing import cast

import anyio

from cognitive._kinds import PatternKind
from cognitive._pattern import Pattern, left_open
from loop import (Budget, BudgetReport, Options, Publisher, Role, Spend, State, Text, ToolResult, TurnRunner,
                  UsageError, add_turn, charging, has, require, scope, tracing)
from loop.errors import BudgetExhausted

_FINAL = Options(tool_choice="none")
NOTE = ("The budget for this request ran out ({reason}). Write your final answer now from what you have "
        "found so far; say plainly what you could not finish. No more tools can be called.")


class WithBudget:
    """Runs ``inner`` with a fresh spend of ``budget`` for each run (inside ``WithVerification``, each retry
    starts afresh). Every model call and tool call made inside, by any nested pattern or branch, is charged
    to it, and to every budget around it.

    When the budget runs out, everything still running inside is cancelled, and one tool-free final answer
    is written from the last state of the run's main line (allowed past the limit), its outcome ``degraded``
    with the reason. That answer is written by ``step`` or, when none is given, by the step that ran the
    main line's last turn. ``BudgetExhausted`` reaches the caller only when no answer can be written (no
    step known) or ``raise_on_exhausted`` asks for it. A branch-running pattern that offered candidates
    (``loop.offer``) has its best one answer instead, marked ``degraded`` with the reason: the work its
    branches did is not lost. A run that answers although a call was refused for
    the budget is ``degraded`` too; one that only overshot a token or cost limit with its final answer (those
    limits are soft) keeps its own outcome. Either way the spend (in all, and per run path, discarded branches included) is in the
    outcome's data and in a ``BudgetReport`` event on the step's bus.
    """

    __slots__ = ("inner", "budget", "step", "raise_on_exhausted")

    def __init__(self, inner: Pattern, budget: Budget, *, step: TurnRunner | None = None,
                 raise_on_exhausted: bool = False) -> None:
        require(inner, Pattern, "WithBudget", "a Pattern to wrap (something with run(state))")
        if not isinstance(budget, Budget):
            raise UsageError(f"WithBudget needs a loop.Budget, got {budget!r}")
        if step is not None:
            require(step, TurnRunner, "WithBudget's step", "a TurnRunner (something with turn(state)) or None")
        self.inner = inner
        self.budget = budget
        self.step = step
        self.raise_on_exhausted = raise_on_exhausted

    async def run(self, state: State) -> State:
        if not isinstance(state, State):
            raise UsageError(f"WithBudget runs on a loop.State, got {state!r}")
        budget = self.budget
        tracer = tracing.current_tracer()
        with scope("WithBudget"), tracing.NOOP_SPAN if tracer is None else tracing.start(
                tracer, "invoke_agent WithBudget", {"gen_ai.operation.name": "invoke_agent",
                                                    "gen_ai.agent.name": "WithBudget", "budget.name": budget.name}) as span:
            spend = Spend(budget, start=state)
            result: State | None = None
            with anyio.CancelScope() as cancel:
                if budget.deadline is not None:
                    cancel.deadline = anyio.current_time() + budget.deadline
                spend.cancels(cancel)
                with charging(spend):
                    try:
                        result = await self.inner.run(state)
                    except BaseException as exc:
                        if not _ours(exc, spend):
                            raise
            spend.cancels(None)
            if result is None and spend.exhausted is None:
                spend.exhaust(f"deadline={budget.deadline:g}s passed")
            span.set_attribute("budget.exhausted", spend.exhausted or "")
            if result is not None:
                self._report(spend)
                if spend.refused and not left_open(result):  # it answered without a call the budget refused
                    return result.with_outcome("degraded", f"budget {budget.name!r} ran out ({spend.exhausted}); "
                                               "a call was refused and the run answered without it",
                                               data=spend.report())
                return result.with_outcome(data=spend.report())
            return await self._final(spend, state)

    async def _final(self, spend: Spend, start: State) -> State:
        runner = self.step or spend.runner
        base = spend.tip or start
        if self.raise_on_exhausted or runner is None:
            self._report(spend)
            raise spend.error(base)
        best = spend.best
        if best is not None and len(base) > len(start) and best.common_prefix(base) < len(base):
            best = None  # the run wrote to the conversation past the candidate: answer from there, never rewrite it
        if best is not None and len(best) > len(start) and best.common_prefix(start) == len(start):
            # A branch-running pattern offered what it found (loop.offer): answer from that, not the main line.
            last = best.last
            if last is not None and last.role is Role.ASSISTANT and not best.pending_calls and best.answer:
                self._report(spend)
                return best.with_outcome("degraded", f"budget {self.budget.name!r} ran out ({spend.exhausted}); "
                                         "the answer is the best candidate the run had found", data=spend.report())
            base = best
        pending = base.pending_calls
        if pending:  # the run stopped between a model's calls and their results: answer them first
            base = base.append(Role.TOOL, *(ToolResult(c.id, c.name, "error: not run: the budget ran out",
                                                       is_error=True) for c in pending))
        spend.close()  # the final answer is charged and reported, never refused
        with charging(spend):
            note = Text(NOTE.format(reason=spend.exhausted))
            base = await add_turn(runner, base, Role.SYSTEM, note, meta={"kind": PatternKind.BUDGET})
            final: State = await runner.turn(base, _FINAL)
        self._report(spend)
        name = self.budget.name
        return final.with_outcome("degraded", f"budget {name!r} ran out ({spend.exhausted}); the answer was "
                                              "written without tools from what the run had", data=spend.report())

    def _report(self, spend: Spend) -> None:
        runner = self.step or spend.runner
        events = cast(Publisher, runner).events if has(runner, Publisher) else None
        if events is not None and events.has_subscribers:
            events.publish(BudgetReport(self.budget.name, spend.spent, spend.by_path, spend.exhausted))

    def __repr__(self) -> str:
        return f"WithBudget({self.inner!r}, {self.budget!r})"


def _ours(exc: BaseException, spend: Spend) -> bool:
    """Whether ``exc`` is this budget running out (alone, or with the cancellations it caused in a group)."""
    if isinstance(exc, BudgetExhausted):
        return exc.spend is spend
    if isinstance(exc, BaseExceptionGroup):
        cancelled = anyio.get_cancelled_exc_class()
        leaves = exc.exceptions
        return (any(_ours(e, spend) for e in leaves)
                and all(_ours(e, spend) or isinstance(e, cancelled) for e in leaves))
    return False
