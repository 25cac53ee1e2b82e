"""Tool calls that need approval, over A2A: what a task that stops for them says (``prompt``), and how the client's
reply in that task decides them (``decisions``); and the fixed policies a server may choose instead of asking.

A task whose run stops with calls waiting for approval ends ``input-required`` (``session.a2a._ending``); its
status message names the calls and how to answer, and its metadata lists them (``approvals``). The client answers
by sending a message in the same task (its ``taskId``):

- a data part ``{"approved": true|false, "reason": "..."}`` decides every call alike, or
  ``{"decisions": [{"id": "<call id>", "approved": ..., "reason": ...}]}`` each call (one left out is denied);
- or text: ``yes``/``approve`` (approved) or ``no``/``deny`` (denied); any other text denies them all, and
  the model reads that text as the reason.

The approved calls run, the denied ones are answered with their denial, and the run goes on in the same task.
Calls a running program waits on (a branch's, a code-action program's) cannot end the task: they wait for the
session routes' approvals (``/sessions/{contextId}/approvals``), as every conduit's do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from a2a.helpers import get_data_parts, get_text_parts
from a2a.types import Message

from loop import Approver, Decision, ToolCall, UsageError

POLICIES = ("ask", "deny", "allow")
DENIED = "the server's approval policy for A2A tasks denies calls that need approval"
ALLOWED = "allowed by the server's approval policy for A2A tasks"
_YES = frozenset({"y", "yes", "ok", "approve", "approved", "allow", "allowed"})
_NO = frozenset({"n", "no", "deny", "denied", "reject", "rejected"})


def check_policy(policy: object) -> str:
    """``policy`` when it is one the A2A routes know (``"ask"``, ``"deny"``, ``"allow"``), else ``UsageError``."""
    if policy not in POLICIES:
        raise UsageError(f"approvals must be one of {', '.join(map(repr, POLICIES))}, got {policy!r}")
    return str(policy)


def policy_approver(policy: str) -> Approver | None:
    """The approver deciding, as they come, every call that needs approval as ``policy`` says; ``None`` for
    ``"ask"``: the calls are left open, and the task asks its client (``input-required``)."""
    if policy == "ask":
        return None
    approve = policy == "allow"

    async def decide(calls: tuple[ToolCall, ...]) -> list[Decision]:
        return [Decision(c.id, approve, ALLOWED if approve else DENIED) for c in calls]

    return decide


def prompt(calls: Sequence[ToolCall]) -> str:
    """The status message of a task waiting for ``calls`` to be approved: what the agent asks to call, and how
    to answer."""
    asked = "\n".join(f"- {c.name}({c.arguments})  [call id {c.id}]" for c in calls)
    return (f"The agent asks to call:\n{asked}\nReply in this task: 'approve' or 'deny' (or a data part "
            '{"approved": true|false, "reason": "..."}). Any other reply denies the calls, and the agent reads it.')


def decisions(message: Message | None, calls: Sequence[ToolCall]) -> list[Decision]:
    """The decisions the client's reply ``message`` gives on ``calls`` (see the module docstring)."""
    if message is not None:
        for data in get_data_parts(message.parts):
            given = _from_data(data, calls)
            if given is not None:
                return given
    text = "\n".join(get_text_parts(message.parts)).strip() if message is not None else ""
    word = text.strip(" .!").lower()
    if word in _YES:
        return [Decision.approve(c.id, "approved by the A2A client") for c in calls]
    if word in _NO:
        return [Decision.deny(c.id, "denied by the A2A client") for c in calls]
    reason = f"the person answered: {text}" if text else "the person gave no answer"
    return [Decision.deny(c.id, reason) for c in calls]


def _from_data(data: Any, calls: Sequence[ToolCall]) -> list[Decision] | None:
    if not isinstance(data, Mapping):
        return None
    reason = _reason(data)
    if isinstance(data.get("approved"), bool):
        return [Decision(c.id, data["approved"], reason) for c in calls]
    listed = data.get("decisions")
    if not isinstance(listed, list):
        return None
    by_id: dict[str, Decision] = {}
    for entry in listed:
        if isinstance(entry, Mapping) and isinstance(entry.get("approved"), bool):
            call_id = entry.get("id", entry.get("call_id"))
            why = _reason(entry)
            if isinstance(call_id, str):
                by_id[call_id] = Decision(call_id, entry["approved"], why)
    return [by_id.get(c.id) or Decision.deny(c.id, "the reply gave no decision for this call") for c in calls]


def _reason(entry: Mapping[str, Any]) -> str:
    reason = entry.get("reason")
    return reason if isinstance(reason, str) else ""
