"""``WithGuardrails`` and ``ToolOutputGuard``: checks on what reaches the model and what leaves the run.

A guardrail is a verifier (``verifier.Verifier``: the shipped ``NoSecrets``, ``NoPII``, ``MaxLength``,
``NoInjection``, a ``SchemaVerifier``, or a ``FunctionVerifier`` of your own). Used as a tripwire, a FAIL stops
the run with ``GuardrailTripped``; used to repair, its report goes back to the model through
``WithVerification`` and the model writes the answer again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cognitive._pattern import Pattern, check_start, check_wiring, left_open
from cognitive.wrappers._holdback import AnswerHold, answers_unrecorded
from cognitive.wrappers._verification import WithVerification
from loop import (Executor, LoopError, Options, Role, State, TurnMiddleware, TurnSubmitter, UsageError, has, scope,
                  tracing)
from loop.checks import non_negative_int, positive_number
from loop.errors import VerificationError
from verifier import Guard, Result, Status, Verifier, Where, check_verifiers, run_all

_REASON_IN_MESSAGE = 400  # characters of the reason the message repeats; ``reason`` keeps it whole


class GuardrailTripped(LoopError):
    """Raised when a guardrail trips, and never retried: ``check`` is the name of the check that tripped,
    ``stage`` where it stood (``"input"``: before the model saw the message; ``"tool_output"``: before the model
    read a tool's result; ``"output"``: before the answer left the run), ``reason`` the check's report (the
    shipped guards mask what they found, so it never holds the secret itself), ``results`` every check of that
    stage, and ``state`` the conversation at that moment, for a session to keep what happened. On the
    ``"output"`` stage that state holds the answer that tripped (its outcome ``failed``): show ``reason``, not
    the answer."""

    def __init__(self, message: str, *, check: str, stage: Where, reason: str, state: State,
                 results: Iterable[Result] = ()) -> None:
        super().__init__(message)
        self.check = check
        self.stage: Where = stage
        self.reason = reason
        self.state = state
        self.results = tuple(results)

    @property
    def notice(self) -> str:
        """What a person is shown: ``blocked by guardrail <check> (<stage>): <reason>``, the reason whole."""
        return f"blocked by guardrail {self.check} ({self.stage.replace('_', ' ')}): {self.reason}"

    def to_dict(self) -> dict[str, str]:
        """``{"check", "stage", "reason"}``: the trip as a conduit sends it (never the text that tripped)."""
        return {"check": self.check, "stage": self.stage, "reason": self.reason}


def _placed(checks: Verifier | Iterable[Verifier], stage: Where, who: str) -> tuple[Verifier, ...]:
    """``checks`` as verifiers, each guard reading the text of ``stage``; names must differ (results are keyed
    by them)."""
    verifiers = check_verifiers(checks, who, unique=True)
    return tuple(v.at(stage) if has(v, Guard) else v for v in verifiers)  # type: ignore[attr-defined]


async def _gate(stage: Where, checks: tuple[Verifier, ...], state: State, timeout: float | None,
                span: Any = tracing.NOOP_SPAN) -> dict[str, str]:
    """Run ``checks`` on ``state``; their statuses by name when all PASS. A FAIL trips (``GuardrailTripped``),
    before an ERROR (``VerificationError``: whether the text is safe is unknown, so the run stops too). A
    check running past ``timeout`` seconds FAILs, as in ``run_all``: a guard that cannot decide trips."""
    results = await run_all(checks, state, timeout=timeout)
    statuses = {r.name: r.status.value for r in results}
    where = stage.replace("_", " ")
    tripped = next((r for r in results if r.status is Status.FAIL), None)
    if tripped is not None:
        reason = tripped.report.strip() or f"The check {tripped.name} reported FAIL."
        flat = " ".join(reason.split())
        if len(flat) > _REASON_IN_MESSAGE:
            flat = flat[:_REASON_IN_MESSAGE - 1] + "…"
        span.set_attribute("guardrail.tripped", tripped.name)
        span.set_attribute("guardrail.stage", stage)
        message = f"the {where} guardrail {tripped.name!r} tripped: {flat}"
        if stage == "output":
            state = state.with_outcome("failed", message, data={stage: statuses})
        raise GuardrailTripped(message, check=tripped.name, stage=stage, reason=reason, state=state,
                               results=results)
    errors = [r for r in results if r.status is Status.ERROR]
    if errors:
        names = ", ".join(r.name for r in errors)
        raise VerificationError(f"the {where} guardrail {names} could not run: {errors[0].report}",
                                state=state, results=results)
    return statuses


def _unanswered(state: State) -> bool:
    """Whether ``state`` holds a user message the model has not answered yet (not a run resumed from results
    its caller gave)."""
    for turn in state.reversed():
        if turn.role is Role.USER:
            return True
        if turn.role is Role.ASSISTANT:
            return False
    return False


def _unread(state: State) -> bool:
    """Whether ``state`` holds tool results the model has not read yet: any since its last turn."""
    for turn in state.reversed():
        if turn.role is Role.ASSISTANT:
            return False
        if turn.role is Role.TOOL and turn.tool_results:
            return True
    return False


class WithGuardrails:
    """Runs ``inner`` between checks: ``input`` checks before the model sees the message, ``output`` checks on
    the answer before it leaves the run, and ``repair`` verifiers the model fixes its answer by.

    - ``input``: tripwires run on the state as it comes in, when it ends in a message the model has not
      answered; one that FAILs raises ``GuardrailTripped`` and no model is called.
    - ``repair``: verifiers run through ``WithVerification(inner, submitter, verifiers=repair,
      max_retries=...)``: a FAIL's report goes back to the model as a system turn and it answers again; still
      failing after ``max_retries`` raises ``VerificationFailed``.
    - ``output``: tripwires run on the answer once ``inner`` (and the repairs) are done; one that FAILs raises
      ``GuardrailTripped``, its state's outcome ``failed``.

    A guard (``verifier.Guard``: the shipped checks, or a ``TextCheck`` of your own) reads the text of the stage
    it is given to (``NoSecrets()`` in ``input`` reads the message); any other verifier runs as it is
    (``SchemaVerifier`` reads the answer). A check that ERRORs raises ``VerificationError``; one running past
    ``verifier_timeout`` seconds FAILs. Checks run concurrently, as branches. The answer's outcome holds each
    check's status by stage under this wrapper's run path. A run that ended with calls left for the caller is
    returned as it is, unchecked, until it writes an answer.

    Tool results are checked where they arrive, before the model reads them: build ``inner`` on
    ``ToolOutputGuard(step, [NoInjection()])``.

    ``hold_back`` (with ``output`` checks): the answer's text, as the main line streams it on ``submitter``'s
    event bus (the one a session's conduits read), is held back from the first text of a model turn until the
    ``output`` checks pass, then sent on as it was streamed; on a trip, or any other failure, no text of it is
    ever sent (see ``AnswerHold``). A turn that calls a tool is not the answer: its text goes out when its first
    call streams. ``hold_back=False`` streams the answer as it is written, seen before the checks run. Raises
    ``UsageError`` without any check.
    """

    __slots__ = ("inner", "submitter", "input", "output", "repair", "max_retries", "verifier_timeout", "hold_back",
                 "_run")

    def __init__(
        self,
        inner: Pattern,
        submitter: TurnSubmitter,
        *,
        input: Verifier | Iterable[Verifier] = (),
        output: Verifier | Iterable[Verifier] = (),
        repair: Verifier | Iterable[Verifier] = (),
        max_retries: int = 2,
        verifier_timeout: float | None = 60.0,
        hold_back: bool = True,
    ) -> None:
        check_wiring("WithGuardrails", inner, submitter)
        if not isinstance(hold_back, bool):
            raise UsageError(f"WithGuardrails's hold_back is True (hold the streamed answer back until the output "
                             f"checks pass) or False, got {hold_back!r}")
        non_negative_int("max_retries", max_retries)
        positive_number("verifier_timeout", verifier_timeout, unit="seconds", optional=True)
        self.input = _placed(input, "input", "WithGuardrails's input=")
        self.output = _placed(output, "output", "WithGuardrails's output=")
        self.repair = _placed(repair, "output", "WithGuardrails's repair=")
        if not (self.input or self.output or self.repair):
            raise UsageError("WithGuardrails needs a check: input=[...] (before the model sees the message), "
                             "output=[...] (tripwires on the answer) or repair=[...] (verifiers the model fixes its "
                             "answer by); tool results are checked by building inner on ToolOutputGuard(step, [...])")
        self.inner = inner
        self.submitter = submitter
        self.max_retries = max_retries
        self.verifier_timeout = verifier_timeout
        self.hold_back = hold_back
        self._run: Pattern = inner if not self.repair else WithVerification(
            inner, submitter, verifiers=self.repair, max_retries=max_retries, verifier_timeout=verifier_timeout)

    async def run(self, state: State) -> State:
        check_start(state, "WithGuardrails")
        with scope("WithGuardrails"), tracing.span(
                "invoke_agent WithGuardrails",
                {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "WithGuardrails"}) as span:
            ran: dict[str, dict[str, str]] = {}
            if self.input and _unanswered(state):
                ran["input"] = await _gate("input", self.input, state, self.verifier_timeout, span)
            hold = AnswerHold.on(self.submitter) if self.output and self.hold_back else None
            if hold is None:
                return await self._checked(state, ran, span)
            with hold, answers_unrecorded():  # the hold ends as failed unless the checks passed
                state = await self._checked(state, ran, span)
                hold.end(passed=True)
            return state

    async def _checked(self, state: State, ran: dict[str, dict[str, str]], span: Any) -> State:
        """``inner`` (with its repairs) run on ``state``, then the ``output`` checks on its answer."""
        state = await self._run.run(state)
        if left_open(state):  # calls left for the caller: no answer to check yet
            return state
        if self.output:
            ran["output"] = await _gate("output", self.output, state, self.verifier_timeout, span)
        return state.with_outcome(data=ran) if ran else state

    def __repr__(self) -> str:
        def names(checks: tuple[Verifier, ...]) -> list[str]:
            return [c.name for c in checks]
        held = "" if self.hold_back or not self.output else ", hold_back=False"
        return (f"WithGuardrails({self.inner!r}, input={names(self.input)}, output={names(self.output)}, "
                f"repair={names(self.repair)}, max_retries={self.max_retries}{held})")


class ToolOutputGuard(TurnMiddleware):
    """Runs ``step``'s turns, checking the tool results the model is about to read before each model call.

    Before a ``turn`` or ``sample`` whose state holds tool results since the model's last turn, ``checks`` run
    on them (a guard reads the results of the current run: see ``verifier.passages``); one that FAILs raises
    ``GuardrailTripped`` (stage ``"tool_output"``) and the model is not called, so it never reads them. A check
    that ERRORs raises ``VerificationError``; one running past ``verifier_timeout`` seconds FAILs. Results a
    pattern folds into a turn of its own (``ReWOO``'s evidence) are no longer tool results, and are not checked.

    A ``loop.TurnMiddleware``: it keeps every ability of ``step``, stages a pattern derives keep it, and it
    composes with other middleware in any order. Build the pattern on it: ``ReAct(ToolOutputGuard(step,
    [NoInjection()]))``. Raises ``UsageError`` when ``step`` is not a ``loop.Executor`` or no check is given.
    """

    __slots__ = ("checks", "verifier_timeout")

    def __init__(self, step: Executor, checks: Verifier | Iterable[Verifier], *,
                 verifier_timeout: float | None = 60.0) -> None:
        super().__init__(step)
        self.checks = _placed(checks, "tool_output", "ToolOutputGuard")
        if not self.checks:
            raise UsageError("ToolOutputGuard needs a check for tool results, e.g. ToolOutputGuard(step, "
                             "[verifier.NoInjection()])")
        self.verifier_timeout = positive_number("verifier_timeout", verifier_timeout, unit="seconds",
                                                optional=True)

    async def turn(self, state: State, options: Options | None = None) -> State:
        if _unread(state):
            await _gate("tool_output", self.checks, state, self.verifier_timeout)
        return await self.inner.turn(state, options)

    async def sample(self, state: State, n: int, options: Options | None = None) -> tuple[State, ...]:
        if _unread(state):
            await _gate("tool_output", self.checks, state, self.verifier_timeout)
        return await self.inner.sample(state, n, options)

    def __repr__(self) -> str:
        return f"ToolOutputGuard({self.inner!r}, checks={[c.name for c in self.checks]})"
