"""``OpenSession``: a session in use through the HTTP conduit, and the running total of its message text that
``max_conversation_bytes`` bounds."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from loop import Role, Turn
from session.http._eventlog import EventLog
from session.http._guards import Problem
from session.http._history import text_size, utf8_size


@attrs.define(eq=False)
class OpenSession:
    """A session in use through the conduit: the manager's id for it (``key``), the id its client uses, and its
    event log."""

    key: str
    id: str
    log: EventLog
    size: int | None = None  # bytes of message text, counted from when first needed (see ``count``)
    counted: int = 0  # how many of the session's turns ``size`` has measured

    def count(self, turns: Sequence[Turn], text: str, limit: int | None) -> int:
        """Add ``text`` to the conversation's running total of message text, or refuse it (413) when it would
        pass ``limit`` (``max_conversation_bytes``); the bytes added. The total is measured the first time from
        ``turns`` (the conversation), and after that from the turns stored since that were not posted here
        (answers, tool results), so that a message costs no more than its own text and the turns added since."""
        if limit is None:
            return 0
        if self.size is None or len(turns) < self.counted:  # first needed, or the conversation was cut back
            self.size, self.counted = text_size(turns), len(turns)
        else:  # the turns stored since, less the user's: those were counted as they were posted
            self.size += text_size(t for t in turns[self.counted:] if t.role is not Role.USER)
            self.counted = len(turns)
        added = utf8_size(text)
        if self.size + added > limit:
            raise Problem(413, "conversation_too_large",
                          f"this message ({added} bytes) would take the conversation past {limit} bytes of message "
                          "text, the most the server keeps in one conversation; start a new session")
        self.size += added
        return added
