"""Calls a main-line turn leaves open for someone else: the caller's own tools' calls (``external_tools``) and
calls waiting for a person's approval (``require_approval``). The turn runs the others, marks its answer
``pending`` saying why, and the run returns; whoever holds the conversation answers them and runs it again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from loop._approval import APPROVAL, approval_data, asks_on_main_line, current_approver
from loop._outcome import PENDING
from loop._parts import ToolCall
from loop._protocols import ToolSpec
from loop._scope import RunScope
from loop._state import State
from loop.errors import UsageError

if TYPE_CHECKING:
    from loop._pipeline import ToolPipeline


class Left(NamedTuple):
    """The calls a turn leaves open, in call order, why, and which of them wait for approval (outcome data)."""

    calls: tuple[ToolCall, ...]
    reason: str
    approval: dict[str, Any] | None

    def mark(self, state: State) -> State:
        """``state`` with its answer's outcome ``pending``, saying why, and listing the calls that wait for
        approval under ``"approval"``."""
        if self.approval is None:
            return state.with_outcome(PENDING, self.reason)
        return state.with_outcome(PENDING, self.reason, data=self.approval, path=APPROVAL)


def left_open(pipeline: ToolPipeline, calls: tuple[ToolCall, ...], external: Sequence[ToolSpec],
              scope: RunScope) -> Left | None:
    """What a main-line turn leaves open of ``calls``; ``None`` when it runs them all. The caller's own tools'
    calls (``external``) are left to the caller; calls needing approval are left open for a person on a recorded
    line (a session's, which keeps them to be answered later) and on a script's main line with no approver to
    ask; elsewhere the pipeline asks the run's approver as they run."""
    names = {spec.name for spec in external}
    theirs = tuple(c for c in calls if c.name in names)
    asked: tuple[ToolCall, ...] = ()
    if (pipeline.gated and scope.on_main_line and not asks_on_main_line()
            and (scope.recorder is not None or current_approver() is None)):
        asked = pipeline.needing_approval([c for c in calls if c.name not in names])
    if not theirs and not asked:
        return None
    reasons = []
    if theirs:
        reasons.append(f"left for the caller to answer: {', '.join(c.name for c in theirs)}")
    if asked:
        reasons.append(f"waiting for approval: {', '.join(c.name for c in asked)}")
    left = tuple(c for c in calls if c in theirs or c in asked)
    return Left(left, "; ".join(reasons), approval_data(asked) if asked else None)


def offered(specs: tuple[ToolSpec, ...], pipeline: ToolPipeline, external: tuple[ToolSpec, ...]
            ) -> tuple[ToolSpec, ...]:
    """A step's tools (``specs``, run by ``pipeline``) and the caller's ``external`` ones, which must not share
    a name."""
    clash = [spec.name for spec in external if pipeline.find(spec.name) is not None]
    if clash:
        raise UsageError(f"external tools share names with this step's own tools: {', '.join(map(repr, clash))}; "
                         "the model could not tell them apart")
    return specs + external
