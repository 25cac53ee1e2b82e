"""Approval: tool calls a person must allow before they run.

A tool is marked as needing approval with ``@tool(needs_approval=...)``, or any tool (an MCP server's, one of
your own) by wrapping it, ``require_approval(tools, when=...)``: always, or when a policy of the run's context
(who is asking, ``loop.RunContext``), the tool's name and its checked arguments says so. The gate is in the tool
pipeline, so every way a call runs goes through it: a model's turn, a planner's worker, a code-action program's
bridged call.

Where a call waits depends on where it was made:

- On the main line of a recorded run (a session's conversation), the turn runs the calls that need no approval
  and leaves the others open, the run's outcome ``pending`` with the calls listed under ``"approval"`` in its
  data (``awaiting_approval``). The conversation is stored in that state, so the answer may come later, through
  any conduit, after a restart; ``answer_approvals`` runs the approved calls, answers the denied ones, and the
  run goes on from there.
- Anywhere else (a branch, a tool's own agent, a bridged call, a script's run), the run's ``Approver`` is asked
  and waited on (``approving(approver)``; a session is one). With no approver, a script's main line leaves the
  calls open as above, and any other call is denied: nobody could answer it.

A denial is an error result the model reads: "the user denied this call".
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Protocol, runtime_checkable

import attrs

from loop._context import Caller, current_run_context
from loop._parts import Role, ToolCall, ToolResult
from loop._protocols import ToolSpec
from loop._state import State
from loop._executor import ToolRunner, require
from loop._protocols import TurnSubmitter
from loop._tools import Gate, TimedTool, Tool, check_gate, index_tools
from loop.errors import ApprovalMismatch, UsageError


APPROVAL = "approval"  # the key of the outcome data listing the calls that wait for approval
DENIED = "the user denied this call"
NO_ONE = ("this call needs approval, and nobody can be asked here (it was made outside the conversation's main "
          "line, in a run with no approver)")


def _call_id(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise UsageError(f"a Decision names the tool call it answers by its id, a non-empty string; got {value!r}")
    return value


def _typed(name: str, value: Any, kind: type, wanted: str) -> None:
    if not isinstance(value, kind):
        raise UsageError(f"a Decision's {name} must be {wanted}, got {value!r}")


@attrs.frozen
class Decision:
    """A person's answer to one call waiting for approval: ``approved`` or not, and why (``reason``, shown to
    the model with a denial)."""

    call_id: str = attrs.field(converter=_call_id)
    approved: bool = attrs.field(validator=lambda _, __, value: _typed("approved", value, bool, "True or False"))
    reason: str = attrs.field(default="", validator=lambda _, __, value: _typed("reason", value, str, "a string"))

    @classmethod
    def approve(cls, call_id: str, reason: str = "") -> Decision:
        return cls(call_id, True, reason)

    @classmethod
    def deny(cls, call_id: str, reason: str = "") -> Decision:
        return cls(call_id, False, reason)

    def to_dict(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "approved": self.approved, "reason": self.reason}


@runtime_checkable
class Approver(Protocol):
    """Asked to decide calls as they wait, live: one ``Decision`` per call (a call it leaves out is denied).
    It may take as long as it likes; the run waits, and stops waiting if cancelled."""

    async def __call__(self, calls: tuple[ToolCall, ...]) -> Sequence[Decision]: ...


@runtime_checkable
class GatedTool(Tool, Protocol):
    """The optional ability of a tool to need approval: ``needs_approval`` is ``True``, ``False``, or a
    ``Policy``. ``FunctionTool`` has it (``@tool(needs_approval=...)``)."""

    needs_approval: Gate


def tool_gate(tool: Tool) -> Gate:
    """Whether ``tool`` needs approval (see ``GatedTool``)."""
    return tool.needs_approval if isinstance(tool, GatedTool) else False


class _Gated:
    """A tool that needs approval as ``gate`` says; everything else is the wrapped tool's."""

    __slots__ = ("inner", "needs_approval")

    def __init__(self, inner: Tool, gate: Gate) -> None:
        self.inner = inner
        self.needs_approval = gate

    @property
    def spec(self) -> ToolSpec:
        return self.inner.spec

    @property
    def timeout(self) -> float | None:
        inner = self.inner
        return inner.timeout if isinstance(inner, TimedTool) else None  # the tool's own limit, passed on

    async def call(self, arguments: Mapping[str, Any]) -> Any:
        return await self.inner.call(arguments)

    def __repr__(self) -> str:
        return f"require_approval({self.inner!r})"


def require_approval(tools: Tool | Iterable[Tool], *, when: Gate = True) -> list[Tool]:
    """``tools``, each needing approval ``when`` says: always (``True``), or when the policy
    ``when(context, tool_name, arguments)`` returns true (a policy that raises counts as yes)."""
    gate = check_gate(when, "require_approval")
    return [_Gated(t, gate) for t in index_tools(tools, "given to require_approval").values()]


_APPROVER: ContextVar[tuple[Approver | None, bool]] = ContextVar("cognitive_loop.approver", default=(None, True))


def current_approver() -> Approver | None:
    """The approver of the run this code is part of (``None`` outside ``approving``)."""
    return _APPROVER.get()[0]


def asks_on_main_line() -> bool:
    """Whether the run's approver decides main-line calls too (``approving(..., keep_open=False)``)."""
    approver, keep_open = _APPROVER.get()
    return approver is not None and not keep_open


@contextlib.contextmanager
def approving(approver: Approver | Callable[..., Any] | None, *, keep_open: bool = True) -> Iterator[None]:
    """Run the block with ``approver`` deciding, live, the calls that need approval where the conversation's
    main line cannot leave them open (``None``: nobody; such calls are denied). With ``keep_open=False`` it
    decides the main line's calls too, even where they could be kept open for later (a conduit with a policy
    of its own, or a person it can ask at once)."""
    if approver is not None and not callable(approver):
        raise UsageError(f"approving takes an async function (calls) -> decisions, or None; got {approver!r}")
    if not isinstance(keep_open, bool):
        raise UsageError(f"approving(keep_open=...) takes True or False, got {keep_open!r}")
    token = _APPROVER.set((approver, keep_open))
    try:
        yield
    finally:
        _APPROVER.reset(token)


def needs_asking(gate: Gate, name: str, arguments: Mapping[str, Any]) -> bool:
    """Whether a call of tool ``name`` with checked ``arguments`` must wait for approval under ``gate``."""
    if gate is True or gate is False:
        return gate
    try:
        return bool(gate(current_run_context(), name, arguments))
    except Exception:  # a policy that cannot decide does not let the call through
        return True


def denied_text(reason: str = "") -> str:
    """What the model reads for a denied call."""
    return f"{DENIED}: {reason}" if reason else DENIED


def denial(call: ToolCall, reason: str = "") -> ToolResult:
    """The error result answering a denied ``call``."""
    return ToolResult(call.id, call.name, f"error: {denied_text(reason)}", is_error=True)


def decided(calls: Sequence[ToolCall], decisions: Iterable[Decision]) -> dict[str, Decision]:
    """``decisions`` by call id, checked to answer each of ``calls`` exactly once (``ApprovalMismatch`` names
    the difference)."""
    given: dict[str, Decision] = {}
    for decision in decisions:
        if not isinstance(decision, Decision):
            raise UsageError(f"approvals are answered with loop.Decision values, got {decision!r}")
        if decision.call_id in given:
            raise ApprovalMismatch(f"call {decision.call_id} is decided twice")
        given[decision.call_id] = decision
    wanted = [c.id for c in calls]
    if sorted(given) != sorted(wanted):
        raise ApprovalMismatch(f"the decisions answer calls {', '.join(sorted(given)) or 'none'}, but the calls "
                               f"waiting for approval are: {', '.join(wanted) or 'none'}; decide each of them")
    return given


def awaiting_approval(state: State) -> tuple[ToolCall, ...]:
    """The calls of ``state``'s last turns left open for approval, in call order (empty when none)."""
    outcome = state.outcome
    if outcome is None or outcome.status != "pending":
        return ()
    asked = outcome.data.get(APPROVAL)
    if not isinstance(asked, Mapping):
        return ()
    ids = set(asked.get("calls") or ())
    return tuple(c for c in state.pending_calls if c.id in ids)


def approval_asked_at(state: State) -> float | None:
    """When ``state``'s calls waiting for approval were left open (seconds since the epoch), if it says."""
    outcome = state.outcome
    asked = outcome.data.get(APPROVAL) if outcome is not None else None
    at = asked.get("asked_at") if isinstance(asked, Mapping) else None
    return float(at) if isinstance(at, (int, float)) else None


def approval_data(calls: Sequence[ToolCall]) -> dict[str, Any]:
    """The outcome data (kept under the path ``APPROVAL``) saying ``calls`` wait for approval since now."""
    return {"calls": [c.id for c in calls], "asked_at": time.time()}


async def answer_approvals(executor: Any, state: State, decisions: Iterable[Decision], *,
                           by: Caller | None = None) -> State:
    """``state`` with the calls waiting for approval answered as ``decisions`` say: the approved ones run
    through ``executor``'s tool pipeline (an ``Executor``'s, as a turn's calls do), the denied ones get an error
    result with the reason. The results are one tool turn, submitted (recorded on a session's main line) with
    the decisions in its meta under ``"approvals"`` with who decided (``by``, else the run's caller). The
    approved calls run in the current run context: run this as the caller who asked, not as the one who
    approves, so that tools and policies see the asker. Run the pattern again on the state it returns to go on.
    ``ApprovalMismatch`` when the decisions do not answer exactly the calls that wait."""
    waiting = awaiting_approval(state)
    if not waiting:
        raise ApprovalMismatch("no tool call of this conversation is waiting for approval")
    given = decided(waiting, decisions)
    runner = require(executor, ToolRunner, "answering approvals", "an executor with a tool pipeline")
    submitter = require(executor, TurnSubmitter, "answering approvals")
    approved = tuple(c for c in waiting if given[c.id].approved)
    ran = dict(zip((c.id for c in approved), await runner.pipeline.run(approved, approved=True))) if approved else {}
    results: list[ToolResult] = []
    for call in waiting:
        decision = given[call.id]
        results.append(ran[call.id] if decision.approved else denial(call, decision.reason))
    if by is not None and not isinstance(by, Caller):
        raise UsageError(f"answer_approvals(by=...) takes the loop.Caller who decided, got {by!r}")
    caller = by if by is not None else current_run_context().caller
    record = {c.id: {"approved": given[c.id].approved, "reason": given[c.id].reason,
                     "by": None if caller is None else caller.id} for c in waiting}
    answered: State = await submitter.submit(state, Role.TOOL, *results, meta={"approvals": record})
    return answered
