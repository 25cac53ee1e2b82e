"""``check_provider``: the shipped providers pass it, and broken providers are caught, each for its own fault."""

from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from loop import Delta, Finish, LoopError, Request, Text, TextDelta, UsageError
from loop.errors import ProviderError
from provider import Function, Scripted
from provider.testing import ConformanceError, check_provider

REPLY = "Hello there, how can I help?"
QUICK = 0.3  # bounds the waits of a check that is expected to fail; a hang is the fault being shown


async def scripted_stream(request: Request) -> AsyncIterator[Delta]:
    for word in REPLY.split(" "):
        yield TextDelta(word + " ")
        await anyio.lowlevel.checkpoint()
    yield Finish("stop")


async def replies_async(request: Request) -> str:
    await anyio.lowlevel.checkpoint()
    return REPLY


@pytest.mark.parametrize(
    "make",
    [
        lambda: Scripted([REPLY] * 10, chunk_size=4),
        lambda: Scripted([[Text(REPLY)]] * 10, chunk_size=1),
        lambda: Function(lambda request: REPLY, chunk_size=3),
        lambda: Function(replies_async),
        lambda: Function(scripted_stream),
    ],
    ids=["scripted", "scripted-one-char-chunks", "function-sync", "function-async", "function-generator"],
)
async def test_the_shipped_providers_conform(make: Any) -> None:
    assert await check_provider(make) is None


async def test_an_async_factory_is_awaited() -> None:
    async def make() -> Scripted:
        return Scripted([REPLY] * 10)

    assert await check_provider(make) is None


def test_conformance_error_is_a_loop_error() -> None:
    assert issubclass(ConformanceError, LoopError)


@pytest.mark.parametrize("timeout", [0, -1, "5"])
async def test_timeout_must_be_positive(timeout: Any) -> None:
    with pytest.raises(UsageError, match="timeout"):
        await check_provider(lambda: Scripted([REPLY] * 10), timeout=timeout)


# -- broken providers ----------------------------------------------------------------------------------


class AsyncDefStream:
    """Wrong: ``async def stream`` returns a coroutine, not an async iterator."""

    async def stream(self, request: Request) -> AsyncIterator[Delta]:
        return scripted_stream(request)


class ListStream:
    """Wrong: a plain list is not an async iterator."""

    def stream(self, request: Request) -> list[Delta]:
        return [TextDelta(REPLY)]


class Unclosable:
    """Wrong: an async iterator with no ``aclose``, so a consumer leaving early cannot release it."""

    def stream(self, request: Request) -> Any:
        class Deltas:
            def __init__(self) -> None:
                self.left = [TextDelta(REPLY)]

            def __aiter__(self) -> Any:
                return self

            async def __anext__(self) -> Delta:
                if not self.left:
                    raise StopAsyncIteration
                return self.left.pop()

        return Deltas()


class YieldsParts:
    """Wrong: yields a turn part instead of a delta."""

    async def stream(self, request: Request) -> AsyncIterator[Any]:
        yield Text(REPLY)


class MyTextDelta(TextDelta):
    pass


class YieldsSubclass:
    """Wrong: a subclass of ``TextDelta`` is not what ``Step`` accumulates."""

    async def stream(self, request: Request) -> AsyncIterator[Delta]:
        yield MyTextDelta(REPLY)


class Silent:
    """Wrong for this check: it never says anything."""

    async def stream(self, request: Request) -> AsyncIterator[Delta]:
        yield Finish("stop")


class Failing:
    async def stream(self, request: Request) -> AsyncIterator[Delta]:
        raise ProviderError("upstream said 500", status=500)
        yield  # pragma: no cover


class Hangs:
    async def stream(self, request: Request) -> AsyncIterator[Delta]:
        yield TextDelta("Hello")
        await anyio.sleep_forever()


class HoldsSlotPastClose:
    """Wrong: the connection slot is given back only when the stream runs to its end, so closing it early
    leaks the slot and the next request waits forever."""

    def __init__(self) -> None:
        self._slot = anyio.Semaphore(1)

    async def stream(self, request: Request) -> AsyncIterator[Delta]:
        await self._slot.acquire()
        yield TextDelta("Hello")
        yield TextDelta(" there")
        self._slot.release()


class ConvertsCancellation:
    """Wrong: turns the consumer's cancellation into a provider failure."""

    async def stream(self, request: Request) -> AsyncIterator[Delta]:
        try:
            yield TextDelta("Hello")
            await anyio.lowlevel.checkpoint()  # waiting for the next chunk
            yield TextDelta(" there")
        except anyio.get_cancelled_exc_class() as exc:
            raise ProviderError("the stream was interrupted") from exc


class GoesOnAfterClose:
    """Wrong: an iterator whose ``aclose`` does nothing."""

    def __init__(self) -> None:
        self._left = [TextDelta("Hello"), TextDelta(" there")]

    def stream(self, request: Request) -> "GoesOnAfterClose":
        return GoesOnAfterClose()

    def __aiter__(self) -> "GoesOnAfterClose":
        return self

    async def __anext__(self) -> Delta:
        if not self._left:
            raise StopAsyncIteration
        return self._left.pop(0)

    async def aclose(self) -> None:
        pass


class OneAtATime:
    """Wrong: shares per-stream state, so a second concurrent stream fails."""

    def __init__(self) -> None:
        self._busy = False

    async def stream(self, request: Request) -> AsyncIterator[Delta]:
        if self._busy:
            raise ProviderError("a response is already streaming")
        self._busy = True
        try:
            yield TextDelta("Hello")
            await anyio.lowlevel.checkpoint()
            yield TextDelta(" there")
        finally:
            self._busy = False


BROKEN = [
    (AsyncDefStream, "streaming one response: stream\\(request\\) returned a coroutine"),
    (ListStream, "must return an async iterator of deltas, got \\["),
    (Unclosable, "cannot be closed \\(no aclose\\(\\)\\); a provider's stream is a loop.DeltaStream"),
    (YieldsParts, "yielded Text\\(text='Hello.*which is not a loop delta"),
    (YieldsSubclass, "yielded MyTextDelta"),
    (Silent, "the response carried no text"),
    (Failing, "the stream raised ProviderError\\('upstream said 500'\\)"),
    (Hangs, "streaming one response: the stream did not end within 0.3 seconds"),
    (HoldsSlotPastClose, "closing a stream mid-way, then streaming again .* did not end within 0.3 seconds"),
    (ConvertsCancellation, "cancelling a consumer mid-stream: the stream raised ProviderError.*instead of "
                           "letting the cancellation through"),
    (GoesOnAfterClose, "the stream went on after aclose\\(\\), yielding TextDelta\\(text=' there', choice=0\\)"),
    (OneAtATime, "stream \\d+ of 10 running at once: the stream raised ProviderError"),
    (object, "has no stream\\(request\\) method"),
]


@pytest.mark.parametrize(("broken", "message"), BROKEN, ids=[broken.__name__ for broken, _ in BROKEN])
async def test_a_broken_provider_is_caught(broken: Any, message: str) -> None:
    with anyio.fail_after(10):
        with pytest.raises(ConformanceError, match=message):
            await check_provider(broken, timeout=QUICK)


async def test_a_script_too_short_for_the_check_is_reported() -> None:
    with pytest.raises(ConformanceError, match="ran out of replies") as caught:
        await check_provider(lambda: Scripted([REPLY] * 9))
    assert "running at once" in str(caught.value)
    assert isinstance(caught.value.__cause__, ProviderError)
