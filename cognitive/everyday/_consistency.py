"""``SelfConsistency``: sample a pattern several times, hot, and keep the answer most samples agree on."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NoReturn, cast

import attrs

from cognitive._pattern import Pattern, check_start
from cognitive.everyday._react import SingleShot
from loop import (BranchResult, Executor, Options, Role, Sampler, State, UsageError, current_scope, fan_out, has,
                  require, scope, tracing, turn_options)
from loop.checks import positive_int, positive_number
from loop.errors import BudgetExhausted

Normaliser = Callable[[str], str]
"""Maps an answer's text to the form votes are counted in: two answers with the same form are one answer."""

_TRAILING = ".,;:!?…。！？"
_TOOL_FREE = Options(tool_choice="none")


def normalise_answer(text: str) -> str:
    """The default ``Normaliser``: surrounding whitespace removed, case folded, inner whitespace collapsed to
    one space, trailing punctuation dropped. ``"  The answer is 42. "`` and ``"the answer is  42"`` agree."""
    return " ".join(text.split()).casefold().rstrip(_TRAILING).rstrip()


@attrs.frozen
class _Sample:
    index: int  # from 0, in the order the samples were asked for
    state: State
    vote: str  # the normalised answer


class SelfConsistency:
    """Runs ``inner`` ``n`` times concurrently as branches (run paths ``SelfConsistency/sample 1`` ...),
    each hot, and returns the answer most of them agree on.

    **Sampling.** Every turn of a sample is run at ``temperature`` (through ``loop.turn_options``, so any
    pattern can be sampled without knowing its steps); with a ``seed``, sample ``i`` (from 0) gets ``seed + i``.
    ``None`` leaves that setting to the steps. The samples run inside the caller's budgets: each model and
    tool call of every sample is charged to whatever ``WithBudget`` encloses this pattern, and a budget that
    runs out stops them all (its ``WithBudget`` then writes the degraded answer). When ``inner`` is a
    ``SingleShot`` whose step's provider returns several choices per request (``supports_choices``), the
    samples are taken with one request (``Step.sample``): the prompt is paid and charged once.

    **Vote.** Each sample's answer is normalised (``normalise``, default ``normalise_answer``) and the most
    frequent form wins. A tie goes to the tied answer given first by the lowest-numbered sample, so the same
    samples always give the same winner; the outcome says ``tie: true`` and names the tied answers.
    ``confidence`` is the winner's share of all ``n`` samples (a failed sample counts against it).

    **Result.** The caller's state plus the turns of one sample that gave the winning answer (the first such
    sample whose run ended ok, else the first such sample), its tool exchanges included: a valid conversation
    ending in that sample's written answer. The other samples are never part of it. The outcome data (under
    this pattern's run path) holds ``answer`` (normalised), ``votes`` (normalised answer to count, most first),
    ``written`` (each normalised answer as its first sample wrote it), ``confidence``, ``n``, ``answered``, ``failed``, ``tie`` (and ``tied``), ``sample`` (the number of the sample
    kept) and ``native`` (whether one request served every sample).

    **Failures.** A sample that raised or wrote no answer is failed. If some failed but others answered, the
    vote is over the others and the outcome is ``degraded``, saying how many failed and why the first did.
    If every sample raised, the first sample's error is raised (with a note). A budget of the caller that ran
    out is always re-raised, so that its ``WithBudget`` writes the final answer. With ``min_share``, a winner
    with a smaller ``confidence`` is ``degraded`` too.
    """

    __slots__ = ("inner", "n", "temperature", "seed", "normalise", "min_share", "limit")

    def __init__(
        self,
        inner: Pattern,
        *,
        n: int = 5,
        temperature: float | None = 0.7,
        seed: int | None = None,
        normalise: Normaliser | None = None,
        min_share: float | None = None,
        limit: int | None = None,
    ) -> None:
        require(inner, Pattern, "SelfConsistency", "a Pattern to wrap (something with run(state))")
        positive_int("n", n)
        Options(temperature=temperature, seed=seed)  # raises the UsageError naming a bad temperature or seed
        if normalise is not None and not callable(normalise):
            raise UsageError(f"normalise must be a function str -> str or None, got {normalise!r}")
        share = positive_number("min_share", min_share, optional=True)
        if share is not None and share > 1:
            raise UsageError(f"min_share must be a share of the samples, above 0 and at most 1; got {min_share!r}")
        positive_int("limit", limit, optional=True)
        self.inner = inner
        self.n = n
        self.temperature = temperature
        self.seed = seed
        self.normalise: Normaliser = normalise or normalise_answer
        self.min_share = min_share
        self.limit = limit

    async def run(self, state: State) -> State:
        check_start(state, "SelfConsistency")
        with scope("SelfConsistency"), tracing.span("invoke_agent SelfConsistency", {
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "SelfConsistency",
                "self_consistency.n": self.n}) as span:
            native = self._native()
            if native:
                samples, errors = await self._sample_natively(state)
            else:
                samples, errors = await self._sample(state)
            failed = self.n - len(samples)
            span.set_attribute("self_consistency.failed", failed)
            if not samples:
                self._none_answered(errors)
            return self._vote(samples, errors, native, span)

    def _native(self) -> bool:
        inner = self.inner
        if not isinstance(inner, SingleShot) or self.n == 1:
            return False
        step = inner.step
        return has(step, Sampler) and cast(Sampler, step).samples_in_one_request

    def _options(self, index: int) -> Options:
        return Options(temperature=self.temperature, seed=None if self.seed is None else self.seed + index)

    async def _one(self, state: State, index: int) -> State:
        with turn_options(self._options(index)):
            return await self.inner.run(state)

    async def _sample(self, state: State) -> tuple[list[_Sample], list[tuple[int, Exception | str]]]:
        results = await fan_out([functools.partial(self._one, state, i) for i in range(self.n)],
                                limit=self.limit, name="sample")
        _reraise_budget(results)
        samples: list[_Sample] = []
        errors: list[tuple[int, Exception | str]] = []
        for result in results:
            if result.error is not None:
                errors.append((result.index, result.error))
            elif result.state is not None:
                self._add(samples, errors, result.index, result.state)
        return samples, errors

    async def _sample_natively(self, state: State) -> tuple[list[_Sample], list[tuple[int, Exception | str]]]:
        assert isinstance(self.inner, SingleShot)  # native sampling is for a SingleShot's step (see _native)
        step = cast(Executor, require(self.inner.step, Executor, "SelfConsistency"))
        try:
            states = list(await step.sample(state, self.n, self._options(0)))
        except BudgetExhausted:
            raise
        except Exception as exc:  # one request for every sample: they all failed with it
            return [], [(i, exc) for i in range(self.n)]
        calling = [i for i, sampled in enumerate(states) if sampled.last is not None and sampled.last.role is Role.TOOL]
        if calling:
            # As SingleShot does: a sample that called tools writes its answer in one more turn, tools off.
            results = await fan_out([functools.partial(step.turn, states[i], _TOOL_FREE) for i in calling],
                                    name="finish")
            _reraise_budget(results)
            failed: dict[int, Exception] = {}
            for result in results:
                if result.error is not None:
                    failed[calling[result.index]] = result.error
                elif result.state is not None:
                    states[calling[result.index]] = result.state
        else:
            failed = {}
        samples: list[_Sample] = []
        errors: list[tuple[int, Exception | str]] = []
        for index, sampled in enumerate(states):
            error = failed.get(index)
            if error is not None:
                errors.append((index, error))
            else:
                self._add(samples, errors, index, sampled)
        return samples, errors

    def _add(self, samples: list[_Sample], errors: list[tuple[int, Exception | str]], index: int,
             sampled: State) -> None:
        answer = sampled.answer
        vote = self.normalise(answer) if answer else ""
        if not isinstance(vote, str):
            raise UsageError(f"SelfConsistency's normalise returned {vote!r} for {answer!r}; it must return a str")
        if vote:
            samples.append(_Sample(index, sampled, vote))
        else:
            errors.append((index, "wrote no answer"))

    def _none_answered(self, errors: list[tuple[int, Exception | str]]) -> NoReturn:
        raised = [e for _, e in errors if isinstance(e, Exception)]
        if raised:
            first = raised[0]
            first.add_note(f"SelfConsistency: all {self.n} samples failed; this is the first one's error")
            raise first
        raise UsageError(f"SelfConsistency: none of the {self.n} samples of {self.inner!r} wrote an answer, so "
                         "there was nothing to vote on")

    def _vote(self, samples: list[_Sample], errors: list[tuple[int, Exception | str]], native: bool,
              span: Any) -> State:
        groups: dict[str, list[_Sample]] = {}
        for sample in sorted(samples, key=lambda s: s.index):
            groups.setdefault(sample.vote, []).append(sample)  # dicts keep first appearance: the tie-break
        most = max(len(group) for group in groups.values())
        tied = [vote for vote, group in groups.items() if len(group) == most]
        winner = tied[0]
        group = groups[winner]
        kept = next((s for s in group if _clean(s.state)), group[0])
        confidence = most / self.n
        ranked = sorted(groups.items(), key=lambda item: -len(item[1]))  # stable: ties stay in first-given order
        data: dict[str, Any] = {
            "answer": winner,
            "votes": {vote: len(members) for vote, members in ranked},
            # each vote as the first sample that gave it wrote it: votes are counted in normalised form
            "written": {vote: members[0].state.answer for vote, members in ranked},
            "confidence": confidence,
            "n": self.n,
            "answered": len(samples),
            "failed": len(errors),
            "tie": len(tied) > 1,
            "sample": kept.index + 1,
            "native": native,
        }
        if len(tied) > 1:
            data["tied"] = tied
        reasons = []
        if errors:
            index, error = min(errors, key=lambda e: e[0])
            why = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
            reasons.append(f"{len(errors)} of {self.n} samples failed (sample {index + 1}: {why}); the vote is "
                           f"over the other {len(samples)}")
        if self.min_share is not None and confidence < self.min_share:
            reasons.append(f"the winning answer has {most} of {self.n} votes ({confidence:.0%}), below "
                           f"min_share={self.min_share:g}")
        span.set_attribute("self_consistency.confidence", confidence)
        span.set_attribute("self_consistency.tie", len(tied) > 1)
        if reasons:
            return kept.state.with_outcome("degraded", "; ".join(reasons), data=data)
        return kept.state.with_outcome(data=data)

    def __repr__(self) -> str:
        settings = [f"n={self.n}", f"temperature={self.temperature!r}"]
        if self.seed is not None:
            settings.append(f"seed={self.seed}")
        if self.normalise is not normalise_answer:
            settings.append(f"normalise={getattr(self.normalise, '__name__', self.normalise)!s}")
        if self.min_share is not None:
            settings.append(f"min_share={self.min_share:g}")
        if self.limit is not None:
            settings.append(f"limit={self.limit}")
        return f"SelfConsistency({self.inner!r}, {', '.join(settings)})"


def _clean(state: State) -> bool:
    outcome = state.outcome
    return outcome is None or outcome.ok


def _reraise_budget(results: tuple[BranchResult, ...]) -> None:
    """Raise the first sample's error that is a budget of the caller running out: the run cannot go on."""
    budgets = current_scope().budgets
    for result in results:
        error = result.error
        if isinstance(error, BudgetExhausted) and any(error.spend is spend for spend in budgets):
            raise error
