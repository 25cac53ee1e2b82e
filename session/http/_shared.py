"""Events shared between the processes of one deployment, through its store's feed (``FeedStore``): whichever
process runs a session publishes its events there, and a reader connected to any process streams them from there.

So a client posting to one server and reading ``/sessions/{id}/events`` from another sees the run, wherever it
happens, and ``Last-Event-ID`` means the same on every server: the ids are the feed's. The process running a
session publishes its events in batches (what gathers while the previous batch is written goes in the next), and
on leaving the session publishes what is left before it lets the lease go. A batch the feed refuses is tried
again a few times, then dropped with an error in the log: the events are a live view, and the conversation
itself is in the store either way.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager

import anyio

from loop import Subscription, tracing
from session._session import Session
from session.http._eventlog import encoded, frame
from session.stores._protocol import EventFeed, StoreError

_log = tracing.logger("session.http")

RETRIES = 5
FIRST_RETRY = 0.2  # seconds before a refused batch is tried again; doubled each time


@asynccontextmanager
async def publishing(feed: EventFeed, session: Session) -> AsyncIterator[None]:
    """Publish ``session``'s events to ``feed`` for as long as the body runs (a ``Manager`` watcher: its worker),
    and what is left of them after."""
    subscription = session.events.subscribe(buffer=None, stamped=True)
    async with anyio.create_task_group() as group:
        group.start_soon(_publish, feed, session.id, subscription)
        try:
            yield
        finally:
            subscription.close()  # the publisher sends what is buffered, then ends


async def _publish(feed: EventFeed, session_id: str, subscription: Subscription) -> None:
    async for event in subscription:
        batch = [encoded(event), *(encoded(e) for e in subscription.drain())]
        delay = FIRST_RETRY
        for attempt in range(1, RETRIES + 1):
            try:
                await feed.publish(session_id, batch)
                break
            except StoreError as exc:
                if attempt == RETRIES:
                    _log.error("events not published: the feed refused them", session=session_id,
                               events=len(batch), error=str(exc))
                else:
                    await anyio.sleep(delay)
                    delay *= 2


async def feed_sse(feed: EventFeed, session_id: str, after: int, *, branches: bool,
                   keepalive: float) -> AsyncGenerator[str, None]:
    """The events of ``session_id`` after id ``after``, from ``feed``, as server-sent events (the main line's only,
    unless ``branches``), with a keep-alive comment after ``keepalive`` quiet seconds. It runs until the client
    leaves: the session may run again, here or elsewhere."""
    follower = feed.follow(session_id, after)
    try:
        while True:
            with anyio.move_on_after(keepalive) as waited:
                try:
                    event = await follower.__anext__()
                except StopAsyncIteration:  # the feed closed: the server is going away
                    return
            if waited.cancelled_caught:
                yield ": keep-alive\n\n"
            elif event.main or branches:
                yield frame(event.id, event.type, event.data)
    finally:
        with anyio.CancelScope(shield=True):
            await follower.aclose()
