"""``Retry``: a provider wrapper that retries failed requests before anything was streamed; ``Backoff``, the
rules for when to try again, which other clients share."""

from __future__ import annotations

import math
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, cast

import anyio
import attrs

from loop import (Closable, Delta, DeltaStream, Provider, ProviderInfo, Request, UsageError, charge, has,
                  provider_info, require, tracing)
from loop.checks import positive_int
from loop.errors import ProviderError

_log = tracing.logger("provider.retry")


def _seconds(name: str, value: Any, *, finite: bool = True) -> float:
    # bool is an int, and NaN or infinity would turn into a sleep that never ends or raises later.
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0
            or (finite and not math.isfinite(value))):
        raise UsageError(f"{name} must be a {'finite ' if finite else ''}number of seconds >= 0, got {value!r}")
    return value


def _attempts(value: Any) -> int:
    return positive_int("attempts", value)


def _base_delay(value: Any) -> float:
    return _seconds("base_delay", value)


def _max_delay(value: Any) -> float:
    return _seconds("max_delay", value)


def _max_total(value: Any) -> float:
    return _seconds("max_total", value, finite=False)


def timing(sleep: Any, clock: Any) -> tuple[Callable[[float], Awaitable[None]], Callable[[], float]]:
    """``sleep`` and ``clock`` as given, checked to be callable (replaceable so tests run waits on a fake clock)."""
    if not callable(sleep):
        raise UsageError(f"sleep must be an async function taking seconds, got {sleep!r}")
    if not callable(clock):
        raise UsageError(f"clock must be a function returning seconds, got {clock!r}")
    return sleep, clock


@attrs.frozen
class Backoff:
    """When to try a failed request again: the rules ``Retry`` and ``OpenAIEmbeddings`` share.

    Only a retryable ``ProviderError`` (429, 5xx, connection failures) is tried again. Waits grow exponentially
    from ``base_delay`` up to ``max_delay`` with full jitter; a server's ``Retry-After`` is honoured instead.
    No more than ``attempts`` tries in all, and no wait that would end more than ``max_total`` seconds after the
    first try began.
    """

    attempts: int = attrs.field(default=4, converter=_attempts)
    base_delay: float = attrs.field(default=0.5, converter=_base_delay)
    max_delay: float = attrs.field(default=20.0, converter=_max_delay)
    max_total: float = attrs.field(default=120.0, converter=_max_total)

    def delay(self, attempt: int, error: ProviderError) -> float:
        """Seconds to wait before try ``attempt + 1`` after ``error``."""
        asked = getattr(error, "retry_after", None)
        # NaN, negative or non-numeric values are no instruction: back off as if none was given. An infinite
        # one is honoured, so max_total gives up on it.
        if isinstance(asked, (int, float)) and not isinstance(asked, bool) and asked >= 0:
            return float(asked)
        return random.uniform(0, min(self.max_delay, self.base_delay * 2 ** (attempt - 1)))

    def wait(self, attempt: int, error: ProviderError, elapsed: float) -> float | None:
        """Seconds to wait before trying again after try ``attempt`` failed with ``error``, ``elapsed`` seconds
        after the first began; ``None`` to give up (not retryable, out of attempts, or past ``max_total``)."""
        if not error.retryable or attempt >= self.attempts:
            return None
        wait = self.delay(attempt, error)
        return None if elapsed + wait > self.max_total else wait


class Retry:
    """Retries ``inner`` when it fails with a retryable ``ProviderError`` (429, 5xx, connection failures).

    Waits grow exponentially from ``base_delay`` up to ``max_delay`` with full jitter; a server's
    ``Retry-After`` is honoured instead. Never retries once a delta has been passed on (the consumer has
    already seen part of a response). Gives up after ``attempts`` tries in all, or when the next wait would
    pass ``max_total`` seconds since the first try, and raises the last error. The stream of every failed try
    is closed before the wait. ``sleep`` and ``clock`` (a monotonic clock in seconds) are replaceable, so tests
    can run the waits on a fake clock.
    """

    def __init__(
        self,
        inner: Provider,
        *,
        attempts: int = 4,
        base_delay: float = 0.5,
        max_delay: float = 20.0,
        max_total: float = 120.0,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        require(inner, Provider, "Retry", "a provider to wrap (something with stream(request))")
        self.inner = inner
        self.backoff = Backoff(attempts, base_delay, max_delay, max_total)
        self.attempts: int = self.backoff.attempts
        self.base_delay: float = self.backoff.base_delay
        self.max_delay: float = self.backoff.max_delay
        self.max_total: float = self.backoff.max_total
        self._sleep, self._clock = timing(sleep, clock)

    async def aclose(self) -> None:
        """Close the provider it wraps, when that one holds anything to close (``loop.Closable``)."""
        if has(self.inner, Closable):
            await cast(Closable, self.inner).aclose()

    @property
    def info(self) -> ProviderInfo:
        """What the wrapped provider says of itself."""
        return provider_info(self.inner)

    def stream(self, request: Request) -> DeltaStream:
        return self._stream(request)

    def delay(self, attempt: int, error: ProviderError) -> float:
        """Seconds to wait before try ``attempt + 1`` after ``error`` (``Backoff.delay``)."""
        return self.backoff.delay(attempt, error)

    async def _stream(self, request: Request) -> AsyncGenerator[Delta, None]:
        started = self._clock()
        attempt = 0
        while True:
            attempt += 1
            passed_on = False
            stream: Any = None
            if attempt > 1:
                charge(turns=1)  # the step charged the first attempt; every retry is one more model call
            try:
                # Inside the try: a provider may fail in stream() itself, before returning an iterator.
                stream = self.inner.stream(request)
                async for delta in stream:
                    passed_on = True
                    yield delta
                return
            except ProviderError as exc:
                wait = None if passed_on else self.backoff.wait(attempt, exc, self._clock() - started)
                if wait is None:
                    raise
                _log.warning("provider call failed; retrying", attempt=attempt, wait=round(wait, 3),
                             error=str(exc), status=exc.status)
            finally:
                if stream is not None:  # None when the inner provider failed in stream() itself
                    with anyio.CancelScope(shield=True):
                        await stream.aclose()
            await self._sleep(wait)

    def __repr__(self) -> str:
        return f"Retry({self.inner!r}, attempts={self.attempts})"
