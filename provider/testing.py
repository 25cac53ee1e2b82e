"""A pytest plugin for testing agents built on this framework (installed as the ``cognitive_loop`` plugin),
and ``check_provider``, a conformance check any ``loop.Provider`` implementation can run.

Fixtures:

- ``scripted(*replies)`` — a ``Scripted`` provider; the test fails at teardown if replies were left unused,
  since that means the agent stopped earlier than the script expected (``allow_unused=True`` to permit it).
- ``function_provider(fn)`` — a ``Function`` provider.
- ``event_recorder(step_or_bus)`` — an ``EventRecorder`` capturing every event published from then on.
- ``no_model_calls`` — any HTTP request to a host other than loopback fails loudly, and the model API keys
  (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ...) are removed from the environment. Set
  ``cognitive_loop_offline = true`` in the pytest ini options to apply it to every test.

An ``async def`` test requesting one of these fixtures by name runs on anyio, as if marked ``@pytest.mark.anyio``,
with no ``anyio_mode`` needed; unless an async plugin runs it already: it is marked ``anyio``, ``asyncio`` or
``trio`` (itself, its class or module), or ``anyio_mode``/``asyncio_mode`` is ``auto`` or ``trio_mode`` is on.

Conformance (in the spirit of ``trio.testing.check_one_way_stream``):

- ``await check_provider(make_provider)`` — raises ``ConformanceError`` naming the first way the providers
  ``make_provider`` makes break the ``loop.Provider`` contract.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest

from loop import (
    EventBus,
    Finish,
    LoopError,
    Provider,
    ReasoningDelta,
    Request,
    Role,
    State,
    Step,
    Subscription,
    Text,
    TextDelta,
    ToolCallDelta,
    ToolStarted,
    Turn,
    TurnCompleted,
    UsageDelta,
    UsageError,
    positive_number,
)
from loop.errors import ConformanceError
from provider._http import is_loopback
from provider._offline import Function, ReplyFunction, Scripted
from provider._replies import Reply

MODEL_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")


class ModelCallBlocked(LoopError):
    """Raised when a test tries to reach a host off this machine while real model calls are blocked."""


class EventRecorder:
    """Everything a bus published since the recorder subscribed, with helpers for common assertions."""

    def __init__(self, subscription: Subscription) -> None:
        self._subscription = subscription
        self._events: list[Any] = []

    @property
    def events(self) -> list[Any]:
        """Every event so far, oldest first."""
        self._events.extend(self._subscription.drain())
        return list(self._events)

    def of_type(self, *types: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, types)]

    @property
    def text(self) -> str:
        """All streamed text, joined."""
        return "".join(e.text for e in self.of_type(TextDelta))

    @property
    def tools_called(self) -> list[str]:
        """Names of the tools started, in order."""
        return [e.call.name for e in self.of_type(ToolStarted)]

    @property
    def turns(self) -> list[Turn]:
        """Turns completed (model turns, tool turns and submitted turns), in order."""
        return [e.turn for e in self.of_type(TurnCompleted)]

    def close(self) -> None:
        self._subscription.close()


_FIXTURES = frozenset({"scripted", "function_provider", "event_recorder", "no_model_calls"})
# Async test plugins: each one's name (also its mark's) and the setting by which it runs every async test.
_ASYNC_PLUGINS = (("anyio", "anyio_mode", "auto"), ("asyncio", "asyncio_mode", "auto"), ("trio", "trio_mode", True))


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(collector: pytest.Module | pytest.Class, name: str, obj: object) -> Any:
    # A wrapper runs before every plain implementation, anyio's included, which then sees the mark.
    if (inspect.iscoroutinefunction(obj) and collector.istestfunction(obj, name)
            and _FIXTURES.intersection(inspect.signature(obj).parameters) and not _claimed(collector, obj)):
        pytest.mark.anyio(obj)
    return (yield)


def _claimed(collector: pytest.Module | pytest.Class, obj: object) -> bool:
    """Whether an async plugin runs this test already (it bears the plugin's mark, on itself, its class or module, or
    the plugin runs every async test), or there is no anyio to hand it to."""
    config = collector.config
    if not config.pluginmanager.has_plugin("anyio"):
        return True
    own = {m.name for m in getattr(obj, "pytestmark", ())}
    for plugin, setting, on in _ASYNC_PLUGINS:
        if plugin in own or collector.get_closest_marker(plugin) is not None:
            return True
        if config.pluginmanager.has_plugin(plugin) and on in (config.getoption(setting, None), _ini(config, setting)):
            return True
    return False


def _ini(config: pytest.Config, name: str) -> Any:
    try:
        return config.getini(name)
    except ValueError:  # no plugin registered the setting
        return None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "cognitive_loop_offline",
        type="bool",
        default=False,
        help="block real model calls (any non-loopback HTTP request) in every test",
    )


@pytest.fixture
def scripted() -> Iterator[Callable[..., Scripted]]:
    made: list[tuple[Scripted, bool]] = []

    def make(*replies: Reply, allow_unused: bool = False, chunk_size: int = 16) -> Scripted:
        provider = Scripted(replies, chunk_size=chunk_size)
        made.append((provider, allow_unused))
        return provider

    yield make
    for provider, allow_unused in made:
        if provider.remaining and not allow_unused:
            pytest.fail(
                f"the scripted provider has {provider.remaining} unused repl"
                f"{'y' if provider.remaining == 1 else 'ies'} after {provider.used}: the agent stopped earlier "
                "than the script expected (pass allow_unused=True if that is intended)"
            )


@pytest.fixture
def function_provider() -> Callable[[ReplyFunction], Function]:
    def make(fn: ReplyFunction, *, chunk_size: int = 16) -> Function:
        return Function(fn, chunk_size=chunk_size)

    return make


@pytest.fixture
def event_recorder() -> Iterator[Callable[[Step | EventBus], EventRecorder]]:
    recorders: list[EventRecorder] = []

    def record(source: Step | EventBus) -> EventRecorder:
        bus = source.events if isinstance(source, Step) else source
        if not isinstance(bus, EventBus):
            raise UsageError(f"event_recorder takes a Step or an EventBus, got {source!r}")
        recorder = EventRecorder(bus.subscribe(buffer=None))
        recorders.append(recorder)
        return recorder

    yield record
    for recorder in recorders:
        recorder.close()


def _refuse(request: httpx.Request) -> None:
    if not is_loopback(request.url.host):
        raise ModelCallBlocked(
            f"a test tried to reach {request.url.scheme}://{request.url.host}: real model and network calls are "
            "blocked in tests; use the scripted or function_provider fixtures, or a server on 127.0.0.1"
        )


@pytest.fixture
def no_model_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in MODEL_ENV:
        monkeypatch.delenv(name, raising=False)
    sync_send = httpx.HTTPTransport.handle_request
    async_send = httpx.AsyncHTTPTransport.handle_async_request

    def guarded_sync(self: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
        _refuse(request)
        return sync_send(self, request)

    async def guarded_async(self: httpx.AsyncHTTPTransport, request: httpx.Request) -> httpx.Response:
        _refuse(request)
        return await async_send(self, request)

    monkeypatch.setattr(httpx.HTTPTransport, "handle_request", guarded_sync)
    monkeypatch.setattr(httpx.AsyncHTTPTransport, "handle_async_request", guarded_async)


@pytest.fixture(autouse=True)
def _cognitive_loop_offline(request: pytest.FixtureRequest) -> None:
    if request.config.getini("cognitive_loop_offline"):
        request.getfixturevalue("no_model_calls")


# -- conformance ---------------------------------------------------------------------------------------

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
    if not callable(getattr(provider, "stream", None)):
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
