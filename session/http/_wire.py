"""The JSON form of every event a session publishes, for conduits that send events over a wire; and of the
message a client posts.

Each event becomes a plain dict with a snake_case ``"type"``. Turns, parts and a delta's fields are written by
``loop``'s codec (``Turn.to_dict``, ``part_to_dict``, ``delta_to_dict``), as they are stored and recorded.
Exceptions are never sent as objects, only as ``{"type": name, "message": text}``. An object this module does
not know becomes ``{"type": "unknown", "repr": ...}``, so a new event never breaks a stream.

A posted message (``read_message``) is ``{"text": "..."}``, or ``{"parts": [...]}`` of text, image and file parts
in the form the codec writes them, so the turn the event stream and the history send back holds the same dicts::

    {"type": "text", "text": "What is in these?"}
    {"type": "image", "url": "https://example.com/cat.png"}
    {"type": "image", "data": "iVBORw0KGgo...", "media_type": "image/png"}
    {"type": "file", "data": "JVBERi0xLjQ...", "media_type": "application/pdf", "name": "report.pdf"}

Each rule is one the OpenAPI document states (``_openapi``), so a body its schema takes is one the route takes:
exactly one of ``text`` and ``parts``; a text not only whitespace; an image or file holding an http(s) ``url``
or base64 ``data`` (with its padding) and its ``media_type`` (lowercase; an image's one of ``IMAGE_MEDIA_TYPES``),
no other fields; a file's ``name`` not only whitespace. Beyond what a schema can state, bytes whose first bytes
say they are of another type than their ``media_type`` are refused too. An image's URL is passed on to the
model, never fetched here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import base64
import re

from starlette.responses import Response

from loop import (BudgetReport, Delta, EventsDropped, Finish, ReasoningDelta, TextDelta, ToolCallDelta, ToolFinished,
                  ToolStarted, TurnCompleted, TurnFailed, TurnStarted, UsageDelta)
from loop.codec import delta_to_dict, part_to_dict
from session._events import (ApprovalAnswered, ApprovalRequested, Interrupted, MessageFailed, MessageFinished,
                             MessageQueued, MessageStarted, StorePaused, TurnStored, TurnUpdated)
from loop import File, Image, Part, Text, UsageError
from session._problem import Problem
from session._serving import json_text

__all__ = ["BASE64", "EVENT_TYPES", "HTTP_URL", "IMAGE_MEDIA_TYPES", "MEDIA_TYPE", "dumps", "event_to_json",
           "json_response", "read_message"]

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


# What ``str.isspace`` counts as whitespace (as ``NOT_BLANK`` in the document), spelt out so that a pattern means the
# same to Python's ``re`` and to the ECMA regular expressions of JSON Schema validators (whose \\s differs).
_SPACE = "\t-\r\x1c- \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
HTTP_URL = f"[Hh][Tt][Tt][Pp][Ss]?://[^{_SPACE}/?#]+[^{_SPACE}]*"
"""An http(s) URL, as ``loop.Image`` takes one (the route matches the whole value; the document anchors it)."""
BASE64 = "(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)"
"""Base64 (RFC 4648, with its padding) of at least one byte."""
MEDIA_TYPE = "[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*"
"""A lowercase media type (type/subtype, no parameters)."""
IMAGE_MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The media types an image part may have: those ``loop.Image`` takes."""
_HTTP_URL, _BASE64, _MEDIA_TYPE = re.compile(HTTP_URL), re.compile(BASE64), re.compile(MEDIA_TYPE)
_MISSING: Any = object()
_FIELDS = {"text": ("type", "text"), "image": ("type", "url", "data", "media_type"),
           "file": ("type", "url", "data", "media_type", "name")}


def read_message(body: Mapping[str, Any]) -> str | tuple[Part, ...]:
    """The message a posted body holds: its ``text``, or its ``parts`` as ``Text``, ``Image`` and ``File`` parts;
    ``Problem`` (422 ``invalid_message``) naming the field or part that is wrong (see the module docstring)."""
    if ("text" in body) == ("parts" in body):
        given = "both" if "text" in body else "neither"
        raise _invalid(f"a message is 'text' (a string) or 'parts' (a list of text, image and file parts): exactly "
                       f"one of them; got {given}")
    if "text" in body:
        text = body["text"]
        if not isinstance(text, str) or not text.strip():
            raise _invalid(f"'text' must be a non-empty string; got {_shown(text)}")
        return text
    parts = body["parts"]
    if not isinstance(parts, list) or not parts:
        raise _invalid(f"'parts' must be a non-empty list of text, image and file parts; got {_shown(parts)}")
    return tuple(_part(part, f"parts[{i}]") for i, part in enumerate(parts))


def _part(part: Any, at: str) -> Part:
    if not isinstance(part, dict):
        raise _invalid(f"{at} must be an object such as {{\"type\": \"text\", \"text\": \"...\"}}; got "
                       f"{_shown(part)}")
    kind = part.get("type", _MISSING)
    if not isinstance(kind, str) or kind not in _FIELDS:
        raise _invalid(f"{at}.type must be 'text', 'image' or 'file'; got {_shown(kind)}")
    fields = _FIELDS[kind]
    other = next((name for name in part if name not in fields), None)
    if other is not None:
        raise _invalid(f"{at}: a {kind} part has no field {other[:40]!r}; its fields are {', '.join(fields)}")
    if kind == "text":
        text = part.get("text", _MISSING)
        if not isinstance(text, str) or not text.strip():
            raise _invalid(f"{at}.text must be a non-empty string; got {_shown(text)}")
        return Text(text)
    if ("url" in part) == ("data" in part):
        raise _invalid(f"{at}: an {kind} part holds a 'url' or 'data' (base64 bytes with their 'media_type'), "
                       "exactly one of them")
    media_type = part.get("media_type")
    if "media_type" in part and not (isinstance(media_type, str) and _MEDIA_TYPE.fullmatch(media_type)):
        raise _invalid(f"{at}.media_type must be a lowercase type/subtype such as 'image/png'; got "
                       f"{_shown(media_type)}")
    source: dict[str, Any] = {"media_type": media_type}
    if "url" in part:
        url = part["url"]
        if not (isinstance(url, str) and _HTTP_URL.fullmatch(url)):
            raise _invalid(f"{at}.url must be an http(s) URL (send bytes as 'data'); got {_shown(url)}")
        source["url"] = url
    else:
        data = part["data"]
        if not (isinstance(data, str) and _BASE64.fullmatch(data)):
            raise _invalid(f"{at}.data must be base64 (RFC 4648, with its padding) of at least one byte; got "
                           f"{_shown(data)}")
        if media_type is None:
            raise _invalid(f"{at}: 'data' needs its 'media_type'")
        source["data"] = base64.b64decode(data)
    if kind == "file" and "name" in part:
        name = part["name"]
        if not isinstance(name, str) or not name.strip():
            raise _invalid(f"{at}.name must be a non-empty string; got {_shown(name)}")
        source["name"] = name
    try:
        return Image(**source) if kind == "image" else File(**source)
    except UsageError as exc:
        raise _invalid(f"{at}: {exc}") from None


def _shown(value: Any) -> str:
    return "missing" if value is _MISSING else f"{type(value).__name__} {value!r}"[:80]


def _invalid(message: str) -> Problem:
    return Problem(422, "invalid_message", message)
