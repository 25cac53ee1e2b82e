"""``Retry``: which errors it retries, how many times, how long it waits, and what it never does."""

import math
import random
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

import provider._retry
from cognitive import ReAct
from loop import Finish, Request, Role, State, Step, Text, TextDelta, UsageError, tool
from loop.errors import (
    AuthenticationError,
    BadRequestError,
    OverloadedError,
    ProviderError,
    ProviderTimeout,
    ProviderUnreachable,
    RateLimitError,
    ServerError,
    StreamError,
)
from provider import Function, Retry, Scripted, tool_call
from provider._http import status_error, transport_error
from provider.testing import check_provider
from tests.provider.streams import REQUEST, Held, collect


OK = [TextDelta("ok"), Finish("stop")]


class FakeTime:
    """A clock that only moves when something sleeps on it (or a test moves it), and a record of the waits."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


class Faulty:
    """Raises ``errors[n]`` (before any delta) on call ``n``, then answers "ok"; counts calls and closes."""

    def __init__(self, *errors: BaseException, time: FakeTime | None = None, call_takes: float = 0.0) -> None:
        self.errors = list(errors)
        self.calls = 0
        self.closed = 0
        self._time = time
        self._call_takes = call_takes

    def stream(self, request: Request) -> AsyncIterator[Any]:
        self.calls += 1
        return self._respond(self.calls)

    async def _respond(self, number: int) -> AsyncIterator[Any]:
        try:
            if self._time is not None:
                self._time.now += self._call_takes
            if number <= len(self.errors):
                raise self.errors[number - 1]
            for delta in OK:
                yield delta
        finally:
            self.closed += 1


def retry(inner: Any, fake: FakeTime, **settings: Any) -> Retry:
    return Retry(inner, sleep=fake.sleep, clock=fake.clock, **settings)


# -- what is retried -----------------------------------------------------------------------------------

RETRYABLE = [
    pytest.param(lambda: RateLimitError("slow down"), id="RateLimitError"),
    pytest.param(lambda: ServerError("boom", status=500), id="ServerError"),
    pytest.param(lambda: OverloadedError("busy", status=529), id="OverloadedError"),
    pytest.param(lambda: ProviderTimeout("late", retryable=True), id="ProviderTimeout"),
    pytest.param(lambda: ProviderUnreachable("refused", retryable=True), id="ProviderUnreachable"),
    pytest.param(lambda: StreamError("cut short", retryable=True), id="StreamError-retryable"),
    pytest.param(lambda: ProviderError("flagged", retryable=True), id="ProviderError-retryable"),
    # As the HTTP providers make them from real failures:
    pytest.param(lambda: transport_error("X", httpx.ConnectTimeout("slow")), id="http-connect-timeout"),
    pytest.param(lambda: transport_error("X", httpx.ReadTimeout("slow")), id="http-read-timeout"),
    pytest.param(lambda: transport_error("X", httpx.ConnectError("refused")), id="http-connect-error"),
    pytest.param(lambda: transport_error("X", httpx.RemoteProtocolError("eof")), id="http-cut-short"),
    pytest.param(lambda: status_error("X", 429, "{}", {}), id="http-429"),
    pytest.param(lambda: status_error("X", 502, "{}", {}), id="http-502"),
    pytest.param(lambda: status_error("X", 408, "{}", {}), id="http-408"),
]


@pytest.mark.parametrize("make_error", RETRYABLE)
async def test_a_retryable_error_is_retried_until_the_call_succeeds(make_error: Any) -> None:
    fake = FakeTime()
    inner = Faulty(make_error(), make_error())
    assert await collect(retry(inner, fake)) == OK
    assert inner.calls == 3
    assert len(fake.waits) == 2


NOT_RETRYABLE = [
    pytest.param(lambda: AuthenticationError("bad key", status=401), id="AuthenticationError"),
    pytest.param(lambda: BadRequestError("bad request", status=400), id="BadRequestError"),
    pytest.param(lambda: ProviderError("plain"), id="ProviderError"),
    pytest.param(lambda: StreamError("malformed"), id="StreamError-not-retryable"),
    pytest.param(lambda: UsageError("misuse"), id="UsageError"),
    pytest.param(lambda: RuntimeError("a bug in the provider"), id="RuntimeError"),
    pytest.param(lambda: status_error("X", 401, "{}", {}), id="http-401"),
    pytest.param(lambda: status_error("X", 404, "{}", {}), id="http-404"),
]


@pytest.mark.parametrize("make_error", NOT_RETRYABLE)
async def test_a_non_retryable_error_is_raised_at_once(make_error: Any) -> None:
    fake = FakeTime()
    error = make_error()
    inner = Faulty(error)
    with pytest.raises(type(error)) as caught:
        await collect(retry(inner, fake))
    assert caught.value is error
    assert inner.calls == 1
    assert fake.waits == []


async def test_the_retryable_flag_decides_not_the_class() -> None:
    fake = FakeTime()
    refused = ServerError("do not retry me")
    refused.retryable = False
    inner = Faulty(refused)
    with pytest.raises(ServerError):
        await collect(retry(inner, fake))
    assert inner.calls == 1


# -- how many tries ------------------------------------------------------------------------------------


@pytest.mark.parametrize("attempts", [1, 2, 3, 5])
async def test_attempts_caps_the_calls_and_the_last_error_is_raised(attempts: int) -> None:
    fake = FakeTime()
    errors = [ServerError(f"failure {n}") for n in range(1, attempts + 2)]
    inner = Faulty(*errors)
    with pytest.raises(ServerError) as caught:
        await collect(retry(inner, fake, attempts=attempts))
    assert inner.calls == attempts
    assert caught.value is errors[attempts - 1]
    assert len(fake.waits) == attempts - 1


async def test_success_on_the_last_allowed_attempt_is_returned() -> None:
    fake = FakeTime()
    inner = Faulty(ServerError("1"), ServerError("2"))
    assert await collect(retry(inner, fake, attempts=3)) == OK
    assert inner.calls == 3


# -- how long it waits ---------------------------------------------------------------------------------


async def test_retry_after_is_the_wait_instead_of_the_backoff() -> None:
    fake = FakeTime()
    inner = Faulty(RateLimitError("slow", retry_after=7.5), ServerError("down", retry_after=0),
                   OverloadedError("busy", status=529, retry_after=3))
    # A Retry-After longer than max_delay is still honoured: the server said so.
    assert await collect(retry(inner, fake, base_delay=100, max_delay=1, attempts=4)) == OK
    assert fake.waits == [7.5, 0.0, 3.0]
    assert all(type(w) is float for w in fake.waits)


async def test_a_retry_after_from_a_real_429_header_is_used() -> None:
    fake = FakeTime()
    inner = Faulty(status_error("X", 429, "{}", {"retry-after": "4"}))
    assert await collect(retry(inner, fake, base_delay=100, max_delay=100)) == OK
    assert fake.waits == [4.0]


@pytest.mark.parametrize("bogus", [-1.0, math.nan, "soon"])
async def test_a_retry_after_that_is_not_a_usable_wait_falls_back_to_backoff(bogus: Any) -> None:
    fake = FakeTime()
    error = RateLimitError("slow")
    error.retry_after = bogus
    inner = Faulty(error)
    assert await collect(retry(inner, fake, base_delay=2, max_delay=2)) == OK
    assert len(fake.waits) == 1 and 0 <= fake.waits[0] <= 2


async def test_an_infinite_retry_after_gives_up_at_max_total() -> None:
    fake = FakeTime()
    inner = Faulty(RateLimitError("come back never", retry_after=math.inf))
    with pytest.raises(RateLimitError, match="never"):
        await collect(retry(inner, fake, max_total=600))
    assert inner.calls == 1 and fake.waits == []


async def test_backoff_doubles_up_to_max_delay_with_full_jitter_in_bounds() -> None:
    fake = FakeTime()
    attempts = 8
    inner = Faulty(*[ServerError(str(n)) for n in range(attempts)])
    with pytest.raises(ServerError):
        await collect(retry(inner, fake, attempts=attempts, base_delay=0.5, max_delay=3.0, max_total=math.inf))
    caps = [min(3.0, 0.5 * 2 ** (n - 1)) for n in range(1, attempts)]
    assert caps == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0, 3.0]
    assert len(fake.waits) == attempts - 1
    assert all(0 <= wait <= cap for wait, cap in zip(fake.waits, caps))


async def test_backoff_is_uniform_between_zero_and_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # A seeded generator in place of the module's ``random``: the waits are exactly its draws.
    monkeypatch.setattr(provider._retry, "random", random.Random(1234))
    fake = FakeTime()
    inner = Faulty(*[ServerError(str(n)) for n in range(5)])
    with pytest.raises(ServerError):
        await collect(retry(inner, fake, attempts=5, base_delay=1.0, max_delay=5.0))
    expected = random.Random(1234)
    assert fake.waits == [expected.uniform(0, cap) for cap in (1.0, 2.0, 4.0, 5.0)]
    assert len(set(fake.waits)) == 4  # jitter: not the caps themselves, and not all equal


async def test_the_bounds_of_each_draw_grow_exponentially(monkeypatch: pytest.MonkeyPatch) -> None:
    draws: list[tuple[float, float]] = []

    class Highest:
        def uniform(self, low: float, high: float) -> float:
            draws.append((low, high))
            return high

    monkeypatch.setattr(provider._retry, "random", Highest())
    fake = FakeTime()
    inner = Faulty(*[ServerError(str(n)) for n in range(6)])
    with pytest.raises(ServerError):
        await collect(retry(inner, fake, attempts=6, base_delay=0.25, max_delay=2.0))
    assert draws == [(0, 0.25), (0, 0.5), (0, 1.0), (0, 2.0), (0, 2.0)]
    assert fake.waits == [0.25, 0.5, 1.0, 2.0, 2.0]


async def test_delay_is_public_and_prefers_retry_after() -> None:
    r = Retry(Scripted([]), base_delay=1.0, max_delay=8.0)
    assert r.delay(1, RateLimitError("x", retry_after=12)) == 12.0
    assert 0 <= r.delay(10, ServerError("x")) <= 8.0


# -- max_total -----------------------------------------------------------------------------------------


async def test_max_total_stops_when_the_next_wait_would_pass_it() -> None:
    fake = FakeTime()
    errors = [RateLimitError(str(n), retry_after=10) for n in range(1, 10)]
    inner = Faulty(*errors)
    with pytest.raises(RateLimitError) as caught:
        await collect(retry(inner, fake, attempts=10, max_total=25))
    # waits at t=0 (0+10 <= 25) and t=10 (10+10 <= 25); at t=20 the next wait would end at 30 > 25
    assert fake.waits == [10.0, 10.0]
    assert inner.calls == 3
    assert caught.value is errors[2]


async def test_max_total_counts_the_time_the_calls_took() -> None:
    fake = FakeTime()
    inner = Faulty(*[ServerError(str(n), retry_after=10) for n in range(1, 10)], time=fake, call_takes=3)
    with pytest.raises(ServerError):
        await collect(retry(inner, fake, attempts=10, max_total=25))
    # first failure at t=3 (3+10 <= 25); second at t=16, and 16+10 > 25
    assert fake.waits == [10.0]
    assert inner.calls == 2


async def test_a_wait_ending_exactly_at_max_total_is_still_taken() -> None:
    fake = FakeTime()
    inner = Faulty(RateLimitError("x", retry_after=5))
    assert await collect(retry(inner, fake, max_total=5)) == OK
    assert fake.waits == [5.0]


# -- what it never does --------------------------------------------------------------------------------


async def test_an_error_after_a_delta_was_passed_on_is_never_retried() -> None:
    calls = 0

    async def partial(request: Request) -> AsyncIterator[Any]:
        nonlocal calls
        calls += 1
        yield TextDelta("half an ans")
        raise ServerError("connection dropped", status=502)

    fake = FakeTime()
    seen: list[Any] = []
    with pytest.raises(ServerError):
        async for delta in retry(Function(partial), fake).stream(REQUEST):
            seen.append(delta)
    assert seen == [TextDelta("half an ans")]
    assert calls == 1
    assert fake.waits == []


class ClosableFailure:
    """A stream that is not a generator (as an HTTP response iterator is not): it fails on its first
    ``__anext__`` and only lets go of what it holds when ``aclose`` is called."""

    def __init__(self, number: int, log: list[str], error: Exception) -> None:
        self.number = number
        self.log = log
        self.error = error
        log.append(f"open {number}")

    def __aiter__(self) -> "ClosableFailure":
        return self

    async def __anext__(self) -> Any:
        raise self.error

    async def aclose(self) -> None:
        self.log.append(f"close {self.number}")


async def test_each_failed_attempts_stream_is_closed_before_the_wait() -> None:
    log: list[str] = []
    calls = 0

    def stream(request: Request) -> AsyncIterator[Any]:
        nonlocal calls
        calls += 1
        return ClosableFailure(calls, log, ServerError(f"failure {calls}"))

    class Inner:
        pass

    inner = Inner()
    inner.stream = stream  # type: ignore[attr-defined]

    async def sleep(seconds: float) -> None:
        log.append("sleep")

    with pytest.raises(ServerError, match="failure 3"):
        await collect(Retry(inner, attempts=3, sleep=sleep))
    assert log == ["open 1", "close 1", "sleep", "open 2", "close 2", "sleep", "open 3", "close 3"]


async def test_a_provider_that_fails_in_stream_itself_is_retried() -> None:
    fake = FakeTime()
    calls = 0

    class FailsEarly:
        def stream(self, request: Request) -> AsyncIterator[Any]:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise RateLimitError("before any iterator", retry_after=1)
            return Scripted(["ok"]).stream(request)

    assert await collect(retry(FailsEarly(), fake)) == OK
    assert calls == 2
    assert fake.waits == [1.0]


async def test_closing_the_retry_stream_early_closes_the_inner_stream() -> None:
    inner = Held(TextDelta("one"), TextDelta("two"))
    stream = Retry(inner).stream(REQUEST)
    assert await stream.__anext__() == TextDelta("one")
    await stream.aclose()  # type: ignore[attr-defined]
    assert inner.closed == 1


async def test_cancellation_during_the_backoff_sleep_propagates() -> None:
    inner = Faulty(ServerError("1"), ServerError("2"))
    reached_sleep = anyio.Event()
    after_stream: list[Any] = []

    async def sleep(seconds: float) -> None:
        reached_sleep.set()
        await anyio.sleep_forever()

    async def consume() -> None:
        after_stream.append(await collect(Retry(inner, sleep=sleep)))

    async with anyio.create_task_group() as group:
        group.start_soon(consume)
        await reached_sleep.wait()
        group.cancel_scope.cancel()
    assert group.cancel_scope.cancelled_caught
    assert after_stream == []  # the stream did not go on to another attempt and return
    assert inner.calls == 1
    assert inner.closed == 1


async def test_cancellation_while_streaming_is_not_retried() -> None:
    calls = 0

    async def slow(request: Request) -> AsyncIterator[Any]:
        nonlocal calls
        calls += 1
        yield TextDelta("first")
        await anyio.sleep_forever()

    fake = FakeTime()
    with anyio.CancelScope() as scope:
        async for _ in retry(Function(slow), fake).stream(REQUEST):
            scope.cancel()
    assert scope.cancelled_caught
    assert calls == 1 and fake.waits == []


# -- settings ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings",
    [
        {"attempts": 0},
        {"attempts": -2},
        {"attempts": 2.5},
        {"attempts": True},
        {"attempts": "3"},
        {"base_delay": -1},
        {"base_delay": math.nan},
        {"base_delay": math.inf},
        {"base_delay": "1"},
        {"base_delay": True},
        {"max_delay": -0.1},
        {"max_delay": math.nan},
        {"max_delay": math.inf},
        {"max_delay": None},
        {"max_total": -5},
        {"max_total": math.nan},
        {"max_total": "forever"},
        {"sleep": 3},
        {"clock": "monotonic"},
    ],
    ids=lambda s: f"{next(iter(s))}={next(iter(s.values()))!r}",
)
def test_bad_settings_raise_usage_error(settings: dict[str, Any]) -> None:
    name = next(iter(settings))
    with pytest.raises(UsageError, match=name):
        Retry(Scripted([]), **settings)


def test_a_non_provider_is_refused() -> None:
    with pytest.raises(UsageError, match="provider"):
        Retry(object())  # type: ignore[arg-type]


def test_no_limit_on_the_total_and_zero_delays_are_allowed() -> None:
    r = Retry(Scripted([]), attempts=1, base_delay=0, max_delay=0, max_total=math.inf)
    assert (r.attempts, r.base_delay, r.max_delay, r.max_total) == (1, 0, 0, math.inf)
    assert "attempts=1" in repr(r)


# -- composed ------------------------------------------------------------------------------------------


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_a_react_run_over_a_real_step_gets_through_the_failures() -> None:
    fake = FakeTime()
    inner = Scripted([
        RateLimitError("slow", retry_after=2),
        tool_call("add", {"a": 2, "b": 3}),
        ServerError("down", status=503),
        ServerError("still down", status=503),
        "The sum is 5.",
    ])
    step = Step(retry(inner, fake), tools=[add])
    state = await ReAct(step).run(State().append(Role.USER, Text("What is 2 + 3?")))
    assert state.answer == "The sum is 5."
    assert [t.role for t in state.turns] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert state.turns[2].tool_results[0].content == "5"
    assert inner.used == 5 and inner.remaining == 0
    assert len(fake.waits) == 3 and fake.waits[0] == 2.0
    # Every attempt sent the request the step built, unchanged.
    assert inner.requests[0] == inner.requests[1]
    assert inner.requests[2] == inner.requests[3] == inner.requests[4]


async def test_a_step_turn_fails_with_the_last_error_when_attempts_run_out() -> None:
    fake = FakeTime()
    inner = Scripted([ServerError("1"), ServerError("2")])
    step = Step(retry(inner, fake, attempts=2))
    with pytest.raises(ServerError, match="2"):
        await step.turn(State().append(Role.USER, Text("hi")))
    assert inner.remaining == 0


async def test_retry_keeps_the_provider_contract() -> None:
    # The first call of each fresh provider fails with a 429, so every part of the check goes through a retry.
    await check_provider(lambda: Retry(Scripted([RateLimitError("slow", retry_after=0), *["Hello there."] * 12])))


async def test_closing_retry_closes_the_provider_it_wraps_and_a_plain_one_is_fine() -> None:
    from loop import Closable, has

    class Holding(Function):
        closed = 0

        async def aclose(self) -> None:
            self.closed += 1

    inner = Holding(lambda request: "ok")
    wrapped = Retry(inner)
    assert has(wrapped, Closable)
    await wrapped.aclose()
    await wrapped.aclose()
    assert inner.closed == 2
    await Retry(Function(lambda request: "ok")).aclose()  # nothing held: nothing to close, no error
