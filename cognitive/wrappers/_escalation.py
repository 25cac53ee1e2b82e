"""``Escalation``: the cheapest adequate pattern first, one rung up when its answer is not trusted, never down."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, cast

import attrs

from cognitive._pattern import Pattern, check_start, left_open
from cognitive._registry import build
from cognitive.search._thoughts import score_line
from loop import (Role, State, Text, ToolRunner, TurnRunner, UsageError, add_turn, ask, branch, has, require, scope,
                  tracing)
from loop.checks import positive_number
from loop.errors import VerificationFailed

NEEDS_TOOLS = """\
Decide whether answering the latest request needs the tools (looking something up, acting on something), \
or whether it can be answered by reasoning alone."""


@attrs.frozen
class _NeedsTools:
    tools: Annotated[bool, "true when the request cannot be answered well without using the tools"]


def confidence_of(state: State) -> float | None:
    """How far a run trusts its own answer, from its outcome: 0 when it did not end ok, else the lowest
    ``confidence`` any pattern of the run wrote in its outcome data (``SelfConsistency``'s winning share, a
    search's best score), ``None`` when none did."""
    outcome = state.outcome
    if outcome is None:
        return None
    if not outcome.ok:
        return 0.0
    found = [float(v["confidence"]) for v in outcome.data.values()
             if isinstance(v, Mapping) and isinstance(v.get("confidence"), (int, float))
             and not isinstance(v.get("confidence"), bool)]
    return min(found) if found else None


class Escalation:
    """Runs ``rungs`` (name -> pattern, cheapest first) one at a time until an answer is trusted.

    **Trust.** A rung's answer is trusted when its confidence is at least ``confidence``: the confidence its
    outcome states (``confidence_of``: the self-consistency share, a search's best score; 0 for a run that did not
    end ok), else, when a ``judge`` step is given, a typed rating of the answer by it, else the answer is
    trusted. An answer not trusted sends the run one rung up; the last rung's answer is taken whatever it is,
    and the outcome is ``degraded`` when it was not trusted either. It never steps down.

    **Measured reliability.** ``reliability`` maps rung names to the accuracy the benchmark harness measured for
    this kind of task (``python -m cognitive.bench``); a rung measured below ``confidence`` is passed over (never
    the last one), so a deployment does not pay for a rung known to fail on its tasks.

    **Tools.** With ``tools`` (a tool-using pattern) and a ``judge`` step, one typed question first decides
    whether the request needs tools; if it does, ``tools`` answers it and no rung runs.

    Every rung runs as a branch (``Escalation/<name>``): a rung that is not trusted leaves nothing in the
    conversation. The result is the caller's state plus the turns of the answer taken. The outcome data holds
    ``choices``: each rung tried or passed over, with its confidence and the reason for the next move. Costs the
    rungs it runs, plus one judge call per rung without a confidence of its own.
    """

    __slots__ = ("rungs", "confidence", "judge", "tools", "reliability")

    def __init__(self, rungs: Mapping[str, Pattern] | Sequence[Pattern], *, confidence: float = 0.8,
                 judge: TurnRunner | None = None, tools: Pattern | None = None,
                 reliability: Mapping[str, float] | None = None) -> None:
        if isinstance(rungs, Mapping):
            named = dict(rungs)
        elif isinstance(rungs, Sequence) and not isinstance(rungs, (str, bytes)):
            named = {f"{type(p).__name__} {i}" if sum(type(q) is type(p) for q in rungs) > 1 else type(p).__name__: p
                     for i, p in enumerate(rungs, 1)}
        else:
            raise UsageError(f"Escalation takes its rungs as a list of patterns or a mapping name -> pattern, "
                             f"cheapest first; got {rungs!r}")
        if not named:
            raise UsageError("Escalation needs at least one rung")
        for name, rung in named.items():
            if not isinstance(name, str) or not name or "/" in name:
                raise UsageError(f"a rung's name is a non-empty string without '/', got {name!r}")
            require(rung, Pattern, f"Escalation's rung {name!r}", "a Pattern")
        value = positive_number("confidence", confidence)
        if value > 1:
            raise UsageError(f"confidence is a share from 0 to 1, got {confidence!r}")
        if judge is not None:
            require(judge, TurnRunner, "Escalation's judge", "a TurnRunner (a step) or None")
        if tools is not None:
            require(tools, Pattern, "Escalation's tools", "a tool-using Pattern or None")
            if judge is None:
                raise UsageError("Escalation(tools=...) needs a judge step to decide which requests need tools")
        measured = dict(reliability or {})
        unknown = sorted(set(measured) - set(named))
        if unknown:
            raise UsageError(f"reliability names rungs that do not exist: {', '.join(map(repr, unknown))}; "
                             f"the rungs are {', '.join(map(repr, named))}")
        for name, accuracy in measured.items():
            if isinstance(accuracy, bool) or not isinstance(accuracy, (int, float)) or not 0 <= accuracy <= 1:
                raise UsageError(f"reliability[{name!r}] is an accuracy from 0 to 1, got {accuracy!r}")
        self.rungs = named
        self.confidence = float(value)
        self.judge = judge
        self.tools = tools
        self.reliability = measured

    async def run(self, state: State) -> State:
        check_start(state, "Escalation")
        with scope("Escalation"), tracing.span("invoke_agent Escalation", {
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Escalation"}) as span:
            choices: list[dict[str, Any]] = []
            if self.tools is not None and await self._needs_tools(state):
                answered = await self.tools.run(state)
                choices.append({"rung": "tools", "reason": "the request needs tools"})
                return answered if left_open(answered) else answered.with_outcome(data={"choices": choices})
            names = list(self.rungs)
            result: State | None = None
            trusted = False
            for index, name in enumerate(names):
                last = index == len(names) - 1
                measured = self.reliability.get(name)
                if measured is not None and measured < self.confidence and not last:
                    choices.append({"rung": name, "skipped": True, "reason": f"measured accuracy {measured:g} is "
                                    f"below {self.confidence:g}"})
                    continue
                with branch(name):
                    try:
                        result = await self.rungs[name].run(state)
                    except VerificationFailed as exc:  # a gate inside the rung gave up: one rung up
                        if last:
                            raise
                        choices.append({"rung": name, "confidence": 0.0, "reason": f"it failed: {exc}"})
                        continue
                    if left_open(result):
                        return result
                    level = confidence_of(result)
                    source = "outcome"
                    if level is None and self.judge is not None:
                        level, source = await self._rate(result), "judge"
                trusted = level is None or level >= self.confidence
                move = "trusted" if trusted else ("not trusted; the last rung's answer is taken" if last
                                                   else "not trusted; one rung up")
                choices.append({"rung": name, "confidence": level, "source": source if level is not None else None,
                                "reason": move})
                if trusted:
                    break
            assert result is not None  # the last rung always runs
            span.set_attribute("escalation.rungs", len(choices))
            data = {"choices": choices, "rung": choices[-1]["rung"]}
            if not trusted:
                return result.with_outcome("degraded", f"no rung gave an answer with confidence {self.confidence:g} "
                                           f"or more (the last, {names[-1]!r}, gave {choices[-1]['confidence']})",
                                           data=data)
            return result.with_outcome(data=data)

    async def _rate(self, result: State) -> float | None:
        assert self.judge is not None
        with branch("judge"):
            try:
                return await score_line(self.judge, None, result)
            except VerificationFailed:
                return None  # the judge could not rate it: no evidence against the answer

    async def _needs_tools(self, state: State) -> bool:
        assert self.judge is not None
        with branch("route"):
            asking = await add_turn(self.judge, state, Role.SYSTEM, Text(NEEDS_TOOLS))
            try:
                return bool((await ask(self.judge, asking, _NeedsTools, max_retries=1)).value.tools)
            except VerificationFailed:
                return False

    def __repr__(self) -> str:
        return f"Escalation({list(self.rungs)}, confidence={self.confidence:g})"


def escalation(step: TurnRunner, *, rungs: Sequence[str] = ("chain-of-thought", "self-consistency",
                                                            "tree-of-thoughts"),
               confidence: float = 0.8, tools: str | None = "react") -> Escalation:
    """``Escalation`` built from a step by registry names: the ``rungs`` named, each built on ``step`` with its
    defaults, the step as judge, and ``tools`` (a registry name, ``None`` for none) for requests that need tools
    when the step has any."""
    if isinstance(rungs, str) or not all(isinstance(r, str) for r in rungs):
        raise UsageError(f"rungs are registry names, cheapest first, like ['chain-of-thought', 'self-consistency'];"
                         f" got {rungs!r}")
    has_tools = has(step, ToolRunner) and bool(cast(ToolRunner, step).pipeline.tools)
    return Escalation({name: build(name, step) for name in rungs}, confidence=confidence, judge=step,
                      tools=build(tools, step) if tools is not None and has_tools else None)
