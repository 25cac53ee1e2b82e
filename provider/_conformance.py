"""``check_provider``: a conformance check any ``loop.Provider`` implementation can run (in the spirit of
``trio.testing.check_one_way_stream``). Re-exported by ``provider.testing``."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio

from loop import (Finish, Provider, ReasoningDelta, Request, Role, State, Step, Text, TextDelta, ToolCallDelta, Turn,
                  UsageDelta, has)
from loop.checks import positive_number
from loop.errors import ConformanceError

DELTA_TYPES: tuple[type, ...] = (TextDelta, ReasoningDelta, ToolCallDelta, UsageDelta, Finish)
CONCURRENT_STREAMS = 10
_PROMPT = "Say hello."


async def check_provider(
    make_provider: Callable[[], Provider | Awaitable[Provider]], *, timeout: float = 10.0
) -> None:
    """Check that the providers ``make_provider`` makes keep the ``loop.Provider`` contract.

    ``make_provider()`` (sync or async) returns a provider that answers any request with a short text reply.
    Each part of the check uses a fresh provider and sends it at most ten requests, so ``Scripted`` with ten
    replies qualifies. The check streams a response (only ``loop`` deltas, carrying text), runs a ``Step``
    turn on it, closes a stream mid-way with ``aclose``, cancels a consumer mid-stream, and runs ten streams
    at once; after the close and the cancellation the provider must still answer. Every wait is bounded by
    ``timeout`` seconds, so a provider that hangs fails the check instead of stalling the test run.

    Raises ``ConformanceError`` naming the first breach; returns ``None`` when the provider conforms.
    """
    positive_number("timeout", timeout, unit="seconds")
    await _collect(await _make(make_provider), "streaming one response", timeout)
    await _check_step(await _make(make_provider), timeout)
    await _check_aclose(await _make(make_provider), timeout)
    await _check_cancel(await _make(make_provider), timeout)
    await _check_concurrent(await _make(make_provider), timeout)


async def _make(make_provider: Callable[[], Any]) -> Any:
    provider = make_provider()
    if inspect.isawaitable(provider):
        provider = await provider
    if not has(provider, Provider):
        raise ConformanceError(f"make_provider() returned {provider!r}, which has no stream(request) method")
    return provider


def _request() -> Request:
    return Request((Turn(Role.USER, (Text(_PROMPT),)),))


def _open(provider: Any, what: str) -> AsyncIterator[Any]:
    try:
        stream = provider.stream(_request())
    except Exception as exc:
        raise ConformanceError(f"{what}: stream(request) raised {exc!r}") from exc
    if inspect.iscoroutine(stream):
        stream.close()  # never awaited on purpose; closing it avoids a RuntimeWarning
        raise ConformanceError(
            f"{what}: stream(request) returned a coroutine; it must return an async iterator of deltas "
            "(write it as an async generator, or as a plain def returning one)"
        )
    if not isinstance(stream, AsyncIterator):
        raise ConformanceError(f"{what}: stream(request) must return an async iterator of deltas, got {stream!r}")
    if not callable(getattr(stream, "aclose", None)):  # the DeltaStream contract, checked once here
        raise ConformanceError(f"{what}: stream(request) returned {stream!r}, which cannot be closed (no aclose()); "
                               "a provider's stream is a loop.DeltaStream: write it as an async generator")
    return stream


def _check_delta(delta: Any, what: str) -> None:
    # Exact types, as Step accumulates them: a subclass of TextDelta would be rejected there too.
    if type(delta) not in DELTA_TYPES:
        raise ConformanceError(
            f"{what}: the stream yielded {delta!r}, which is not a loop delta "
            "(TextDelta, ReasoningDelta, ToolCallDelta, UsageDelta or Finish)"
        )


async def _aclose(stream: Any, what: str, timeout: float) -> None:
    try:
        with anyio.move_on_after(timeout, shield=True) as scope:
            await stream.aclose()
    except Exception as exc:
        raise ConformanceError(f"{what}: aclose() raised {exc!r}") from exc
    if scope.cancelled_caught:
        raise ConformanceError(f"{what}: aclose() did not return within {timeout:g} seconds")


async def _collect(provider: Any, what: str, timeout: float) -> list[Any]:
    """Every delta of one response, checked; the response must carry some text."""
    stream = _open(provider, what)
    deltas: list[Any] = []
    try:
        with anyio.move_on_after(timeout) as scope:
            async for delta in stream:
                _check_delta(delta, what)
                deltas.append(delta)
    except ConformanceError:
        raise
    except Exception as exc:
        raise ConformanceError(f"{what}: the stream raised {exc!r}") from exc
    finally:
        await _aclose(stream, what, timeout)
    if scope.cancelled_caught:
        raise ConformanceError(f"{what}: the stream did not end within {timeout:g} seconds")
    if not "".join(d.text for d in deltas if type(d) is TextDelta).strip():
        raise ConformanceError(
            f"{what}: the response carried no text ({deltas!r}); make_provider() must return a provider "
            "that answers any request with a short text reply"
        )
    return deltas


async def _check_step(provider: Any, timeout: float) -> None:
    what = "a Step turn"
    try:
        with anyio.move_on_after(timeout) as scope:
            state = await Step(provider).turn(State().append(Role.USER, Text(_PROMPT)))
    except Exception as exc:
        raise ConformanceError(f"{what}: the turn raised {exc!r}") from exc
    if scope.cancelled_caught:
        raise ConformanceError(f"{what}: the turn did not finish within {timeout:g} seconds")
    turns = state.turns
    if len(turns) < 2 or turns[1].role is not Role.ASSISTANT or not turns[1].text.strip():
        raise ConformanceError(f"{what}: expected an assistant turn with text after the user's, got {turns[1:]!r}")


async def _first(stream: Any, what: str, timeout: float) -> Any:
    try:
        with anyio.move_on_after(timeout) as scope:
            delta = await stream.__anext__()
    except StopAsyncIteration:
        raise ConformanceError(f"{what}: the stream ended without a single delta") from None
    except Exception as exc:
        raise ConformanceError(f"{what}: the stream raised {exc!r}") from exc
    if scope.cancelled_caught:
        raise ConformanceError(f"{what}: no delta arrived within {timeout:g} seconds")
    _check_delta(delta, what)
    return delta


async def _check_aclose(provider: Any, timeout: float) -> None:
    what = "closing a stream mid-way"
    stream = _open(provider, what)
    await _first(stream, what, timeout)
    await _aclose(stream, what, timeout)
    try:
        extra = await stream.__anext__()
    except Exception:  # StopAsyncIteration, or the iterator's own "closed" error
        pass
    else:
        raise ConformanceError(f"{what}: the stream went on after aclose(), yielding {extra!r}")
    await _collect(provider, f"{what}, then streaming again (the closed stream must release what it held)", timeout)


async def _check_cancel(provider: Any, timeout: float) -> None:
    what = "cancelling a consumer mid-stream"
    stream = _open(provider, what)
    try:
        with anyio.move_on_after(timeout) as deadline:
            with anyio.CancelScope() as scope:
                async for delta in stream:
                    _check_delta(delta, what)
                    scope.cancel()
                    # No checkpoint here: the provider's own next checkpoint must let the cancellation through.
    except ConformanceError:
        raise
    except Exception as exc:
        raise ConformanceError(
            f"{what}: the stream raised {exc!r} instead of letting the cancellation through"
        ) from exc
    finally:
        await _aclose(stream, what, timeout)
    if deadline.cancelled_caught:
        raise ConformanceError(f"{what}: the stream did not stop within {timeout:g} seconds")
    await _collect(provider, f"{what}, then streaming again (the cancelled stream must release what it held)",
                   timeout)


async def _check_concurrent(provider: Any, timeout: float) -> None:
    errors: list[ConformanceError] = []

    async def one(number: int) -> None:
        try:
            await _collect(provider, f"stream {number} of {CONCURRENT_STREAMS} running at once", timeout)
        except ConformanceError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as group:
        for number in range(1, CONCURRENT_STREAMS + 1):
            group.start_soon(one, number)
    if errors:
        raise errors[0]
