"""``PEOATR`` and ``Deliberate``: plan, act on one subgoal at a time, look at what was found, reflect, and answer.

Both run the same loop of stages (``cognitive.Plan``, ``Act``, ``Think``, ``Reflect``, ``Synthesize``); they
differ in where the thinking goes: ``PEOATR`` thinks after each act, ``Deliberate`` thinks once before planning
and observes after each act.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from cognitive._pattern import check_prompt, check_start
from cognitive.planning._stages import (ACT, OBSERVE, PLAN, REFLECT, SYNTHESIZE, THINK, Act, Next, Plan, Reflect,
                                        Synthesize, Think, offer_notes, write_notes)
from loop import State, TurnRunner, branch, require, scope, tracing
from loop.checks import non_negative_int, positive_int
from loop.errors import VerificationFailed

PROGRESS = """\
Where the plan stands: {done} of its {total} subgoals done. The next one: {next}"""
PROGRESS_DONE = """\
Where the plan stands: all {total} of its subgoals are done."""
WHOLE_REQUEST = "everything the latest request asks for"
_REASON_CHARS = 300


class _Run:
    """One run's working copy and what it did: made inside ``run``, so the pattern keeps nothing between runs."""

    __slots__ = ("start", "working", "path", "plans", "decisions", "rounds", "replans", "trouble")

    def __init__(self, start: State) -> None:
        self.start = start
        self.working = start
        self.path: list[str] = []
        self.plans: list[list[str]] = []
        self.decisions: list[dict[str, Any]] = []
        self.rounds = 0
        self.replans = 0
        self.trouble: str | None = None  # the first thing that made the run degraded

    def degrade(self, reason: str) -> None:
        if self.trouble is None:
            self.trouble = reason

    async def stage(self, name: str, work: Callable[[State], Awaitable[State]]) -> None:
        """Run ``work`` on the working copy in a branch named ``name``, and offer what it found."""
        self.path.append(name)
        with branch(name):
            self.working = await work(self.working)
        self.offer()

    def offer(self) -> None:
        """Offer the work so far to the run's budgets, as notes on the conversation (``offer_notes``)."""
        offer_notes(self.start, self.working)

    def data(self) -> dict[str, Any]:
        return {"path": list(self.path), "plans": [list(p) for p in self.plans], "decisions": list(self.decisions),
                "rounds": self.rounds, "replans": self.replans}


class _StageLoop:
    """The loop both patterns run: [first] -> plan -> (act -> review -> reflect)* -> answer."""

    __slots__ = ("step", "max_rounds", "max_replans", "_first", "_plan", "_act", "_review", "_reflect", "_answer")
    _who = ""

    def __init__(self, step: TurnRunner, *, max_rounds: int, max_replans: int, max_steps: int, max_turns: int,
                 max_retries: int, first: Think | None, review: Think, plan_prompt: str, act_prompt: str,
                 reflect_prompt: str, answer_prompt: str) -> None:
        self.step = step
        self.max_rounds = positive_int("max_rounds", max_rounds)
        self.max_replans = non_negative_int("max_replans", max_replans)
        self._first = first
        self._review = review
        self._plan = Plan(step, prompt=check_prompt("plan_prompt", plan_prompt, "max_steps"), max_steps=max_steps,
                           max_retries=max_retries)
        self._act = Act(step, prompt=check_prompt("act_prompt", act_prompt, "subgoal"), max_turns=max_turns)
        self._reflect = Reflect(step, prompt=check_prompt("reflect_prompt", reflect_prompt), max_retries=max_retries)
        self._answer = Synthesize(step, name="answer", prompt=check_prompt("answer_prompt", answer_prompt))

    async def run(self, state: State) -> State:
        who = self._who
        check_start(state, who)
        with scope(who), tracing.span(f"invoke_agent {who}", {"gen_ai.operation.name": "invoke_agent",
                                                              "gen_ai.agent.name": who}) as span:
            run = _Run(state)
            if self._first is not None:
                await run.stage(self._first.name, self._first.run)
            await self._loop(run)
            span.set_attribute(f"{who.lower()}.rounds", run.rounds)
            span.set_attribute(f"{who.lower()}.replans", run.replans)
            answered = await write_notes(self.step, state, run.working)
            run.path.append(self._answer.name)
            answered = await self._answer.run(answered)
            if run.trouble is not None:
                return answered.with_outcome("degraded", run.trouble, data=run.data())
            return answered.with_outcome(data=run.data())

    async def _loop(self, run: _Run) -> None:
        """Plan, then rounds of act, review and reflect until the reflection (or a cap) says to answer."""
        subgoals = await self._planned(run, (WHOLE_REQUEST,))
        done = 0
        while done < len(subgoals):
            run.rounds += 1
            subgoal = subgoals[done]
            await run.stage(self._act.name, lambda working: self._act.act(working, subgoal))
            acted = run.working.outcome
            if acted is not None and acted.degraded:
                run.degrade(f"{self._who}'s act in round {run.rounds}: {acted.reason}")
            await run.stage(self._review.name, self._review.run)
            done += 1
            decision = await self._reflected(run, subgoals, done)
            if decision is None:
                return
            then = self._route(run, decision.decision, len(subgoals) - done)
            run.decisions.append({"round": run.rounds, "decision": decision.decision, "reason": decision.reason,
                                  "then": then})
            if then == "answer":
                return
            if then == "plan":
                run.replans += 1
                subgoals, done = await self._planned(run, subgoals[done:]), 0

    def _route(self, run: _Run, asked: str, left: int) -> str:
        """Where the reflection's decision leads, within the caps: ``"act"``, ``"plan"`` or ``"answer"``."""
        who = self._who
        if asked == "answer":
            return "answer"
        then = "act"
        if asked == "replan":
            if run.replans < self.max_replans:
                then = "plan"
            else:
                run.degrade(f"{who}'s reflection asked to replan past max_replans={self.max_replans}; "
                            + ("it went on with the plan it had" if left else "no subgoal was left, so it answered"))
        if then == "act" and not left:
            return "answer"  # going on with nothing left to do is answering
        if run.rounds == self.max_rounds:
            run.degrade(f"{who} reached max_rounds={self.max_rounds} with its work unfinished (the reflection "
                        f"asked to {asked}); it answered from the work so far")
            return "answer"
        return then

    async def _planned(self, run: _Run, fallback: tuple[str, ...]) -> tuple[str, ...]:
        """The plan's subgoals; ``fallback`` (recorded, and the run degraded) when the planner gives none valid."""
        plan = self._plan
        run.path.append(plan.name)
        with branch(plan.name):
            try:
                decided = await plan.decide(run.working)
            except VerificationFailed as exc:
                run.degrade(f"{self._who}'s planner never gave a valid plan ({_clip(exc)}); it went on with "
                            + ("the request as a whole" if fallback == (WHOLE_REQUEST,) else "the plan it had"))
                subgoals = fallback
            else:
                run.working = decided.state
                run.offer()
                subgoals = decided.value.steps
        run.plans.append(list(subgoals))
        return subgoals

    async def _reflected(self, run: _Run, subgoals: tuple[str, ...], done: int) -> Next | None:
        """The reflection's decision, or ``None`` (recorded, and the run degraded) when it never gives a valid one."""
        reflect = self._reflect
        progress = (PROGRESS.format(done=done, total=len(subgoals), next=subgoals[done]) if done < len(subgoals)
                    else PROGRESS_DONE.format(total=len(subgoals)))
        run.path.append(reflect.name)
        with branch(reflect.name):
            try:
                decided = await reflect.decide(run.working, f"{reflect.prompt}\n\n{progress}")
            except VerificationFailed as exc:
                reason = f"no valid decision: {_clip(exc)}"
                run.decisions.append({"round": run.rounds, "decision": None, "reason": reason, "then": "answer"})
                run.degrade(f"{self._who}'s reflection in round {run.rounds} gave {reason}; it answered from the "
                            "work so far")
                return None
        run.working = decided.state
        run.offer()
        return decided.value

    def __repr__(self) -> str:
        return f"{self._who}({self.step!r}, max_rounds={self.max_rounds}, max_replans={self.max_replans})"


def _clip(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= _REASON_CHARS else text[:_REASON_CHARS] + "…"


class PEOATR(_StageLoop):
    """Plan, act, think, reflect, answer: a typed plan of subgoals, carried out one subgoal per round.

    **Stages.** ``plan`` (a typed ``Steps``, at most ``max_steps`` subgoals) -> ``act`` (a tool loop on the
    current subgoal, at most ``max_turns`` turns) -> ``think`` (no tools: what the results mean) -> ``reflect``
    (a typed ``Next``, told how many subgoals are done and which is next) -> ``answer``. The reflection routes:
    ``continue`` acts on the next subgoal (with none left, it answers), ``replan`` plans again from what was
    found (at most ``max_replans`` times; past that it goes on with the plan it has, or answers when none of it
    is left, and the run is ``degraded``), ``answer`` answers. At most ``max_rounds`` acts in all; a plan still
    unfinished then is answered from the work so far, ``degraded``. An empty plan is answered at once.

    **Settings.** ``max_rounds`` (acts in all, >= 1), ``max_replans`` (>= 0), ``max_steps`` (subgoals per plan),
    ``max_turns`` (turns of one act's tool loop), ``max_retries`` (corrections per typed answer), and each
    stage's prompt (``plan_prompt`` must use ``{max_steps}``, ``act_prompt`` ``{subgoal}``).

    **Failures.** A typed stage whose answer does not validate is told why and asked again, at most
    ``max_retries`` times. A planner that still gives no valid plan is replaced by one subgoal, the whole
    request (on a replan: what was left of the plan there was); a reflection that still gives no valid decision
    ends the work and the run answers; both make the run ``degraded`` with the reason, as does an act stopped by
    its turn cap. A tool that raises is an error result the act stage reads and works around. Cancellation
    propagates unchanged.

    **Conversation.** The working stages run in branches (``plan``, ``act``, ``think``, ``reflect``) on a copy
    of the conversation, each seeing the ones before; none of their turns is stored or streamed as the main
    line. Then one system turn with the work's notes (``write_notes``, kind ``"work_notes"``) and the ``answer``
    stage's turn are added, so the run only extends the state it was given; the answer takes the run's typed
    answer shape (``loop.typed_answer``) when one is asked for. After each stage the notes so far are offered
    (``loop.offer``) to the run's budgets, so a ``WithBudget`` running out answers from the work; once the notes
    are on the main line, it answers from there.

    **Cost.** One planning call, then per round: the act's calls (one per round of tool calls, plus one), one
    think call and one reflect call; then one call per replan and one for the answer, plus one per correction
    of a typed answer. A run of ``r`` rounds whose acts call tools once each makes ``1 + 4r + 1`` calls.

    **Outcome data** (under this pattern's run path): ``path`` (the stage names in the order they ran),
    ``plans`` (each plan's subgoals), ``decisions`` (per reflection: ``round``, ``decision``, ``reason`` and
    ``then``, the stage it led to), ``rounds`` and ``replans``.
    """

    __slots__ = ()
    _who = "PEOATR"

    def __init__(self, step: TurnRunner, *, max_rounds: int = 4, max_replans: int = 2, max_steps: int = 6,
                 max_turns: int = 6, max_retries: int = 1, plan_prompt: str = PLAN, act_prompt: str = ACT,
                 think_prompt: str = THINK, reflect_prompt: str = REFLECT, answer_prompt: str = SYNTHESIZE) -> None:
        require(step, TurnRunner, "PEOATR", "a TurnRunner (a step, whose tools the act stage uses)")
        super().__init__(step, max_rounds=max_rounds, max_replans=max_replans, max_steps=max_steps,
                         max_turns=max_turns, max_retries=max_retries, first=None,
                         review=Think(step, prompt=check_prompt("think_prompt", think_prompt)),
                         plan_prompt=plan_prompt, act_prompt=act_prompt, reflect_prompt=reflect_prompt,
                         answer_prompt=answer_prompt)


class Deliberate(_StageLoop):
    """Think before acting: think, plan, act, observe, reflect, answer.

    **Stages.** ``think`` (no tools: what is known, what is missing) runs once, then ``plan`` (a typed
    ``Steps``) -> ``act`` (a tool loop on the current subgoal) -> ``observe`` (no tools: what the last results
    showed) -> ``reflect`` (a typed ``Next``) -> ``answer``. ``continue`` acts on the next subgoal (none left:
    answer), ``replan`` goes back to ``plan`` (not to ``think``), ``answer`` answers. The caps, the fallbacks
    when a typed stage never gives a valid value, the conversation (working stages in branches, notes and the
    answer on the main line, the work offered to budgets) and the outcome data are those of ``PEOATR``.

    **Cost.** One call more than ``PEOATR``: one think call, one planning call, then per round the act's calls
    (one per round of tool calls, plus one), one observe call and one reflect call; then one call per replan
    and one for the answer, plus one per correction of a typed answer. A run of ``r`` rounds whose acts call
    tools once each makes ``2 + 4r + 1`` calls.
    """

    __slots__ = ()
    _who = "Deliberate"

    def __init__(self, step: TurnRunner, *, max_rounds: int = 4, max_replans: int = 2, max_steps: int = 6,
                 max_turns: int = 6, max_retries: int = 1, think_prompt: str = THINK, plan_prompt: str = PLAN,
                 act_prompt: str = ACT, observe_prompt: str = OBSERVE, reflect_prompt: str = REFLECT,
                 answer_prompt: str = SYNTHESIZE) -> None:
        require(step, TurnRunner, "Deliberate", "a TurnRunner (a step, whose tools the act stage uses)")
        super().__init__(step, max_rounds=max_rounds, max_replans=max_replans, max_steps=max_steps,
                         max_turns=max_turns, max_retries=max_retries,
                         first=Think(step, prompt=check_prompt("think_prompt", think_prompt)),
                         review=Think(step, name="observe", prompt=check_prompt("observe_prompt", observe_prompt),
                                      description="look closely at what the last actions showed"),
                         plan_prompt=plan_prompt, act_prompt=act_prompt, reflect_prompt=reflect_prompt,
                         answer_prompt=answer_prompt)
