"""The verifier contract: ``Status``, ``Result``, ``Verifier``, and running several at once."""

from __future__ import annotations

import enum
import time
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

import anyio
import attrs

from loop import State, UsageError, branch, tracing
from loop.checks import positive_number
from loop.errors import BudgetExhausted

_log = tracing.logger("verifier")


class Status(enum.Enum):
    """PASS: the work is good. FAIL: the model can fix it. ERROR: the check itself broke; retrying won't help."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"


@attrs.frozen
class Result:
    """What one verifier found. ``report`` tells the model (and people) what is wrong, in markdown."""

    name: str
    status: Status
    report: str = ""

    @property
    def ok(self) -> bool:
        return self.status is Status.PASS


def passed(report: str = "") -> Result:
    """A PASS result for a ``FunctionVerifier`` to return; the verifier fills in its name."""
    return Result("", Status.PASS, report)


def failed(report: str) -> Result:
    """A FAIL result for a ``FunctionVerifier`` to return; the verifier fills in its name."""
    return Result("", Status.FAIL, report)


@runtime_checkable
class Verifier(Protocol):
    """A quality gate over a conversation's outcome.

    ``verify`` looks at ``state`` (usually ``state.answer``, or files the model wrote) and returns a ``Result``
    named ``name``. FAIL means the model should try again and ``report`` says why; ERROR means the check could
    not run. It may raise: ``run_all`` turns an exception into ERROR. It must be safe to call concurrently and
    must stop promptly when cancelled.
    """

    name: str

    async def verify(self, state: State) -> Result: ...


def check_verifiers(verifiers: Verifier | Iterable[Verifier], who: str, *, unique: bool = False) -> tuple[Verifier, ...]:
    """``verifiers`` as a tuple, each checked to be a ``Verifier`` (one verifier needs no list); with ``unique``,
    their names must differ. Raises ``UsageError`` naming ``who`` and the problem."""
    if not isinstance(verifiers, (tuple, list)) and isinstance(verifiers, Verifier):  # one needs no list
        verifiers = (verifiers,)
    elif isinstance(verifiers, (str, bytes)) or not isinstance(verifiers, Iterable):
        raise UsageError(f"{who} takes a Verifier or a list of verifiers, got {verifiers!r}")
    checked = tuple(verifiers)
    for v in checked:
        if not isinstance(getattr(v, "name", None), str) or not callable(getattr(v, "verify", None)):
            raise UsageError(f"{v!r} is not a Verifier (it needs a str .name and an async .verify(state))")
    if unique:
        names = [v.name for v in checked]
        if len(set(names)) != len(names):
            raise UsageError(f"verifier names must be unique, got {names}")
    return checked


async def run_all(
    verifiers: Verifier | Iterable[Verifier], state: State, *, timeout: float | None = None
) -> list[Result]:
    """Run every verifier concurrently on ``state``; the results sorted by name. One verifier needs no list.

    Every result carries its verifier's name. An exception becomes an ERROR result, except ``BudgetExhausted``:
    a budget that ran out while a verifier called a model is the budget's to report (its ``WithBudget`` writes
    the final answer), not a broken check, so it goes on to the caller. A verifier still running
    after ``timeout`` seconds is stopped and FAILs (the model can fix an answer that makes a check hang; ERROR is
    for broken infrastructure).
    """
    verifiers = check_verifiers(verifiers, "run_all")
    if not isinstance(state, State):
        raise UsageError(f"run_all verifies a loop.State, got {state!r}")
    positive_number("timeout", timeout, unit="seconds", optional=True)
    results: list[Result | None] = [None] * len(verifiers)

    async def run_one(index: int) -> None:
        results[index] = await _verify(verifiers[index], state, timeout)

    if len(verifiers) == 1:
        await run_one(0)
    elif verifiers:
        async with anyio.create_task_group() as group:
            for index in range(len(verifiers)):
                group.start_soon(run_one, index)
    return sorted((r for r in results if r is not None), key=lambda r: r.name)  # each run_one filled its slot


async def _verify(v: Verifier, state: State, timeout: float | None) -> Result:
    started = time.perf_counter()
    # A branch of its own: a verifier or judge that calls a model is never taken for the conversation.
    with branch(f"verify:{v.name.replace('/', '_') or '?'}"), \
            tracing.span(f"verify {v.name}", {"verifier.name": v.name}) as span:
        try:
            with anyio.move_on_after(timeout) as scope:
                result = await v.verify(state)
            if scope.cancelled_caught:
                result = Result(v.name, Status.FAIL, f"The check did not finish within {timeout:g} seconds.")
            elif not isinstance(result, Result):
                result = Result(v.name, Status.ERROR, f"verify() returned {result!r}, not a verifier.Result")
            elif result.name != v.name:
                # e.g. a bare passed()/failed(): results are sorted, reported and keyed by the verifier's name.
                result = attrs.evolve(result, name=v.name)
        except BudgetExhausted:
            raise
        except Exception as exc:
            _log.warning("verifier raised", verifier=v.name, error=repr(exc))
            result = Result(v.name, Status.ERROR, f"The verifier raised {type(exc).__name__}: {exc}")
        if span is not tracing.NOOP_SPAN:
            span.set_attribute("verifier.status", result.status.value)
            span.set_attribute("verifier.seconds", time.perf_counter() - started)
    return result


def build_report(results: Iterable[Result]) -> str:
    """The results as markdown: a summary heading, then a section per verifier with its status and report."""
    results = list(results)
    bad = [r for r in results if r.status is not Status.PASS]
    if not bad:
        head = f"# Verification: all {len(results)} checks passed"
    else:
        head = f"# Verification: {len(bad)} of {len(results)} checks did not pass"
    sections = [head]
    for r in results:
        body = r.report.strip()
        sections.append(f"## {r.name}: {r.status.name}" + (f"\n\n{body}" if body else ""))
    return "\n\n".join(sections) + "\n"
