"""``Step``: one inference turn, and the tool calls it asks for."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import anyio
import anyio.lowlevel

from loop import tracing
from loop._accumulate import Accumulator
from loop._events import EventBus, ToolFinished, ToolStarted, TurnCompleted, TurnFailed, TurnStarted
from loop._parts import Part, Role, ToolCall, ToolResult
from loop._progress import ProgressCallback, begin_turn, end_turn
from loop._protocols import Options, Provider, Request
from loop._state import State
from loop._argcheck import ArgumentChecker
from loop._tools import Tool, index_tools, render, truncate
from loop._turn import Turn
from loop.errors import UsageError

Transform = Callable[[State], State]

_DEFAULT_OPTIONS = Options()  # immutable, so every step without options can share it
CANCELLED = "cancelled: the turn was interrupted before this tool call finished"
_log = tracing.logger("loop.step")


class Step:
    """Runs one inference turn against ``provider`` and executes the tool calls it makes.

    ``turn`` builds the model's view of ``state`` through ``transforms`` (the history itself is never
    rewritten), streams one response, appends the assistant turn and, if the model called tools, runs them
    concurrently and appends one ``TOOL`` turn with a result for every call, in call order. Unknown tools,
    malformed or schema-breaking arguments, exceptions, timeouts and cancellations all become error results.

    A step holds settings only; the same step can serve any number of conversations at once. Events go to
    ``events`` (a new ``EventBus`` unless one is given).
    """

    __slots__ = ("_provider", "_tools", "_specs", "_checkers", "_options", "_transforms", "events",
                 "_tool_timeout", "_max_result_chars")

    def __init__(
        self,
        provider: Provider,
        *,
        tools: Iterable[Tool] = (),
        options: Options | None = None,
        transforms: Sequence[Transform] = (),
        events: EventBus | None = None,
        tool_timeout: float = 60.0,
        max_result_chars: int = 20_000,
    ) -> None:
        if not callable(getattr(provider, "stream", None)):
            raise UsageError(f"Step needs a provider with a stream(request) method, got {provider!r}")
        by_name = index_tools(tools, "in a step")
        if options is not None and not isinstance(options, Options):
            raise UsageError(f"options must be loop.Options, got {options!r}")
        for transform in transforms:
            if not callable(transform):
                raise UsageError(f"a transform must be a function State -> State, got {transform!r}")
        if not (isinstance(tool_timeout, (int, float)) and tool_timeout > 0):
            raise UsageError(f"tool_timeout must be a positive number of seconds, got {tool_timeout!r}")
        if not (isinstance(max_result_chars, int) and max_result_chars > 0):
            raise UsageError(f"max_result_chars must be a positive integer, got {max_result_chars!r}")
        self._provider = provider
        self._tools = by_name
        self._specs = tuple(t.spec for t in by_name.values())
        self._checkers = {name: ArgumentChecker(t.spec.parameters) for name, t in by_name.items()}
        self._options = options or _DEFAULT_OPTIONS
        self._transforms = tuple(transforms)
        self.events = events if events is not None else EventBus()
        self._tool_timeout = float(tool_timeout)
        self._max_result_chars = max_result_chars

    @property
    def provider(self) -> Provider:
        return self._provider

    @property
    def tools(self) -> tuple[Tool, ...]:
        return tuple(self._tools.values())

    @property
    def options(self) -> Options:
        return self._options

    def view(self, state: State) -> State:
        """What the model sees of ``state``: the state passed through every transform."""
        for transform in self._transforms:
            state = transform(state)
        return state

    async def submit(
        self, state: State, role: Role | str, *parts: Part, meta: Mapping[str, Any] | None = None
    ) -> State:
        """Append a turn that did not come from the model, and publish it."""
        turn = Turn(role, parts, meta or {})
        self.events.publish(TurnCompleted(turn))
        return state.append_turn(turn)

    async def turn(
        self, state: State, options: Options | None = None, *, progress: ProgressCallback | None = None
    ) -> State:
        """One turn on ``state``: the model's answer and, if it called tools, their results.

        ``progress`` is awaited with the partial state when the model's turn called tools (before they run),
        and with "cancelled" results if the turn is interrupted while they run. Without it, the callback of
        the enclosing ``on_progress`` block is used. Either way the turn hides that callback from what it
        runs: its tools may run other agents, whose steps must never report into this conversation.
        """
        if progress is not None and not callable(progress):
            raise UsageError(f"progress must be an async function taking a State, got {progress!r}")
        progress, hidden = begin_turn(progress)
        try:
            opts = self._options.merge(options)
            bus = self.events
            if bus.has_subscribers:
                bus.publish(TurnStarted(len(state)))
            request = Request(self.view(state).turns, self._specs, opts)
            tracer = tracing.current_tracer()
            acc: Accumulator | None = None  # made at the first delta: nothing to hold while the model thinks
            try:
                with _chat_span(tracer, opts) as span:
                    stream = self._provider.stream(request)
                    # (bound methods are looked up when needed, not held across the stream's awaits)
                    try:
                        async for delta in stream:
                            if acc is None:
                                acc = Accumulator()
                            acc.add(delta)
                            bus.publish(delta)
                    except BaseException:
                        aclose = getattr(stream, "aclose", None)
                        if aclose is not None:
                            # Release the provider's connection even when the turn is being cancelled.
                            with anyio.CancelScope(shield=True):
                                await aclose()
                        raise
                    # An async generator that ran to its end is closed already (its frame is gone).
                    if getattr(stream, "ag_frame", True) is not None:
                        aclose = getattr(stream, "aclose", None)
                        if aclose is not None:
                            await aclose()
                    if acc is None:
                        acc = Accumulator()
                    turn = acc.turn(opts.model)
                    if tracer is not None:
                        _record_usage(span, turn, acc.finish)
            except BaseException as exc:
                bus.publish(TurnFailed(exc))
                raise
            state = state.append_turn(turn)
            if bus.has_subscribers:
                bus.publish(TurnCompleted(turn))
            calls = turn.tool_calls
            if calls:
                if progress is not None:
                    await progress(state)
                results = await self._run_tools(state, calls, tracer, progress, disabled=opts.tool_choice == "none")
                tool_turn = Turn(Role.TOOL, results)
                state = state.append_turn(tool_turn)
                if bus.has_subscribers:
                    bus.publish(TurnCompleted(tool_turn))
            return state
        finally:
            end_turn(hidden)

    async def _run_tools(
        self, state: State, calls: tuple[ToolCall, ...], tracer: Any, progress: ProgressCallback | None, *,
        disabled: bool,
    ) -> tuple[ToolResult, ...]:
        results: list[ToolResult | None] = [None] * len(calls)

        async def run_into(index: int) -> None:
            results[index] = await self._run_call(calls[index], tracer, disabled)

        try:
            if len(calls) == 1:
                await run_into(0)  # one call needs no task group
            else:
                async with anyio.create_task_group() as group:
                    for index in range(len(calls)):
                        group.start_soon(run_into, index)
        except BaseException as exc:
            # Cancelled mid-call: answer every open call so that the published history stays valid to send
            # back to a model, then let the cancellation go on.
            answered = Turn(Role.TOOL, [r if r is not None else _error(c, CANCELLED) for r, c in zip(results, calls)])
            self.events.publish(TurnCompleted(answered))
            self.events.publish(TurnFailed(exc))
            if progress is not None:
                with anyio.CancelScope(shield=True):
                    await progress(state.append_turn(answered))
            raise
        return tuple(results)  # type: ignore[arg-type]

    async def _run_call(self, call: ToolCall, tracer: Any, disabled: bool) -> ToolResult:
        bus = self.events
        if bus.has_subscribers:
            bus.publish(ToolStarted(call))
        started = time.perf_counter()
        if tracer is None:
            result = await self._call(call, disabled)
        else:
            with tracing.start(tracer, f"execute_tool {call.name}", {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": call.name,
                "gen_ai.tool.call.id": call.id,
            }) as span:
                result = await self._call(call, disabled)
                if result.is_error:
                    span.set_attribute("error.type", "tool_error")
        if bus.has_subscribers:
            bus.publish(ToolFinished(call, result, time.perf_counter() - started))
        return result

    async def _call(self, call: ToolCall, disabled: bool) -> ToolResult:
        if disabled:
            return _error(call, "tools are disabled for this turn; answer in text without calling a tool")
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            what = "a tool with no name" if not call.name else f"unknown tool {call.name!r}"
            return _error(call, f"{what}; the tools you can call are: {known}")
        arguments = self._checkers[call.name].parse(call.arguments)
        if isinstance(arguments, str):
            return _error(call, arguments)
        timeout = getattr(tool, "timeout", None) or self._tool_timeout
        try:
            with anyio.move_on_after(timeout) as scope:
                value = await tool.call(arguments)
            if scope.cancelled_caught:
                return _error(call, f"the tool timed out after {timeout:g} seconds and was stopped")
            content = render(value)
        except anyio.get_cancelled_exc_class():
            # Re-raises if the turn itself is being cancelled; otherwise only the tool was.
            await anyio.lowlevel.checkpoint_if_cancelled()
            return _error(call, "the tool was cancelled before it finished")
        except Exception as exc:
            _log.warning("tool raised", tool=call.name, call_id=call.id, error=repr(exc))
            return _error(call, truncate(f"the tool raised {type(exc).__name__}: {exc}", self._max_result_chars))
        return ToolResult(call.id, call.name, truncate(content, self._max_result_chars))


def _error(call: ToolCall, message: str) -> ToolResult:
    return ToolResult(call.id, call.name, f"error: {message}", is_error=True)


def _chat_span(tracer: Any, opts: Options) -> Any:
    if tracer is None:
        return tracing.NOOP_SPAN
    return tracing.start(tracer, f"chat {opts.model}" if opts.model else "chat", {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": opts.model,
        "gen_ai.request.temperature": opts.temperature,
        "gen_ai.request.max_tokens": opts.max_tokens,
    })


def _record_usage(span: Any, turn: Turn, finish: str | None) -> None:
    usage = turn.usage
    if usage is not None:
        span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
    if finish is not None:
        span.set_attribute("gen_ai.response.finish_reasons", (finish,))
