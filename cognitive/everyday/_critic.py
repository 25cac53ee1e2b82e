"""CRITIC: an answer checked with tools (a search, a calculator, code) and revised on what the check found.

Two pieces: ``ToolCheckedVerifier`` is the check, a ``verifier.Verifier`` that investigates the last answer
with tools and ends in a typed verdict; ``Critic`` is the pattern, the ``SelfRefine`` loop with that check as
its critic. The check is a verifier so that it plugs into every place a verifier goes: ``SelfRefine`` (a
best effort, degraded when the check never passes), ``WithVerification`` (a gate that raises), a
``Reflexion`` evaluator; ``Critic`` is the short spelling of the usual case.
"""

from __future__ import annotations

from collections.abc import Iterable

from typing import cast

from cognitive._pattern import Pattern, check_prompt, check_start, check_wiring
from cognitive.everyday._react import ReAct
from cognitive.everyday._refine import revise
from loop import (Deriver, Role, State, Text, ToolCall, ToolRunner, TurnExecutor, TurnSubmitter, UsageError, ask,
                  branch, has, require, scope, tracing)
from loop.checks import positive_int, positive_number
from verifier import Result, Status, Verdict

CHECK = """\
Check the last answer above before it is given. Use the tools to test each claim, figure or calculation \
it depends on, rather than trusting it: look facts up, recompute numbers, run the code. Then say plainly \
what holds up and what does not, with the evidence."""
REVISE_CHECKED = """\
Your last answer was checked with tools, and the check found problems:

{feedback}

Write a corrected answer that fixes them, in full."""
_MAX_EVIDENCE = 12
_MAX_RESULT = 400


class ToolCheckedVerifier:
    """A verifier that checks the last answer with tools: a ``ReAct`` run of at most ``max_turns`` turns on
    ``step`` (give it the tools to check with, e.g. ``step.derive(tools=["search"])``) told to test the
    answer, then a ``Verdict`` asked for without tools (``loop.ask``). ``passed`` is PASS; otherwise FAIL,
    its report listing the issues and the tool calls made, with their results, as evidence. A check that
    cannot give a valid verdict raises, which ``run_all`` reports as ERROR.

    The check runs as a branch (``check``): its turns are never taken for the conversation. It costs the
    check's turns (one, plus one per round of tool calls) and one verdict turn.
    """

    __slots__ = ("step", "name", "max_turns", "prompt")

    def __init__(self, step: TurnExecutor, *, max_turns: int = 6, name: str = "tool_check",
                 prompt: str = CHECK) -> None:
        require(step, TurnExecutor, "ToolCheckedVerifier", "a TurnExecutor (a step with the checking tools)")
        if not isinstance(name, str) or not name:
            raise UsageError(f"name must be a non-empty string, got {name!r}")
        self.step = step
        self.name = name
        self.max_turns = positive_int("max_turns", max_turns)
        self.prompt = check_prompt("prompt", prompt)

    async def verify(self, state: State) -> Result:
        with branch("check"):
            checking = await _add_system(self.step, state, self.prompt)
            checked = await ReAct(self.step, max_turns=self.max_turns).run(checking)
            verdict: Verdict = (await ask(self.step, checked, Verdict)).value
        evidence = _evidence(checked, len(checking))
        if verdict.passed:
            return Result(self.name, Status.PASS, "The check found no problems." + evidence)
        issues = "\n".join(f"- {issue}" for issue in verdict.issues if issue.strip())
        if not issues:
            issues = "- The check found the answer wrong but named no issue. Its notes:\n\n" + (checked.answer or "")
        return Result(self.name, Status.FAIL, f"The check found these problems:\n\n{issues}{evidence}")

    def __repr__(self) -> str:
        return f"ToolCheckedVerifier({self.step!r}, name={self.name!r}, max_turns={self.max_turns})"


class Critic:
    """Answer, check the answer with tools, revise: CRITIC. ``inner`` answers; a ``ToolCheckedVerifier`` on
    ``step`` narrowed to ``tools`` (tool names; ``None``: all of the step's tools) checks the answer in a
    branch; if it finds problems, its issues and evidence are submitted as a ``SYSTEM`` turn
    (``TurnKind.VERIFICATION``, ``prompt`` with ``{feedback}``) and ``inner`` revises. It stops when a check
    passes, or after ``max_rounds`` checks, returning the last answer ``degraded``.

    The same as ``SelfRefine(inner, step, ToolCheckedVerifier(...), max_iters=max_rounds)`` but for its name on
    the run path and in the outcome data (``rounds``, ``passed``, ``critic``). The conversation keeps every
    draft and every report; the checks' own turns are never part of it.
    """

    __slots__ = ("inner", "step", "check", "max_rounds", "check_timeout", "prompt")

    def __init__(
        self,
        inner: Pattern,
        step: TurnExecutor,
        *,
        tools: Iterable[str] | None = None,
        max_rounds: int = 2,
        max_check_turns: int = 6,
        check_timeout: float | None = 300.0,
        prompt: str = REVISE_CHECKED,
    ) -> None:
        check_wiring("Critic", inner, step)
        require(step, TurnExecutor, "Critic")
        checker: TurnExecutor = step
        if tools is not None:
            deriver = require(step, Deriver, "Critic(tools=...)",
                              "an executor it can narrow the tools of with derive, such as a loop.Step (or tools=None)")
            checker = cast(Deriver, deriver).derive(tools=tools)
        self.inner = inner
        self.step = step
        self.check = ToolCheckedVerifier(checker, max_turns=max_check_turns)
        self.max_rounds = positive_int("max_rounds", max_rounds)
        self.check_timeout = positive_number("check_timeout", check_timeout, unit="seconds", optional=True)
        self.prompt = check_prompt("prompt", prompt, "feedback")

    async def run(self, state: State) -> State:
        check_start(state, "Critic")
        with scope("Critic"), tracing.span("invoke_agent Critic", {
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Critic"}) as span:
            return await revise(self.inner, self.step, self.check, state, rounds=self.max_rounds,
                                timeout=self.check_timeout, prompt=self.prompt, unit="rounds", span=span)

    def __repr__(self) -> str:
        checker = self.check.step
        tools = [t.spec.name for t in cast(ToolRunner, checker).pipeline.tools] if has(checker, ToolRunner) else []
        return f"Critic({self.inner!r}, tools={tools}, max_rounds={self.max_rounds})"


async def _add_system(runner: TurnSubmitter, state: State, text: str) -> State:
    return await runner.submit(state, Role.SYSTEM, Text(text))


def _evidence(checked: State, since: int) -> str:
    """The tool calls the check made and what they returned, as markdown ("" when it made none)."""
    calls: dict[str, ToolCall] = {}
    lines: list[str] = []
    for turn in checked.turns[since:]:
        for call in turn.tool_calls:
            calls[call.id] = call
        for result in turn.tool_results:
            made = calls.get(result.call_id)
            arguments = made.arguments if made is not None else "…"
            content = " ".join(result.content.split())
            if len(content) > _MAX_RESULT:
                content = content[:_MAX_RESULT] + "…"
            lines.append(f"- `{result.name}({arguments})` {'failed: ' if result.is_error else '→ '}{content}")
    if not lines:
        return ""
    more = f"\n- … and {len(lines) - _MAX_EVIDENCE} more calls" if len(lines) > _MAX_EVIDENCE else ""
    return "\n\nEvidence from the check's tools:\n\n" + "\n".join(lines[:_MAX_EVIDENCE]) + more
