"""``ReuseResults``: a repeated identical call to a chosen tool is answered from its earlier result."""

from __future__ import annotations

from collections.abc import Iterable

from cognitive.context._exchanges import call_key
from loop import (Executor, Options, Role, State, ToolCall, ToolResult, Turn, TurnCompleted, TurnFailed,
                  TurnMiddleware, UsageError, current_scope, recording)

PENDING = "pending"
REUSED_NOTE = "[reused: an identical earlier call returned this result; the tool was not run again]\n"
"""What starts the content of a result answered from an earlier one."""

_LEAVE_CALLS = Options(run_tools=False)


class ReuseResults(TurnMiddleware):
    """Runs ``step``'s turns, answering a call to one of ``tools`` from the history when an identical call (same
    tool, same arguments as canonical JSON) already has a result that is not an error.

    The model's turn is run with ``Options(run_tools=False)`` laid over the caller's options. Each call to a
    listed tool with such an earlier result is answered with the newest one, its content starting with
    ``REUSED_NOTE`` so the model knows; every other call (unlisted tools, new arguments, earlier errors) runs
    through ``step.pipeline`` with the step's checks, events and budget charges. One ``TOOL`` turn answers every
    call, in call order, and is submitted through the step (published, told to budgets, recorded on the main
    line). A reused answer is not charged as a tool call. Two identical calls in one turn both run.
    Options that ask for tool calls to be left pending (``run_tools=False``) are honoured: the turn is the
    step's own. With ``tool_choice="none"`` every call is answered as the pipeline answers it, with an error.
    On the main line the model's turn is recorded before its calls run, and if cancelled while they run, the
    calls still open are answered "cancelled", published and recorded, as ``Step.turn`` does. Samples
    (``sample``) are the step's own: their calls all run.

    A ``loop.TurnMiddleware``: it keeps every ability of ``step`` and composes with other middleware in any
    order. Opt in only for tools whose answer does not change between calls (lookups, searches, reads of data
    that stays put). Raises ``UsageError`` when ``step`` is not a ``loop.Executor``, when ``tools`` is not a
    non-empty collection of tool names, or names a tool the step does not have.
    """

    __slots__ = ("tools",)

    def __init__(self, step: Executor, *, tools: Iterable[str]) -> None:
        super().__init__(step)
        if isinstance(tools, str) or not isinstance(tools, Iterable):
            raise UsageError(f"tools takes tool names, got {tools!r}; write tools=[{tools!r}]")
        names = tuple(tools)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise UsageError(f"tools must name at least one tool (non-empty strings), got {names!r}")
        pipeline = self.inner.pipeline
        unknown = [n for n in names if pipeline.find(n) is None]
        if unknown:
            have = ", ".join(t.spec.name for t in pipeline.tools) or "none"
            raise UsageError(f"tools: the step has no tool {', '.join(map(repr, unknown))}; it has {have}")
        self.tools = frozenset(names)

    @property
    def step(self) -> Executor:
        """The executor whose turns this runs."""
        return self.inner

    def rewrap(self, inner: Executor) -> Executor:
        """Around a derived executor: reuse the tools it still has (none left: ``inner`` itself)."""
        kept = [n for n in sorted(self.tools) if inner.pipeline.find(n) is not None]
        return ReuseResults(inner, tools=kept) if kept else inner

    async def turn(self, state: State, options: Options | None = None) -> State:
        """One turn: the model's answer and a result for every call it made, reused or run."""
        step = self.inner
        scope = current_scope()
        effective = step.options.merge(scope.options).merge(options)  # as the step's turn will see them
        if effective.run_tools is False:
            return await step.turn(state, options)
        recorder = scope.main_recorder
        with recording(None):  # the turn is recorded here, once its calls are this wrapper's to answer
            answered = await step.turn(state, (options or Options()).merge(_LEAVE_CALLS))
        last = answered.last
        if last is None or last.role is not Role.ASSISTANT or not last.tool_calls:
            if recorder is not None:
                await recorder(answered)
            return answered
        # The calls are answered here, so the "pending" mark the turn left on them comes off; those to tools the
        # caller answers (``loop.external_tools``) stay open for it, as a step leaves them.
        outcome = answered.outcome
        state = answered.without_outcome() if outcome is not None and outcome.status == PENDING else answered
        offered = scope.on_main_line and effective.tool_choice != "none"
        external = {s.name for s in scope.external} if offered else set()
        theirs = [c.name for c in last.tool_calls if c.name in external]
        calls = tuple(c for c in last.tool_calls if c.name not in external)
        if not calls:
            state = state.with_outcome(PENDING, f"left for the caller to answer: {', '.join(theirs)}")
            if recorder is not None:
                await recorder(state)
            return state
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
            if recorder is not None:
                await recorder(state)

            async def cancelled(partial: tuple[ToolResult, ...], exc: BaseException) -> None:
                for index, result in zip(to_run, partial):
                    results[index] = result
                turn = Turn(Role.TOOL, tuple(r for r in results if r is not None))
                step.events.publish(TurnCompleted(turn))
                step.events.publish(TurnFailed(exc))
                if recorder is not None:
                    await recorder(state.append_turn(turn))

            ran = await step.pipeline.run([calls[i] for i in to_run], disabled=effective.tool_choice == "none",
                                          on_cancel=cancelled)
            for index, result in zip(to_run, ran):
                results[index] = result
        parts = tuple(r for r in results if r is not None)
        if theirs:
            with recording(None):
                done = await step.submit(state, Role.TOOL, *parts)
            done = done.with_outcome(PENDING, f"left for the caller to answer: {', '.join(theirs)}")
            if recorder is not None:
                await recorder(done)
            return done
        return await step.submit(state, Role.TOOL, *parts)

    def __repr__(self) -> str:
        return f"ReuseResults({self.inner!r}, tools={sorted(self.tools)!r})"


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
