"""The ``cognitive_loop`` pytest plugin: its fixtures (``scripted``, ``function_provider``, ``event_recorder``,
``no_model_calls``), the ``cognitive_loop_offline`` setting, and async fixture tests run on anyio. Documented in
``provider.testing``, which can be imported without pytest; this module is what pytest loads."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from loop import EventBus, Step, UsageError
from provider._http import is_loopback
from provider._offline import Function, ReplyFunction, Scripted
from provider._replies import Reply
from provider.testing import MODEL_ENV, EventRecorder, ModelCallBlocked

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


def _refuse(request: Any) -> None:
    if not is_loopback(request.url.host):
        raise ModelCallBlocked(
            f"a test tried to reach {request.url.scheme}://{request.url.host}: real model and network calls are "
            "blocked in tests; use the scripted or function_provider fixtures, or a server on 127.0.0.1"
        )


@pytest.fixture
def no_model_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in MODEL_ENV:
        monkeypatch.delenv(name, raising=False)
    # httpx, and httpx2 where installed: the openai SDK (and the frameworks over it) sends through httpx2.
    clients = [httpx] + [importlib.import_module(n) for n in ("httpx2",) if importlib.util.find_spec(n) is not None]
    for client in clients:
        _guard(monkeypatch, client.HTTPTransport, client.AsyncHTTPTransport)


def _guard(monkeypatch: pytest.MonkeyPatch, sync_transport: Any, async_transport: Any) -> None:
    sync_send = sync_transport.handle_request
    async_send = async_transport.handle_async_request

    def guarded_sync(self: Any, request: Any) -> Any:
        _refuse(request)
        return sync_send(self, request)

    async def guarded_async(self: Any, request: Any) -> Any:
        _refuse(request)
        return await async_send(self, request)

    monkeypatch.setattr(sync_transport, "handle_request", guarded_sync)
    monkeypatch.setattr(async_transport, "handle_async_request", guarded_async)


@pytest.fixture(autouse=True)
def _cognitive_loop_offline(request: pytest.FixtureRequest) -> None:
    if request.config.getini("cognitive_loop_offline"):
        request.getfixturevalue("no_model_calls")

