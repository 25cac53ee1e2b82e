"""``WithVerification``: run verifiers after a pattern and let the model fix what they find."""

from __future__ import annotations

from collections.abc import Iterable

from cognitive._pattern import Pattern, check_start, check_wiring, left_open
from loop import Role, State, Text, TurnKind, TurnSubmitter, UsageError, scope, tracing
from loop.checks import non_negative_int, positive_number
from loop.errors import VerificationError, VerificationFailed
from verifier import Result, Status, Verifier, build_report, check_verifiers, run_all


class WithVerification:
    """Runs ``inner``, then every verifier concurrently on the result.

    All PASS: the state is returned, its answer's outcome holding the results (under this wrapper's run path)
    and no better than the inner run's. Any ERROR: ``VerificationError`` at once (the check is broken; the
    model cannot fix it). Any FAIL: the markdown report is submitted as a ``SYSTEM`` turn through
    ``submitter`` and ``inner`` runs again from there, up to ``max_retries`` times; after that
    ``VerificationFailed`` carries the final state (its outcome ``failed``) and results. A verifier that runs
    past ``verifier_timeout`` seconds FAILs. Verifiers run as branches: models they call are never taken for
    the conversation.
    """

    __slots__ = ("inner", "submitter", "verifiers", "max_retries", "verifier_timeout")

    def __init__(
        self,
        inner: Pattern,
        submitter: TurnSubmitter,
        *,
        verifiers: Verifier | Iterable[Verifier],
        max_retries: int = 3,
        verifier_timeout: float | None = 300.0,
    ) -> None:
        check_wiring("WithVerification", inner, submitter)
        non_negative_int("max_retries", max_retries)
        positive_number("verifier_timeout", verifier_timeout, unit="seconds", optional=True)
        verifiers = check_verifiers(verifiers, "verifiers", unique=True)
        if not verifiers:
            raise UsageError("WithVerification needs at least one verifier to gate the answer with: pass verifiers="
                             "[...] (verifier.FunctionVerifier, CommandVerifier, a judge, or one of your own)")
        self.inner = inner
        self.submitter = submitter
        self.verifiers = verifiers
        self.max_retries = max_retries
        self.verifier_timeout = verifier_timeout

    async def run(self, state: State) -> State:
        check_start(state, "WithVerification")
        with scope("WithVerification"), tracing.span(
                "invoke_agent WithVerification",
                {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "WithVerification"}) as span:
            state = await self.inner.run(state)
            attempt = 0
            while not left_open(state):  # calls left for the caller: nothing to verify yet
                results = await run_all(self.verifiers, state, timeout=self.verifier_timeout)
                errors = [r for r in results if r.status is Status.ERROR]
                if errors:
                    names = ", ".join(r.name for r in errors)
                    raise VerificationError(f"verifier {names} could not run: {errors[0].report}",
                                            state=state, results=results)
                if all(r.status is Status.PASS for r in results):
                    span.set_attribute("verification.retries", attempt)
                    return state.with_outcome(data=_summary(results, attempt))
                if attempt == self.max_retries:
                    failing = ", ".join(r.name for r in results if r.status is Status.FAIL)
                    message = (f"verifier {failing} still failing after {self.max_retries} "
                               f"retr{'y' if self.max_retries == 1 else 'ies'}")
                    raise VerificationFailed(message, state=state.with_outcome(
                        "failed", message, data=_summary(results, attempt)), results=results)
                attempt += 1
                state = await self.submitter.submit(
                    state, Role.SYSTEM, Text(build_report(results)),
                    meta={"kind": TurnKind.VERIFICATION, "attempt": attempt},
                )
                state = await self.inner.run(state)
            return state

    def __repr__(self) -> str:
        return (f"WithVerification({self.inner!r}, verifiers={[v.name for v in self.verifiers]}, "
                f"max_retries={self.max_retries})")


def _summary(results: list[Result], retries: int) -> dict[str, object]:
    return {"retries": retries, "results": {r.name: r.status.value for r in results}}
