"""Sync tools: they run in worker threads, see the caller's context, and are abandoned when cancelled."""

import asyncio
import importlib.metadata
import threading
import time
from contextvars import ContextVar
from typing import Any

import anyio
import pytest
from packaging.requirements import Requirement

from loop import Role, State, Step, Text, ToolResult, TurnCompleted, tool
from loop._threads import THREAD_LIMIT, _Call, _WorkerThreads
from provider import Scripted, tool_call
from tests.loop.one_call import run_one

START = State().append(Role.USER, Text("go"))
REQUEST = ContextVar("REQUEST", default="unset")


def trio_unusable() -> str | None:
    """Why anyio cannot run on trio here, or ``None`` if it can."""
    try:
        version = importlib.metadata.version("trio")
    except importlib.metadata.PackageNotFoundError:
        return "trio is not installed"
    for line in importlib.metadata.requires("anyio") or ():
        needed = Requirement(line)
        if needed.name == "trio" and not needed.specifier.contains(version):
            anyio_version = importlib.metadata.version("anyio")
            return f"trio {version} is installed; anyio {anyio_version} needs trio{needed.specifier}"
    return None


TRIO_UNUSABLE = trio_unusable()
on_trio = pytest.mark.skipif(TRIO_UNUSABLE is not None, reason=TRIO_UNUSABLE or "")


async def cancel_at_tool_start(step: Step, started: threading.Event) -> tuple[list[State], ToolResult]:
    """Run ``step.turn(START)``, cancel it once its tool sets ``started``, and return what it returned and
    published."""
    returned: list[State] = []
    scope = anyio.CancelScope()

    async def run() -> None:
        with scope:
            returned.append(await step.turn(START))

    with step.events.subscribe(buffer=None) as watch, anyio.fail_after(2):
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            while not started.is_set():  # (a ToolStarted event comes before the call reaches its thread)
                await anyio.sleep(0.001)
            scope.cancel()
        turns = [e.turn for e in watch.drain() if isinstance(e, TurnCompleted)]
    (result,) = turns[-1].tool_results
    return returned, result


async def test_a_blocking_sync_tool_runs_off_the_loop_and_leaves_it_free() -> None:
    release = threading.Event()
    loop_thread = threading.get_ident()

    @tool
    def waits() -> str:
        released = release.wait(5)  # only the event loop can set it
        return f"{released} {threading.get_ident() != loop_thread}"

    async def release_soon() -> None:
        await anyio.sleep(0.01)
        release.set()

    async with anyio.create_task_group() as group:
        group.start_soon(release_soon)
        result = await run_one(waits)
    assert (result.content, result.is_error) == ("True True", False)


async def test_the_callers_context_variables_are_visible_in_the_tool_and_changes_stay_there() -> None:
    @tool
    def read_and_change(n: int) -> str:
        seen = REQUEST.get()
        REQUEST.set(f"changed by call {n}")
        return seen

    REQUEST.set("request 7")
    calls = [tool_call("read_and_change", {"n": n}, id=f"c{n}") for n in range(2)]
    state = await Step(Scripted([calls]), tools=[read_and_change]).turn(START)
    assert [r.content for r in state[-1].tool_results] == ["request 7", "request 7"]
    assert REQUEST.get() == "request 7"


async def test_the_tool_runs_outside_any_async_library_as_in_anyios_threads() -> None:
    sniffio = pytest.importorskip("sniffio")

    @tool
    def library() -> str:
        try:
            return sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            return "none"

    assert (await run_one(library)).content == "none"


async def test_exceptions_keep_their_type_and_become_error_results() -> None:
    class Refused(Exception):
        pass

    @tool
    def refuse(why: str) -> str:
        raise Refused(why)

    @tool
    def stops() -> str:
        raise StopIteration

    with pytest.raises(Refused, match="^no$"):
        await refuse.call({"why": "no"})
    with pytest.raises(RuntimeError, match="StopIteration"):
        await stops.call({})
    result = await run_one(refuse, {"why": "no"})
    assert result.is_error and result.content == "error: the tool raised Refused: no"


async def test_cancelling_the_turn_abandons_a_blocked_tool_at_once() -> None:
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    @tool
    def blocks() -> str:
        started.set()
        release.wait(5)
        finished.set()
        return "late"

    step = Step(Scripted([[tool_call("blocks", id="b")]]), tools=[blocks])
    try:
        returned, result = await cancel_at_tool_start(step, started)
        assert not finished.is_set()  # the turn did not wait for the thread
    finally:
        release.set()
    assert returned == []
    assert result.call_id == "b" and result.is_error and result.content.startswith("error: cancelled")
    assert finished.wait(5)  # the abandoned thread still ran to its end
    assert (await run_one(tool(lambda: "after", name="after"))).content == "after"


async def test_many_concurrent_calls_all_answer_in_call_order_within_the_thread_limit() -> None:
    lock = threading.Lock()
    running = peak = 0

    @tool
    def double(n: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.005)
        with lock:
            running -= 1
        return 2 * n

    count = 2 * THREAD_LIMIT + 5
    calls = [tool_call("double", {"n": n}, id=f"c{n}") for n in range(count)]
    with anyio.fail_after(10):
        state = await Step(Scripted([calls]), tools=[double]).turn(START)
    assert [(r.content, r.is_error) for r in state[-1].tool_results] == [(str(2 * n), False) for n in range(count)]
    assert 1 < peak <= THREAD_LIMIT


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the test drives asyncio's own loop
async def test_a_call_waits_for_a_place_and_an_abandoned_one_gives_its_place_up() -> None:
    workers = _WorkerThreads(limit=1)
    loop = asyncio.get_running_loop()
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []
    results: dict[str, Any] = {}

    def hold() -> str:
        started.set()
        release.wait(5)
        return "held"

    def note(tag: str) -> str:
        ran.append(tag)
        return tag

    async def run(key: str, fn: Any, kwargs: dict[str, Any]) -> None:
        results[key] = await workers.run(loop, fn, kwargs)

    try:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                group.start_soon(run, "hold", hold, {})
                await anyio.to_thread.run_sync(started.wait, 5)
                with anyio.move_on_after(0.02):  # waits behind "hold", then gives up
                    await workers.run(loop, note, {"tag": "given up"})
                group.start_soon(run, "queued", note, {"tag": "queued"})
                await anyio.sleep(0.02)
                assert ran == []  # the one place is taken
                release.set()
            assert results == {"hold": "held", "queued": "queued"} and ran == ["queued"]

            release.clear()
            started.clear()
            async with anyio.create_task_group() as group:
                group.start_soon(run, "abandoned", hold, {})
                await anyio.to_thread.run_sync(started.wait, 5)
                group.cancel_scope.cancel()  # while "hold" runs, so its thread is abandoned
            assert "abandoned" not in results
            assert await workers.run(loop, note, {"tag": "beside it"}) == "beside it"
    finally:
        release.set()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the test drives asyncio's own loop
async def test_a_call_that_finds_no_thread_fails_and_frees_its_place(monkeypatch: pytest.MonkeyPatch) -> None:
    workers = _WorkerThreads(limit=1)
    loop = asyncio.get_running_loop()

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as patched:
        patched.setattr(threading.Thread, "start", refuse)
        with pytest.raises(RuntimeError, match="can't start new thread"):
            await workers.run(loop, str, {})
    with anyio.fail_after(5):
        assert await workers.run(loop, str, {"object": 7}) == "7"


async def test_an_outcome_for_a_closed_loop_is_dropped() -> None:
    other = asyncio.new_event_loop()
    call = _Call(other, str, {})
    other.close()
    call.report("value", None)  # nobody is waiting: no error


def test_calls_abandoned_when_their_loop_ends_do_not_disturb_the_next_loop() -> None:
    release = threading.Event()

    @tool(timeout=0.05)
    def outlives() -> str:
        release.wait(5)
        return "late"

    @tool
    def quick() -> str:
        return "quick"

    try:
        first = anyio.run(run_one, outlives)  # the loop closes while the tool's thread still blocks
    finally:
        release.set()
    assert first.is_error and "timed out after 0.05 seconds" in first.content
    assert anyio.run(run_one, quick).content == "quick"


@on_trio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_on_trio_sync_tools_run_in_anyios_threads(anyio_backend: str) -> None:
    loop_thread = threading.get_ident()
    started, release = threading.Event(), threading.Event()

    @tool
    def where() -> str:
        return f"{threading.get_ident() != loop_thread} {REQUEST.get()}"

    @tool
    def refuse() -> str:
        raise KeyError("no")

    @tool
    def blocks() -> str:
        started.set()
        release.wait(5)
        return "late"

    REQUEST.set("on trio")
    assert (await run_one(where)).content == "True on trio"
    with pytest.raises(KeyError):
        await refuse.call({})
    try:
        returned, result = await cancel_at_tool_start(Step(Scripted([[tool_call("blocks")]]), tools=[blocks]), started)
    finally:
        release.set()
    assert returned == [] and result.content.startswith("error: cancelled")
