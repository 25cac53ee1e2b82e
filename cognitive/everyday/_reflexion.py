"""``Reflexion``: retry a task from scratch, carrying short lessons learned from the failed trials."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from cognitive._pattern import Pattern, check_start
from cognitive._pattern import check_prompt
from cognitive.everyday._refine import check_critic
from loop import Role, State, Text, TurnExecutor, UsageError, ask, branch, require, scope, tracing
from loop.checks import positive_int, positive_number
from loop.errors import VerificationFailed
from verifier import Status, Verifier, run_all

MEMORY_KEY = "reflexion"
"""The default key of ``State.meta`` where ``Reflexion`` keeps its memory between runs."""
MEMORY_KIND = "reflexion_memory"
"""The ``meta["kind"]`` of the system turn that shows a trial the lessons of earlier ones."""
MEMORY = """\
Lessons from earlier attempts at this kind of task that did not succeed, oldest first:

{lessons}

Apply them in this attempt."""
REFLECT = """\
The attempt above did not succeed. The check said:

{feedback}

In one or two sentences, say why the attempt failed and what to do differently next time. Write a lesson \
that will still help on a fresh attempt, without repeating the answer."""
_MAX_LESSON = 1000


@attrs.frozen
class Reflection:
    """What the model learned from a failed trial.

    Attributes:
        lesson: one or two sentences: why the attempt failed and what to do differently next time
    """

    lesson: str


@attrs.frozen
class _Lesson:
    text: str
    trial: int  # the number of the trial it was learned from, counted over every run of the memory


@attrs.frozen
class _Memory:
    trials: int = 0  # trials run so far, over every run that used this memory
    lessons: tuple[_Lesson, ...] = ()

    @classmethod
    def load(cls, raw: Any, key: str) -> _Memory:
        if raw is None:
            return cls()
        try:
            trials = raw["trials"]
            lessons = tuple(_Lesson(r["lesson"], r["trial"]) for r in raw["reflections"])
            if not isinstance(trials, int) or not all(isinstance(x.text, str) and isinstance(x.trial, int)
                                                      for x in lessons):
                raise TypeError
        except (TypeError, KeyError):
            raise UsageError(f"state.meta[{key!r}] is not a Reflexion memory ({{'trials': int, 'reflections': "
                             f"[{{'lesson': str, 'trial': int}}]}}), got {raw!r}; give Reflexion another "
                             "memory_key") from None
        return cls(trials, lessons)

    def to_json(self) -> dict[str, Any]:
        return {"trials": self.trials, "reflections": [{"lesson": x.text, "trial": x.trial} for x in self.lessons]}

    def live(self, trial: int, ttl: int | None, size: int) -> _Memory:
        """The memory as trial number ``trial`` sees it: lessons past their time-to-live dropped, then all
        but the newest ``size``."""
        lessons = self.lessons if ttl is None else tuple(x for x in self.lessons if trial - x.trial <= ttl)
        return attrs.evolve(self, lessons=lessons[-size:])


class Reflexion:
    """Runs ``inner`` in trials until ``evaluator`` (a ``verifier.Verifier``) passes, learning from each
    failure in words.

    **Trials.** Every trial starts afresh from the state given to ``run``, plus a ``SYSTEM`` turn (``meta
    ["kind"] == "reflexion_memory"``) listing the lessons in memory, oldest first, when there are any. Trials
    run as branches (``Reflexion/trial 2/...``): nothing of a trial is stored or streamed as the conversation
    while it runs. The state returned is the given state plus the turns the kept trial added after the
    memory turn, so the conversation holds one attempt, ending in its answer; neither failed trials nor the
    memory turn are part of it (the memory lives in ``state.meta``).

    **Evaluation.** PASS ends the run with that trial. FAIL makes ``step`` write a ``Reflection`` (a typed,
    tool-free answer, in a branch ``reflect``) on why the trial failed and what to change; it is added to the
    memory, and the oldest lessons beyond ``memory_size`` are dropped. ERROR (the evaluator could not run:
    an outage, not a fault of the answer) writes no lesson, as nothing can be learned from it, but the trial
    still counts. After ``max_trials`` trials without a pass, the last trial's answer is returned ``degraded``.

    **Memory.** Kept in ``state.meta[memory_key]`` as JSON data (``{"trials": int, "reflections": [{"lesson":
    str, "trial": int}]}``), so it persists with the conversation and later messages learn from earlier
    ones; a lesson is written after every failed trial, the last one too, for that reason. Trials are
    numbered over every run of the memory; with ``reflection_ttl``, a lesson is shown to at most that many
    trials after the one it came from, then dropped, so that advice for an old situation does not linger.
    (A count of trials, not seconds: the same runs always see the same lessons.)

    The outcome data holds ``trials`` (this run), ``passed``, ``reflections`` (written this run),
    ``external_failures`` (evaluator ERRORs) and ``memory`` (lessons kept).
    """

    __slots__ = ("inner", "step", "evaluator", "max_trials", "memory_size", "reflection_ttl", "memory_key",
                 "evaluator_timeout", "memory_prompt", "reflect_prompt")

    def __init__(
        self,
        inner: Pattern,
        step: TurnExecutor,
        evaluator: Verifier,
        *,
        max_trials: int = 4,
        memory_size: int = 6,
        reflection_ttl: int | None = None,
        memory_key: str = MEMORY_KEY,
        evaluator_timeout: float | None = 300.0,
        memory_prompt: str = MEMORY,
        reflect_prompt: str = REFLECT,
    ) -> None:
        require(inner, Pattern, "Reflexion", "a Pattern to wrap (something with run(state))")
        require(step, TurnExecutor, "Reflexion", "a TurnExecutor (the step) to write reflections")
        self.evaluator = check_critic("Reflexion", "evaluator", evaluator)
        if not isinstance(memory_key, str) or not memory_key:
            raise UsageError(f"memory_key must be a non-empty string, got {memory_key!r}")
        self.inner = inner
        self.step = step
        self.max_trials = positive_int("max_trials", max_trials)
        self.memory_size = positive_int("memory_size", memory_size)
        self.reflection_ttl = positive_int("reflection_ttl", reflection_ttl, optional=True)
        self.memory_key = memory_key
        self.evaluator_timeout = positive_number("evaluator_timeout", evaluator_timeout, unit="seconds",
                                                 optional=True)
        self.memory_prompt = check_prompt("memory_prompt", memory_prompt, "lessons")
        self.reflect_prompt = check_prompt("reflect_prompt", reflect_prompt, "feedback")

    async def run(self, state: State) -> State:
        check_start(state, "Reflexion")
        with scope("Reflexion"), tracing.span("invoke_agent Reflexion", {
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Reflexion"}) as span:
            memory = _Memory.load(state.meta.get(self.memory_key), self.memory_key)
            memory = memory.live(memory.trials + 1, self.reflection_ttl, self.memory_size)
            written = external = 0
            for number in range(1, self.max_trials + 1):
                memory = attrs.evolve(memory, trials=memory.trials + 1)  # this trial's number
                with branch(f"trial {number}"):
                    start = await self._start(state, memory)
                    trajectory = await self.inner.run(start)
                    candidate = _rebase(state, start, trajectory)
                    (result,) = await run_all([self.evaluator], candidate, timeout=self.evaluator_timeout)
                    if result.status is Status.ERROR:
                        external += 1
                    elif result.status is Status.FAIL:
                        lesson = await self._reflect(trajectory, result.report)
                        if lesson:
                            written += 1
                            memory = attrs.evolve(memory, lessons=(*memory.lessons, _Lesson(lesson, memory.trials)))
                # What the next trial (of this run or a later one) sees: the newest memory_size lessons not
                # past their time to live. Nothing else is kept.
                memory = memory.live(memory.trials + 1, self.reflection_ttl, self.memory_size)
                data = {"trials": number, "passed": result.status is Status.PASS, "reflections": written,
                        "external_failures": external, "memory": len(memory.lessons)}
                kept = candidate.with_meta({self.memory_key: memory.to_json()})
                if result.status is Status.PASS:
                    span.set_attribute("reflexion.trials", number)
                    return kept.with_outcome(data=data)
            span.set_attribute("reflexion.trials", self.max_trials)
            why = ("the evaluator could not run" if result.status is Status.ERROR
                   else "the evaluator still failed it")
            return kept.with_outcome("degraded", f"no trial passed in {self.max_trials} (the last: {why})",
                                     data=data)

    async def _start(self, state: State, memory: _Memory) -> State:
        if not memory.lessons:
            return state
        lessons = "\n".join(f"{i}. {x.text}" for i, x in enumerate(memory.lessons, 1))
        text = Text(self.memory_prompt.format(lessons=lessons))
        meta = {"kind": MEMORY_KIND, "lessons": len(memory.lessons)}
        return await self.step.submit(state, Role.SYSTEM, text, meta=meta)

    async def _reflect(self, trajectory: State, feedback: str) -> str:
        """The lesson of a failed trial, or ``""`` when the model could not put one in the form asked for."""
        with branch("reflect"):
            asking = trajectory.append(Role.SYSTEM, Text(self.reflect_prompt.format(feedback=feedback.strip())))
            try:
                asked = await ask(self.step, asking, Reflection)
            except VerificationFailed:
                return ""
        lesson = " ".join(asked.value.lesson.split())
        return lesson if len(lesson) <= _MAX_LESSON else lesson[:_MAX_LESSON] + "…"

    def __repr__(self) -> str:
        ttl = "" if self.reflection_ttl is None else f", reflection_ttl={self.reflection_ttl}"
        return (f"Reflexion({self.inner!r}, evaluator={self.evaluator.name!r}, max_trials={self.max_trials}, "
                f"memory_size={self.memory_size}{ttl})")


def _rebase(state: State, start: State, trajectory: State) -> State:
    """``state`` followed by what the trial added to ``start`` (which is ``state``, perhaps with the memory turn)."""
    if len(trajectory) < len(start):
        raise UsageError(f"Reflexion's inner pattern returned a state shorter than the one it was given "
                         f"({len(trajectory)} turns < {len(start)}); a pattern returns its input extended")
    kept = state
    for turn in trajectory.turns[len(start):]:
        kept = kept.append_turn(turn)
    return kept.with_meta(_changed(state.meta, trajectory.meta))


def _changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in after.items() if before.get(k, _MISSING) is not v}


_MISSING = object()
