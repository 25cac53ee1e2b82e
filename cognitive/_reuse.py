"""``ReuseResults``: a repeated identical call to a chosen tool is answered from its earlier result."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cognitive._exchanges import call_key
from loop import (Options, ProgressCallback, Role, State, ToolCall, ToolResult, Turn, TurnCompleted, TurnFailed,
                  TurnRunner, UsageError, current_scope)

PENDING = "pending"
REUSED_NOTE = "[reused: an identical earlier call returned this result; the tool was not run again]\n"
"""What starts the content of a result answered from an earlier one."""

_LEAVE_CALLS = Options(run_tools=False)


class ReuseResults:
    """Runs ``step``'s turns, answering a call to one of ``tools`` from the history when an identical call (same
    tool, same arguments as canonical JSON) already has a result that is not an error.

    The model's turn is run with ``Options(run_tools=False)`` laid over the caller's options. Each call to a
    listed tool with such an earlier result is answered with the newest one, its content starting with
    ``REUSED_NOTE`` so the model knows; every other call (unlisted tools, new arguments, earlier errors) runs
    through ``step.pipeline`` with the step's checks, events and budget charges. One ``TOOL`` turn answers every
    call, in call order, and is published on the step's events (through ``step.submit`` when it has one, which
    also tells budgets). A reused answer is not charged as a tool call. Two identical calls in one turn both run.
    Options that ask for tool calls to be left pending (``run_tools=False``) are honoured: the turn is the
    step's own. With ``tool_choice="none"`` every call is answered as the pipeline answers it, with an error.
    If cancelled while tools run, the calls still open are answered "cancelled", published, and reported to
    ``progress``, as ``Step.turn`` does.

    Opt in only for tools whose answer does not change between calls (lookups, searches, reads of data that
    stays put). Raises ``UsageError`` when ``step`` has no ``turn`` or no ``pipeline`` (a ``loop.ToolPipeline``),
    when ``tools`` is not a non-empty collection of tool names, or names a tool the step does not have.
    """

    __slots__ = ("step", "tools")

    def __init__(self, step: TurnRunner, *, tools: Iterable[str]) -> None:
        if not callable(getattr(step, "turn", None)):
            raise UsageError(f"ReuseResults needs a TurnRunner (something with turn(state)), got {step!r}")
        pipeline = getattr(step, "pipeline", None)
        if not callable(getattr(pipeline, "run", None)):
            raise UsageError(f"ReuseResults needs a step with a tool pipeline (step.pipeline, as loop.Step has) to "
                             f"run the calls it does not reuse; got {step!r}")
        if isinstance(tools, str) or not isinstance(tools, Iterable):
            raise UsageError(f"tools takes tool names, got {tools!r}; write tools=[{tools!r}]")
        names = tuple(tools)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise UsageError(f"tools must name at least one tool (non-empty strings), got {names!r}")
        find = getattr(pipeline, "find", None)
        if callable(find):
            unknown = [n for n in names if find(n) is None]
            if unknown:
                have = ", ".join(t.spec.name for t in getattr(pipeline, "tools", ())) or "none"
                raise UsageError(f"tools: the step has no tool {', '.join(map(repr, unknown))}; it has {have}")
        self.step = step
        self.tools = frozenset(names)

    async def turn(
        self, state: State, options: Options | None = None, *, progress: ProgressCallback | None = None
    ) -> State:
        """One turn: the model's answer and a result for every call it made, reused or run."""
        step: Any = self.step
        defaults = getattr(step, "options", None)
        laid = current_scope().options  # turn_options over the run: the step's turn takes them too
        effective = (defaults if isinstance(defaults, Options) else Options()).merge(laid).merge(options)
        if effective.run_tools is False:
            done: State = await step.turn(state, options, progress=progress)
            return done
        answered: State = await step.turn(state, (options or Options()).merge(_LEAVE_CALLS), progress=progress)
        last = answered.last
        if last is None or last.role is not Role.ASSISTANT or not last.tool_calls:
            return answered
        # The calls are answered here, so the "pending" mark the turn left on them comes off; those to tools the
        # caller answers (``loop.external_tools``) stay open for it, as a step leaves them.
        outcome = answered.outcome
        state = answered.without_outcome() if outcome is not None and outcome.status == "pending" else answered
        scope = current_scope()
        offered = scope.on_main_line and effective.tool_choice != "none"
        external = {s.name for s in scope.external} if offered else set()
        theirs = [c.name for c in last.tool_calls if c.name in external]
        calls = tuple(c for c in last.tool_calls if c.name not in external)
        if not calls:
            return state.with_outcome(PENDING, f"left for the caller to answer: {', '.join(theirs)}")
        known = _earlier_results(answered) if effective.tool_choice != "none" else {}
        results: list[ToolResult | None] = [None] * len(calls)
        to_run: list[int] = []
        for index, call in enumerate(calls):
            earlier = known.get(call_key(call)) if call.name in self.tools else None
            if earlier is None:
                to_run.append(index)
            else:
                results[index] = ToolResult(call.id, call.name, REUSED_NOTE + earlier)
        if to_run:
            if progress is not None:
                await progress(state)

            async def cancelled(partial: tuple[ToolResult, ...], exc: BaseException) -> None:
                for index, result in zip(to_run, partial):
                    results[index] = result
                turn = Turn(Role.TOOL, tuple(r for r in results if r is not None))
                step.events.publish(TurnCompleted(turn))
                step.events.publish(TurnFailed(exc))
                if progress is not None:
                    await progress(state.append_turn(turn))

            ran = await step.pipeline.run([calls[i] for i in to_run], disabled=effective.tool_choice == "none",
                                          on_cancel=cancelled)
            for index, result in zip(to_run, ran):
                results[index] = result
        parts = tuple(r for r in results if r is not None)
        submit = getattr(step, "submit", None)
        if callable(submit):
            done = await submit(state, Role.TOOL, *parts)
        else:
            turn = Turn(Role.TOOL, parts)
            events = getattr(step, "events", None)
            if events is not None:
                events.publish(TurnCompleted(turn))
            done = state.append_turn(turn)
        return done.with_outcome(PENDING, f"left for the caller to answer: {', '.join(theirs)}") if theirs else done

    async def submit(self, state: State, role: Role | str, *parts: Any,
                     meta: Mapping[str, Any] | None = None) -> State:
        """``step.submit``: so that this wrapper can stand in for the step wherever a ``TurnExecutor`` is taken."""
        submit = getattr(self.step, "submit", None)
        if not callable(submit):
            raise UsageError(f"the step ReuseResults wraps cannot submit turns (no submit method): {self.step!r}")
        result: State = await submit(state, role, *parts, meta=meta)
        return result

    def __repr__(self) -> str:
        return f"ReuseResults({self.step!r}, tools={sorted(self.tools)!r})"


def _earlier_results(state: State) -> dict[tuple[str, str], str]:
    """The newest successful result of every call in ``state``, by call (name and canonical arguments)."""
    calls: dict[str, ToolCall] = {}
    known: dict[tuple[str, str], str] = {}
    for turn in state:
        if turn.role is Role.ASSISTANT:
            for call in turn.tool_calls:
                calls[call.id] = call
        elif turn.role is Role.TOOL:
            for result in turn.tool_results:
                asked = calls.get(result.call_id)
                if asked is not None and not result.is_error:
                    known[call_key(asked)] = result.content.removeprefix(REUSED_NOTE)
    return known
