"""``Debate``: a proposer answers with the tools, a critic challenges, a judge decides, an answer stage writes."""

from __future__ import annotations

from typing import Any, cast

import attrs

from cognitive._pattern import check_prompt, check_start
from cognitive.planning._stages import CRITICIZE, JUDGE, Act, Criticize, Judge, Synthesize, write_notes
from loop import Deriver, Role, State, TurnRunner, UsageError, branch, has, offer, require, scope, tracing
from loop.checks import positive_int
from loop.errors import VerificationFailed

PROPOSE = """\
You are the proposer in a debate on the latest request: answer it as well as you can. Use the tools to look \
facts up, compute and check rather than guess. A critic and a judge will examine your answer, so give the \
reasons and the evidence it rests on."""
REVISE = """\
The {speaker} found these problems with your last answer:

{issues}

As the proposer, write a revised answer that fixes every one of them, in full (not a list of changes). Use \
the tools where they help."""
ANSWER = """\
Write the final answer to the latest request. The notes above hold a debate on it: the proposer's answers, \
the critic's objections and the judge's verdicts. Give the best answer they support: the last proposal, \
corrected where an objection still holds. Answer the person directly, without mentioning the debate, and say \
plainly what remains in doubt."""


class Debate:
    """Adversarial debate: a proposer answers, a critic challenges, a judge decides, then an answer is written.

    **Propose.** The proposer (``step``, with its tools) answers the request as a tool loop (``Act``, at most
    ``max_turns`` turns a round), told to by ``propose_prompt``.

    **Criticize.** The critic (a ``Criticize`` stage on ``critic``) rates the proposal's problems from 0 to 1
    and lists them. Above ``severity``, the issues go back to the proposer (``revise_prompt``) for a revised
    answer. At or below it, the judge rules.

    **Judge.** The judge (a ``Judge`` stage on ``judge``) gives a ``verifier.Verdict``; a failed verdict sends
    its issues back to the proposer. A passed one ends the debate.

    At most ``max_rounds`` proposals are written in all; when the last is still rejected (by the critic or the
    judge) the debate ends anyway and the answer is ``degraded`` with the reason. Typed answers that never
    validate (``VerificationFailed``) are bounded too: a critic that gives no valid critique is taken as having
    no objection (the judge still rules); a judge that gives no valid verdict ends the debate. Either marks
    the outcome ``degraded``.

    ``critic`` and ``judge`` are steps (any ``TurnRunner``: a cheaper model with ``step.derive(provider=...)``);
    by default ``step`` itself, with no tools offered when it can ``derive``. The three speakers are named
    on their turns (``Turn.name``: ``proposer``, ``critic``, ``judge``) so each sees who said what.

    **Conversation.** The debate runs in branches on a working copy of the state, never stored or streamed as
    the conversation. Then one system turn with what it found (``write_notes``) and the answer stage
    (``Synthesize`` with ``answer_prompt``, no tools, in the run's answer shape) join the conversation. Each
    proposal is offered to the run's budgets (``loop.offer``), so a ``WithBudget`` that runs out answers from
    the latest one.

    **Outcome data** (under the run path): ``rounds`` (proposals written), ``critiques`` (each round's
    ``severity`` and ``issues``, or its ``error``), ``verdicts`` (``passed``, ``severity``, ``issues``,
    ``summary``, or ``error``), ``passed`` and ``ended_by``: ``"judge"`` (it passed the answer),
    ``"max_rounds"`` or ``"invalid_verdict"``.

    **Cost.** Per round: the proposer's tool loop (one model call, plus one per round of tool calls), one
    critic call and, when the critic lets it through, one judge call (more when a typed answer must be asked
    again). Then one answer call.
    """

    __slots__ = ("step", "max_rounds", "severity", "max_turns", "critic", "judge", "propose_prompt",
                 "revise_prompt", "answer_prompt", "_proposer", "_criticize", "_judge", "_answer")

    def __init__(self, step: TurnRunner, *, max_rounds: int = 3, severity: float = 0.3,
                 critic: TurnRunner | None = None, judge: TurnRunner | None = None, max_turns: int = 6,
                 propose_prompt: str = PROPOSE, revise_prompt: str = REVISE, critic_prompt: str = CRITICIZE,
                 judge_prompt: str = JUDGE, answer_prompt: str = ANSWER) -> None:
        require(step, TurnRunner, "Debate", "a TurnRunner (a step, whose tools the proposer uses)")
        if isinstance(severity, bool) or not isinstance(severity, (int, float)) or not 0 <= severity <= 1:
            raise UsageError(f"severity must be a number from 0 to 1 (above it the critic sends the answer back), "
                             f"got {severity!r}")
        for role, given in (("critic", critic), ("judge", judge)):
            if given is not None:
                require(given, TurnRunner, f"Debate's {role}", "a TurnRunner (a step) or None (the step itself)")
        self.step = step
        self.max_rounds = positive_int("max_rounds", max_rounds)
        self.severity = float(severity)
        self.max_turns = positive_int("max_turns", max_turns)
        # The critic and the judge call no tool: where the step can say so, they are offered none.
        toolless: TurnRunner = cast(Deriver, step).derive(tools=()) if has(step, Deriver) else step
        self.critic: TurnRunner = toolless if critic is None else critic
        self.judge: TurnRunner = toolless if judge is None else judge
        self.propose_prompt = check_prompt("propose_prompt", propose_prompt)
        self.revise_prompt = check_prompt("revise_prompt", revise_prompt, "speaker", "issues")
        self.answer_prompt = check_prompt("answer_prompt", answer_prompt)
        # The proposer's instructions are the whole of its stage's prompt: the opening or a revision request.
        self._proposer = Act(step, name="proposer", prompt="{subgoal}", max_turns=self.max_turns,
                             description="answer the request with the tools, or revise the answer")
        self._criticize = Criticize(self.critic, prompt=critic_prompt)
        self._judge = Judge(self.judge, prompt=judge_prompt)
        self._answer = Synthesize(toolless, name="answer", prompt=self.answer_prompt)

    async def run(self, state: State) -> State:
        check_start(state, "Debate")
        with scope("Debate"), tracing.span("invoke_agent Debate", {"gen_ai.operation.name": "invoke_agent",
                                                                   "gen_ai.agent.name": "Debate"}) as span:
            start = working = state
            critiques: list[dict[str, Any]] = []
            verdicts: list[dict[str, Any]] = []
            problems: list[str] = []
            instructions = self.propose_prompt
            ended_by, rounds = "max_rounds", 0
            for rounds in range(1, self.max_rounds + 1):
                with branch("proposer"):
                    since = len(working)
                    working = _named(await self._proposer.act(working, instructions), since, "proposer")
                offer(working)  # a budget that runs out answers from the latest proposal
                proposal = working.outcome
                last = rounds == self.max_rounds
                with branch("critic"):
                    try:
                        criticized = await self._criticize.decide(working)
                    except VerificationFailed as exc:
                        critiques.append({"round": rounds, "error": str(exc)})
                        problems.append(f"the critic gave no valid critique in round {rounds}, so its objections "
                                        "were skipped")
                    else:
                        critique = criticized.value
                        working = _named(criticized.state, len(working), "critic")
                        critiques.append({"round": rounds, "severity": critique.severity,
                                          "issues": list(critique.issues)})
                        if critique.severity > self.severity:
                            if last:
                                problems.append(f"the critic still rated the answer's problems "
                                                f"{critique.severity:g} (above {self.severity:g}) after "
                                                f"{self.max_rounds} round{'s' if self.max_rounds > 1 else ''}")
                                break
                            instructions = self._revision("critic", critique.issues)
                            continue
                with branch("judge"):
                    try:
                        judged = await self._judge.decide(working)
                    except VerificationFailed as exc:
                        verdicts.append({"round": rounds, "error": str(exc)})
                        problems.append(f"the judge gave no valid verdict in round {rounds}, so the debate ended "
                                        "without one")
                        ended_by = "invalid_verdict"
                        break
                verdict = judged.value
                working = _named(judged.state, len(working), "judge")
                verdicts.append({"round": rounds, "passed": verdict.passed, "severity": verdict.severity,
                                 "issues": list(verdict.issues), "summary": verdict.summary})
                if verdict.passed:
                    ended_by = "judge"
                    break
                if last:
                    problems.append(f"the judge still did not pass the answer after {self.max_rounds} "
                                    f"round{'s' if self.max_rounds > 1 else ''}")
                    break
                instructions = self._revision("judge", verdict.issues or (verdict.summary,))
            if proposal is not None and not proposal.ok:
                problems.append(f"the last proposal ended {proposal.status}: {proposal.reason}")
            span.set_attribute("debate.rounds", rounds)
            span.set_attribute("debate.ended_by", ended_by)
            state = await self._answer.run(await write_notes(self.step, start, working))
            data = {"rounds": rounds, "critiques": critiques, "verdicts": verdicts, "passed": ended_by == "judge",
                    "ended_by": ended_by}
            if problems:
                return state.with_outcome("degraded", f"Debate: {'; '.join(problems)}; the answer was written from "
                                          "the debate as it stood", data=data)
            return state.with_outcome(data=data)

    def _revision(self, speaker: str, issues: Any) -> str:
        listed = "\n".join(f"- {issue}" for issue in issues if str(issue).strip()) or "- (no issue was named)"
        return self.revise_prompt.format(speaker=speaker, issues=listed)

    def __repr__(self) -> str:
        return f"Debate({self.step!r}, max_rounds={self.max_rounds}, severity={self.severity:g})"


def _named(state: State, since: int, name: str) -> State:
    """``state`` with the assistant turns after the first ``since`` spoken by ``name``: the model's turns come
    back unnamed, and the later speakers must see who said what."""
    named = state.prefix(since)
    for turn in state.turns[since:]:
        named = named.append_turn(attrs.evolve(turn, name=name) if turn.role is Role.ASSISTANT else turn)
    return named
