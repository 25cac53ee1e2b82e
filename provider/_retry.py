"""``Retry``: a provider wrapper that retries failed requests before anything was streamed."""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio

from loop import Delta, Provider, Request, UsageError, tracing
from loop.errors import ProviderError

_log = tracing.logger("provider.retry")


class Retry:
    """Retries ``inner`` when it fails with a retryable ``ProviderError`` (429, 5xx, connection failures).

    Waits grow exponentially from ``base_delay`` up to ``max_delay`` with full jitter; a server's
    ``Retry-After`` is honoured instead. Never retries once a delta has been passed on (the consumer has
    already seen part of a response). Gives up after ``attempts`` tries in all, or when the next wait would
    pass ``max_total`` seconds since the first try, and raises the last error.
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
    ) -> None:
        if not callable(getattr(inner, "stream", None)):
            raise UsageError(f"Retry wraps a provider (something with stream(request)), got {inner!r}")
        if not (isinstance(attempts, int) and attempts >= 1):
            raise UsageError(f"attempts must be an integer >= 1, got {attempts!r}")
        for name, value in (("base_delay", base_delay), ("max_delay", max_delay), ("max_total", max_total)):
            if not (isinstance(value, (int, float)) and value >= 0):
                raise UsageError(f"{name} must be a number of seconds >= 0, got {value!r}")
        self.inner = inner
        self.attempts = attempts
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.max_total = max_total
        self._sleep = sleep

    def stream(self, request: Request) -> AsyncIterator[Delta]:
        return self._stream(request)

    def delay(self, attempt: int, error: ProviderError) -> float:
        """Seconds to wait before try ``attempt + 1`` after ``error``."""
        asked = getattr(error, "retry_after", None)
        if asked is not None:
            return float(asked)
        return random.uniform(0, min(self.max_delay, self.base_delay * 2 ** (attempt - 1)))

    async def _stream(self, request: Request) -> AsyncIterator[Delta]:
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            passed_on = False
            stream = self.inner.stream(request)
            try:
                async for delta in stream:
                    passed_on = True
                    yield delta
                return
            except ProviderError as exc:
                if passed_on or not exc.retryable or attempt >= self.attempts:
                    raise
                wait = self.delay(attempt, exc)
                if time.monotonic() - started + wait > self.max_total:
                    raise
                _log.warning("provider call failed; retrying", attempt=attempt, wait=round(wait, 3),
                             error=str(exc), status=exc.status)
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    with anyio.CancelScope(shield=True):
                        await aclose()
            await self._sleep(wait)

    def __repr__(self) -> str:
        return f"Retry({self.inner!r}, attempts={self.attempts})"
