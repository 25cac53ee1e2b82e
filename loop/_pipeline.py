"""``ToolPipeline``: what every tool call goes through, with or without a model turn around it.

The argument check against the tool's schema, the timeout, exceptions turned into error results, result
truncation, ``ToolStarted``/``ToolFinished`` events, a span, and a charge to every budget of the run scope.
Each call runs in a scope of its own (``tool:NAME#ID``), a branch: an agent that a tool runs is never taken
for the conversation that called the tool. ``Step.turn`` runs its tools through one; planners' workers and
code-action programs' bridged calls use the same.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import anyio

from loop import tracing
from loop._approval import NO_ONE, Decision, current_approver, denial, denied_text, needs_asking, tool_gate
from loop._argcheck import ArgumentChecker
from loop._spend import _TOOLS, Spend, exhausted_error, take
from loop.checks import positive_int, positive_number
from loop._events import EventBus, ToolFinished, ToolStarted
from loop._parts import ToolCall, ToolResult
from loop._scope import branch, carry, current_scope, current_task
from loop._tools import Tool, index_tools, tool_result, tool_timeout, truncate
from loop.errors import ToolDenied, UsageError

CANCELLED = "cancelled: the turn was interrupted before this tool call finished"
_log = tracing.logger("loop.tools")


class ToolPipeline:
    """Runs tool calls with every guarantee a model turn gives them; every call gets a ``ToolResult``.

    Unknown tools, malformed or schema-breaking arguments, exceptions, timeouts (``timeout`` seconds, or the
    tool's own, see ``TimedTool``) and a budget with no tool calls left all become error results the
    model can read; results longer than ``max_result_chars`` are cut with a note. Events go to ``events``.
    """

    __slots__ = ("_tools", "_checkers", "_timeouts", "_gates", "events", "timeout", "max_result_chars")

    def __init__(
        self,
        tools: Iterable[Tool] = (),
        *,
        events: EventBus | None = None,
        timeout: float = 60.0,
        max_result_chars: int = 20_000,
    ) -> None:
        by_name = index_tools(tools, "in a step")
        self._tools = by_name
        self._checkers = {name: ArgumentChecker(t.spec.parameters) for name, t in by_name.items()}
        self.events = events if events is not None else EventBus()
        self.timeout = positive_number("tool_timeout", timeout, unit="seconds")
        # Each tool's own limit, read once: a protocol check per call would cost more than the call's checks.
        self._timeouts = {name: tool_timeout(t, self.timeout) for name, t in by_name.items()}
        self._gates = {name: gate for name, t in by_name.items() if (gate := tool_gate(t)) is not False}
        self.max_result_chars = positive_int("max_result_chars", max_result_chars)

    @property
    def tools(self) -> tuple[Tool, ...]:
        return tuple(self._tools.values())

    def find(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def gated(self) -> bool:
        """Whether any of its tools may need approval (``loop.require_approval``, ``@tool(needs_approval=...)``)."""
        return bool(self._gates)

    def needing_approval(self, calls: Sequence[ToolCall]) -> tuple[ToolCall, ...]:
        """The ``calls`` that must wait for approval, in call order: calls of gated tools whose arguments pass
        their checks (a call that fails them is answered with the failure, never put to a person) and that the
        tool's policy, asked with the run's context, says need it."""
        gates = self._gates
        if not gates:
            return ()
        waiting = []
        for call in calls:
            gate = gates.get(call.name)
            if gate is None:
                continue
            arguments = self._checkers[call.name].parse(call.arguments)
            if not isinstance(arguments, str) and needs_asking(gate, call.name, arguments):
                waiting.append(call)
        return tuple(waiting)

    async def run(
        self,
        calls: Sequence[ToolCall],
        *,
        disabled: bool = False,
        on_cancel: Callable[[tuple[ToolResult, ...], BaseException], Awaitable[None]] | None = None,
        approved: bool = False,
    ) -> tuple[ToolResult, ...]:
        """Run ``calls`` concurrently; their results in call order.

        If cancelled, ``on_cancel`` is awaited (shielded) with a result for every call, the open ones
        answered "cancelled", before the cancellation goes on. ``disabled`` answers every call with an error
        saying tools are off for this turn. Calls that need approval wait for the run's approver
        (``loop.approving``) first, and are denied when there is none; ``approved`` says they were approved
        already (``loop.answer_approvals``).
        """
        if self._gates and not approved and not disabled:
            waiting = self.needing_approval(calls)
            if waiting:
                return await self._run_asked(calls, waiting, on_cancel)
        tracer = tracing.current_tracer()
        if len(calls) == 1:  # the usual turn: one call, run here, with no task group (and no events or span to make)
            call = calls[0]
            try:
                if tracer is None and not self.events.has_subscribers:
                    result = await self._call(call, disabled)
                else:
                    result = await self._run_call(call, tracer, disabled)
            except BaseException as exc:
                if on_cancel is not None:
                    with anyio.CancelScope(shield=True):
                        await on_cancel((error_result(call, CANCELLED),), exc)
                raise
            return (result,)
        results: dict[int, ToolResult] = {}  # by call index, as they finish
        # Each call's task acts for the line that asked for the calls, as the one call run here does: its events
        # (ToolStarted, ToolFinished) are that line's, the main line's included; the tool itself runs in a branch.
        line = carry()

        async def run_into(index: int) -> None:
            with line:
                results[index] = await self._run_call(calls[index], tracer, disabled)

        try:
            async with anyio.create_task_group() as group:
                for index in range(len(calls)):
                    group.start_soon(run_into, index)
        except BaseException as exc:
            if on_cancel is not None:
                answered = tuple(results[i] if i in results else error_result(c, CANCELLED)
                                 for i, c in enumerate(calls))
                with anyio.CancelScope(shield=True):
                    await on_cancel(answered, exc)
            raise
        return tuple(results[i] for i in range(len(calls)))

    async def call(self, call: ToolCall) -> ToolResult:
        """Run one call; its result (an error result when it could not run, failed, or was denied approval)."""
        if self._gates and self.needing_approval((call,)):
            return (await self._run_asked((call,), (call,), None))[0]
        return await self._run_call(call, tracing.current_tracer(), False)

    async def _run_asked(self, calls: Sequence[ToolCall], waiting: tuple[ToolCall, ...],
                         on_cancel: Callable[[tuple[ToolResult, ...], BaseException], Awaitable[None]] | None
                         ) -> tuple[ToolResult, ...]:
        """``run``, once the run's approver has decided the ``waiting`` calls: the denied ones are answered
        with the reason, the others run."""
        try:
            decisions = await ask_approver(waiting)
        except BaseException as exc:
            if on_cancel is not None:
                with anyio.CancelScope(shield=True):
                    await on_cancel(tuple(error_result(c, CANCELLED) for c in calls), exc)
            raise
        denied = {c.id: denial(c, decisions[c.id].reason) for c in waiting if not decisions[c.id].approved}
        rest = tuple(c for c in calls if c.id not in denied)

        def merged(results: Sequence[ToolResult]) -> tuple[ToolResult, ...]:
            by_id = dict(zip((c.id for c in rest), results))
            return tuple(denied[c.id] if c.id in denied else by_id[c.id] for c in calls)

        async def cancelled(answered: tuple[ToolResult, ...], exc: BaseException) -> None:
            assert on_cancel is not None  # only passed on when given
            await on_cancel(merged(answered), exc)

        ran = await self.run(rest, on_cancel=None if on_cancel is None else cancelled, approved=True) if rest else ()
        return merged(ran)

    async def invoke(self, call: ToolCall, arguments: Mapping[str, Any]) -> Any:
        """Run one call whose ``arguments`` were already parsed and checked, and return the tool's value itself,
        for callers that hand values on rather than show results to a model (a code-action program's bridged
        calls). It is charged, published and scoped as ``call`` does; a failure raises instead of becoming a
        result (``BudgetExhausted`` when the budget has no tool call left; the run stops at its next model
        call). Timeouts are the caller's."""
        tool = self._tools.get(call.name)
        if tool is None:
            raise UsageError(f"unknown tool {call.name!r}; this pipeline has: {', '.join(sorted(self._tools)) or 'none'}")
        gate = self._gates.get(call.name) if self._gates else None
        if gate is not None and needs_asking(gate, call.name, arguments):
            decision = (await ask_approver((call,)))[call.id]
            if not decision.approved:
                raise ToolDenied(f"{call.name}: {denied_text(decision.reason)}")
        bus = self.events
        if bus.has_subscribers:
            bus.publish(ToolStarted(call))
        started = time.perf_counter()
        try:
            refused = _reserve_call()
            if refused is not None:
                raise exhausted_error(refused, None)
            with branch(f"tool:{call.name}#{call.id}"):
                value = await tool.call(arguments)
        except BaseException as exc:
            if bus.has_subscribers:
                failed = error_result(call, f"the tool raised {type(exc).__name__}: {exc}")
                bus.publish(ToolFinished(call, failed, time.perf_counter() - started))
            raise
        if bus.has_subscribers:
            result = tool_result(call, value, self.max_result_chars)
            bus.publish(ToolFinished(call, result, time.perf_counter() - started))
        return value

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
            return error_result(call, "tools are disabled for this turn; answer in text without calling a tool")
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            what = "a tool with no name" if not call.name else f"unknown tool {call.name!r}"
            return error_result(call, f"{what}; the tools you can call are: {known}")
        arguments = self._checkers[call.name].parse(call.arguments)
        if isinstance(arguments, str):
            return error_result(call, arguments)
        refused = _reserve_call()
        if refused is not None:
            return error_result(call, f"not run: {exhausted_error(refused, None)}")
        timeout = self._timeouts.get(call.name) or self.timeout
        try:
            # The tool runs in a branch of its own: an agent it runs is never taken for the caller's conversation.
            with anyio.move_on_after(timeout) as deadline, branch(f"tool:{call.name}#{call.id}"):
                value = await tool.call(arguments)
            if deadline.cancelled_caught:
                return error_result(call, f"the tool timed out after {timeout:g} seconds and was stopped")
            result = tool_result(call, value, self.max_result_chars)
        except anyio.get_cancelled_exc_class():
            if caller_cancelled():
                raise
            # Only the tool was cancelled (it cancelled itself, or something it awaited was): its result says so.
            return error_result(call, "the tool was cancelled before it finished")
        except Exception as exc:
            _log.warning("tool raised", tool=call.name, call_id=call.id, error=repr(exc))
            return error_result(call, truncate(f"the tool raised {type(exc).__name__}: {exc}", self.max_result_chars))
        return result


async def ask_approver(calls: tuple[ToolCall, ...]) -> dict[str, Decision]:
    """The run's approver's decision on each of ``calls``, by call id: a call it left out is denied, and every
    call is denied when the run has no approver (``loop.approving``)."""
    approver = current_approver()
    if approver is None:
        return {c.id: Decision.deny(c.id, NO_ONE) for c in calls}
    given = {d.call_id: d for d in await approver(calls) if isinstance(d, Decision)}
    return {c.id: given.get(c.id) or Decision.deny(c.id, "no decision was given for this call") for c in calls}


def caller_cancelled() -> bool:
    """Whether the task running now is being cancelled by its caller: a cancelled anyio scope around it, or, on
    asyncio, ``task.cancel()`` (Ctrl-C, ``asyncio.wait_for``, ``asyncio.timeout``), which asyncio counts on the
    task (``Task.cancelling``) until the cancellation is taken back. A cancellation that reached a tool by any
    other way (the tool cancelled itself) is the tool's failure, not the caller's."""
    task = current_task()
    if isinstance(task, asyncio.Task) and task.cancelling():
        return True
    return anyio.current_effective_deadline() == -math.inf  # a cancelled scope encloses this task


def _reserve_call() -> Spend | None:
    """Reserve one tool call in every budget of the run scope, charged to the path that makes it (the limit is
    hard); the budget that refuses it, marked run out (the run stops at its next model call), or ``None``."""
    scope = current_scope()
    budgets = scope.budgets
    if not budgets:
        return None
    refused = take(budgets, _TOOLS, scope.path)
    if refused is None:
        return None
    spend, reason = refused
    spend.refuse(reason)
    return spend


def error_result(call: ToolCall, message: str) -> ToolResult:
    """An error ``ToolResult`` answering ``call`` with ``message``."""
    return ToolResult(call.id, call.name, f"error: {message}", is_error=True)
