"""Fan-out: run branches concurrently, each in a branch scope of its own, and collect one result per branch.

The concurrency ``limit`` belongs to one fan-out call, never to the run scope: a limit shared by nested
fan-outs would deadlock once the outer branches held every slot while waiting on inner ones.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import attrs

from loop._budget import Spent
from loop._spend import Spend
from loop.checks import positive_int
from loop._outcome import FAILED, OK, Outcome
from loop._scope import branch, charging
from loop._state import State
from loop.errors import UsageError

Job = Callable[[], Awaitable[State]]


@attrs.frozen
class BranchResult:
    """What one branch ended with: its ``index`` among the jobs (from 0), its run ``path`` (numbered from
    1, as in ``sample 3``), its final ``state`` (or ``None``), the ``error`` it raised (or ``None``) and what
    it ``spent``. A budget that ran out inside the branch is its error, not an exception of the fan-out."""

    index: int
    path: str
    state: State | None
    error: Exception | None
    spent: Spent

    @property
    def outcome(self) -> Outcome:
        """The branch's outcome: ``failed`` when it raised, else its answer's (``ok`` if none recorded)."""
        if self.error is not None:
            return Outcome(FAILED, f"{type(self.error).__name__}: {self.error}")
        outcome = None if self.state is None else self.state.outcome
        return outcome if outcome is not None else Outcome(OK)

    @property
    def ok(self) -> bool:
        return self.error is None and self.outcome.ok


def _jobs(jobs: Iterable[Job]) -> tuple[Job, ...]:
    if isinstance(jobs, (str, bytes)) or not isinstance(jobs, Iterable):
        raise UsageError(f"fan_out takes a list of jobs (functions returning an awaitable State), got {jobs!r}")
    jobs = tuple(jobs)
    for job in jobs:
        if not callable(job):
            raise UsageError(f"a fan-out job is a function taking no arguments and returning an awaitable State "
                             f"(e.g. functools.partial(pattern.run, state)), got {job!r}")
    return jobs


def _check(limit: Any, name: Any) -> None:
    positive_int("limit", limit, optional=True)
    if not isinstance(name, str) or not name or "/" in name:
        raise UsageError(f"name must be a non-empty string without '/', got {name!r}")


async def run_branch(index: int, job: Job, name: str) -> BranchResult:
    """Run ``job`` as branch ``index`` (in the current task), catching what it raises."""
    with branch(f"{name} {index + 1}") as scope:
        tally = Spend(None)
        state: State | None = None
        error: Exception | None = None
        with charging(tally):
            try:
                result = await job()
            except Exception as exc:
                error = exc
            else:
                if isinstance(result, State):
                    state = result
                else:
                    error = UsageError(f"fan-out job {index} returned {result!r}, not a State")
        return BranchResult(index, scope.path, state, error, tally.spent)


async def fan_out(jobs: Iterable[Job], *, limit: int | None = None, name: str = "branch") -> tuple[BranchResult, ...]:
    """Run every job concurrently (at most ``limit`` at once) as branches named ``{name} 1``, ``{name} 2``...;
    one ``BranchResult`` per job, in job order. Each job is a function taking no arguments and returning an
    awaitable ``State``, e.g. ``functools.partial(pattern.run, state)``. A job that raises gives a result
    with its error; cancelling the fan-out cancels every branch."""
    finished: list[BranchResult] = []
    async with as_completed(_jobs(jobs), limit=limit, name=name) as branches:
        async for result in branches:
            finished.append(result)
    return tuple(sorted(finished, key=lambda result: result.index))


class as_completed:  # noqa: N801 - reads as a function: ``async with as_completed(jobs) as results``
    """Branches as they finish: ``async with as_completed(jobs, limit=3) as results: async for r in results``.

    Leaving the block (after a quorum, say) cancels the branches still running. Like ``fan_out``, each job
    runs as a branch of its own and ends in a ``BranchResult``.
    """

    def __init__(self, jobs: Iterable[Job], *, limit: int | None = None, name: str = "branch") -> None:
        _check(limit, name)
        self._jobs = _jobs(jobs)
        self._limit = limit
        self._name = name
        self._group: anyio.abc.TaskGroup | None = None
        self._received = 0

    async def __aenter__(self) -> as_completed:
        self._send, self._receive = anyio.create_memory_object_stream[BranchResult](math.inf)
        self._group = group = anyio.create_task_group()
        await group.__aenter__()
        jobs = self._jobs
        workers = len(jobs) if self._limit is None else min(self._limit, len(jobs))
        if workers == len(jobs):
            for index in range(len(jobs)):
                group.start_soon(self._one, index)
        else:
            indices = iter(range(len(jobs)))
            for _ in range(workers):
                group.start_soon(self._worker, indices)
        return self

    async def _one(self, index: int) -> None:
        self._send.send_nowait(await run_branch(index, self._jobs[index], self._name))

    async def _worker(self, indices: Any) -> None:
        for index in indices:  # shared by the workers: each index is taken once
            await self._one(index)

    def __aiter__(self) -> AsyncIterator[BranchResult]:
        return self

    async def __anext__(self) -> BranchResult:
        if self._received >= len(self._jobs):
            raise StopAsyncIteration
        result = await self._receive.receive()
        self._received += 1
        return result

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        group = self._group
        assert group is not None  # set by __aenter__
        if self._received < len(self._jobs):
            group.cancel_scope.cancel()  # the caller stopped early: cancel the rest
        try:
            return await group.__aexit__(exc_type, exc, tb)
        finally:
            self._send.close()
            self._receive.close()
