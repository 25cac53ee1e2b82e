"""Running patterns over tasks, each task under a budget, and what each run cost and got right."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from types import MappingProxyType
from typing import Any, Union

import anyio
import attrs

from cognitive import Pattern, RegistryError, WithBudget, build, settings
from cognitive.bench._progress import Progress
from cognitive.bench._simulated import simulated_provider
from cognitive.bench._tasks import Task
from loop import Budget, Provider, Spend, Step, UsageError, branch, charging, has, provider_info
from loop.checks import positive_int

Contender = Union[str, Callable[[Step], Pattern]]
"""A pattern to measure: a registry name (``cognitive.build(name, step)``) or a function building the pattern
from the step a task runs on (``cognitive.PatternFactory``)."""

MAX_TURNS = 100
MAX_TOKENS = 400_000


def default_budget(*, max_turns: int = MAX_TURNS, max_tokens: int = MAX_TOKENS) -> Budget:
    """The budget each task runs under unless another is given: ``max_turns`` model calls, and ``max_tokens``
    input tokens and as many output tokens."""
    return Budget(max_turns=max_turns, max_input_tokens=max_tokens, max_output_tokens=max_tokens, name="bench")


@attrs.frozen
class TaskRun:
    """One pattern's run on one task: whether its answer was right (``correct``), whether the run ended
    ``degraded`` (a budget or cap forced the answer; ``reason`` says why) or raised (``error``), what it spent
    (model calls, tool calls, tokens, dollars when priced), and its wall time."""

    task: str
    kind: str
    correct: bool
    degraded: bool
    repeat: int = 0
    answer: str = ""
    reason: str = ""
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    seconds: float = 0.0
    cost: float | None = None

    @property
    def accurate(self) -> bool:
        """Right, and not degraded: a degraded run is never a success."""
        return self.correct and not self.degraded and self.error is None

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


@attrs.frozen
class PatternResult:
    """One pattern's runs over the tasks, and the figures made from them."""

    name: str
    runs: tuple[TaskRun, ...]
    priced: bool = False

    @property
    def tasks(self) -> int:
        """How many tasks it ran (each ``repeat`` times)."""
        return len({r.task for r in self.runs})

    @property
    def repeats(self) -> int:
        return len(self.runs) // max(1, self.tasks)

    @property
    def accuracy(self) -> float:
        """The share of tasks answered right and not degraded."""
        return _mean([r.accurate for r in self.runs])

    @property
    def pass_rate(self) -> float:
        """The share of tasks answered right, degraded or not."""
        return _mean([r.correct and r.error is None for r in self.runs])

    @property
    def degraded_rate(self) -> float:
        return _mean([r.degraded for r in self.runs])

    @property
    def error_rate(self) -> float:
        return _mean([r.error is not None for r in self.runs])

    @property
    def mean_input_tokens(self) -> float:
        return _mean([r.input_tokens for r in self.runs])

    @property
    def mean_output_tokens(self) -> float:
        return _mean([r.output_tokens for r in self.runs])

    @property
    def mean_tokens(self) -> float:
        return self.mean_input_tokens + self.mean_output_tokens

    @property
    def mean_model_calls(self) -> float:
        return _mean([r.model_calls for r in self.runs])

    @property
    def mean_tool_calls(self) -> float:
        return _mean([r.tool_calls for r in self.runs])

    @property
    def seconds(self) -> float:
        """Wall time, all tasks added up (tasks run side by side overlap)."""
        return sum(r.seconds for r in self.runs)

    @property
    def cost(self) -> float | None:
        """US dollars for all the tasks, ``None`` when the model has no known price."""
        return sum(r.cost or 0.0 for r in self.runs) if self.priced else None

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.kind for r in self.runs))

    def of_kind(self, kind: str) -> PatternResult:
        """The same pattern's runs on tasks of ``kind`` only."""
        return attrs.evolve(self, runs=tuple(r for r in self.runs if r.kind == kind))

    def figures(self) -> dict[str, Any]:
        """The figures, as JSON data."""
        return {"tasks": self.tasks, "repeats": self.repeats, "accuracy": self.accuracy, "pass_rate": self.pass_rate,
                "degraded_rate": self.degraded_rate, "error_rate": self.error_rate,
                "mean_input_tokens": self.mean_input_tokens, "mean_output_tokens": self.mean_output_tokens,
                "mean_tokens": self.mean_tokens, "mean_model_calls": self.mean_model_calls,
                "mean_tool_calls": self.mean_tool_calls, "seconds": self.seconds, "cost": self.cost}

    def to_dict(self) -> dict[str, Any]:
        return {**self.figures(), "by_kind": {kind: self.of_kind(kind).figures() for kind in self.kinds},
                "runs": [r.to_dict() for r in self.runs]}


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


@attrs.frozen
class Report:
    """What ``run_bench`` measured: a ``PatternResult`` per pattern run (in the order given; its figures are
    means over every run, each task run ``repeat`` times), the patterns ``skipped`` (name -> why), the provider
    and the budget each task ran under, and how many tasks of each kind there were."""

    results: tuple[PatternResult, ...]
    skipped: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen)
    provider: str = ""
    budget: Budget = attrs.field(factory=default_budget)
    task_kinds: Mapping[str, int] = attrs.field(factory=dict, converter=_frozen)

    def result(self, name: str) -> PatternResult:
        for result in self.results:
            if result.name == name:
                return result
        raise UsageError(f"the report has no pattern {name!r}; it has: {', '.join(r.name for r in self.results)}")

    def to_dict(self) -> dict[str, Any]:
        limits = {f.name: getattr(self.budget, f.name) for f in attrs.fields(Budget)
                  if f.name.startswith("max_") or f.name == "deadline"}
        return {"format": 1, "provider": self.provider,
                "budget": {k: v for k, v in limits.items() if v is not None},
                "tasks": {"count": sum(self.task_kinds.values()), "kinds": dict(self.task_kinds)},
                "patterns": {r.name: r.to_dict() for r in self.results}, "skipped": dict(self.skipped)}


def contenders(patterns: Mapping[str, Contender] | Iterable[str]) -> dict[str, Contender]:
    """``patterns`` as label -> contender, checked: names must be registered."""
    entries: dict[str, Contender] = dict(patterns) if isinstance(patterns, Mapping) else \
        {name: name for name in _names(patterns)}
    if not entries:
        raise UsageError("run_bench needs at least one pattern (a registry name, or label -> factory)")
    for label, entry in entries.items():
        if not isinstance(label, str) or not label:
            raise UsageError(f"a pattern's label is a non-empty string, got {label!r}")
        if isinstance(entry, str):
            settings(entry)  # an unknown name raises RegistryError listing the valid ones
        elif not callable(entry):
            raise UsageError(f"pattern {label!r} is a registry name or a function step -> Pattern, got {entry!r}")
    return entries


def _names(patterns: Iterable[str]) -> list[str]:
    if isinstance(patterns, (str, bytes)) or not isinstance(patterns, Iterable):
        raise UsageError(f"patterns are a list of registry names or a mapping label -> factory, got {patterns!r}")
    return list(dict.fromkeys(patterns))


def needs_settings(name: str) -> str | None:
    """Why the registry pattern ``name`` cannot be built from a step alone, or ``None`` when it can."""
    required = [n for n, default in settings(name).items() if default is inspect.Parameter.empty]
    if not required:
        return None
    return f"needs the setting{'s' if len(required) > 1 else ''} {', '.join(map(repr, required))}"


async def run_bench(patterns: Mapping[str, Contender] | Iterable[str], tasks: Iterable[Task], *,
                    provider: Provider | None = None, budget: Budget | None = None, concurrency: int = 4,
                    repeat: int = 1, progress: Progress | None = None, provider_name: str | None = None) -> Report:
    """Run every pattern on every task and measure it.

    ``patterns``: registry names (``cognitive.names()``) or a mapping label -> registry name or function
    ``step -> Pattern``. A registry pattern that needs a setting (``with-budget`` needs a budget) is skipped
    and the report says why, and so is one that cannot be built at all. Each task runs on a fresh
    ``Step(provider, tools=task.tools)`` as ``WithBudget(pattern, budget)`` (default ``default_budget()``), so a
    budget that runs out still ends in an answer, marked degraded. Each task runs ``repeat`` times, repeat
    ``n`` (from 1) as the branch ``repeat n``: the simulated model draws afresh on each, and a real one samples
    afresh at a temperature above 0, so the figures average out more noise. Up to ``concurrency`` runs of a
    pattern go at once; patterns run one after another. ``provider``: any ``loop.Provider``
    (``provider.from_spec``); the ``SimulatedModel`` when ``None``. ``progress`` reports on stderr
    (``Progress``); ``provider_name`` is how the report names the provider.
    """
    entries = contenders(patterns)
    chosen = tuple(tasks)
    if not chosen or not all(isinstance(t, Task) for t in chosen):
        raise UsageError("run_bench needs at least one task, each a cognitive.bench.Task")
    limit = positive_int("concurrency", concurrency)
    repeats = positive_int("repeat", repeat)
    if budget is None:
        budget = default_budget()
    elif not isinstance(budget, Budget):
        raise UsageError(f"budget is a loop.Budget, got {budget!r}")
    if provider is None:
        provider, provider_name = simulated_provider(), provider_name or "simulated (offline, seed 0)"
    elif not has(provider, Provider):
        raise UsageError(f"provider is a loop.Provider (provider.from_spec('openai:gpt-4o-mini')), got {provider!r}")
    model = provider_info(provider).model
    priced = budget.price(model) is not None
    results: list[PatternResult] = []
    skipped: dict[str, str] = {}
    for label, entry in entries.items():
        why = needs_settings(entry) if isinstance(entry, str) else None
        if why is None:
            runs = await _run_pattern(label, entry, chosen, repeats, provider, budget, limit, progress)
            built = [r for r in runs if not (r.error or "").startswith("building it failed")]
            if built:
                result = PatternResult(label, runs, priced)
                results.append(result)
                if progress is not None:
                    progress.finish(result)
                continue
            why = str(runs[0].error)
        skipped[label] = why
        if progress is not None:
            progress.skip(label, why)
    kinds: dict[str, int] = {}
    for task in chosen:
        kinds[task.kind] = kinds.get(task.kind, 0) + 1
    return Report(tuple(results), skipped, provider_name or model or repr(provider), budget, kinds)


async def _run_pattern(label: str, entry: Contender, tasks: tuple[Task, ...], repeats: int, provider: Provider,
                       budget: Budget, limit: int, progress: Progress | None) -> tuple[TaskRun, ...]:
    jobs = [(task, n) for n in range(1, repeats + 1) for task in tasks]
    runs: list[TaskRun | None] = [None] * len(jobs)
    gate = anyio.CapacityLimiter(limit)
    if progress is not None:
        progress.start(label, len(jobs))

    async def one(index: int) -> None:
        task, n = jobs[index]
        async with gate:
            runs[index] = await run_task(entry, task, provider, budget, repeat=n if repeats > 1 else 0)
        if progress is not None:
            progress.advance()

    async with anyio.create_task_group() as group:
        for index in range(len(jobs)):
            group.start_soon(one, index)
    return tuple(r for r in runs if r is not None)


async def run_task(entry: Contender, task: Task, provider: Provider, budget: Budget, *, repeat: int = 0) -> TaskRun:
    """One run of ``entry`` on ``task`` under ``budget``, measured; a pattern that raises is a failed run.
    ``repeat`` above 0 runs it as the branch ``repeat N``."""
    step = Step(provider, tools=task.tools)
    try:
        pattern = build(entry, step) if isinstance(entry, str) else entry(step)
    except (RegistryError, UsageError, TypeError) as exc:
        return TaskRun(task.id, task.kind, False, False, repeat, error=f"building it failed: {exc}")
    tally = Spend(Budget(name="tally", prices=budget.prices))
    started = time.perf_counter()
    answer, degraded, reason, error = "", False, "", None
    try:
        with charging(tally), branch(f"repeat {repeat}") if repeat else nullcontext():
            state = await WithBudget(pattern, budget).run(task.question)
        answer = state.answer or ""
        outcome = state.outcome
        degraded = outcome is not None and not outcome.ok
        reason = outcome.reason if outcome is not None and degraded else ""
    except Exception as exc:  # the pattern's failure is this run's result, not the benchmark's
        error = f"{type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - started
    correct = False
    if error is None:
        try:
            correct = task.check(answer)
        except Exception as exc:
            error = f"the checker raised {type(exc).__name__}: {exc}"
    spent = tally.spent
    return TaskRun(task.id, task.kind, correct, degraded, repeat, answer, reason, error, spent.input_tokens,
                   spent.output_tokens, spent.turns, spent.tool_calls, seconds,
                   spent.cost if budget.price(provider_info(provider).model) is not None else None)
