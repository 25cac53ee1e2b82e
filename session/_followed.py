"""``Followed``: one message a conduit sent a session, told apart from the others in the session's events by the id
its ``MessageQueued`` announced, so the conduit knows when the message runs and when it has ended."""

from __future__ import annotations

from typing import Any

from session._events import MessageFailed, MessageFinished, MessageQueued, MessageStarted

__all__ = ["Followed"]


class Followed:
    """A message followed through its session's events (see ``observe``)."""

    def __init__(self) -> None:
        self.message_id: str | None = None
        self.running = False  # the session is processing this message now
        self.ended = False  # the session reported it finished or failed

    def observe(self, event: Any) -> bool:
        """Note what ``event`` says about this message; whether it was published while the message ran. The
        first ``MessageQueued`` names the message: the conduit subscribes just before it sends it."""
        if self.message_id is None:
            if isinstance(event, MessageQueued):
                self.message_id = event.message_id
            return False
        if isinstance(event, MessageStarted):
            self.running = event.message_id == self.message_id
        elif isinstance(event, (MessageFinished, MessageFailed)) and event.message_id == self.message_id:
            self.running, self.ended = False, True
        else:
            return self.running
        return False
