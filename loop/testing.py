"""Conformance checks: ``check_executor`` for any ``loop.Executor`` implementation, ``check_tool`` for a tool.

In the spirit of ``trio.testing.check_one_way_stream``: ``await check_executor(make)`` builds executors with
``make(provider, tools)`` (a ``Step``, a ``Step.derive(...)``, a ``TurnMiddleware`` around one, what a session
hands a pattern factory) and raises ``ConformanceError`` naming the first rule of the executor contract one of
them breaks. The provider and tools are the check's own: a model that answers by the last turn, an ``echo``
tool and a ``block`` tool that waits until it is cancelled.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import cast

import anyio

from loop._checktool import check_tool
from loop._events import TurnCompleted
from loop._executor import Executor, has
from loop._parts import Role, Text, ToolCall
from loop._pipeline import CANCELLED
from loop._protocols import Delta, Finish, Options, Provider, Request, TextDelta, ToolCallDelta
from loop._scope import main_line
from loop._state import State
from loop._tools import Tool, tool
from loop.errors import ConformanceError

__all__ = ["ConformanceError", "check_executor", "check_tool"]

MakeExecutor = Callable[[Provider, Sequence[Tool]], "Executor | Awaitable[Executor]"]


class _Model:
    """Answers by the last turn: a user's "call NAME" calls tool NAME with ``{"text": "x"}``, tool results are
    answered "done: RESULT", anything else "hello". Keeps every request."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    async def stream(self, request: Request) -> AsyncIterator[Delta]:
        self.requests.append(request)
        last = request.turns[-1]
        text = last.text
        if last.role is Role.USER and text.startswith("call "):
            yield ToolCallDelta(0, id=f"c{len(self.requests)}", name=text[5:], arguments_fragment='{"text": "x"}')
            yield Finish("tool_calls")
            return
        if last.role is Role.TOOL:
            yield TextDelta("done: " + "; ".join(r.content for r in last.tool_results))
        else:
            yield TextDelta("hello")
        yield Finish("stop")


def _tools(started: anyio.Event) -> tuple[Tool, ...]:
    @tool
    async def echo(text: str) -> str:
        """Echo the text."""
        return f"echo {text}"

    @tool
    async def block(text: str) -> str:
        """Wait until cancelled."""
        started.set()
        await anyio.sleep_forever()
        return text

    return echo, block


def _ask(text: str) -> State:
    return State().append(Role.USER, Text(text))


def _fail(rule: str, executor: object) -> ConformanceError:
    return ConformanceError(f"{executor!r}: {rule}")


async def _make(make: MakeExecutor, model: _Model, tools: Sequence[Tool]) -> Executor:
    made = make(cast(Provider, model), tools)
    if inspect.isawaitable(made):
        made = await made
    if not has(made, Executor):
        missing = sorted(m for m in ("turn", "submit", "sample", "derive", "view", "options", "transforms",
                                      "pipeline", "events", "samples_in_one_request") if m not in dir(made))
        raise ConformanceError(f"{made!r} is not a loop.Executor: it has no {', '.join(missing)}")
    return made


async def check_executor(make: MakeExecutor) -> None:
    """Check the executors ``make(provider, tools)`` builds against the executor contract; ``ConformanceError``
    names the first rule broken. ``make`` may be async. It is called once per rule, with a fresh provider."""
    checks: list[Callable[[MakeExecutor], Awaitable[None]]] = [
        _turn, _tools_run, _options, _submit, _sample, _derive, _view_and_pipeline, _recorded, _cancelled]
    for check in checks:
        await check(make)


async def _turn(make: MakeExecutor) -> None:
    model = _Model()
    ex = await _make(make, model, _tools(anyio.Event()))
    start = _ask("hi")
    with ex.events.subscribe(buffer=None) as events:
        done = await ex.turn(start)
        seen = events.drain()
    if not isinstance(done, State) or len(done) != 2 or done.answer != "hello" or done.prefix(1) != start:
        raise _fail(f"turn(state) must return the state with the model's answer appended; got {done!r}", ex)
    if not any(isinstance(e, TurnCompleted) and e.turn == done.last for e in seen):
        raise _fail("turn must publish TurnCompleted for the answer on executor.events", ex)


async def _tools_run(make: MakeExecutor) -> None:
    model = _Model()
    ex = await _make(make, model, _tools(anyio.Event()))
    done = await ex.turn(_ask("call echo"))
    roles = [t.role for t in done]
    if roles != [Role.USER, Role.ASSISTANT, Role.TOOL]:
        raise _fail(f"a turn that calls a tool must append the call and one TOOL turn of results; got {roles}", ex)
    (result,) = done.last.tool_results if done.last is not None else (None,)
    if result is None or result.content != "echo x" or result.is_error:
        raise _fail(f"the echo tool's result must be 'echo x'; got {result!r}", ex)
    unknown = await ex.turn(_ask("call nowhere"))
    results = unknown.last.tool_results if unknown.last is not None else ()
    if len(results) != 1 or not results[0].is_error:
        raise _fail(f"a call to an unknown tool must get an error result; got {results!r}", ex)


async def _options(make: MakeExecutor) -> None:
    model = _Model()
    ex = await _make(make, model, _tools(anyio.Event()))
    await ex.turn(_ask("hi"), Options(temperature=0.25, max_tokens=9))
    got = model.requests[-1].options
    if got.temperature != 0.25 or got.max_tokens != 9:
        raise _fail(f"turn(state, options) must pass the options to the provider; the request had {got!r}", ex)
    await ex.turn(_ask("call echo"), Options(tool_choice="none"))
    if model.requests[-1].options.tool_choice != "none":
        raise _fail("turn(state, Options(tool_choice='none')) must reach the provider", ex)


async def _submit(make: MakeExecutor) -> None:
    ex = await _make(make, _Model(), _tools(anyio.Event()))
    start = _ask("hi")
    with ex.events.subscribe(buffer=None) as events:
        done = await ex.submit(start, Role.USER, Text("again"), meta={"k": 1}, name="ada")
        seen = events.drain()
    last = done.last
    if len(done) != 2 or last is None or last.role is not Role.USER or last.text != "again" or last.name != "ada" \
            or last.meta.get("k") != 1:
        raise _fail(f"submit(state, role, *parts, meta=, name=) must append that turn; got {last!r}", ex)
    if not any(isinstance(e, TurnCompleted) and e.turn == last for e in seen):
        raise _fail("submit must publish the turn it appends (TurnCompleted)", ex)


async def _sample(make: MakeExecutor) -> None:
    ex = await _make(make, _Model(), _tools(anyio.Event()))
    start = _ask("hi")
    samples = await ex.sample(start, 3)
    if len(samples) != 3 or any(s.prefix(1) != start or s.answer != "hello" for s in samples):
        raise _fail(f"sample(state, 3) must return 3 states, each the state with one answer; got {samples!r}", ex)
    if not isinstance(ex.samples_in_one_request, bool):
        raise _fail("samples_in_one_request must be True or False", ex)


async def _derive(make: MakeExecutor) -> None:
    model = _Model()
    ex = await _make(make, model, _tools(anyio.Event()))
    seen_views: list[int] = []

    def counting(state: State) -> State:
        seen_views.append(len(state))
        return state

    derived = ex.derive(options=Options(max_tokens=7), tools=("echo",), transforms=(*ex.transforms, counting))
    if not has(derived, Executor):
        raise _fail(f"derive(...) must return a loop.Executor; got {derived!r}", ex)
    with ex.events.subscribe(buffer=None) as events:
        await derived.turn(_ask("hi"))
        seen = events.drain()
    request = model.requests[-1]
    if request.options.max_tokens != 7:
        raise _fail("derive(options=) must lay the options over the executor's own", ex)
    if [t.name for t in request.tools] != ["echo"]:
        raise _fail(f"derive(tools=('echo',)) must offer only echo; the request offered {[t.name for t in request.tools]}",
                    ex)
    if not seen_views:
        raise _fail("derive(transforms=) must show the model the view those transforms make", ex)
    if not any(isinstance(e, TurnCompleted) for e in seen):
        raise _fail("a derived executor must publish on the same event bus", ex)
    other = _Model()
    await ex.derive(provider=cast(Provider, other)).turn(_ask("hi"))
    if len(other.requests) != 1:
        raise _fail("derive(provider=) must send the turns to that provider", ex)


async def _view_and_pipeline(make: MakeExecutor) -> None:
    ex = await _make(make, _Model(), _tools(anyio.Event()))
    start = _ask("hi")
    viewed = await ex.view(start)
    if not isinstance(viewed, State):
        raise _fail(f"view(state) must return a State; got {viewed!r}", ex)
    if not isinstance(ex.options, Options) or not isinstance(ex.transforms, tuple):
        raise _fail("options must be loop.Options and transforms a tuple", ex)
    results = await ex.pipeline.run([ToolCall("p1", "echo", '{"text": "y"}')])
    if [r.content for r in results] != ["echo y"]:
        raise _fail(f"pipeline.run(calls) must run the calls; got {results!r}", ex)


async def _recorded(make: MakeExecutor) -> None:
    ex = await _make(make, _Model(), _tools(anyio.Event()))
    recorded: list[State] = []

    async def record(state: State) -> None:
        recorded.append(state)

    start = _ask("call echo")
    with main_line(recorder=record):
        done = await ex.turn(start)
        asked = await ex.submit(done, Role.USER, Text("thanks"))
    if not recorded or recorded[-1] != asked or not any(len(s) == 2 for s in recorded):
        raise _fail("on the main line, the recorder must get the model's turn before its tools run and the state "
                    f"after each completed turn and submit; it got states of {[len(s) for s in recorded]} turns", ex)
    branch_recorded = len(recorded)

    async def in_task() -> None:
        await ex.turn(start)

    with main_line(recorder=record):
        async with anyio.create_task_group() as group:
            group.start_soon(in_task)  # a task the main line does not own: a branch
    if len(recorded) != branch_recorded:
        raise _fail("turns run in a task the main line does not own must not be recorded", ex)


async def _cancelled(make: MakeExecutor) -> None:
    started = anyio.Event()
    ex = await _make(make, _Model(), _tools(started))
    recorded: list[State] = []

    async def record(state: State) -> None:
        recorded.append(state)

    finished = False

    async def run() -> None:
        nonlocal finished
        with main_line(recorder=record):
            await ex.turn(_ask("call block"))
        finished = True

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await started.wait()
            group.cancel_scope.cancel()
    if finished:
        raise _fail("a turn cancelled during a tool call must raise the cancellation, not return", ex)
    last = recorded[-1].last if recorded else None
    if last is None or last.role is not Role.TOOL or [r.content for r in last.tool_results] != [f"error: {CANCELLED}"]:
        raise _fail("a turn cancelled during a tool call must record the open call answered 'cancelled'", ex)
