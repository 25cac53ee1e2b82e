"""The ``cognitive_loop`` pytest plugin (``provider.testing``): its fixtures and the offline guard.

``pytest_plugins`` may not be set in a conftest below the root, but a test module may set it.
The guard tests run pytest in a subprocess: this session is itself guarded (the repository sets
``cognitive_loop_offline``), so an in-process run could not tell the inner guard from the outer one.
"""

import os
from collections.abc import Callable
from typing import Any

import pytest

from loop import (
    EventBus,
    Finish,
    Request,
    Role,
    State,
    Step,
    Text,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnCompleted,
    TurnStarted,
    UsageError,
    tool,
)
from provider import Function, Scripted, tool_call
from provider._http import is_loopback
from provider.testing import EventRecorder

pytest_plugins = ["pytester"]

ASYNC_INI = "[pytest]\nanyio_mode = auto\nfilterwarnings = error\n"
ASYNCIO_ONLY = """
import pytest

@pytest.fixture
def anyio_backend():
    return "asyncio"
"""
# Plugins the inner runs do not need; leaving them out keeps each run quick.
QUIET = ("-p", "no:hypothesispytest", "-p", "no:benchmark")


def test_the_plugin_is_registered_through_its_entry_point(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.hasplugin("cognitive_loop")


# -- async tests without anyio_mode ----------------------------------------------------------------------

PLAIN_INI = "[pytest]\nfilterwarnings = error\n"
FIXTURE_TESTS = """
from loop import Request


async def test_requests_a_fixture(scripted, anyio_backend_name):
    assert [d async for d in scripted("hi").stream(Request(()))]
    print("ran on", anyio_backend_name)


async def test_records_events(event_recorder, function_provider):
    pass


def test_sync_tests_are_untouched(scripted, request):
    assert "anyio_backend" not in request.fixturenames
    scripted("unused", allow_unused=True)
"""


def test_async_tests_requesting_the_fixtures_run_without_anyio_mode(pytester: pytest.Pytester) -> None:
    pytester.makeini(PLAIN_INI)
    pytester.makepyfile(test_fixtures=FIXTURE_TESTS)
    result = pytester.runpytest_inprocess(*QUIET, "-s")
    result.assert_outcomes(passed=5)  # the two async tests on asyncio and on trio (a test dependency)
    result.stdout.fnmatch_lines(["*ran on asyncio*", "*ran on trio*"])


def test_an_anyio_backend_fixture_picks_the_backend(pytester: pytest.Pytester) -> None:
    pytester.makeini(PLAIN_INI)
    pytester.makeconftest(ASYNCIO_ONLY)
    pytester.makepyfile(test_fixtures=FIXTURE_TESTS)
    result = pytester.runpytest_inprocess(*QUIET, "-s")
    result.assert_outcomes(passed=3)
    assert "ran on trio" not in result.stdout.str()


def test_other_async_tests_are_not_claimed(pytester: pytest.Pytester) -> None:
    pytester.makeini(PLAIN_INI)
    pytester.makepyfile(test_plain="async def test_uses_no_fixture_of_ours(tmp_path):\n    pass\n")
    result = pytester.runpytest_inprocess(*QUIET)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*async def functions are not natively supported*"])


def test_tests_already_marked_anyio_run_once_per_backend(pytester: pytest.Pytester) -> None:
    pytester.makeini(PLAIN_INI)
    pytester.makeconftest(ASYNCIO_ONLY)
    pytester.makepyfile(test_marked="""
import pytest

pytestmark = pytest.mark.anyio


async def test_module_marked(scripted):
    scripted("unused", allow_unused=True)


class TestClass:
    @pytest.mark.anyio
    async def test_marked_twice(self, scripted):
        scripted("unused", allow_unused=True)
""")
    result = pytester.runpytest_inprocess(*QUIET, "-v")
    result.assert_outcomes(passed=2)


# A stand-in for pytest-asyncio: the plugin named "asyncio" runs async tests marked asyncio, and every async test
# when asyncio_mode = auto.
OTHER_ASYNC_PLUGIN = """
import asyncio
import inspect

import pytest


def pytest_addoption(parser):
    parser.addini("asyncio_mode", default="strict", help="auto: run every async test")


class OtherAsyncPlugin:
    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem):
        auto = pyfuncitem.config.getini("asyncio_mode") == "auto"
        if inspect.iscoroutinefunction(pyfuncitem.obj) and (auto or pyfuncitem.get_closest_marker("asyncio")):
            asyncio.run(pyfuncitem.obj(**{n: pyfuncitem.funcargs[n] for n in pyfuncitem._fixtureinfo.argnames}))
            return True
        return None


def pytest_configure(config):
    config.addinivalue_line("markers", "asyncio: run by the other plugin")
    config.pluginmanager.register(OtherAsyncPlugin(), "asyncio")
"""

OTHER_PLUGIN_TESTS = """
import pytest


async def test_unmarked(scripted, request):
    scripted("unused", allow_unused=True)
    print("unmarked:", "anyio" if "anyio_backend" in request.fixturenames else "other")


@pytest.mark.asyncio
async def test_marked(scripted, request):
    scripted("unused", allow_unused=True)
    print("marked:", "anyio" if "anyio_backend" in request.fixturenames else "other")
"""


@pytest.mark.parametrize(("mode", "unmarked"), [("strict", "anyio"), ("auto", "other")])
def test_tests_another_async_plugin_claims_are_left_to_it(pytester: pytest.Pytester, mode: str,
                                                          unmarked: str) -> None:
    pytester.makeini(PLAIN_INI + f"asyncio_mode = {mode}\n")
    pytester.makeconftest(ASYNCIO_ONLY + OTHER_ASYNC_PLUGIN)
    pytester.makepyfile(test_other=OTHER_PLUGIN_TESTS)
    result = pytester.runpytest_inprocess(*QUIET, "-s")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"*unmarked: {unmarked}*", "*marked: other*"])


# -- scripted ------------------------------------------------------------------------------------------

SCRIPTED_TESTS = """
from loop import Request

async def drain(provider):
    return [d async for d in provider.stream(Request(()))]

async def test_leaves_two_unused(scripted):
    await drain(scripted("a", "b", "c"))

async def test_leaves_one_unused(scripted):
    scripted("a")

async def test_may_leave_some(scripted):
    scripted("a", "b", allow_unused=True)

async def test_uses_all(scripted):
    provider = scripted("a", "b", chunk_size=1)
    assert len(await drain(provider)) == 2 and len(await drain(provider)) == 2
"""


def test_scripted_fails_at_teardown_when_replies_are_left_unused(pytester: pytest.Pytester) -> None:
    pytester.makeini(ASYNC_INI)
    pytester.makeconftest(ASYNCIO_ONLY)
    pytester.makepyfile(test_scripted_fixture=SCRIPTED_TESTS)
    result = pytester.runpytest_inprocess(*QUIET)
    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines([
        "*ERROR at teardown of test_leaves_two_unused*",
        "*the scripted provider has 2 unused replies after 1: the agent stopped earlier*",
        "*ERROR at teardown of test_leaves_one_unused*",
        "*the scripted provider has 1 unused reply after 0*",
    ])
    assert "test_may_leave_some" not in result.stdout.str().split("short test summary")[-1]


async def test_scripted_makes_scripted_providers(scripted: Callable[..., Any]) -> None:
    provider = scripted("hello", chunk_size=2, allow_unused=False)
    assert isinstance(provider, Scripted)
    assert [d async for d in provider.stream(Request(()))] == [TextDelta("he"), TextDelta("ll"), TextDelta("o"),
                                                              Finish("stop")]


# -- function_provider and event_recorder --------------------------------------------------------------


async def test_function_provider_makes_function_providers(function_provider: Callable[..., Any]) -> None:
    provider = function_provider(lambda request: f"{len(request.turns)} turns", chunk_size=100)
    assert isinstance(provider, Function)
    state = await Step(provider).turn(State().append(Role.USER, Text("hi")))
    assert state.answer == "1 turns"


@tool
def lookup(word: str) -> str:
    """Look a word up."""
    return word.upper()


async def test_event_recorder_records_what_a_step_publishes(
    scripted: Callable[..., Any], event_recorder: Callable[..., Any]
) -> None:
    provider = scripted([tool_call("lookup", {"word": "ok"})], "Found it.", chunk_size=3)
    step = Step(provider, tools=[lookup])
    recorder = event_recorder(step)
    assert isinstance(recorder, EventRecorder) and recorder.events == []
    state = await step.turn(State().append(Role.USER, Text("look up ok")))
    state = await step.turn(state)
    assert recorder.text == "Found it."
    assert recorder.tools_called == ["lookup"]
    assert [t.role for t in recorder.turns] == [Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert recorder.turns == list(state.turns[1:])
    assert [e.index for e in recorder.of_type(TurnStarted)] == [1, 3]
    (finished,) = recorder.of_type(ToolFinished)
    assert finished.result.content == "OK"
    kinds = [type(e) for e in recorder.events]
    assert kinds.index(ToolStarted) < kinds.index(ToolFinished)
    assert recorder.of_type(TextDelta, Finish) == [e for e in recorder.events if type(e) in (TextDelta, Finish)]


async def test_event_recorder_takes_a_bus_and_sees_only_later_events(event_recorder: Callable[..., Any]) -> None:
    bus = EventBus()
    bus.publish("before")
    recorder = event_recorder(bus)
    bus.publish("after")
    step = Step(Scripted([]), events=bus)
    await step.submit(State(), Role.USER, Text("typed"))
    assert recorder.events[0] == "after"
    assert [t.text for t in recorder.turns] == ["typed"]
    assert recorder.of_type(TurnCompleted)[0].turn.role is Role.USER


def test_event_recorder_refuses_anything_else(event_recorder: Callable[..., Any]) -> None:
    with pytest.raises(UsageError, match="Step or an EventBus"):
        event_recorder("not a bus")


# -- no_model_calls ------------------------------------------------------------------------------------

# A tripwire under httpx: if a guard ever let a request through, the connection attempt is recorded and
# refused here, before any name lookup or packet. Loopback connections go through.
GUARD_CONFTEST = ASYNCIO_ONLY + """
import http.server
import threading

import httpcore
import pytest

ATTEMPTS = []


def _tripwire(real):
    def connect_tcp(self, host, port, *args, **kwargs):
        if host not in ("127.0.0.1", "localhost", "::1"):
            ATTEMPTS.append(host)
            raise OSError(f"tripwire: a connection to {host} was attempted")
        return real(self, host, port, *args, **kwargs)
    return connect_tcp


@pytest.fixture(autouse=True)
def tripwire(monkeypatch):
    ATTEMPTS.clear()
    monkeypatch.setattr(httpcore.SyncBackend, "connect_tcp", _tripwire(httpcore.SyncBackend.connect_tcp))
    monkeypatch.setattr(httpcore.AnyIOBackend, "connect_tcp", _tripwire(httpcore.AnyIOBackend.connect_tcp))
    return ATTEMPTS


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *args):
        pass


@pytest.fixture
def loopback():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
"""

GUARDED_TESTS = """
import os

import httpx
import pytest

from provider.testing import ModelCallBlocked


def test_a_sync_request_off_the_machine_is_refused(tripwire, {fixture}):
    with httpx.Client(trust_env=False) as client:
        with pytest.raises(ModelCallBlocked, match="http://model.invalid"):
            client.get("http://model.invalid/v1/models")
    assert tripwire == []


async def test_an_async_request_off_the_machine_is_refused(tripwire, {fixture}):
    async with httpx.AsyncClient(trust_env=False) as client:
        with pytest.raises(ModelCallBlocked, match="https://api.model.invalid"):
            await client.post("https://api.model.invalid/v1/chat/completions", json={{}})
    assert tripwire == []


def test_a_request_through_httpx2_is_refused_too({fixture}):
    # The openai SDK sends through httpx2 (installed with it); the guard covers it as well.
    httpx2 = pytest.importorskip("httpx2")
    with httpx2.Client(trust_env=False) as client:
        with pytest.raises(ModelCallBlocked, match="http://model.invalid"):
            client.get("http://model.invalid/v1/models")


async def test_loopback_still_works(loopback, {fixture}):
    with httpx.Client(trust_env=False) as client:
        assert client.get(loopback).text == "hello"
    async with httpx.AsyncClient(trust_env=False) as client:
        assert (await client.get(loopback)).text == "hello"


def test_model_keys_are_removed({fixture}):
    assert "OPENAI_API_KEY" not in os.environ and "ANTHROPIC_API_KEY" not in os.environ
    assert os.environ["UNRELATED_SETTING"] == "kept"
"""

UNGUARDED_TESTS = """
import os

import httpx
import pytest


def test_without_the_guard_the_request_reaches_the_tripwire(tripwire):
    with httpx.Client(trust_env=False) as client:
        with pytest.raises(OSError, match="tripwire"):
            client.get("http://model.invalid/v1/models")
    assert tripwire == ["model.invalid"]


def test_without_the_guard_the_keys_stay():
    assert os.environ["OPENAI_API_KEY"] == "sk-not-a-real-key"
"""


@pytest.fixture
def model_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-a-real-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-not-a-real-key")
    monkeypatch.setenv("UNRELATED_SETTING", "kept")


def test_no_model_calls_blocks_hosts_off_the_machine(pytester: pytest.Pytester, model_keys: None) -> None:
    pytester.makeini(ASYNC_INI)
    pytester.makeconftest(GUARD_CONFTEST)
    pytester.makepyfile(test_guarded=GUARDED_TESTS.format(fixture="no_model_calls"),
                        test_unguarded=UNGUARDED_TESTS)
    result = pytester.runpytest_subprocess(*QUIET)
    result.assert_outcomes(passed=7)


def test_the_ini_option_guards_every_test(pytester: pytest.Pytester, model_keys: None) -> None:
    pytester.makeini(ASYNC_INI + "cognitive_loop_offline = true\n")
    pytester.makeconftest(GUARD_CONFTEST)
    pytester.makepyfile(test_guarded=GUARDED_TESTS.format(fixture="request"))
    result = pytester.runpytest_subprocess(*QUIET)
    result.assert_outcomes(passed=5)


def test_this_session_runs_guarded() -> None:
    assert "OPENAI_API_KEY" not in os.environ and "ANTHROPIC_API_KEY" not in os.environ


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("localhost", True), ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True),
     ("model.invalid", False), ("10.0.0.1", False), ("0.0.0.0", False), ("localhost.example", False)],
)
def test_only_loopback_hosts_count_as_local(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
