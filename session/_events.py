"""Events a session publishes about messages, besides the step's own events it passes on."""

from __future__ import annotations

import attrs

from loop import Turn


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
    """Processing a message raised; the conversation keeps every turn stored before the failure."""

    message_id: str
    error: str
    kind: str


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
