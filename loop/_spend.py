"""The live spend of a run against its budgets (``Spend``), and the charging every model and tool call goes
through: reserve a turn or tool call before it is made (hard limits), charge usage once a response is complete
(soft limits), offer a best candidate, and the error a budget that ran out raises."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import anyio

from loop import tracing
from loop._budget import Budget, Spent, _row_dict
from loop._parts import Usage
from loop._scope import current_scope
from loop._state import State
from loop.errors import BudgetExhausted, UsageError

if TYPE_CHECKING:
    from loop._scope import Line

_log = tracing.logger("loop.budget")


_TURNS, _TOOLS, _IN, _OUT, _CACHED, _COST = range(6)
_UNLIMITED = float("inf")  # no hard limit
_BRANCH = re.compile(r"(?<=\S) \d+$")  # "sample 3", "branch 12": one of a fan-out's branches
_TOOL = re.compile(r"^(tool:[^#]+)#.*$")  # "tool:search#call_7": one call of a tool


def _level(path: str) -> str:
    """``path`` with every branch number and tool call id left out: the pattern level it belongs to
    (``SelfConsistency/sample */ReAct``, ``ReAct/tool:search``)."""
    if " " not in path and "#" not in path:
        return path
    return "/".join(_TOOL.sub(r"\1", _BRANCH.sub(" *", segment)) for segment in path.split("/"))


def summary(by_path: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Rows of spend per run path (lists in ``_FIELDS`` order) added up per pattern level (see ``_level``), so
    that what an outcome records does not grow with the number of branches; a level that sums several paths
    says how many (``paths``)."""
    rows: dict[str, list[Any]] = {}
    counts: dict[str, int] = {}
    for path, row in by_path.items():
        level = _level(path)
        into = rows.get(level)
        if into is None:
            rows[level] = list(row)
            counts[level] = 1
        else:
            for index, value in enumerate(row):
                into[index] += value
            counts[level] += 1
    out = {level: _row_dict(row) for level, row in rows.items()}
    for level, count in counts.items():
        if count > 1:
            out[level]["paths"] = count
    return out


class Spend:
    """The spend of one run against ``budget`` (``None``: a tally that only counts, as each fan-out branch
    keeps), kept per run path, discarded branches included.

    A pattern that owns a budget (``cognitive.WithBudget``) makes one per run, ``Spend(budget, start=state)``,
    and charges what runs inside with ``with loop.charging(spend):``; the step and the tool pipeline do the
    charging. What it hands out is read-only or a frozen snapshot: ``spent`` and ``by_path`` (``Spent``
    values), ``exhausted`` (why it ran out, ``None`` while it has not), ``refused`` (whether a call was
    refused for it), ``tip`` (the latest state of the line it was opened on), ``runner`` (a step that ran on
    it), ``best`` (the best candidate a branch-running pattern offered, see ``offer``), ``unpriced`` (models
    that answered with no known price) and ``report()``. It changes only through its verbs: ``exhaust``,
    ``refuse``, ``cancels`` and ``close``."""

    __slots__ = ("_budget", "_hard", "_costed", "_total", "_by_path", "_exhausted", "_refused", "_cancel_scope",
                 "_line", "_task", "_tip", "_runner", "_closed", "_unpriced", "_best", "_best_score")

    def __init__(self, budget: Budget | None, *, start: State | None = None) -> None:
        if budget is not None and not isinstance(budget, Budget):
            raise UsageError(f"Spend takes a loop.Budget or None, got {budget!r}")
        self._budget = budget
        # The hard limits by row index (``_TURNS``, ``_TOOLS``), infinite when there is none: read on every
        # reservation. And whether a cost limit asks each turn's model for its price.
        self._hard = (_UNLIMITED, _UNLIMITED) if budget is None else (
            _UNLIMITED if budget.max_turns is None else budget.max_turns,
            _UNLIMITED if budget.max_tool_calls is None else budget.max_tool_calls)
        self._costed = budget is not None and budget.max_cost is not None
        self._total: list[Any] = [0, 0, 0, 0, 0, 0.0]  # a row: five int counts, then the float cost
        self._by_path: dict[str, list[Any]] = {}
        self._exhausted: str | None = None
        self._refused = False
        self._cancel_scope: anyio.CancelScope | None = None  # cancelled when it runs out
        self._line: Line | None = None  # the line whose latest state ``tip`` follows
        self._task: Any = None
        self._tip: State | None = start
        self._runner: Any = None
        self._closed = False  # past exhaustion: charged, never refused (the final answer)
        self._unpriced: tuple[str, ...] = ()
        self._best: State | None = None
        self._best_score: float | None = None
        if start is not None:
            here = current_scope()
            self._line, self._task = here.line, here.task

    @property
    def budget(self) -> Budget | None:
        return self._budget

    @property
    def exhausted(self) -> str | None:
        """Why the budget ran out, or ``None`` while it has not."""
        return self._exhausted

    @property
    def refused(self) -> bool:
        """Whether a call was refused for it: the run's answer lacks what that call would have done."""
        return self._refused

    @property
    def closed(self) -> bool:
        """Whether it is past exhaustion (``close``): still charged, never refusing."""
        return self._closed

    @property
    def tip(self) -> State | None:
        """The latest state of the line the spend was opened on (its ``start`` until a turn runs there)."""
        return self._tip

    @property
    def runner(self) -> Any:
        """The step that ran the tip's last turn, or a step that ran on this spend at all; ``None`` if none did."""
        return self._runner

    @property
    def best(self) -> State | None:
        """The best candidate answer offered (``loop.offer``), or ``None``."""
        return self._best

    @property
    def unpriced(self) -> tuple[str, ...]:
        """Models that answered with no known price: their cost is unknown."""
        return self._unpriced

    def cancels(self, scope: anyio.CancelScope | None) -> None:
        """Cancel ``scope`` when the budget runs out (``None``: nothing any more)."""
        if scope is not None and not isinstance(scope, anyio.CancelScope):
            raise UsageError(f"cancels takes an anyio.CancelScope or None, got {scope!r}")
        self._cancel_scope = scope

    def close(self) -> None:
        """From now on, charge what runs but refuse nothing: the final answer written past exhaustion."""
        self._closed = True

    def _add(self, index: int, amount: Any, path: str) -> None:
        self._total[index] += amount
        row = self._by_path.get(path)
        if row is None:
            row = self._by_path[path] = [0, 0, 0, 0, 0, 0.0]
        row[index] += amount

    def refusal(self, index: int) -> str | None:
        """Why one more turn (``_TURNS``) or tool call (``_TOOLS``) would pass the budget, or ``None``."""
        budget = self._budget
        if budget is None or self._closed:
            return None
        if self._exhausted is not None:
            return self._exhausted
        limit = budget.max_turns if index == _TURNS else budget.max_tool_calls
        if limit is not None and self._total[index] >= limit:
            return f"max_{'turns' if index == _TURNS else 'tool_calls'}={limit} reached"
        return None

    def refuse(self, reason: str) -> None:
        """Mark the budget run out because a call was refused; the run stops at its next model call."""
        self._refused = True
        if self._exhausted is None:
            self._exhausted = reason

    def exhaust(self, reason: str) -> None:
        """Mark the budget run out and cancel what runs inside its ``WithBudget`` (see ``cancels``)."""
        self._refused = True
        if self._exhausted is None:
            self._exhausted = reason
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()

    def _usage(self, usage: Usage, model: str | None, path: str) -> str | None:
        """Charge a response's usage; why a token or cost limit is now passed (soft limits), or ``None``."""
        self._add(_IN, usage.input_tokens, path)
        self._add(_OUT, usage.output_tokens, path)
        if usage.cache_read_tokens:
            self._add(_CACHED, usage.cache_read_tokens, path)
        budget = self._budget
        price = (budget or _NO_LIMITS).price(model)
        if price is not None:
            self._add(_COST, price.cost(usage), path)
        elif budget is not None and budget.max_cost is not None:
            # The call is paid for and its answer is kept: its cost is unknown, which the outcome says.
            name = model or "(unnamed)"
            if name not in self._unpriced:
                self._unpriced += (name,)
                _log.warning("a model with no known price answered under max_cost; its cost is counted as 0",
                             budget=budget.name, model=name)
        if budget is None or self._closed or self._exhausted is not None:
            return None
        total = self._total
        for index, limit, label in ((_IN, budget.max_input_tokens, "max_input_tokens"),
                                    (_OUT, budget.max_output_tokens, "max_output_tokens"),
                                    (_COST, budget.max_cost, "max_cost")):
            if limit is not None and total[index] > limit:
                return f"{label}={limit:g} passed ({total[index]:g} spent)"
        return None

    def _check_priced(self, model: str | None) -> None:
        budget = self._budget
        if budget is not None and budget.max_cost is not None and budget.price(model) is None:
            if model is None:
                raise UsageError(f"budget {budget.name!r} has max_cost, but this turn names no model, so its price "
                                 "is unknown: name the model (Options(model=...) on the step, or the provider's "
                                 "model), or price it under the name the provider reports")
            raise UsageError(f"budget {budget.name!r} has max_cost but model {model!r} has no known price; pass "
                             f"Budget(prices={{{model!r}: loop.Price(input, output)}}) (dollars per million tokens)")

    @property
    def spent(self) -> Spent:
        return Spent(*self._total)

    @property
    def by_path(self) -> Mapping[str, Spent]:
        return MappingProxyType({path: Spent(*row) for path, row in self._by_path.items()})

    def error(self, state: State | None) -> BudgetExhausted:
        """The ``BudgetExhausted`` saying this budget ran out, carrying ``state``."""
        return exhausted_error(self, state)

    def report(self) -> dict[str, Any]:
        """The spend as JSON data, for an outcome: in all, and per pattern level (``by_path``: branches of one
        fan-out add up under ``name *``, calls of one tool under ``tool:NAME``; ``by_path`` of the spend itself
        and the ``BudgetReport`` event keep every path)."""
        out: dict[str, Any] = {"spent": _row_dict(self._total), "by_path": summary(self._by_path)}
        if self._budget is not None:
            out["budget"] = self._budget.name
        if self._exhausted is not None:
            out["exhausted"] = self._exhausted
        if self._unpriced:
            out["unpriced"] = list(self._unpriced)
        return out


_NO_LIMITS = Budget()


def take(budgets: tuple[Spend, ...], index: int, path: str) -> tuple[Spend, str] | None:
    """Reserve one turn (``_TURNS``) or tool call (``_TOOLS``) in every budget, charged to ``path``, or in none:
    the budget that refuses it and why, or ``None`` once it is reserved. Every model call and tool call of a
    budgeted run comes here, so the usual case (a limit not reached) asks ``refusal`` nothing and adds inline."""
    if len(budgets) == 1:  # the usual case, in one pass
        spend = budgets[0]
        total = spend._total
        if spend._exhausted is not None or total[index] >= spend._hard[index]:
            reason = spend.refusal(index)  # None when past exhaustion (closed) or counting only
            if reason is not None:
                return spend, reason
        total[index] += 1
        row = spend._by_path.get(path)
        if row is None:
            row = spend._by_path[path] = [0, 0, 0, 0, 0, 0.0]
        row[index] += 1
        return None
    for spend in budgets:
        if spend._exhausted is not None or spend._total[index] >= spend._hard[index]:
            reason = spend.refusal(index)
            if reason is not None:
                return spend, reason
    for spend in budgets:
        spend._total[index] += 1
        row = spend._by_path.get(path)
        if row is None:
            row = spend._by_path[path] = [0, 0, 0, 0, 0, 0.0]
        row[index] += 1
    return None


def reserve(budgets: tuple[Spend, ...], index: int, path: str, state: State | None) -> None:
    """Reserve one turn or tool call in every budget, or none: a refusal exhausts that budget and raises."""
    refused = take(budgets, index, path)
    if refused is not None:
        spend, reason = refused
        spend.exhaust(reason)
        raise exhausted_error(spend, state)


def exhausted_error(spend: Spend, state: State | None) -> BudgetExhausted:
    budget = spend._budget
    name = budget.name if budget is not None else "budget"
    error = BudgetExhausted(f"budget {name!r} ran out: {spend._exhausted}", state=state, budget=budget)
    error.spend = spend
    return error


def charge(*, turns: int = 0, tool_calls: int = 0, usage: Usage | None = None, model: str | None = None) -> None:
    """Charge work done outside a step (a provider wrapper's extra attempt, a tool run by hand) to every
    budget of the current run scope. Turns and tool calls are reserved one by one and raise
    ``BudgetExhausted`` when one would pass a limit; usage is charged and may exhaust a soft limit."""
    scope = current_scope()
    budgets = scope.budgets
    if not budgets:
        return
    for _ in range(turns):
        reserve(budgets, _TURNS, scope.path, None)
    for _ in range(tool_calls):
        reserve(budgets, _TOOLS, scope.path, None)
    if usage is not None:
        charge_usage(budgets, usage, model, scope.path)


def offer(state: State, score: float | None = None) -> None:
    """Offer ``state``, a candidate answer that a branch-running pattern found (a sample, a search's best node),
    to every budget of the run scope as its best so far: if the budget runs out before the pattern answers, its
    ``cognitive.WithBudget`` answers from the best candidate instead of the main line's last state, and says so.
    A candidate with a ``score`` replaces one with a lower score or none; without scores the latest wins.
    ``state`` must extend the state the budget's run started from (a branch forked from it does)."""
    if not isinstance(state, State):
        raise UsageError(f"offer takes the candidate's loop.State, got {type(state).__name__}")
    if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
        raise UsageError(f"offer's score must be a number or None, got {score!r}")
    for spend in current_scope().budgets:
        if spend._best is None or score is None or spend._best_score is None or score >= spend._best_score:
            spend._best = state
            spend._best_score = score


def charge_usage(budgets: tuple[Spend, ...], usage: Usage, model: str | None, path: str) -> Spend | None:
    """Charge ``usage`` to every budget; the first whose soft limit it passes (now exhausted), or ``None``."""
    passed: Spend | None = None
    for spend in budgets:
        reason = spend._usage(usage, model, path)
        if reason is not None:
            spend._exhausted = reason
            passed = passed or spend
    return passed
