"""``JudgeVerifier``: a model turn that judges the answer against criteria and hands back a typed ``Verdict``."""

from __future__ import annotations

from typing import Annotated, Any

import attrs

from loop import Options, Role, State, Text, ToolCall, ToolResult, Turn, TurnRunner, UsageError, ask, branch, require
from loop.checks import non_negative_int
from loop.errors import VerificationFailed
from verifier._core import Result, Status

JUDGE_PROMPT = """\
You review an answer written by someone else. Judge it against these criteria:

{criteria}

Judge the answer under review; do not write a better one. Set `passed` to true only if the answer meets every \
criterion. Rate `severity` from 0 to 1: 0 when nothing is wrong, about 0.3 for problems worth fixing, 1 when \
the answer is wrong or useless. List in `issues` each problem the author must fix, one short sentence each \
saying what is wrong and what to do (an empty list when there is none). Sum up your judgement in `summary`."""

_MAX_TURN_CHARS = 4_000  # a context turn longer than this is cut: the judge needs its gist, not every byte


def _check_severity(_: Any, __: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"severity must be a number from 0 to 1, got {value!r}")


@attrs.frozen
class Verdict:
    """A judge's decision on an answer: whether it passed, how severe its problems are (0 to 1), the issues to
    fix, and a summary."""

    passed: Annotated[bool, "true only if the answer meets every criterion"]
    severity: Annotated[float, "how bad the problems are, from 0 (none) to 1 (the answer is wrong or useless)"] = \
        attrs.field(validator=_check_severity)
    issues: Annotated[tuple[str, ...], "each problem to fix, one short sentence each; empty when there is none"] = \
        attrs.field(converter=tuple)
    summary: Annotated[str, "the judgement in a few sentences"]


class JudgeVerifier:
    """A verifier that asks a model whether the answer meets ``criteria``, for checks no program can make
    (tone, completeness, faithfulness to the sources).

    ``verify`` builds a fresh conversation for the judge, never the one under review: a ``SYSTEM`` turn with
    ``prompt`` (``{criteria}`` in it is replaced by ``criteria``), and a ``USER`` turn presenting the task (the
    last user message before the answer), the last ``context`` turns before the answer (0: none; tool calls and
    results shown in short, the model's reasoning never), and the answer under review (``state.answer``). It
    asks ``step`` for a ``Verdict`` with ``loop.ask`` (``options``, ``max_retries`` and ``native`` are passed
    on), inside ``loop.branch(name)``, so the judge's turns are never taken for the conversation; they are still
    charged to the run's budgets.

    The answer PASSes when the judge says it ``passed`` and rates its ``severity`` at most ``threshold``; a
    judge that says "passed" while rating the problems above ``threshold`` is taken at its severity, so the
    default of 0.3 matches the severity above which a critic sends work back. ``threshold=1`` trusts
    ``passed`` alone. The report (markdown) gives the severity, the summary and the issues. No answer with text
    FAILs, saying so. A verdict that never validates is an ERROR: the judge is broken, and the model under
    review cannot fix that. A model call that fails raises (``run_all`` reports it as an ERROR).

    ``step`` is any ``TurnRunner``; a ``Step`` also publishes the judge's turns. A judge is often a cheaper
    model than the one it judges: ``JudgeVerifier(step.derive(options=Options(model="small")), criteria=...)``.
    """

    def __init__(
        self,
        step: TurnRunner,
        *,
        criteria: str,
        name: str = "judge",
        threshold: float = 0.3,
        context: int = 0,
        options: Options | None = None,
        max_retries: int = 2,
        native: bool = True,
        prompt: str = JUDGE_PROMPT,
    ) -> None:
        require(step, TurnRunner, "JudgeVerifier", "a TurnRunner (something with turn(state))")
        if not isinstance(criteria, str) or not criteria.strip():
            raise UsageError(f"JudgeVerifier's criteria= must say what a good answer is, got {criteria!r}")
        if not isinstance(name, str) or not name:
            raise UsageError(f"JudgeVerifier's name= must be a non-empty string, got {name!r}")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1:
            raise UsageError(f"threshold must be a severity from 0 to 1, got {threshold!r}")
        non_negative_int("context (turns shown before the answer)", context)
        if options is not None and not isinstance(options, Options):
            raise UsageError(f"options must be loop.Options, got {options!r}")
        non_negative_int("max_retries", max_retries)
        if not isinstance(native, bool):
            raise UsageError(f"native must be True or False, got {native!r}")
        if not isinstance(prompt, str) or "{criteria}" not in prompt:
            raise UsageError("JudgeVerifier's prompt= must be a string holding {criteria}, where the criteria go")
        self.name = name
        self.step = step
        self.criteria = criteria
        self.threshold = float(threshold)
        self.context = context
        self.options = options
        self.max_retries = max_retries
        self.native = native
        self.prompt = prompt

    async def verify(self, state: State) -> Result:
        answer = state.answer
        if answer is None:
            return Result(self.name, Status.FAIL,
                          "There is no answer to judge: the conversation has no assistant reply with text.")
        judging = (State()
                   .append(Role.SYSTEM, Text(self.prompt.replace("{criteria}", self.criteria.strip())))
                   .append(Role.USER, Text(self._presentation(state, answer))))
        # The name is a run path segment here, as it is in run_all: a '/' would split it.
        with branch(self.name.replace("/", "_")):
            try:
                asked = await ask(self.step, judging, Verdict, options=self.options,
                                  max_retries=self.max_retries, native=self.native)
            except VerificationFailed as exc:
                return Result(self.name, Status.ERROR, f"The judge gave no valid verdict, so the answer could not "
                                                       f"be judged: {exc}")
        verdict: Verdict = asked.value
        return Result(self.name, self._status(verdict), self._report(verdict))

    def _status(self, verdict: Verdict) -> Status:
        return Status.PASS if verdict.passed and verdict.severity <= self.threshold else Status.FAIL

    def _report(self, verdict: Verdict) -> str:
        severity = f"severity {verdict.severity:.2g} of 1"
        if self._status(verdict) is Status.PASS:
            head = f"The judge passed the answer ({severity})."
        elif verdict.passed:
            head = (f"The judge found problems too severe to pass ({severity}; passing needs at most "
                    f"{self.threshold:.2g}).")
        else:
            head = f"The judge failed the answer ({severity})."
        sections = [head]
        if verdict.summary.strip():
            sections.append(verdict.summary.strip())
        issues = [issue.strip() for issue in verdict.issues if issue.strip()]
        if issues:
            sections.append("Issues:\n\n" + "\n".join(f"- {issue}" for issue in issues))
        return "\n\n".join(sections)

    def _presentation(self, state: State, answer: str) -> str:
        """The judge's user turn: the task, the turns before the answer it may need, and the answer."""
        turns = state.turns
        at = next(i for i in range(len(turns) - 1, -1, -1) if turns[i].role is Role.ASSISTANT)  # answer's turn
        task_at = next((i for i in range(at - 1, -1, -1) if turns[i].role is Role.USER), None)
        task = "(the conversation holds no user message)" if task_at is None else (
            turns[task_at].text.strip() or "(the user's message holds no text)")
        sections = [f"## Task\n\n{task}"]
        if self.context:
            shown = [("(the task above)" if i == task_at else _render(turns[i]), turns[i])
                     for i in range(max(0, at - self.context), at)]
            lines = [f"**{turn.role.value}**: {text}" for text, turn in shown if text]
            if lines:
                sections.append("## Conversation before the answer\n\n" + "\n\n".join(lines))
        sections.append(f"## Answer under review\n\n{answer}")
        return "\n\n".join(sections)

    def __repr__(self) -> str:
        return f"JudgeVerifier(name={self.name!r}, threshold={self.threshold:g}, context={self.context})"


def _render(turn: Turn) -> str:
    """One turn in short, as text; reasoning is left out (it is the author's, not part of what was said)."""
    pieces: list[str] = []
    for part in turn.parts:
        if isinstance(part, Text):
            pieces.append(part.text.strip())
        elif isinstance(part, ToolCall):
            pieces.append(f"called `{part.name}` with {part.arguments or '{}'}")
        elif isinstance(part, ToolResult):
            pieces.append(f"`{part.name}` {'failed' if part.is_error else 'returned'}: {part.content}")
    text = "\n".join(p for p in pieces if p)
    return text if len(text) <= _MAX_TURN_CHARS else text[:_MAX_TURN_CHARS] + " …(cut)"
