"""``SelfRefine``: answer, hear a critic, revise, until the critic is satisfied or the iterations run out."""

from __future__ import annotations

from typing import Any

from cognitive._pattern import Pattern, check_prompt, check_start, check_wiring, left_open
from loop import Role, State, Text, TurnKind, TurnSubmitter, UsageError, has, scope, tracing
from loop.checks import positive_int, positive_number
from loop.errors import VerificationError
from verifier import Result, Status, Verifier, run_all

REVISE = """\
A reviewer read your last answer and has this feedback:

{feedback}

Write a revised answer that addresses every point. Keep what was right; answer in full, not as a list of \
changes."""


class SelfRefine:
    """Runs ``inner``, asks ``critic`` (a ``verifier.Verifier``, such as a judge) for feedback on the answer,
    and while it does not pass, submits the feedback as a ``SYSTEM`` turn (``TurnKind.VERIFICATION``, through
    ``submitter``) asking for a revised answer, and runs ``inner`` again from there.

    The conversation keeps every draft and every critique, so each revision sees what came before. At most
    ``max_iters`` answers are written, each critiqued once. The critic passing ends the run with its outcome
    data (``iterations``, ``passed: true``); still not passing after the last one, the last answer is
    returned ``degraded`` with the last feedback in the data. That is the difference from
    ``WithVerification``, which raises ``VerificationFailed`` there: verifiers are gates an answer must pass,
    a critic is advice an answer can improve on, and its best effort is still an answer.

    A critic that reports ERROR (it could not run) raises ``VerificationError`` at once, as in
    ``WithVerification``. A critic still running after ``critic_timeout`` seconds FAILs. The critic runs as
    a branch: a judge's model calls are never taken for the conversation. ``prompt`` is the revision request,
    with ``{feedback}`` where the critic's report goes.
    """

    __slots__ = ("inner", "submitter", "critic", "max_iters", "critic_timeout", "prompt")

    def __init__(
        self,
        inner: Pattern,
        submitter: TurnSubmitter,
        critic: Verifier,
        *,
        max_iters: int = 4,
        critic_timeout: float | None = 300.0,
        prompt: str = REVISE,
    ) -> None:
        check_wiring("SelfRefine", inner, submitter)
        self.critic = check_critic("SelfRefine", "critic", critic)
        self.inner = inner
        self.submitter = submitter
        self.max_iters = positive_int("max_iters", max_iters)
        self.critic_timeout = positive_number("critic_timeout", critic_timeout, unit="seconds", optional=True)
        self.prompt = check_prompt("prompt", prompt, "feedback")

    async def run(self, state: State) -> State:
        check_start(state, "SelfRefine")
        with scope("SelfRefine"), tracing.span("invoke_agent SelfRefine", {
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "SelfRefine"}) as span:
            return await revise(self.inner, self.submitter, self.critic, state, rounds=self.max_iters,
                                timeout=self.critic_timeout, prompt=self.prompt, unit="iterations", span=span)

    def __repr__(self) -> str:
        return f"SelfRefine({self.inner!r}, critic={self.critic.name!r}, max_iters={self.max_iters})"


async def revise(inner: Pattern, submitter: TurnSubmitter, critic: Verifier, state: State, *, rounds: int,
                 timeout: float | None, prompt: str, unit: str, span: Any) -> State:
    """The loop ``SelfRefine`` and ``Critic`` share: answer, critique, and revise until the critic passes or
    ``rounds`` answers have been critiqued. The outcome data counts the answers under ``unit``."""
    state = await inner.run(state)
    for number in range(1, rounds + 1):
        if left_open(state):
            return state  # calls left for the caller: nothing to critique yet
        (result,) = await run_all([critic], state, timeout=timeout)
        if result.status is Status.ERROR:
            raise VerificationError(f"critic {critic.name} could not run: {result.report}", state=state,
                                    results=[result])
        if result.status is Status.PASS:
            span.set_attribute(f"refine.{unit}", number)
            return state.with_outcome(data={unit: number, "passed": True, "critic": critic.name})
        if number == rounds:
            break
        state = await submitter.submit(state, Role.SYSTEM, Text(prompt.format(feedback=result.report.strip())),
                                       meta={"kind": TurnKind.VERIFICATION, "attempt": number})
        state = await inner.run(state)
    span.set_attribute(f"refine.{unit}", rounds)
    return state.with_outcome(
        "degraded", f"critic {critic.name} still not satisfied after {rounds} {unit if rounds > 1 else unit[:-1]}",
        data={unit: rounds, "passed": False, "critic": critic.name, "feedback": _excerpt(result)})




def check_critic(who: str, name: str, critic: Any) -> Verifier:
    if isinstance(critic, (list, tuple)):
        raise UsageError(f"{who}'s {name} is one Verifier, got {critic!r}")
    if not has(critic, Verifier) or not isinstance(critic.name, str):
        raise UsageError(f"{who}'s {name} must be a verifier.Verifier (a str .name and an async .verify(state)), "
                         f"got {critic!r}; wrap a function in verifier.FunctionVerifier")
    checked: Verifier = critic
    return checked




def _excerpt(result: Result, limit: int = 2000) -> str:
    report = result.report.strip()
    return report if len(report) <= limit else report[:limit] + "…"
