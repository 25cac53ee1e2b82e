"""``Managed``: a tool loop whose model sees the task and a ledger of facts instead of the whole transcript."""

from __future__ import annotations


from cognitive._pattern import check_start
from cognitive.context._ledger import Ledger
from cognitive.everyday._react import ReAct
from loop import Executor, State, Transform, UsageError, require, scope


class Managed:
    """A ReAct tool loop over the facts-ledger view, for long tool chains.

    Each turn the model sees the conversation's system and user turns, the latest exchange it must react to,
    and one system turn listing what earlier calls found (``tool(args) = result``, one line per distinct
    call, long results excerpted; see ``Ledger``). The prompt grows by one short line per new fact until the
    list reaches the ledger's ``max_chars``, and stays that size from then on (the oldest facts give way, and
    the list says how many); the stored conversation keeps every turn. ``view`` replaces the default
    ``Ledger()``: one with other limits, an ``AutoContext()`` (full history until a threshold), or any
    transform. ``step`` must be a ``Step`` (the view is added with ``step.derive``). Loop detection is on by
    default (``detect_loops``), since a model that no longer sees an old exchange in full is likelier to ask
    for it again. Costs one model call per turn, as ReAct.
    """

    __slots__ = ("step", "max_turns", "detect_loops", "view", "_react")

    def __init__(self, step: Executor, *, max_turns: int = 12, detect_loops: bool = True,
                 view: Transform | None = None) -> None:
        require(step, Executor, "Managed", "a loop.Executor such as a loop.Step (it adds the ledger view with "
                "step.derive)")
        if view is not None and not callable(view):
            raise UsageError(f"view must be a transform (State -> State), such as Ledger() or AutoContext(); "
                             f"got {view!r}")
        self.step = step
        self.max_turns = max_turns
        self.detect_loops = detect_loops
        self.view: Transform = view if view is not None else Ledger()
        self._react = ReAct(step.derive(transforms=(*step.transforms, self.view)), max_turns=max_turns,
                            detect_loops=detect_loops)

    async def run(self, state: State) -> State:
        check_start(state, "Managed")
        with scope("Managed"):
            return await self._react.run(state)

    def __repr__(self) -> str:
        return f"Managed({self.step!r}, max_turns={self.max_turns})"
