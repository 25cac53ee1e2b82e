"""``check_verifier``: a conformance check any ``Verifier`` implementation can run in its own tests.

In the spirit of ``trio.testing.check_one_way_stream``: give it a verifier and two states, one it should
pass and one it should fail, and it raises ``ConformanceError`` naming the first way the verifier breaks the
``verifier.Verifier`` contract.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel

from loop import State, UsageError
from loop.checks import positive_number
from loop.errors import ConformanceError
from verifier._core import Result, Status

__all__ = ["ConformanceError", "check_verifier"]


async def check_verifier(verifier: Any, *, passing: State, failing: State, timeout: float = 10.0) -> None:
    """Check that ``verifier`` keeps the ``Verifier`` contract.

    ``passing`` is a state the verifier must PASS, ``failing`` one it must FAIL (with a report saying why).
    The check asks for a non-empty ``str`` name; ``verify`` must be async and return a ``Result`` carrying
    that name; the two states must give PASS and FAIL, also when called concurrently; and a call cancelled
    mid-way must stop within ``timeout`` seconds without raising anything else, after which the verifier
    still works. Every call is bounded by ``timeout`` seconds.

    Raises ``ConformanceError`` naming the first breach; returns ``None`` when the verifier conforms.
    """
    if not isinstance(passing, State) or not isinstance(failing, State):
        raise UsageError(f"passing and failing must be loop.State values, got {passing!r} and {failing!r}")
    positive_number("timeout", timeout, unit="seconds")
    name = getattr(verifier, "name", None)
    if not isinstance(name, str) or not name:
        raise ConformanceError(f"{verifier!r}: name must be a non-empty str, got {name!r}")
    if not callable(getattr(verifier, "verify", None)):
        raise ConformanceError(f"{name}: it has no verify(state) method")
    cases = (("passing", passing, Status.PASS), ("failing", failing, Status.FAIL))

    for label, state, expected in cases:
        what = f"verify({label} state)"
        _expect(await _verify(verifier, state, what, timeout), name, expected, what)

    errors: list[ConformanceError] = []

    async def again(index: int, label: str, state: State, expected: Status) -> None:
        what = f"verify({label} state), call {index} of 4 running at once"
        try:
            _expect(await _verify(verifier, state, what, timeout), name, expected, what)
        except ConformanceError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as group:
        for index, (label, state, expected) in enumerate(cases * 2, start=1):
            group.start_soon(again, index, label, state, expected)
    if errors:
        raise errors[0]

    for how, wait in _CANCEL_POINTS:
        await _cancelled_call(verifier, passing, how, wait, timeout)
    what = "verify(passing state) after cancelled calls"
    _expect(await _verify(verifier, passing, what, timeout), name, Status.PASS, what)


async def _verify(verifier: Any, state: State, what: str, timeout: float) -> Any:
    try:
        with anyio.move_on_after(timeout) as scope:
            pending = verifier.verify(state)
            if not inspect.isawaitable(pending):
                raise ConformanceError(f"{verifier.name}: verify() must be async; {what} returned {pending!r}")
            result = await pending
    except ConformanceError:
        raise
    except Exception as exc:
        raise ConformanceError(f"{verifier.name}: {what} raised {exc!r}") from exc
    if scope.cancelled_caught:
        raise ConformanceError(f"{verifier.name}: {what} did not return within {timeout:g} seconds")
    return result


def _expect(result: Any, name: str, status: Status, what: str) -> None:
    if not isinstance(result, Result):
        raise ConformanceError(f"{name}: {what} returned {result!r}, not a verifier.Result")
    if result.name != name:
        raise ConformanceError(f"{name}: {what} returned a Result named {result.name!r}; it must carry the "
                               f"verifier's name {name!r}")
    if result.status is not status:
        raise ConformanceError(f"{name}: {what} gave {result.status.name}, expected {status.name}; "
                               f"its report: {result.report!r}")
    if status is Status.FAIL and not result.report.strip():
        raise ConformanceError(f"{name}: {what} gave FAIL with an empty report; a FAIL must tell the model why")


async def _checkpoints(count: int) -> None:
    for _ in range(count):
        await anyio.lowlevel.checkpoint()


# When to cancel a call: at its first suspension, a few scheduler rounds in, and once it has had a moment to
# get going (a subprocess started, a request sent). Cancelling is only checked, never timed.
_CANCEL_POINTS: tuple[tuple[str, Callable[[], Awaitable[None]]], ...] = (
    ("at its first await", lambda: _checkpoints(1)),
    ("a few scheduler rounds in", lambda: _checkpoints(5)),
    ("50 ms in", lambda: anyio.sleep(0.05)),
)


async def _cancelled_call(
    verifier: Any, state: State, how: str, wait: Callable[[], Awaitable[None]], timeout: float
) -> None:
    what = f"verify(passing state) cancelled {how}"
    done = anyio.Event()
    raised: list[BaseException] = []
    scope = anyio.CancelScope()

    async def call() -> None:
        try:
            with scope:
                await verifier.verify(state)
        except Exception as exc:
            raised.append(exc)
        finally:
            done.set()

    async with anyio.create_task_group() as group:
        group.start_soon(call)
        await wait()
        scope.cancel()
        with anyio.move_on_after(timeout):
            await done.wait()
        stuck = not done.is_set()
        # Leaving the task group waits for a stuck call to end by itself; the error is raised after that.
    if stuck:
        raise ConformanceError(f"{verifier.name}: {what} did not stop within {timeout:g} seconds")
    if raised:
        raise ConformanceError(
            f"{verifier.name}: {what} raised {raised[0]!r} instead of letting the cancellation through"
        ) from raised[0]
