"""Events a session publishes about messages, besides the step's own events it passes on."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from loop import ToolCall, Turn


@attrs.frozen
class MessageQueued:
    """A user message was accepted; ``position`` messages are ahead of it (0: it runs next)."""

    message_id: str
    position: int


@attrs.frozen
class MessageStarted:
    """The worker began processing a message."""

    message_id: str


@attrs.frozen
class MessageFinished:
    """A message was processed. ``status`` is its answer's outcome (``ok``, ``pending``, ``degraded``);
    ``degraded`` says the answer was written after a budget or cap stopped the run, and ``reason`` why.
    Only ``ok`` is a success."""

    message_id: str
    answer: str | None
    degraded: bool = False
    reason: str = ""
    status: str = "ok"

    def __attrs_post_init__(self) -> None:
        if self.degraded and self.status == "ok":
            object.__setattr__(self, "status", "degraded")  # MessageFinished(id, answer, True, reason)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@attrs.frozen
class MessageFailed:
    """Processing a message raised; the conversation keeps every turn stored before the failure. ``guardrail``:
    when a guardrail stopped it, ``{"check", "stage", "reason"}`` (``cognitive.GuardrailTripped.to_dict``)."""

    message_id: str
    error: str
    kind: str
    guardrail: Mapping[str, str] | None = None


@attrs.frozen
class Interrupted:
    """An interrupt took effect: ``message_id`` was cut short (``None`` when no message was running, or it
    finished just as the interrupt came), and ``dropped`` queued messages were discarded."""

    message_id: str | None
    dropped: int


@attrs.frozen
class TurnStored:
    """A turn reached the store at ``index``: from here on it survives a crash (it is acknowledged)."""

    index: int
    turn: Turn


@attrs.frozen
class TurnUpdated:
    """The stored turn at ``index`` was rewritten as ``turn``: a pattern or wrapper wrote its outcome on the answer
    after it was stored. The conversation has as many turns as before (counting ``TurnStored`` counts them)."""

    index: int
    turn: Turn


@attrs.frozen
class StorePaused:
    """The store failed under the acknowledged message ``message_id`` (``error``, e.g. a full disk): it waits
    ``retry_in`` seconds and runs again from its start, the messages queued behind it waiting their turn. It is
    never reported failed for that; ``attempt`` counts the failures so far."""

    message_id: str
    error: str
    retry_in: float
    attempt: int


@attrs.frozen
class ApprovalRequested:
    """Tool calls wait for a person's approval (``session.approve`` answers them), asked together.

    ``live`` is false for calls the conversation keeps open: the run stopped there (its message finished with
    the outcome ``pending``), and an answer resumes it, now or after a restart. It is true for calls a running
    program waits on (a code-action program's bridged call, a call in a branch of the run): only this process can
    answer those. No answer by ``deadline`` (seconds since the epoch) denies them."""

    message_id: str | None
    calls: tuple[ToolCall, ...]
    deadline: float
    live: bool = False


@attrs.frozen
class ApprovalAnswered:
    """A call waiting for approval was answered: ``approved`` or not, why (``reason``), and by whom (``by``, the
    caller's id; ``None`` when nobody said, as when the time ran out)."""

    call_id: str
    name: str
    approved: bool
    reason: str = ""
    by: str | None = None
