"""``PlanAndExecute``: a typed plan of subgoals, each carried out by an executor pattern, the rest of the plan
reviewed after every subgoal; with ``ledger=True``, plan-and-act for long horizons."""

from __future__ import annotations

from typing import Any

import attrs

from cognitive._kinds import PatternKind
from cognitive._pattern import Pattern, check_prompt, check_start
from cognitive._registry import build
from cognitive.everyday._react import ReAct
from cognitive.planning._stages import ACT, PLAN, Plan, Reflect, Synthesize, offer_notes, write_notes
from loop import (Role, State, Text, ToolResult, TurnRunner, UsageError, add_turn, branch, require, scope,
                  tracing)
from loop.checks import non_negative_int, positive_int
from loop.errors import VerificationFailed

LEDGER_PROMPT = """\
You are carrying out one step of a plan for the latest request. The plan so far:

{progress}

Your step now: {subgoal}
Carry it out with the tools and report what you found; do not answer the whole request yet."""

REVIEW_PROMPT = """\
Review the work on the latest request against its plan:

{progress}

Decide what happens next:
- "answer" when what has been found is enough to answer the request well;
- "continue" when the steps still to do are right as they stand (or none is left);
- "replan" when the steps still to do are wrong, miss something, or no longer fit what was found."""

REPLAN_PROMPT = """\
The rest of the plan must change. The plan so far:

{progress}

Write the steps still to do for the latest request, in order, at most {max_steps}, one sentence each. \
Build on what was found and leave out what is done. Give no steps when the request can be answered now."""

WHOLE_REQUEST = "the latest request as a whole (no plan could be made)"
_LEDGER_CHARS = 200  # a ledger line's result, and a step's result in the outcome data


@attrs.frozen
class _Done:
    """A finished subgoal: ``status`` is ``ok``, ``degraded`` (the executor hit a cap of its own) or ``failed``
    (no usable report); ``result`` is the executor's report, or why the step failed."""

    subgoal: str
    status: str
    result: str


class PlanAndExecute:
    """Plan, then carry the plan out one subgoal at a time with an ``executor`` pattern, revising what is left
    of the plan after each subgoal from what it found; then answer.

    **Plan.** A typed ``Plan`` (``Steps``: subgoals in order; the prompt asks for at most ``max_steps`` and a
    longer plan is cut to that) on the conversation, in a branch. A plan that never validates
    (``VerificationFailed``) is replaced by one subgoal, the request as a whole, and the outcome is
    ``degraded``. An empty plan means nothing needs doing: the answer comes next.

    **Execute.** Each subgoal runs ``executor`` (a ``Pattern`` or a registry name built on ``step``; default
    ``ReAct(step)``) in the branch ``step N``, on the work so far plus a system turn naming the subgoal
    (``step_prompt``). A tool that raises is an error result the executor reads. An executor run that ends
    ``degraded`` is recorded so (its report still counts); one that raises ``VerificationFailed`` is recorded
    as failed and its turns dropped. Calls left for the caller cannot be answered from a branch (branches
    offer no ``external_tools``; only a step asked not to run tools, ``run_tools=False``, leaves any there):
    such a step is recorded as failed, its open calls answered with errors so the transcript stays valid, and
    the work goes on. Neither makes the run degraded: the review reads it and decides.

    **Review.** After each subgoal a typed ``Reflect`` decision (``review_prompt``, showing the finished
    subgoals with their results and the ones still to do): ``continue`` with the rest of the plan, ``answer``
    now, or ``replan``, which asks a ``Plan`` for new remaining steps (``replan_prompt``; none means: answer
    now). A review that never validates keeps the plan as it stands; a re-plan that never validates keeps
    the old remaining steps; both make the outcome ``degraded``. Caps: the remaining plan is replaced at most
    ``max_replans`` times and at most ``max_steps`` subgoals run in all; when the work wants more than a cap
    allows it stops there, the answer is written from what was found, and the outcome is ``degraded`` naming
    the cap.

    **Ledger** (``ledger=True``): plan-and-act for long horizons (more than about 30 steps), where the
    transcript of every step would outgrow the model's context. Each subgoal's executor then sees only the
    conversation's own system turns (those without a ``kind``), the latest user turn, and one system turn
    (``ledger_prompt``) holding the plan: one line per finished subgoal (``subgoal -> result``, shortened to
    200 characters) and the steps still to do. Reviews and re-plans see the same, never a step's
    transcript, and the notes the answer is written from hold each subgoal's report, not its tool results.
    Only the first plan reads the whole conversation.

    **Answer.** The working stages run in branches: the conversation gets one system turn of work notes
    (``write_notes``, kind ``"work_notes"``) and the ``Synthesize`` stage's answer, in the run's typed answer
    shape when one is asked for. After every stage the notes so far are offered (``loop.offer``), so a
    ``WithBudget`` that runs out writes its answer from them; once the notes are on the main line, it answers
    from what the main line stored. The outcome data holds the ``plans`` (the first
    and each re-plan), each executed step (``subgoal``, ``status``, the start of its ``result``), each
    review's ``decisions``, the number of ``replans`` and ``ledger``.

    Costs one planning call (two on an invalid plan), then per subgoal the executor's calls and one review
    call, one call per re-plan, and one answering call.
    """

    __slots__ = ("step", "executor", "max_replans", "max_steps", "ledger", "step_prompt", "ledger_prompt",
                 "review_prompt", "replan_prompt", "_planner", "_replanner", "_reviewer", "_answer")

    def __init__(self, step: TurnRunner, *, executor: Pattern | str | None = None, max_replans: int = 3,
                 max_steps: int = 8, ledger: bool = False, plan_prompt: str = PLAN, step_prompt: str = ACT,
                 ledger_prompt: str = LEDGER_PROMPT, review_prompt: str = REVIEW_PROMPT,
                 replan_prompt: str = REPLAN_PROMPT) -> None:
        require(step, TurnRunner, "PlanAndExecute", "a TurnRunner (a step)")
        if isinstance(executor, str):
            executor = build(executor, step)
        self.executor: Pattern = ReAct(step) if executor is None else require(
            executor, Pattern, "PlanAndExecute's executor", "a Pattern (something with run(state)) or a registry name")
        if not isinstance(ledger, bool):
            raise UsageError(f"ledger must be True or False, got {ledger!r}")
        self.step = step
        self.max_replans = non_negative_int("max_replans", max_replans)
        self.max_steps = positive_int("max_steps", max_steps)
        self.ledger = ledger
        self.step_prompt = check_prompt("step_prompt", step_prompt, "subgoal")
        self.ledger_prompt = check_prompt("ledger_prompt", ledger_prompt, "progress", "subgoal")
        self.review_prompt = check_prompt("review_prompt", review_prompt, "progress")
        self.replan_prompt = check_prompt("replan_prompt", replan_prompt, "progress", "max_steps")
        plan_prompt = check_prompt("plan_prompt", plan_prompt, "max_steps")
        self._planner = Plan(step, prompt=plan_prompt, max_steps=self.max_steps)
        self._replanner = Plan(step, name="replan", max_steps=self.max_steps)
        self._reviewer = Reflect(step, name="review")
        self._answer = Synthesize(step)

    async def run(self, state: State) -> State:
        check_start(state, "PlanAndExecute")
        with scope("PlanAndExecute"), tracing.span("invoke_agent PlanAndExecute", {
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "PlanAndExecute"}) as span:
            work = _Run(self, state)
            await work.plan()
            await work.execute()
            span.set_attribute("plan_and_execute.steps", len(work.done))
            span.set_attribute("plan_and_execute.replans", work.replans)
            answered = await self._answer.run(await write_notes(self.step, state, work.transcript()))
            data = work.data()
            if work.problems:
                return answered.with_outcome("degraded", "; ".join(work.problems), data=data)
            return answered.with_outcome(data=data)

    def __repr__(self) -> str:
        ledger = ", ledger=True" if self.ledger else ""
        return (f"PlanAndExecute({self.step!r}, executor={self.executor!r}, max_replans={self.max_replans}, "
                f"max_steps={self.max_steps}{ledger})")


class _Run:
    """One run's work: the plans, the finished subgoals, and (without a ledger) the working transcript."""

    def __init__(self, pattern: PlanAndExecute, start: State) -> None:
        self.p = pattern
        self.start = start
        self.working = start  # every stage's turns, without a ledger; else only start
        self.brief = _request(start) if pattern.ledger else start
        self.plans: list[tuple[str, ...]] = []
        self.remaining: tuple[str, ...] = ()
        self.done: list[_Done] = []
        self.decisions: list[dict[str, Any]] = []
        self.replans = 0
        self.problems: list[str] = []

    @property
    def context(self) -> State:
        """What the review, the re-plans and the executor start from."""
        return self.brief if self.p.ledger else self.working

    async def plan(self) -> None:
        with branch("plan"):
            try:
                decided = await self.p._planner.decide(self.start)
            except VerificationFailed as exc:
                self.problems.append(f"the planner gave no valid plan ({exc}); the request was worked as one step")
                self.remaining = (WHOLE_REQUEST,)
            else:
                self.remaining = decided.value.steps
                if not self.p.ledger:
                    self.working = decided.state
        self.plans.append(self.remaining)
        self._offer()

    async def execute(self) -> None:
        p = self.p
        while self.remaining:
            if len(self.done) >= p.max_steps:
                self.problems.append(self._capped())
                return
            subgoal, self.remaining = self.remaining[0], self.remaining[1:]
            await self._step(len(self.done) + 1, subgoal)
            self._offer()
            decision = await self._review()
            self._offer()
            if decision == "answer":
                return
            if decision == "replan":
                if len(self.done) >= p.max_steps:
                    self.problems.append(self._capped())
                    return
                if self.replans >= p.max_replans:
                    self.problems.append(f"max_replans={p.max_replans} reached: the review after step "
                                         f"{len(self.done)} asked to re-plan again; the answer was written from "
                                         "what was found")
                    return
                await self._replan()
                self._offer()

    def _capped(self) -> str:
        left = len(self.remaining) or "more"
        return (f"max_steps={self.p.max_steps} reached with {left} step{'' if left == 1 else 's'} still to do; "
                "the answer was written from what was found")

    async def _step(self, number: int, subgoal: str) -> None:
        p = self.p
        if p.ledger:
            instructions = p.ledger_prompt.format(progress=self._progress(subgoal), subgoal=subgoal)
        else:
            instructions = p.step_prompt.format(subgoal=subgoal)
        with branch(f"step {number}"):
            begun = await add_turn(p.step, self.context, Role.SYSTEM, Text(instructions),
                                   meta={"kind": PatternKind.STAGE, "stage": f"step {number}"})
            try:
                result = await p.executor.run(begun)
            except VerificationFailed as exc:
                self.done.append(_Done(subgoal, "failed", f"the step gave no valid answer: {exc}"))
                return
        calls = result.pending_calls  # left for the caller (outcome "pending"): nobody can answer them here
        if calls:
            names = ", ".join(c.name for c in calls)
            self.done.append(_Done(subgoal, "failed", f"the step left tool calls for the caller ({names}), which a "
                                                      "step of a plan cannot wait for"))
            result = result.append(Role.TOOL, *(ToolResult(c.id, c.name, "error: not run: a step of a plan cannot "
                                                           "wait for the caller", is_error=True) for c in calls))
        else:
            outcome = result.outcome
            status = "ok" if outcome is None or outcome.ok else "degraded"
            self.done.append(_Done(subgoal, status, result.answer or "(no report)"))
        if not p.ledger:
            self.working = result

    async def _review(self) -> str:
        p = self.p
        after = len(self.done)
        with branch(f"review {after}"):
            try:
                decided = await p._reviewer.decide(self.context, p.review_prompt.format(progress=self._progress()))
            except VerificationFailed as exc:
                self.problems.append(f"the review after step {after} gave no valid decision ({exc}); the plan was "
                                     "kept as it stood")
                self.decisions.append({"after": after, "decision": "continue", "reason": "no valid decision"})
                return "continue"
        if not p.ledger:
            self.working = decided.state
        self.decisions.append({"after": after, "decision": decided.value.decision, "reason": decided.value.reason})
        return decided.value.decision

    async def _replan(self) -> None:
        p = self.p
        self.replans += 1
        instructions = p.replan_prompt.format(progress=self._progress(), max_steps=p.max_steps - len(self.done))
        with branch(f"replan {self.replans}"):
            try:
                decided = await p._replanner.decide(self.context, instructions)
            except VerificationFailed as exc:
                self.problems.append(f"re-plan {self.replans} gave no valid plan ({exc}); the steps still to do "
                                     "were kept")
                return
        if not p.ledger:
            self.working = decided.state
        self.remaining = decided.value.steps
        self.plans.append(self.remaining)

    def _progress(self, current: str | None = None) -> str:
        """The plan as the stages read it: each finished subgoal with its shortened result, then what is left."""
        lines = ["Done so far:"]
        lines += [f"{i}. {d.subgoal} -> {'' if d.status == 'ok' else f'[{d.status}] '}{_short(d.result)}"
                  for i, d in enumerate(self.done, 1)] or ["(nothing yet)"]
        number = len(self.done) + 1
        if current is not None:
            lines += ["Now:", f"{number}. {current}"]
            number += 1
        lines.append("Still to do:")
        lines += [f"{i}. {s}" for i, s in enumerate(self.remaining, number)] or ["(nothing)"]
        return "\n".join(lines)

    def transcript(self) -> State:
        """What the notes are made of: the working turns, or with a ledger each subgoal's report."""
        if not self.p.ledger:
            return self.working
        state = self.start
        for number, plan in enumerate(self.plans):
            state = _said(state, "plan" if number == 0 else f"replan {number}",
                          "\n".join(f"- {s}" for s in plan) or "(no steps)")
        for number, done in enumerate(self.done, 1):
            marked = "" if done.status == "ok" else f" [{done.status}]"
            state = _said(state, f"step {number}", f"{done.subgoal}{marked}\n{done.result}")
        return state

    def _offer(self) -> None:
        """Offer the work so far to the run's budgets, as notes on the conversation (``offer_notes``)."""
        offer_notes(self.start, self.transcript())

    def data(self) -> dict[str, Any]:
        return {"plans": [list(plan) for plan in self.plans],
                "steps": [{"subgoal": d.subgoal, "status": d.status, "result": _short(d.result)} for d in self.done],
                "decisions": self.decisions, "replans": self.replans, "ledger": self.p.ledger}


def _request(start: State) -> State:
    """The conversation's own system turns and its latest user turn: all a ledger step sees of it."""
    turns = start.turns
    last_user = next((i for i in range(len(turns) - 1, -1, -1) if turns[i].role is Role.USER), None)
    return State([t for i, t in enumerate(turns)
                  if (t.role is Role.SYSTEM and t.kind is None) or i == last_user], start.meta)


def _said(state: State, stage: str, text: str) -> State:
    return state.append(Role.SYSTEM, Text(stage), meta={"kind": PatternKind.STAGE, "stage": stage}).append(
        Role.ASSISTANT, Text(text))


def _short(text: str, limit: int = _LEDGER_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"
