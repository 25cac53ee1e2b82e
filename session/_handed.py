"""Messages other workers put in a session's inbox for it (``HandOffStore.hand_off``), queued by the session that
runs the conversation (``Session.refill``), and the queue item of any message read back from an inbox."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from loop import Caller, Turn
from session._events import MessageQueued
from session._message import Queued, SessionClosed
from session.stores._protocol import HandOffStore, InboxStore

if TYPE_CHECKING:
    from session._session import Session


def posted_item(turn: Turn) -> Queued:
    """A message from the inbox, as it was posted (with its caller, when it named one)."""
    item = Queued(turn.meta["message_id"], tuple(turn.parts), posted=True)
    caller = turn.meta.get("caller")
    if caller is not None:
        item.caller = Caller.from_dict(caller)
    return item


async def refill(session: Session, inbox: InboxStore, before: Queued | None) -> int:
    """``Session.refill``, under its lock: read the inbox, queue what the session has not queued yet, in order, and
    move ``before`` behind every message the inbox holds before it. A ``HandOffStore`` is asked for the ids first,
    and read whole only when it holds a message the session has not queued."""
    if session.closed:
        raise SessionClosed(f"session {session.id!r} is closed")
    known = session._known
    if isinstance(inbox, HandOffStore):
        ids = await inbox.waiting_ids(session.id)
        fresh: tuple[Turn, ...] = ()
        if any(i not in known for i in ids):
            fresh = await inbox.inbox(session.id)
            ids = tuple(str(t.meta.get("message_id")) for t in fresh)
    else:
        fresh = await inbox.inbox(session.id)
        ids = tuple(str(t.meta.get("message_id")) for t in fresh)
    if session.closed:
        raise SessionClosed(f"session {session.id!r} is closed")
    queue = session._queue
    added = 0
    for turn in fresh:
        if turn.meta.get("message_id") in known:
            continue
        item = posted_item(turn)
        known.add(item.id)
        queue.append(item)
        session._waiting += 1
        session._pending[item.id] = item
        added += 1
        if session.events.has_subscribers:
            session.events.publish(MessageQueued(item.id, len(queue) - 1 + (session._current is not None)))
    if before is not None and before in queue and before.id in ids:
        earlier = set(ids[:ids.index(before.id)])
        last = max((i for i, q in enumerate(queue) if q.id in earlier), default=-1)
        if last > queue.index(before):  # posted here after them, queued before them: it runs after them
            queue.remove(before)
            queue.insert(last, before)
    if added:
        session.last_active = time.monotonic()
        session._wake_worker()
    return added
