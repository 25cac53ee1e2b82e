"""``ReAct`` and ``SingleShot``: the basic loops over one step."""

from __future__ import annotations

from cognitive._kinds import PatternKind
from cognitive._pattern import answering as _answering, check_start, left_open
from cognitive.everyday._loops import watch as _watch
from loop import Options, Role, State, Text, TurnRunner, UsageError, add_turn, require, scope, tracing
from loop.checks import positive_int

_FINAL = Options(tool_choice="none")


def _check_runner(step: object, who: str) -> None:
    require(step, TurnRunner, who, "a TurnRunner (something with turn(state))")


class ReAct:
    """Reason and act: run turns until the model answers without calling a tool.

    A clean run records no outcome (``state.outcome`` is ``None``, which reads as ok). After ``max_turns``
    turns that all called tools, one more turn is run with tools disabled so the run still ends in a written
    answer, and its outcome is ``degraded``.

    With ``detect_loops=True`` the run watches for the usual way a tool loop burns a budget: the same tool
    called again with the same arguments (compared after parsing, ignoring key order, letter case and
    whitespace in strings). After the first repeat a system turn (``meta["kind"] == "loop_note"``) tells the
    model it already has that result; a further repeat of any call stops the run with a tool-free final answer,
    marked ``degraded``. Only calls made in this run count: asking again in a later message is no loop.
    """

    __slots__ = ("step", "max_turns", "detect_loops")

    def __init__(self, step: TurnRunner, *, max_turns: int = 12, detect_loops: bool = False) -> None:
        _check_runner(step, "ReAct")
        if not isinstance(detect_loops, bool):
            raise UsageError(f"detect_loops must be True or False, got {detect_loops!r}")
        self.step: TurnRunner = step
        self.max_turns = positive_int("max_turns", max_turns)
        self.detect_loops = detect_loops

    async def run(self, state: State) -> State:
        check_start(state, "ReAct")
        with scope("ReAct"), tracing.span("invoke_agent ReAct", {"gen_ai.operation.name": "invoke_agent",
                                                                 "gen_ai.agent.name": "ReAct"}):
            step = self.step
            answering = _answering()
            final = _FINAL if answering is None else _FINAL.merge(answering)
            seen: dict[tuple[str, str], int] | None = {} if self.detect_loops else None
            for _ in range(self.max_turns):
                state = await step.turn(state, answering)
                if left_open(state):
                    return state  # calls left for the caller (run_tools=False, external tools)
                last = state.last
                if last is not None and last.role is Role.ASSISTANT:
                    if not state.pending_calls:
                        return state  # ok: an answer with no outcome recorded is a clean one
                elif seen is not None and last is not None and last.role is Role.TOOL:
                    note, looping = _watch(state, seen)
                    if note is not None:  # a turn of its own: what was stored is never rewritten
                        state = await add_turn(step, state, Role.SYSTEM, Text(note),
                                               meta={"kind": PatternKind.LOOP_NOTE})
                    if looping is not None:
                        state = await step.turn(state, final)
                        return state.degrade(f"ReAct stopped a tool loop: {looping}; the final answer was asked "
                                             "for with tools disabled")
            state = await step.turn(state, final)
            return state.degrade(
                f"ReAct reached max_turns={self.max_turns} with tools still being called; "
                "the final answer was asked for with tools disabled"
            )

    def __repr__(self) -> str:
        loops = ", detect_loops=True" if self.detect_loops else ""
        return f"ReAct({self.step!r}, max_turns={self.max_turns}{loops})"


class SingleShot:
    """One model turn: the model answers and the run ends.

    A pattern ends in a written answer, so a turn that called tools (they run, and their results are added)
    is followed by one more turn with tools disabled that writes it: one model call, or two when the model
    reached for a tool.
    """

    __slots__ = ("step",)

    def __init__(self, step: TurnRunner) -> None:
        _check_runner(step, "SingleShot")
        self.step = step

    async def run(self, state: State) -> State:
        check_start(state, "SingleShot")
        with scope("SingleShot"):
            answering = _answering()
            state = await self.step.turn(state, answering)
            if left_open(state):
                return state
            last = state.last
            if last is not None and last.role is Role.TOOL:
                state = await self.step.turn(state, _FINAL if answering is None else _FINAL.merge(answering))
            return state

    def __repr__(self) -> str:
        return f"SingleShot({self.step!r})"


def react_factory(step: TurnRunner, *, max_turns: int = 12, detect_loops: bool = False) -> ReAct:
    """The ``PatternFactory`` for ReAct: ``new_turn_processor(react_factory)`` runs ReAct for every message.

    Bind settings with ``functools.partial(react_factory, max_turns=5)``.
    """
    return ReAct(step, max_turns=max_turns, detect_loops=detect_loops)
