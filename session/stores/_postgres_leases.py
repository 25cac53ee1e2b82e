"""The leases of a ``PostgresStore`` (``LeaseStore``): its calls that take, renew, release and list them
(``PostgresLeasing``), their statements, and the fencing check every write of a conversation makes. The functions run in
a worker thread, on the connection they are given: ``fence`` inside the caller's transaction, the others as one
statement each.

**A row per conversation, not advisory locks.** PostgreSQL's advisory locks also give one holder at a time, but a
lock belongs to one connection, and a store's calls run on whichever connection of its pool is free: the writes
that follow an acquire would run on others. The lock dies silently with its connection (a pool replacing it, a
network cut) while its holder goes on writing, and it leaves no token that a later write, on another connection
or from another process, could be checked against. So a conversation's lease is a row of table ``leases``: its
``holder``, its ``epoch`` (the fencing token) and when it lapses (``expires``), by the server's clock (``NOW``),
the one clock every process sharing the database agrees on. Leases are given for ``ttl`` seconds, and their
holder renews them before they lapse; a worker that stops (killed, cut off, paused) lets its leases lapse, and
another takes its conversations over.

**Epochs only grow.** A lease that changes hands gets its row's epoch plus one, in the statement that takes it,
so of many workers racing for a lapsed lease exactly one wins (``INSERT ... ON CONFLICT DO UPDATE`` locks the
row, and each waiting statement checks it again as the winner left it). Releasing makes the row lapse at once
(``expires`` is minus infinity, which ``renew`` never revives) and keeps it, as deleting the conversation
does: a deposed holder never finds its old epoch again. (So rows are never deleted: one small row per
conversation ever leased.) Taking a lease one released is a new one, with a new epoch.

**Fencing.** ``append``, ``done`` and ``delete`` of a conversation lock its lease row ``FOR SHARE`` in their own
transaction and check it: the lease this store took must still be the row's, same holder and epoch (lapsed or
not: a lapsed lease nobody took is still its holder's); a store holding no lease may write only while no lease
is live. The lock holds a takeover (whose update waits for it) until the write has committed, so a new holder
that loads the conversation after taking it sees every write the check let through. A conversation never leased
has no row to lock: a store holding no lease may write it while its first lease is being taken, and then the
version check (see ``_postgres``) refuses the new holder's append if its load missed that write.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from session.stores._postgres_sql import NOW
from session.stores._postgres_views import HeldLeases, WriteQueues
from session.stores._protocol import Lease, LeaseLost, check_holder, check_session_id, check_ttl

T = TypeVar("T")

Held = tuple[str, int]
"""A lease this store took: its holder and epoch."""


_RELEASED = "'-infinity'::double precision"  # the expiry of a released lease: lapsed, and never renewed

_ACQUIRE = (
    f"INSERT INTO leases AS l (session_id, holder, epoch, expires) VALUES (%(id)s, %(holder)s, 1, {NOW} + %(ttl)s) "
    "ON CONFLICT (session_id) DO UPDATE SET holder = excluded.holder, expires = excluded.expires, "
    f"epoch = CASE WHEN l.holder = excluded.holder AND l.expires > {_RELEASED} THEN l.epoch ELSE l.epoch + 1 END "
    f"WHERE (l.holder = excluded.holder AND l.expires > {_RELEASED}) OR l.expires <= {NOW} "
    "RETURNING epoch, expires")

_LAPSED = ("SELECT DISTINCT i.session_id FROM inbox AS i LEFT JOIN leases AS l ON l.session_id = i.session_id "
           f"WHERE l.session_id IS NULL OR l.expires <= {NOW} ORDER BY i.session_id")


def acquire_lease(conn: psycopg.Connection[Any], session_id: str, holder: str, ttl: float) -> Lease | None:
    """Give ``holder`` the lease of conversation ``session_id`` for ``ttl`` seconds when it is free, lapsed or
    its own already (renewed, same epoch); ``None`` while another holder's is live."""
    row = conn.execute(_ACQUIRE, {"id": session_id, "holder": holder, "ttl": ttl}).fetchone()
    return None if row is None else Lease(session_id, holder, row[0], row[1])


def renew_leases(conn: psycopg.Connection[Any], holder: str, ttl: float) -> tuple[str, ...]:
    """Extend every lease ``holder`` still holds (lapsed or not, but not released) to ``ttl`` seconds from now;
    their conversations' ids, sorted."""
    rows = conn.execute(f"UPDATE leases SET expires = {NOW} + %s WHERE holder = %s AND expires > {_RELEASED} "
                        "RETURNING session_id", (ttl, holder)).fetchall()
    return tuple(sorted(row[0] for row in rows))


def release_lease(conn: psycopg.Connection[Any], session_id: str, holder: str) -> None:
    """Make ``holder``'s lease of ``session_id`` lapse now, keeping its row and epoch; nothing when it holds none."""
    conn.execute(f"UPDATE leases SET expires = {_RELEASED} WHERE session_id = %s AND holder = %s "
                 f"AND expires > {_RELEASED}", (session_id, holder))


def read_lapsed(conn: psycopg.Connection[Any]) -> tuple[str, ...]:
    """The ids of the conversations with messages waiting whose lease is free or lapsed, sorted."""
    return tuple(row[0] for row in conn.execute(_LAPSED))


def fence(conn: psycopg.Connection[Any], session_id: str, held: Held | None, where: str) -> None:
    """In a write's transaction: raise ``LeaseLost`` unless this store may write conversation ``session_id``:
    ``held`` (the lease it took) is still the conversation's, or it holds none and no lease is live. The lease
    row stays locked (``FOR SHARE``) until the transaction ends."""
    row = conn.execute(f"SELECT holder, epoch, expires > {NOW} FROM leases WHERE session_id = %s FOR SHARE",
                       (session_id,)).fetchone()
    if held is None:
        if row is not None and row[2]:
            raise LeaseLost(f"session {session_id!r} is leased to {row[0]!r} in {where}, and this store holds no "
                            "lease of it; nothing was written")
        return
    holder, epoch = held
    if row is None:
        raise LeaseLost(f"the lease of session {session_id!r} that {holder!r} held (epoch {epoch}) is gone from "
                        f"{where}; nothing was written")
    if (row[0], row[1]) != held:
        raise LeaseLost(f"{holder!r} lost the lease of session {session_id!r} (epoch {epoch}) in {where}: "
                        f"{row[0]!r} holds it now (epoch {row[1]}); nothing was written")


class PostgresLeasing:
    """``PostgresStore``'s calls of the ``LeaseStore`` ability, kept here beside their statements. The store gives
    what they use: ``_call`` (a function on a connection, in a worker thread), the queue of each conversation's
    writes (acquiring and releasing take their turn in it) and the leases it holds (``HeldLeases``)."""

    _queued: WriteQueues
    _leases: HeldLeases

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        raise NotImplementedError

    async def acquire(self, session_id: str, holder: str, ttl: float) -> Lease | None:
        """Lease conversation ``session_id`` to ``holder`` for ``ttl`` seconds, or renew its lease: the lease, whose
        epoch fences this store's writes of it from now on, or ``None`` while another's is live."""
        seconds = check_ttl(ttl)
        check_holder(holder)
        async with self._queued.of("session", check_session_id(session_id)):
            lease = await self._call(acquire_lease, session_id, holder, seconds)
            self._leases.acquired(session_id, holder, lease)
        return lease

    async def renew(self, holder: str, ttl: float) -> tuple[str, ...]:
        """Extend every lease ``holder`` holds to ``ttl`` seconds from now; their conversations' ids, sorted. This
        store's writes of one missing (taken over) are no longer fenced by it."""
        seconds = check_ttl(ttl)
        expected = self._leases.of_holder(check_holder(holder))
        kept = await self._call(renew_leases, holder, seconds)
        self._leases.renewed(expected, kept)
        return kept

    async def release(self, session_id: str, holder: str) -> None:
        """Give up ``holder``'s lease of ``session_id`` at once (its epoch is kept: the next holder's is higher)."""
        check_holder(holder)
        async with self._queued.of("session", check_session_id(session_id)):
            await self._call(release_lease, session_id, holder)
            self._leases.released(session_id, holder)

    async def lapsed(self) -> tuple[str, ...]:
        """The ids of the conversations with messages waiting whose lease is free or lapsed, sorted."""
        return await self._call(read_lapsed)
