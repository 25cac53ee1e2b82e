"""``Leasing``: how a ``Manager`` whose store is shared by several processes (a ``LeaseStore``) runs a conversation
only while it holds its lease.

A worker opens a session once it holds the session's lease (``take``: when another worker holds it, it waits for
that worker to let go, at most ``wait`` seconds), loads the conversation as the store holds it, and lets go of the
lease as soon as the session has been idle for ``idle`` seconds. With a store that hands messages off
(``HandOffStore``), a message reaching a worker that does not hold the conversation's live lease goes to the
holder instead: the store keeps it in the inbox and tells the holder, whose session queues it (``refill``) and
runs it; so a conversation stays on one worker while it is busy, and moves only once it has been let go. Messages
posted one after another through any workers thus run in the order posted, each once.

While it holds leases, a worker renews them every third of their ``ttl``. A session whose lease was taken over
(after the worker stalled past the ``ttl``, or lost the database for that long) is closed at once: the store fences
its writes anyway (``LeaseLost``), so nothing it does after losing the lease reaches the conversation. A worker
that dies loses its leases within ``ttl``; any other worker then finds the messages it left waiting (``lapsed``)
and takes the conversations over, answering the tool calls left open "interrupted" as a restart does.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import anyio

from loop import tracing
from loop.checks import non_negative_number, positive_number
from session._message import Message, SessionBusy, SessionClosed, posted_turn
from session.stores._protocol import HandOffStore, LeaseStore, StoreError, check_holder

if TYPE_CHECKING:
    from session._session import Session

Adopt = Callable[[str], Awaitable[object]]


async def hand_off(store: HandOffStore, session_id: str, message: Message, caller: Any, queue_size: int
                   ) -> tuple[str, int] | None:
    """``Manager.hand_off`` on ``store``: ``SessionBusy`` when ``queue_size`` messages wait there already."""
    posted = posted_turn(message, caller, f"msg_{secrets.token_hex(8)}")
    waiting = await store.hand_off(session_id, posted, limit=queue_size + 1)  # and the one running
    if waiting is not None and waiting > queue_size:
        raise SessionBusy(f"session {session_id!r} already has {waiting - 1} messages waiting")
    return None if waiting is None else (posted.meta["message_id"], waiting)

_log = tracing.logger("session.leases")

FIRST_POLL = 0.02
"""Seconds a worker waiting for a lease first waits before asking again; each try doubles it, up to ``MAX_POLL``."""
MAX_POLL = 0.5


def new_holder() -> str:
    """A worker's id, unique among every worker that ever shares the store: the host, the process and a random
    part (a restarted process is a new holder, never mistaken for the one it replaces)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class Leasing:
    """The leases one ``Manager`` holds in a ``LeaseStore`` (see the module's notes)."""

    def __init__(self, store: LeaseStore, *, ttl: float, idle: float, wait: float, holder: str | None) -> None:
        self.store = store
        self.ttl = positive_number("lease_ttl", ttl, unit="seconds")
        self.idle = positive_number("lease_idle", idle, unit="seconds")
        self.wait = non_negative_number("lease_wait", wait, unit="seconds")
        self.holder = new_holder() if holder is None else check_holder(holder)
        self.held: set[str] = set()
        self._changed: set[str] = set()  # taken or let go since the renewal under way began: not its to judge
        self._renewed = time.monotonic()  # when every lease in ``held`` was last known to be ours

    async def take(self, session_id: str, *, wait: bool = True, stopping: Callable[[], bool] = lambda: False
                   ) -> bool:
        """Take the lease of ``session_id``: at once when it is free or lapsed, else (with ``wait``) once its holder
        lets go, for at most ``self.wait`` seconds, or until ``stopping()``. Whether it is held now."""
        deadline = time.monotonic() + (self.wait if wait else 0.0)
        delay = FIRST_POLL
        while True:
            lease = await self.store.acquire(session_id, self.holder, self.ttl)
            if lease is not None:
                self.held.add(session_id)
                self._changed.add(session_id)
                return True
            left = deadline - time.monotonic()
            if left <= 0 or stopping():
                return False
            await anyio.sleep(min(delay, left))
            delay = min(MAX_POLL, delay * 2)

    async def release(self, session_id: str) -> None:
        """Let go of the lease of ``session_id`` (its session's worker has stopped: every write of it is done). The
        store is told even when this worker no longer counts it as held: releasing a lease another holds changes
        nothing, and one this worker still holds must never be left to be renewed."""
        self.held.discard(session_id)
        self._changed.add(session_id)
        with anyio.CancelScope(shield=True):  # a lease left held keeps the conversation from others for a ttl
            try:
                await self.store.release(session_id, self.holder)
            except StoreError as exc:  # it lapses on its own within the ttl
                _log.warning("could not release a lease; it lapses by itself", session=session_id, error=str(exc))

    async def renew(self) -> set[str]:
        """Renew every lease held; the sessions whose lease is no longer this worker's (taken over, or not renewed
        for a whole ``ttl`` because the store failed: another worker may have taken them by now)."""
        held = set(self.held)
        self._changed = set()  # those taken or let go while the renewal runs are not lost, whatever it answers
        if not held:
            self._renewed = time.monotonic()
            return set()
        began = time.monotonic()
        try:
            kept = set(await self.store.renew(self.holder, self.ttl))
        except StoreError as exc:
            if began - self._renewed < self.ttl:
                _log.warning("could not renew the leases; trying again", error=str(exc))
                return set()
            _log.error("the leases were not renewed for a whole ttl: their sessions stop", error=str(exc))
            lost = held - self._changed
        else:
            self._renewed = began
            lost = held - kept - self._changed
        self.held -= lost
        return lost

    async def keep(self, sessions: Callable[[], Iterable[Session]], close: Callable[[str], Awaitable[object]],
                   adopt: Callable[[str], Awaitable[object]]) -> None:
        """Run for as long as the manager: renew the leases, close the sessions that lost theirs or have been idle
        for ``idle`` seconds (their workers then release them), and take over the conversations a stopped worker
        left with messages waiting. ``close`` and ``adopt`` are the manager's (async functions of a session id)."""
        period = min(self.ttl / 3, self.idle / 2)
        renew_every, sweep_every = self.ttl / 3, self.ttl
        last_renewal = last_sweep = time.monotonic()
        while True:
            await anyio.sleep(period)
            now = time.monotonic()
            if now - last_renewal >= renew_every:
                last_renewal = now
                for session_id in await self.renew():
                    _log.warning("lease lost: another worker runs the conversation now", session=session_id)
                    await close(session_id)
            for session in list(sessions()):
                if not session.busy and now - session.last_active > self.idle:
                    await close(session.id)
            if now - last_sweep >= sweep_every:
                last_sweep = now
                await self._sweep(adopt)

    async def _sweep(self, adopt: Callable[[str], Awaitable[object]]) -> None:
        """Take over the conversations whose messages wait with nobody holding their lease."""
        try:
            orphans = await self.store.lapsed()
        except StoreError as exc:
            _log.warning("could not look for conversations to take over", error=str(exc))
            return
        for session_id in orphans:
            if session_id not in self.held:
                await adopt(session_id)

    async def follow_hand_offs(self, store: HandOffStore, get: Callable[[str], Session | None],
                               sessions: Callable[[], Iterable[Session]], adopt: Adopt) -> None:
        """Run for as long as the manager: queue each message another worker hands to this one in its session
        (``get(id)``), or, when the session is no longer open here, take the conversation over (``adopt``); after a
        moment in which hand-offs may have been missed, every open session reads its inbox again."""
        try:
            following = store.hand_offs(self.holder)
        except StoreError as exc:
            _log.error("cannot follow the messages other workers hand to this one", error=str(exc))
            return
        try:
            async with anyio.create_task_group() as group:
                async for session_id in following:
                    ids = [s.id for s in sessions()] if session_id is None else [session_id]
                    for one in ids:
                        group.start_soon(self._take_handed, one, get, adopt)
        finally:
            with anyio.CancelScope(shield=True):
                await following.aclose()

    async def _take_handed(self, session_id: str, get: Callable[[str], Session | None], adopt: Adopt) -> None:
        delay = FIRST_POLL
        for _ in range(5):
            session = get(session_id)
            if session is None:
                break
            try:
                await session.refill()
                return
            except SessionClosed:
                break
            except StoreError as exc:  # it waits in the inbox: read again shortly
                _log.warning("could not read a handed-off message; trying again", session=session_id,
                             error=str(exc))
                await anyio.sleep(delay)
                delay = min(MAX_POLL * 4, delay * 4)
        else:
            return  # the message waits in the inbox for the session's next read, or for whoever opens it next
        await adopt(session_id)
