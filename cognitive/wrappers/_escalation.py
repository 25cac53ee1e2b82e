"""``Escalation``: the cheapest adequate pattern first, one rung up when its answer is not trusted, never down."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, cast

import anyio
import attrs

from cognitive._pattern import Pattern, check_start, left_open
from cognitive._registry import build
from cognitive.everyday._consistency import Normaliser, normalise_answer
from cognitive.search._thoughts import score_line
from loop import (Options, Role, State, Text, ToolRunner, TurnRunner, UsageError, add_turn, ask, branch, has, require,
                  scope, tracing, turn_options)
from loop.checks import positive_int, positive_number
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
    end ok). A rung that states none is, with ``agree``, trusted by agreement, else, when a ``judge`` step is
    given, by a typed rating of its answer, else the answer is trusted. An answer not trusted sends the run one
    rung up; the last rung's answer is taken whatever it is, and the outcome is ``degraded`` when it was not
    trusted either. It never steps down.

    **Agreement.** A model's rating of its own answer costs a call as long as the answer and is wrong as often
    as the model is; agreement between independent runs is evidence that needs no rating. With ``agree`` (2 or
    more), a rung whose first run ended ok without a confidence of its own is run again, hot (``temperature``),
    as branches ``run 2``, ``run 3``... until ``agree`` runs gave one answer (compared by ``normalise``, default
    ``normalise_answer``) or it has run ``samples`` times. Each round runs only as many runs as could complete
    the agreement (``agree`` minus the leading answer's count), side by side, so an easy request costs
    ``agree`` runs and a hard one at most ``samples`` before the next rung: keep ``samples`` runs cheaper than
    one run of the next rung, so that sampling never costs more than climbing would have. The answer taken is the first run
    that gave the agreed answer; without agreement, the answer most runs gave (the first given on a tie) is
    not trusted. A later run that raised a failed gate or did not end ok gives no vote.

    **Measured reliability.** ``reliability`` maps rung names to the accuracy the benchmark harness measured for
    this kind of task (``python -m cognitive.bench``); a rung measured below ``confidence`` is passed over (never
    the last one), so a deployment does not pay for a rung known to fail on its tasks. It measures a rung's
    single run: a rung trusted by agreement is worth running even when that figure is low.

    **Tools.** With ``tools`` (a tool-using pattern) and a ``judge`` step, one typed question first decides
    whether the request needs tools; if it does, ``tools`` answers it and no rung runs.

    Every rung runs as a branch (``Escalation/<name>``): a rung that is not trusted leaves nothing in the
    conversation. The result is the caller's state plus the turns of the answer taken. The outcome data holds
    ``choices``: each rung tried or passed over, with its confidence (or, trusted by agreement, its ``votes``
    and ``runs``) and the reason for the next move. Costs the rungs it runs, the extra runs agreement asks for,
    and one judge call per rung rated by the judge.
    """

    __slots__ = ("rungs", "confidence", "judge", "tools", "reliability", "agree", "samples", "temperature",
                 "normalise")

    def __init__(self, rungs: Mapping[str, Pattern] | Sequence[Pattern], *, confidence: float = 0.8,
                 judge: TurnRunner | None = None, tools: Pattern | None = None,
                 reliability: Mapping[str, float] | None = None, agree: int | None = None, samples: int = 32,
                 temperature: float | None = 0.7, normalise: Normaliser | None = None) -> None:
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
        if agree is not None:
            if positive_int("agree", agree) < 2:
                raise UsageError(f"agree is how many runs must give one answer, 2 or more (None to rate answers "
                                 f"by the judge instead); got {agree!r}")
            if positive_int("samples", samples) < agree:
                raise UsageError(f"samples (the most runs of one rung) must be at least agree={agree}; "
                                 f"got {samples!r}")
        Options(temperature=temperature)  # raises the UsageError naming a bad temperature
        if normalise is not None and not callable(normalise):
            raise UsageError(f"normalise must be a function str -> str or None, got {normalise!r}")
        self.rungs = named
        self.confidence = float(value)
        self.judge = judge
        self.tools = tools
        self.reliability = measured
        self.agree = agree
        self.samples = samples
        self.temperature = temperature
        self.normalise: Normaliser = normalise or normalise_answer

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
                    choice: dict[str, Any] = {"rung": name, "confidence": level,
                                              "source": "outcome" if level is not None else None}
                    if level is None and self.agree is not None:
                        result, votes, runs = await self._agreement(self.rungs[name], state, result)
                        if left_open(result):
                            return result
                        trusted = votes >= self.agree
                        choice = {"rung": name, "votes": votes, "runs": runs, "source": "agreement"}
                    else:
                        if level is None and self.judge is not None:
                            level = await self._rate(result)
                            choice.update(confidence=level, source="judge" if level is not None else None)
                        trusted = level is None or level >= self.confidence
                move = "trusted" if trusted else ("not trusted; the last rung's answer is taken" if last
                                                   else "not trusted; one rung up")
                choices.append({**choice, "reason": move})
                if trusted:
                    break
            assert result is not None  # the last rung always runs
            span.set_attribute("escalation.rungs", len(choices))
            data = {"choices": choices, "rung": choices[-1]["rung"]}
            if not trusted:
                agreeing = "" if self.agree is None else f" or {self.agree} runs agreeing on it"
                return result.with_outcome("degraded", f"no rung gave an answer with confidence {self.confidence:g} "
                                           f"or more{agreeing} (the last, {names[-1]!r}, gave "
                                           f"{_evidence(choices[-1])})", data=data)
            return result.with_outcome(data=data)

    async def _agreement(self, rung: Pattern, state: State, first: State) -> tuple[State, int, int]:
        """More runs of ``rung`` after its ``first`` until ``agree`` of them give one answer or ``samples`` ran:
        the answer taken, how many runs gave it, and how many ran. A run left open is returned at once."""
        assert self.agree is not None
        groups: dict[str, list[State]] = {}
        self._vote(groups, first)
        runs = 1
        while runs < self.samples:
            leading = max((len(g) for g in groups.values()), default=0)
            if leading >= self.agree:
                break
            size = min(self.agree - leading, self.samples - runs)
            for again in await self._again(rung, state, range(runs + 1, runs + size + 1)):
                if again is not None and left_open(again):
                    return again, 0, runs + size
                self._vote(groups, again)
            runs += size
        if not groups:
            return first, 0, runs
        chosen = max(groups.values(), key=len)  # the first answer given, on a tie: dicts keep their order
        return chosen[0], len(chosen), runs

    def _vote(self, groups: dict[str, list[State]], result: State | None) -> None:
        if result is None or (result.outcome is not None and not result.outcome.ok) or not result.answer:
            return
        vote = self.normalise(result.answer)
        if not isinstance(vote, str):
            raise UsageError(f"Escalation's normalise returned {vote!r} for {result.answer!r}; it must return a str")
        groups.setdefault(vote, []).append(result)

    async def _again(self, rung: Pattern, state: State, numbers: range) -> list[State | None]:
        """Runs ``numbers`` of ``rung``, side by side and hot; a run whose gate gave up is ``None``. Any other
        error (a budget that ran out) is raised as it is, not wrapped in a group."""
        results: list[State | None] = [None] * len(numbers)
        errors: list[Exception] = []

        async def one(slot: int, number: int) -> None:
            with branch(f"run {number}"), turn_options(Options(temperature=self.temperature)):
                try:
                    results[slot] = await rung.run(state)
                except VerificationFailed:
                    pass
                except Exception as exc:  # raised below, after the others finished
                    errors.append(exc)

        async with anyio.create_task_group() as group:
            for slot, number in enumerate(numbers):
                group.start_soon(one, slot, number)
        if errors:
            raise errors[0]
        return results

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
        agree = "" if self.agree is None else f", agree={self.agree}, samples={self.samples}"
        return f"Escalation({list(self.rungs)}, confidence={self.confidence:g}{agree})"


def _evidence(choice: Mapping[str, Any]) -> str:
    if choice.get("source") == "agreement":
        return f"{choice['votes']} agreeing of {choice['runs']} runs"
    return f"confidence {choice.get('confidence')}"


def escalation(step: TurnRunner, *, rungs: Sequence[str] = ("react", "tree-of-thoughts"), confidence: float = 0.8,
               agree: int | None = 2, samples: int = 32, tools: str | None = "react") -> Escalation:
    """``Escalation`` built from a step by registry names: the ``rungs`` named, each built on ``step`` with its
    defaults, trusted by ``agree`` of at most ``samples`` runs when they state no confidence (``None``: rated
    by the step instead), the step as judge, and ``tools`` (a registry name, ``None`` for none) for requests
    that need tools when the step has any.

    The default ladder samples the cheapest pattern until two answers agree, which settles most requests in
    two or three short calls, and searches (tree of thoughts) only when 32 quick answers never agreed. Quick
    answers are cheap beside a search (on the benchmark's simulated model 32 of them cost a third of one tree
    search on a Game of 24 puzzle), so the search is paid only for what sampling cannot settle."""
    if isinstance(rungs, str) or not all(isinstance(r, str) for r in rungs):
        raise UsageError(f"rungs are registry names, cheapest first, like ['react', 'tree-of-thoughts']; "
                         f"got {rungs!r}")
    has_tools = has(step, ToolRunner) and bool(cast(ToolRunner, step).pipeline.tools)
    return Escalation({name: build(name, step) for name in rungs}, confidence=confidence, judge=step, agree=agree,
                      samples=samples, tools=build(tools, step) if tools is not None and has_tools else None)
