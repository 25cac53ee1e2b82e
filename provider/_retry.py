"""``Retry``: a provider wrapper that retries failed requests before anything was streamed."""

from __future__ import annotations

import math
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, cast

import anyio

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
        if not callable(sleep):
            raise UsageError(f"sleep must be an async function taking seconds, got {sleep!r}")
        if not callable(clock):
            raise UsageError(f"clock must be a function returning seconds, got {clock!r}")
        self.inner = inner
        self.attempts = positive_int("attempts", attempts)
        self.base_delay = _seconds("base_delay", base_delay)
        self.max_delay = _seconds("max_delay", max_delay)
        self.max_total = _seconds("max_total", max_total, finite=False)
        self._sleep = sleep
        self._clock = clock

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
        """Seconds to wait before try ``attempt + 1`` after ``error``."""
        asked = getattr(error, "retry_after", None)
        # NaN, negative or non-numeric values are no instruction: back off as if none was given. An infinite
        # one is honoured, so max_total gives up on it.
        if isinstance(asked, (int, float)) and not isinstance(asked, bool) and asked >= 0:
            return float(asked)
        return random.uniform(0, min(self.max_delay, self.base_delay * 2 ** (attempt - 1)))

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
                if passed_on or not exc.retryable or attempt >= self.attempts:
                    raise
                wait = self.delay(attempt, exc)
                if self._clock() - started + wait > self.max_total:
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
