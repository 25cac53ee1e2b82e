"""The JSON form of every event a session publishes, for conduits that send events over a wire.

Each event becomes a plain dict with a snake_case ``"type"``. Turns, parts and a delta's fields are written by
``loop``'s codec (``Turn.to_dict``, ``part_to_dict``, ``delta_to_dict``), as they are stored and recorded.
Exceptions are never sent as objects, only as ``{"type": name, "message": text}``. An object this module does
not know becomes ``{"type": "unknown", "repr": ...}``, so a new event never breaks a stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.responses import Response

from loop import (BudgetReport, Delta, EventsDropped, Finish, ReasoningDelta, TextDelta, ToolCallDelta, ToolFinished,
                  ToolStarted, TurnCompleted, TurnFailed, TurnStarted, UsageDelta)
from loop.codec import delta_to_dict, part_to_dict
from session._events import (ApprovalAnswered, ApprovalRequested, Interrupted, MessageFailed, MessageFinished,
                             MessageQueued, MessageStarted, StorePaused, TurnStored, TurnUpdated)
from session._serving import json_text

__all__ = ["EVENT_TYPES", "dumps", "event_to_json", "json_response"]

_MAX_REPR = 2000


def _delta(delta: Delta) -> dict[str, Any]:
    """A delta's fields as the codec writes them, with its usage tagged as a part; without ``choice`` and the
    answering ``model``, which the wire has never carried."""
    data = delta_to_dict(delta)
    for name in ("type", "choice", "model"):
        data.pop(name, None)
    if isinstance(delta, UsageDelta):
        data["usage"] = part_to_dict(delta.usage)
    return data


def _error(error: BaseException) -> dict[str, str]:
    return {"type": type(error).__name__, "message": str(error)}


def _message_finished(e: MessageFinished) -> dict[str, Any]:
    # "ok" spells the outcome out so that a client reading only one field never mistakes degraded for success.
    return {"message_id": e.message_id, "answer": e.answer, "ok": e.ok, "status": e.status,
            "degraded": e.degraded, "reason": e.reason}


def _message_failed(e: MessageFailed) -> dict[str, Any]:
    data: dict[str, Any] = {"message_id": e.message_id, "error": {"type": e.kind, "message": e.error}}
    if e.guardrail is not None:
        data["guardrail"] = dict(e.guardrail)  # which check stopped it, at which stage, and why
    return data


def approval_requested(e: ApprovalRequested) -> dict[str, Any]:
    """An approval request: its calls (id, tool name, arguments as the model wrote them), when they are denied
    unanswered, and whether a running program waits on them (``live``) or the conversation keeps them."""
    return {"message_id": e.message_id, "calls": [part_to_dict(c) for c in e.calls], "deadline": e.deadline,
            "live": e.live}


_ENCODERS: dict[type, tuple[str, Callable[[Any], dict[str, Any]]]] = {
    TextDelta: ("text_delta", _delta),
    ReasoningDelta: ("reasoning_delta", _delta),
    ToolCallDelta: ("tool_call_delta", _delta),
    UsageDelta: ("usage_delta", _delta),
    Finish: ("finish", _delta),
    TurnStarted: ("turn_started", lambda e: {"index": e.index}),
    TurnCompleted: ("turn_completed", lambda e: {"turn": e.turn.to_dict()}),
    TurnFailed: ("turn_failed", lambda e: {"error": _error(e.error)}),
    ToolStarted: ("tool_started", lambda e: {"call": part_to_dict(e.call)}),
    ToolFinished: ("tool_finished", lambda e: {"call": part_to_dict(e.call), "result": part_to_dict(e.result),
                                               "seconds": e.seconds}),
    EventsDropped: ("events_dropped", lambda e: {"count": e.count}),
    MessageQueued: ("message_queued", lambda e: {"message_id": e.message_id, "position": e.position}),
    MessageStarted: ("message_started", lambda e: {"message_id": e.message_id}),
    MessageFinished: ("message_finished", _message_finished),
    MessageFailed: ("message_failed", _message_failed),
    Interrupted: ("interrupted", lambda e: {"message_id": e.message_id, "dropped": e.dropped}),
    TurnStored: ("turn_stored", lambda e: {"index": e.index, "turn": e.turn.to_dict()}),
    TurnUpdated: ("turn_updated", lambda e: {"index": e.index, "turn": e.turn.to_dict()}),
    StorePaused: ("store_paused", lambda e: {"message_id": e.message_id, "error": e.error, "retry_in": e.retry_in,
                                             "attempt": e.attempt}),
    ApprovalRequested: ("approval_requested", approval_requested),
    ApprovalAnswered: ("approval_answered", lambda e: {"call_id": e.call_id, "name": e.name, "approved": e.approved,
                                                       "reason": e.reason, "by": e.by}),
    BudgetReport: ("budget_report", lambda e: {"budget": e.budget, "spent": e.spent.to_dict(),
                                               "by_path": {p: s.to_dict() for p, s in e.by_path.items()},
                                               "exhausted": e.exhausted}),
}


EVENT_TYPES: tuple[str, ...] = (*(name for name, _ in _ENCODERS.values()), "unknown")
"""Every ``"type"`` ``event_to_json`` gives an event."""


def _unknown(event: Any) -> dict[str, Any]:
    try:
        text = repr(event)
    except Exception as exc:  # a broken __repr__ must not break the stream
        text = f"<{type(event).__name__} (repr failed: {type(exc).__name__})>"
    return {"type": "unknown", "repr": text[:_MAX_REPR]}


def event_to_json(event: Any) -> dict[str, Any]:
    """The JSON-ready dict for ``event``: ``{"type": "text_delta", "text": ...}`` and so on.

    Subclasses of a known event encode as that event; anything else as ``{"type": "unknown", "repr": ...}``.
    """
    for cls in type(event).__mro__:
        found = _ENCODERS.get(cls)
        if found is not None:
            name, encode = found
            try:
                return {"type": name, **encode(event)}
            except Exception:  # e.g. a part of an unknown type inside a turn
                return _unknown(event)
    return _unknown(event)


def _fallback(value: Any) -> str:
    return repr(value)[:_MAX_REPR]


def dumps(data: Any) -> str:
    """``data`` as one line of JSON text; values JSON cannot hold (odd meta) are sent as their repr. The text
    is always valid UTF-8: a lone surrogate in a string is sent as its ``\\u`` escape (see ``json_text``)."""
    return json_text(data, default=_fallback)


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A JSON response, on a line of its own: shell walkthroughs print one reply after another."""
    return Response(dumps(data) + "\n", status, headers, media_type="application/json")
