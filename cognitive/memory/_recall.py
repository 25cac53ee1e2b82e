"""``RecallMemory``: what is remembered about the caller, shown to the model as one system turn before the message
it answers; a view, never stored."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from cognitive._kinds import PatternKind
from cognitive.memory._protocol import MEMORY, Memory, Recalled, Scope
from loop import Role, State, Text, Turn, UsageError, require, tracing
from loop.checks import positive_int

MEMORY_KIND = PatternKind.MEMORY
"""The ``meta["kind"]`` of the system turn ``RecallMemory`` shows (``meta["items"]``: the ids it lists)."""

HEADER = ("What you remember about this user from earlier conversations, most relevant first. It may be out of "
          "date or beside the point: use it only where it helps with the message below.")

_CACHED = 64  # recalls kept for reuse by later model turns of the same runs (see RecallMemory)
_log = tracing.logger("cognitive.memory")


class RecallMemory:
    """A view (an async transform, ``State -> State``) that shows the model what ``memory`` holds about the
    caller that bears on the message it is answering.

    On each model turn it takes the newest user message's text, recalls the ``k`` closest items of the caller's
    scope (``Scope.current(space)``: the run's ``loop.RunContext`` caller; a run without one uses the anonymous
    scope) and lists those scoring at least ``min_score`` in one ``SYSTEM`` turn, ``header`` first, placed just
    before that message, with ``meta={"kind": "memory", "items": [ids]}``. Everything after the message (the
    run's own turns) is left as it is, so within a run the prompt only grows at its end and a provider's prompt
    cache keeps matching it. Nothing is stored: the conversation never holds the turn, and the next message
    recalls afresh for its own text. A state with no user message, or nothing recalled at or above
    ``min_score``, is returned unchanged; so is a state already showing a memory turn before that message
    (showing the view twice changes nothing).

    Every model turn of a run shows the same user message, so the recall is made once: the result is kept for
    that very message (the same ``Turn`` object, which a new message never is) and that scope, for the last
    64 messages seen, and reused while the run goes on. A later message, another caller, or a new run on a
    conversation read back from a store recalls again. A recall that fails (the store or the embedder is down)
    is logged and the turn goes on without memories; ``UsageError`` (misuse) is raised.

    Raises ``UsageError`` when ``memory`` has no ``recall``, ``k`` is not a positive integer, ``min_score`` is not
    a number from -1 to 1, or ``space`` or ``header`` is not a non-empty string.
    """

    __slots__ = ("memory", "k", "min_score", "space", "header", "_recent")

    def __init__(self, memory: Memory, *, k: int = 5, min_score: float = 0.0, space: str = MEMORY,
                 header: str = HEADER) -> None:
        self.memory = require(memory, Memory, "RecallMemory", "a Memory (something with remember and recall)")
        self.k = positive_int("RecallMemory k", k)
        if isinstance(min_score, bool) or not isinstance(min_score, (int, float)) or not -1.0 <= min_score <= 1.0:
            raise UsageError(f"RecallMemory min_score must be a number from -1 to 1 (a cosine similarity), "
                             f"got {min_score!r}")
        self.min_score = float(min_score)
        if not isinstance(space, str) or not space:
            raise UsageError(f"RecallMemory space must be a non-empty string, got {space!r}")
        self.space = space
        if not isinstance(header, str) or not header.strip():
            raise UsageError(f"RecallMemory header must be a non-empty string, got {header!r}")
        self.header = header
        # (scope, text) -> (the message's turn, what was recalled for it). Only an identical turn object hits.
        self._recent: OrderedDict[tuple[Scope, str], tuple[Turn, tuple[Recalled, ...]]] = OrderedDict()

    async def __call__(self, state: State) -> State:
        tail: list[Turn] = []
        message: Turn | None = None
        for turn in state.reversed():
            if turn.role is Role.USER:
                message = turn
                break
            tail.append(turn)
        if message is None:
            return state
        query = message.text.strip()
        if not query:
            return state
        index = len(state) - len(tail) - 1
        if index > 0 and is_memory_turn(state[index - 1]):
            return state
        scope = Scope.current(self.space)
        found = await self.recalled(scope, query, message)
        shown = [r for r in found if r.score >= self.min_score]
        if not shown:
            return state
        view = state.prefix(index).append_turn(self.turn(shown))
        view = view.append_turn(message)
        for turn in reversed(tail):
            view = view.append_turn(turn)
        return view

    async def recalled(self, scope: Scope, query: str, message: Turn) -> tuple[Recalled, ...]:
        """The ``k`` items recalled for ``query`` in ``scope``: the ones kept for this very ``message`` if any,
        else a new recall (``()`` when it fails)."""
        key = (scope, query)
        kept = self._recent.get(key)
        if kept is not None and kept[0] is message:
            self._recent.move_to_end(key)
            return kept[1]
        try:
            found = tuple(await self.memory.recall(scope, query, k=self.k))
        except UsageError:
            raise
        except Exception as exc:
            _log.warning("recall failed; the turn goes on without memories", error=repr(exc))
            return ()
        self._recent[key] = (message, found)
        self._recent.move_to_end(key)
        while len(self._recent) > _CACHED:
            self._recent.popitem(last=False)
        return found

    def turn(self, recalled: list[Recalled]) -> Turn:
        """The system turn listing ``recalled``, best first."""
        lines = [self.header]
        for r in recalled:
            lines.append("- " + r.item.text.strip().replace("\n", "\n  "))
        meta: dict[str, Any] = {"kind": MEMORY_KIND, "items": [r.item.id for r in recalled]}
        return Turn(Role.SYSTEM, (Text("\n".join(lines)),), meta)

    def __repr__(self) -> str:
        return f"RecallMemory({self.memory!r}, k={self.k}, min_score={self.min_score}, space={self.space!r})"


def is_memory_turn(turn: Turn) -> bool:
    """Whether ``turn`` is the system turn a ``RecallMemory`` view shows."""
    return turn.role is Role.SYSTEM and turn.meta.get("kind") == MEMORY_KIND
