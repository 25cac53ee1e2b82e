"""``check_pattern`` and ``check_memory``: conformance checks a ``Pattern`` or a ``Memory`` of your own can run in its
own tests.

In the spirit of ``trio.testing.check_one_way_stream``: ``await check_pattern(make)`` builds the pattern with
``make(step)`` over a step of the check's own (a model that answers every request in words, or ``reply``) and
raises ``ConformanceError`` naming the first way the pattern breaks the ``Pattern`` contract.
``await check_memory(make_memory)`` does the same for the memories ``make_memory`` makes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import anyio

from cognitive._pattern import Pattern
from cognitive.memory._check import check_memory
from loop import Request, Role, State, Step, Text, UsageError, main_line
from loop.errors import ConformanceError
from provider import Function

__all__ = ["ConformanceError", "check_memory", "check_pattern"]


def _words(request: Request) -> str:
    return f"An answer to: {request.turns[-1].text or 'the question'}"


async def check_pattern(make: Callable[[Step], Any], *, reply: Callable[[Request], Any] | None = None,
                        question: str = "What is the capital of France?", timeout: float = 30.0) -> None:
    """Check that the pattern ``make(step)`` builds keeps the ``Pattern`` contract.

    The step's model answers each request with ``reply(request)``, a ``provider.Function`` reply (default: a
    sentence naming the last turn's text; a pattern that asks typed answers or forces tools needs a ``reply``
    that gives them). The check asks that the pattern has an async ``run(state)``; that a run returns the state it was
    given with turns appended (never rewritten) and ends in a written answer with no tool call left open;
    that one instance runs two conversations at once without mixing them (a pattern keeps settings, not
    state); that on the main line (as in a session) every state recorded as its turns complete extends the one
    recorded before, and what it returns extends the last (only the meta of a stored turn may change: an outcome
    written on the answer); and that a run cancelled while the model is answering raises the
    cancellation instead of returning. Each run is bounded by ``timeout`` seconds.

    Raises ``ConformanceError`` naming the first breach; returns ``None`` when the pattern conforms.
    """
    answer = reply or _words
    if not callable(make) or not callable(answer):
        raise UsageError(f"check_pattern takes make(step) -> pattern and a reply function, got {make!r}")
    pattern = make(Step(Function(answer)))
    if not isinstance(pattern, Pattern) or not inspect.iscoroutinefunction(pattern.run):
        raise ConformanceError(f"{pattern!r} is not a Pattern: it needs an async run(state) -> State")
    first, second = (State().append(Role.USER, Text(q)) for q in (question, f"{question} (again)"))

    with anyio.fail_after(timeout):
        done = await pattern.run(first)
    _answered(pattern, first, done)

    results: dict[int, State] = {}
    both = make(Step(Function(answer)))

    async def run(index: int, state: State) -> None:
        results[index] = await both.run(state)

    with anyio.fail_after(timeout):
        async with anyio.create_task_group() as group:
            group.start_soon(run, 0, first)
            group.start_soon(run, 1, second)
    for index, state in enumerate((first, second)):
        _answered(both, state, results[index])

    recorded: list[State] = []

    async def record(state: State) -> None:
        kept = state.common_prefix(recorded[-1], meta=False) if recorded else 0
        if recorded and kept < len(recorded[-1]):
            raise ConformanceError(f"{pattern!r}: on the main line a recorded state must extend the one recorded "
                                   f"before; it rewrote turn {kept}")
        recorded.append(state)

    with anyio.fail_after(timeout), main_line(recorder=record):
        done = await make(Step(Function(answer))).run(first)
    if recorded and done.common_prefix(recorded[-1], meta=False) < len(recorded[-1]):
        raise ConformanceError(f"{pattern!r}: what a run returns must extend what it recorded on the main line "
                               "(a session has stored it)")

    started = anyio.Event()

    async def slow(request: Request) -> str:
        started.set()
        await anyio.sleep_forever()
        return "never"

    returned = False

    async def cancelled_run() -> None:
        nonlocal returned
        await make(Step(Function(slow))).run(first)
        returned = True

    with anyio.fail_after(timeout):
        async with anyio.create_task_group() as group:
            group.start_soon(cancelled_run)
            await started.wait()
            group.cancel_scope.cancel()
    if returned:
        raise ConformanceError(f"{pattern!r}: a run cancelled while the model answers must raise the cancellation, "
                               "not return a state")


def _answered(pattern: object, given: State, done: object) -> None:
    if not isinstance(done, State):
        raise ConformanceError(f"{pattern!r}: run(state) must return a loop.State, got {done!r}")
    if done.common_prefix(given) < len(given) or len(done) <= len(given):
        raise ConformanceError(f"{pattern!r}: run(state) must return the state it was given with turns appended; "
                               f"it kept {done.common_prefix(given)} of its {len(given)} turns")
    last = done.last
    if last is None or last.role is not Role.ASSISTANT or not done.answer or done.pending_calls:
        raise ConformanceError(f"{pattern!r}: a run must end in a written answer with no tool call left open; it "
                               f"ended with {last!r}")
