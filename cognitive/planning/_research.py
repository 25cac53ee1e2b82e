"""``Research``: search with the tools, check the findings against their sources, then write the answer."""

from __future__ import annotations

from typing import Any, cast

from cognitive._pattern import check_prompt, check_start
from cognitive.planning._stages import (CHECK_SOURCES, SYNTHESIZE, Act, CheckSources, SourceCheck, Synthesize,
                                        write_notes)
from loop import Deriver, State, TurnRunner, branch, has, offer, require, scope, tracing
from loop.checks import positive_int
from loop.errors import VerificationFailed

SEARCH = """\
Research the latest request with the tools: find the facts it needs, from the tools rather than from memory. \
Then summarise your findings, saying for each which tool result it comes from, and what you could not find. \
Do not write the final answer yet."""
SEARCH_AGAIN = """\
A check of your findings against their sources found these issues:

{issues}

Research again with the tools to fix every one of them: back each claim with a tool result, correct what \
the sources contradict, and cover what is missing. Then summarise all your findings again, saying for each \
which tool result it comes from. Do not write the final answer yet."""


class Research:
    """Search, verify, synthesize: findings gathered with the tools are checked against their sources before
    the answer is written from them.

    **Search.** A tool loop (``Act``, at most ``max_turns`` turns) on ``step``, told by ``search_prompt`` to
    gather what the request needs and summarise the findings with their sources.

    **Verify.** A ``CheckSources`` stage on ``checker`` (a step; by default ``step`` with no tools offered
    when it can ``derive``) gives a typed ``SourceCheck``: every claim backed by a tool result, nothing
    contradicting the sources, the request covered. A failed check sends its issues back to search
    (``search_again_prompt``). Verify runs at most ``max_verify_rounds`` times; when the last check still
    fails, the run goes on to synthesize anyway and the outcome is ``degraded`` with the issues. A check that
    never gives a valid ``SourceCheck`` (``VerificationFailed``) ends the verifying: the answer is written from
    the findings as they are, ``degraded``.

    **Synthesize.** The work runs in branches on a working copy of the state, never stored or streamed as the
    conversation; one system turn with what it found (``write_notes``) and the ``Synthesize`` stage
    (``synthesize_prompt``, no tools, in the run's answer shape) join the conversation. Each search's findings
    are offered to the run's budgets (``loop.offer``), so a ``WithBudget`` that runs out answers from them.

    **Outcome data** (under the run path): ``rounds`` (searches run), ``checks`` (each round's ``passed``,
    ``backed``, ``consistent``, ``covered`` and ``issues``, or its ``error``) and ``passed``.

    **Cost.** Per round: the search's tool loop (one model call, plus one per round of tool calls) and one
    check call (more when its typed answer must be asked again). Then one answer call.
    """

    __slots__ = ("step", "max_verify_rounds", "max_turns", "checker", "search_prompt", "search_again_prompt",
                 "synthesize_prompt", "_search", "_verify", "_synthesize")

    def __init__(self, step: TurnRunner, *, max_verify_rounds: int = 2, max_turns: int = 6,
                 checker: TurnRunner | None = None, search_prompt: str = SEARCH,
                 search_again_prompt: str = SEARCH_AGAIN, verify_prompt: str = CHECK_SOURCES,
                 synthesize_prompt: str = SYNTHESIZE) -> None:
        require(step, TurnRunner, "Research", "a TurnRunner (a step, whose tools the search uses)")
        if checker is not None:
            require(checker, TurnRunner, "Research's checker", "a TurnRunner (a step) or None (the step itself)")
        self.step = step
        self.max_verify_rounds = positive_int("max_verify_rounds", max_verify_rounds)
        self.max_turns = positive_int("max_turns", max_turns)
        # The check and the answer call no tool: where the step can say so, they are offered none.
        toolless: TurnRunner = cast(Deriver, step).derive(tools=()) if has(step, Deriver) else step
        self.checker: TurnRunner = toolless if checker is None else checker
        self.search_prompt = check_prompt("search_prompt", search_prompt)
        self.search_again_prompt = check_prompt("search_again_prompt", search_again_prompt, "issues")
        self.synthesize_prompt = check_prompt("synthesize_prompt", synthesize_prompt)
        # The search's instructions are the whole of its stage's prompt: the first search or a search again.
        self._search = Act(step, name="search", prompt="{subgoal}", max_turns=self.max_turns,
                           description="gather and summarise findings with the tools")
        self._verify = CheckSources(self.checker, prompt=verify_prompt)
        self._synthesize = Synthesize(toolless, prompt=self.synthesize_prompt)

    async def run(self, state: State) -> State:
        check_start(state, "Research")
        with scope("Research"), tracing.span("invoke_agent Research", {"gen_ai.operation.name": "invoke_agent",
                                                                       "gen_ai.agent.name": "Research"}) as span:
            start = working = state
            checks: list[dict[str, Any]] = []
            problems: list[str] = []
            instructions = self.search_prompt
            passed, rounds = False, 0
            findings = None
            for rounds in range(1, self.max_verify_rounds + 1):
                with branch("search"):
                    working = await self._search.act(working, instructions)
                offer(working)  # a budget that runs out answers from the latest findings
                findings = working.outcome
                with branch("verify"):
                    try:
                        checked = await self._verify.decide(working)
                    except VerificationFailed as exc:
                        checks.append({"round": rounds, "error": str(exc)})
                        problems.append(f"the check gave no valid answer in round {rounds}, so the findings were "
                                        "not verified")
                        break
                working, check = checked.state, checked.value
                checks.append({"round": rounds, "passed": check.passed, "backed": check.backed,
                               "consistent": check.consistent, "covered": check.covered,
                               "issues": list(check.issues)})
                if check.passed:
                    passed = True
                    break
                named = [issue for issue in check.issues if issue.strip()] or [_failed(check)]
                if rounds == self.max_verify_rounds:
                    problems.append(f"the findings still failed their check after {self.max_verify_rounds} "
                                    f"round{'s' if self.max_verify_rounds > 1 else ''} ({'; '.join(named)})")
                    break
                instructions = self.search_again_prompt.format(issues="\n".join(f"- {issue}" for issue in named))
            if findings is not None and not findings.ok:
                problems.append(f"the last search ended {findings.status}: {findings.reason}")
            span.set_attribute("research.rounds", rounds)
            span.set_attribute("research.passed", passed)
            state = await self._synthesize.run(await write_notes(self.step, start, working))
            data = {"rounds": rounds, "checks": checks, "passed": passed}
            if problems:
                return state.with_outcome("degraded", f"Research: {'; '.join(problems)}; the answer was written "
                                          "from the findings as they stood", data=data)
            return state.with_outcome(data=data)

    def __repr__(self) -> str:
        return f"Research({self.step!r}, max_verify_rounds={self.max_verify_rounds})"


def _failed(check: SourceCheck) -> str:
    """What a failed check that named no issue found wrong, in words."""
    wrong = [what for ok, what in ((check.backed, "a claim is not backed by a tool result"),
                                   (check.consistent, "something contradicts the sources"),
                                   (check.covered, "part of the request is not covered")) if not ok]
    return "; ".join(wrong)
