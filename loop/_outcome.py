"""``Outcome``: how a run ended, kept on the assistant turn that holds its answer.

A run's result belongs to its answer, not to the conversation: the next message starts clean, and a wrapper
that runs its inner pattern again gets a fresh answer turn with no outcome on it yet. ``State.with_outcome``
is the one way to write it; it composes, so a wrapper's outcome is never better than its inner run's.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from loop.errors import UsageError

OK = "ok"
PENDING = "pending"
DEGRADED = "degraded"
FAILED = "failed"
STATUSES = (OK, PENDING, DEGRADED, FAILED)  # from best to worst
_RANK = {status: rank for rank, status in enumerate(STATUSES)}
META_KEY = "outcome"


def _status(value: Any) -> str:
    if value not in _RANK:
        raise UsageError(f"an outcome's status is one of {', '.join(STATUSES)}; got {value!r}")
    return str(value)


def _data(value: Any) -> Mapping[str, Any]:
    if not value:
        return MappingProxyType({})
    if not isinstance(value, Mapping):
        raise UsageError(f"an outcome's data is a mapping from run path to data, got {type(value).__name__}")
    return MappingProxyType(dict(value))


@attrs.frozen
class Outcome:
    """How a run ended: ``status`` (``ok``, ``pending``, ``degraded`` or ``failed``), why (``reason``), and the
    patterns' result data keyed by the run path that wrote it (verification results, votes, a typed answer).

    ``pending`` is for tool calls deliberately left open (for approval or planning); ``degraded`` for an answer
    written after a budget or cap stopped the run; ``failed`` for a run that raised. Only ``ok`` is a success.
    """

    status: str = attrs.field(default=OK, converter=_status)
    reason: str = ""
    data: Mapping[str, Any] = attrs.field(factory=dict, converter=_data)

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def degraded(self) -> bool:
        return self.status == DEGRADED

    def worse(self, other: Outcome) -> Outcome:
        """The composition of this (inner) outcome with ``other`` (the wrapper's own): the worse status, the
        reasons of both when neither is ok, and both sets of data (``other``'s wins on a shared path)."""
        status = self.status if _RANK[self.status] >= _RANK[other.status] else other.status
        reasons = [r for o in (self, other) if (r := o.reason) and not o.ok]
        reason = "; ".join(dict.fromkeys(reasons)) if status != OK else ""
        return Outcome(status, reason, {**self.data, **other.data})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.reason and self.status != OK:
            out["reason"] = self.reason
        if self.data:
            out["data"] = dict(self.data)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Outcome:
        if not isinstance(data, Mapping):
            raise UsageError(f"an outcome is stored as an object, got {type(data).__name__}")
        reason = data.get("reason", "")
        if not isinstance(reason, str):
            raise UsageError(f"an outcome's reason is a string, got {type(reason).__name__}")
        return cls(data.get("status"), reason, data.get("data") or {})


def outcome_of_meta(meta: Mapping[str, Any]) -> Outcome | None:
    raw = meta.get(META_KEY)
    if raw is None:
        return None
    if isinstance(raw, Outcome):
        return raw
    return Outcome.from_dict(raw)


# Keys that versions before outcomes kept in the state's meta, where nested runs overwrote each other's.
_OLD_DATA_KEYS = {"verification": "WithVerification", "code_action": "CodeAction"}


def split_old_meta(meta: Mapping[str, Any]) -> tuple[dict[str, Any], Outcome | None]:
    """The caller's meta without the run results older versions stored there, and those results as an
    outcome for the last answer (``None`` when there were none)."""
    if not any(key in meta for key in ("degraded", "degraded_reason", *_OLD_DATA_KEYS)):
        return dict(meta), None
    rest = dict(meta)
    degraded = bool(rest.pop("degraded", False))
    reason = rest.pop("degraded_reason", "")
    data = {path: rest.pop(key) for key, path in _OLD_DATA_KEYS.items() if key in rest}
    status = DEGRADED if degraded else OK
    return rest, Outcome(status, str(reason or "") if degraded else "", data)
