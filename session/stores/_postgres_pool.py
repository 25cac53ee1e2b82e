"""``Connections``: how a PostgreSQL store (and its event feed) reaches the server: calls run in worker threads,
each on a connection of a thread-safe ``psycopg_pool.ConnectionPool``, made on the first call.

**Threads, not psycopg's async API.** psycopg 3's ``AsyncConnection`` waits on the asyncio event loop only, and
this project runs on trio as well; psycopg's blocking API in worker threads (``anyio.to_thread.run_sync``) runs
unchanged on both. Only ``pool_size`` threads work at once (a ``CapacityLimiter`` of that size), so a thread never
waits on the pool for another's connection and a burst of calls cannot take all of anyio's shared threads. A call
whose task is cancelled finishes its work first (the thread is never abandoned), so a transaction is never left
half done, and its connection always goes back to the pool.

**When the server goes away.** A call waits at most ``PROBE_AFTER`` seconds for a connection of the pool; since at
most ``pool_size`` calls run at once, waiting longer means the pool has lost its connections (the server restarted
or cannot be reached), and psycopg_pool tries again only after a growing delay (1 s, 2 s, 4 s...). So the call
connects on its own instead: while the server cannot be reached it fails at once, saying why, rather than after
``timeout`` seconds; once the server is back it works, before the pool has caught up. A connection the server
ended while it sat in the pool is found out before it is handed out (``check_idle``), so a call after a restart
does not fail on it.
"""

from __future__ import annotations

import selectors
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import psycopg
import psycopg_pool

from loop import UsageError
from session.stores._postgres_url import Conninfo
from session.stores._protocol import StoreError

T = TypeVar("T")
Conn = psycopg.Connection[Any]

PROBE_AFTER = 0.5
"""Seconds a call waits for a connection of the pool before it connects to the server on its own (see above)."""


def check_idle(conn: Conn) -> None:
    """A pool's check of a connection it is about to hand out (``ConnectionPool(check=...)``): one the server wrote
    to while it sat idle (it ended it: a restart, ``pg_terminate_backend``, an idle timeout) is asked a round trip,
    which raises when it is gone, so the pool drops it and hands out another rather than the call failing; any
    other costs no round trip."""
    with selectors.DefaultSelector() as selector:  # select.select fails on descriptors past FD_SETSIZE
        selector.register(conn.fileno(), selectors.EVENT_READ)
        written = bool(selector.select(0))
    if written:
        psycopg_pool.ConnectionPool.check_connection(conn)


class Connections:
    """The connections of ``owner`` (a store or a feed; its ``str`` names it in errors, its ``repr`` in the error
    for a call after ``aclose``) to the server ``conninfo`` names. The first call runs ``prepare(conn)`` on a
    connection of its own (it makes the tables; its error, ``first`` saying what it did, tells why the server
    cannot be used, where a pool would only time out), then opens a pool of up to ``size`` connections, named
    ``name`` in ``pg_stat_activity``; a call waits up to ``timeout`` seconds for one. Errors become ``StoreError``
    (the password never shows)."""

    def __init__(self, owner: object, conninfo: Conninfo, *, size: int, timeout: float, name: str,
                 prepare: Callable[[Conn], None], first: str) -> None:
        self.owner = owner
        self.conninfo = conninfo
        self.size = size
        self.timeout = timeout
        self.name = name
        self.closed = False
        self._prepare = prepare
        self._first = first
        self._pool: psycopg_pool.ConnectionPool[Conn] | None = None
        self._short = False  # whether the pool had no connection to give, the last time it was asked
        self._opening = anyio.Lock()
        self._threads = anyio.CapacityLimiter(size)

    def check_open(self) -> None:
        if self.closed:
            raise UsageError(f"{self.owner!r} is closed; make a new {type(self.owner).__name__} to use the database "
                             "again")

    def error(self, exc: BaseException, what: str = "") -> StoreError:
        return self.conninfo.error(exc, str(self.owner), what)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(conn, *args)`` in a worker thread, on a connection; errors become ``StoreError``."""
        pool = self._pool
        if pool is None:  # the usual case has no wait: the order of callers' writes is kept
            self.check_open()
            async with self._opening:
                self.check_open()
                if self._pool is None:
                    self._pool = await anyio.to_thread.run_sync(self._start)
                pool = self._pool
        return await anyio.to_thread.run_sync(self._on_connection, pool, fn, *args, limiter=self._threads)

    def _start(self) -> psycopg_pool.ConnectionPool[Conn]:
        params = self.conninfo.params
        try:
            conn = psycopg.connect(**params, autocommit=True)
        except psycopg.Error as exc:
            raise self.error(exc, "cannot connect")
        try:
            with conn:
                self._prepare(conn)
        except psycopg.Error as exc:
            raise self.error(exc, self._first)
        pool: psycopg_pool.ConnectionPool[Conn] = psycopg_pool.ConnectionPool(
            kwargs={**params, "autocommit": True}, min_size=1, max_size=self.size, open=False, timeout=self.timeout,
            name=self.name, check=check_idle)
        pool.open(wait=False)
        return pool

    def _on_connection(self, pool: psycopg_pool.ConnectionPool[Conn], fn: Callable[..., T], *args: Any) -> T:
        try:
            try:
                with pool.connection(timeout=0.001 if self._short else min(PROBE_AFTER, self.timeout)) as conn:
                    self._short = False
                    return fn(conn, *args)
            except psycopg_pool.PoolTimeout:
                self._short = True  # see PROBE_AFTER
            try:
                conn = psycopg.connect(**self.conninfo.params, autocommit=True)
            except psycopg.Error as exc:
                raise self.error(exc, "cannot reach the server")
            with conn:
                return fn(conn, *args)
        except psycopg_pool.PoolClosed:
            self.closed = True
            self.check_open()
            raise
        except (psycopg.Error, UnicodeEncodeError) as exc:  # the second: text with no UTF-8 (a lone surrogate)
            raise self.error(exc)  # its cause is set (or withheld) by the error

    async def aclose(self) -> None:
        """Close the connections (one in use closes when its call ends); later calls raise ``UsageError``. Closing
        twice is fine."""
        with anyio.CancelScope(shield=True):  # a cancelled close would leave the connections open
            async with self._opening:
                self.closed = True
                pool, self._pool = self._pool, None
                if pool is not None:
                    await anyio.to_thread.run_sync(pool.close)
