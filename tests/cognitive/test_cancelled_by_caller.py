"""The caller's cancellation is never swallowed: Ctrl-C, ``task.cancel()``, ``asyncio.wait_for`` and a cancelled
scope, during a tool call, during the model's stream and during a verifier, each stop the run, leave every open
call answered "cancelled" in what the main line recorded, and raise to the caller."""

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from cognitive import Pattern, ReAct, WithVerification
from loop import CANCELLED, Finish, Request, Role, State, Step, Text, TextDelta, main_line, tool
from provider import Function, tool_call
from verifier import FunctionVerifier, passed

ROOT = Path(__file__).resolve().parents[2]
START = State().append(Role.USER, Text("go"))


class Run:
    """An agent whose run stops at a point that waits until cancelled: in a tool, in the model's stream or in a
    verifier. ``started`` is set once it waits there; ``recorded`` is what its main line recorded."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.started = anyio.Event()
        self.recorded: list[State] = []
        self.model_calls = 0

    def agent(self) -> Pattern:
        started = self.started

        @tool
        async def slow(x: int) -> int:
            """Take long."""
            started.set()
            await anyio.sleep(60)
            return x

        async def model(request: Request) -> AsyncIterator[Any]:
            self.model_calls += 1
            if self.where == "stream":
                yield TextDelta("Thinking")
                started.set()
                await anyio.sleep(60)
            if self.where == "tool" and request.turns[-1].role is Role.USER:
                async for delta in Function(lambda r: tool_call("slow", {"x": 1})).stream(request):
                    yield delta
                return
            yield TextDelta("done")
            yield Finish("stop")

        async def hangs(state: State) -> Any:
            started.set()
            await anyio.sleep(60)
            return passed()

        step = Step(Function(model), tools=[slow])
        react = ReAct(step)
        if self.where == "verifier":
            return WithVerification(react, step, verifiers=[FunctionVerifier(hangs, name="slow check")])
        return react

    async def record(self, state: State) -> None:
        self.recorded.append(state)

    async def run(self) -> State:
        with main_line(recorder=self.record):
            return await self.agent().run(START)

    def check_stopped(self) -> None:
        assert self.model_calls == 1, "the model was not called again after the cancellation"
        if self.where == "tool":
            last = self.recorded[-1].last
            assert last is not None and last.role is Role.TOOL
            assert [r.content for r in last.tool_results] == [f"error: {CANCELLED}"]
        for state in self.recorded:
            assert not state.pending_calls or state.last is not None and state.last.role is Role.ASSISTANT


WHERE = ["tool", "stream", "verifier"]


@pytest.mark.parametrize("where", WHERE)
async def test_a_cancelled_scope_stops_the_run_and_raises(where: str) -> None:
    run = Run(where)
    returned: list[State] = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            async def go() -> None:
                returned.append(await run.run())

            group.start_soon(go)
            await run.started.wait()
            group.cancel_scope.cancel()
    assert returned == []
    run.check_stopped()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # asyncio's own cancellation
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("how", ["task.cancel", "wait_for"])
async def test_asyncio_cancellation_stops_the_run_and_raises(where: str, how: str) -> None:
    run = Run(where)
    started = time.monotonic()
    if how == "task.cancel":
        task = asyncio.ensure_future(run.run())
        await run.started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(run.run(), 0.5)
    assert time.monotonic() - started < 5
    run.check_stopped()


PROGRAM = """
import anyio, sys
from cognitive import ReAct
from loop import Role, State, Step, Text, tool
from provider import Scripted, tool_call

@tool
async def slow(x: int) -> int:
    \"\"\"Take six seconds.\"\"\"
    print("tool started", flush=True)
    await anyio.sleep(6)
    return x

step = Step(Scripted([tool_call("slow", {"x": 1}), "done"]), tools=[slow])
state = anyio.run(ReAct(step).run, State().append(Role.USER, Text("go")), backend=sys.argv[1])
print("returned", state.answer, flush=True)
"""


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the program under test picks its own backend
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_ctrl_c_during_a_tool_call_stops_the_program(backend: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen([sys.executable, "-c", PROGRAM, backend], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        assert child.stdout is not None
        line = await anyio.to_thread.run_sync(child.stdout.readline)
        assert line.strip() == "tool started"
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = await anyio.to_thread.run_sync(lambda: child.communicate(timeout=20))
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert "returned" not in out, "the run went on and returned after Ctrl-C"
    assert child.returncode != 0 and "KeyboardInterrupt" in err
    assert time.monotonic() - sent < 5, "the program stopped at once, not after the tool's six seconds"
