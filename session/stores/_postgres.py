"""``PostgresStore``: conversations in a PostgreSQL database, which any number of processes can share.

**Threads, not psycopg's async API** (see ``_postgres_pool``, which also says what happens while the server is
down). A thread hop costs tens of microseconds, next to the round trips of each call's transaction. Measured on 2
cores against a server on loopback, the same append transaction took 0.63 ms one after another through threads
and 0.74 ms through psycopg's ``AsyncConnectionPool`` on asyncio, and 1,000 appends by 200 concurrent tasks 0.37 s
either way (0.66 s through threads on trio).

**Conflicts.** Each append is one transaction that first locks the conversation's row (``SELECT ... FOR UPDATE``,
or the insert that creates it), so appends to one conversation from any number of processes take turns, and
nothing of a refused append is written. A start past the stored length raises ``StoreConflict`` as the
``Store`` contract says. A shared database adds a hazard the contract's single writer never meets: two processes
holding the same conversation both append "at the end", and the second's start, now before the end, would
silently branch over the first's turns. So every write gives the row a new ``version`` (from one sequence), the
store remembers the version it last saw of each conversation (by loading or writing it), and an append to a
conversation changed since then by another writer raises ``StoreConflict``: the writer loads it again and
decides. A conversation this store has not seen is appended to as the contract says, unchecked.

**Leases.** Workers sharing the database take turns at a conversation by its lease (``LeaseStore``): a row with
its holder, an expiry by the server's clock and an epoch that grows with each new holder, which every append,
done and delete checks in its own transaction (the fencing). Advisory locks would not do: they belong to one
connection of the pool and die silently with it, and leave no token a later write could be checked against.

Branches, blobs and the schema are in ``_postgres_sql``; leases and fencing in ``_postgres_leases``; handing a
message to a conversation's holder in ``_postgres_handoff``; connecting in
``_postgres_pool``; the URL and its password in ``_postgres_url``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import psycopg

from loop import State, Turn, UsageError, tracing
from loop.checks import positive_number
from session.stores._postgres_handoff import PostgresHandOff
from session.stores._postgres_leases import Held, PostgresLeasing, fence
from session.stores._postgres_sql import (NOW, SCHEMA_VERSION, forget_blobs, keep_blobs, migrate, read_blobs,
                                          read_listing, read_turns)
from session.stores._postgres_pool import Connections
from session.stores._postgres_url import Conninfo
from session.stores._postgres_views import HeldLeases, Views, WriteQueues
from session.stores._protocol import (LeaseLost, StoreConflict, StoredSession, StoreError, check_append,
                                     check_checkpoint_key, check_listing, check_posted, check_session_id,
                                     checkpoint_text, read_checkpoint)
from session.stores._sqlite_file import Rows

if TYPE_CHECKING:
    from session.stores._postgres_events import PostgresEvents

T = TypeVar("T")
Conn = psycopg.Connection[Any]
_log = tracing.logger("session.stores")

FEED_KEEP = 86_400.0  # seconds of events the feed keeps: a reader may come back a day later and resume

_LOCK_ROW = "SELECT length, rev, version FROM sessions WHERE id = %s FOR UPDATE"
_SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"  # reads see one moment of the database


class PostgresStore(PostgresLeasing, PostgresHandOff):
    """A ``Store`` in a PostgreSQL database, at ``url`` (``postgresql://user[:password]@host[:port]/database``;
    libpq's ``PG*`` variables fill in what else it leaves out, ``PGPASSWORD`` the password). It is a
    ``DeletingStore``, an ``InboxStore``, a ``CheckpointStore``, a ``ListingStore``, a ``LeaseStore``, a
    ``HandOffStore`` (a message is handed to the worker holding its conversation) and a ``FeedStore`` (its
    sessions' events go between processes through ``event_feed``), keeps the
    bytes of images and files once each by digest, as ``SQLiteStore`` does, and several processes may share one
    database (see the module's notes on conflicts and leases). Once the store has taken the lease of a conversation
    (``acquire``), its writes of it are fenced by that lease; a store that takes none writes as before, except while
    another worker's lease of the conversation is live (``LeaseLost``). Its tables go in the first schema of the
    connection's ``search_path``: to keep several stores in one database, give each a schema of its own with
    ``?options=-csearch_path%3Dname``.

    Nothing connects until the first call, which makes the tables, or upgrades them, and opens a pool of up to
    ``pool_size`` connections; a call waits up to ``timeout`` seconds for a connection. The default size, 4, suits
    a process on a few cores: a call spends most of its time waiting on the server, and each connection holds a
    server process. A server that cannot be reached, or refuses the login, raises ``StoreError`` saying why. The password never shows: not in the repr,
    the log or an error. Whoever makes the store closes it (``aclose``, or ``async with``); closing is final.
    """

    def __init__(self, url: str, *, pool_size: int = 4, timeout: float = 30.0) -> None:
        self._conninfo = Conninfo(url)
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            raise UsageError(f"pool_size must be a positive int, got {pool_size!r}")
        positive_number("timeout", timeout, unit="seconds")
        self.url = self._conninfo.url  # shown without its password
        self.pool_size = pool_size
        self.timeout = float(timeout)
        self._db = Connections(self, self._conninfo, size=pool_size, timeout=self.timeout, name="cognitive-loop-store",
                               prepare=self._migrate, first="cannot make or upgrade the store's tables")
        self._queued = WriteQueues()
        self._views = Views()
        self._leases = HeldLeases()
        self._feed: PostgresEvents | None = None

    # Connecting and running calls.

    def _migrate(self, conn: Conn) -> None:
        """Make the tables, or upgrade them (on the first call's connection of its own)."""
        before = migrate(conn, str(self))
        if before < SCHEMA_VERSION:
            _log.info("made the store's tables" if before == 0 else "upgraded the store's tables", store=self.url,
                      schema_from=before, schema_to=SCHEMA_VERSION)

    def _check_open(self) -> None:
        self._db.check_open()

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(conn, *args)`` in a worker thread, on a connection of the pool; errors become ``StoreError``."""
        return await self._db.call(fn, *args)

    # The Store.

    async def load(self, session_id: str) -> State | None:
        check_session_id(session_id)
        return await self._call(self._load, session_id)

    def _load(self, conn: Conn, session_id: str) -> State | None:
        began = self._views.tick()
        with conn.transaction():
            conn.execute(_SNAPSHOT)
            row = conn.execute("SELECT meta, length, version FROM sessions WHERE id = %s", (session_id,)).fetchone()
            if row is None:
                self._views.read(session_id, 0, began)
                return None
            meta, length, version = row
            texts = read_turns(conn, session_id, length)
            blobs = read_blobs(conn, texts)
        self._views.read(session_id, version, began)
        try:
            turns = [Turn.from_dict(json.loads(t), where=f"turn {i}", blobs=blobs) for i, t in enumerate(texts)]
            return State(turns, json.loads(meta))
        except (ValueError, UsageError) as exc:
            raise StoreError(f"session {session_id!r} in {self} is unreadable: {exc}") from exc

    async def append(self, session_id: str, start: int, turns: Sequence[Turn], meta: Mapping[str, Any]) -> None:
        check_session_id(session_id)
        check_append(session_id, start, start, turns)  # argument checks; the length is checked in the write
        self._check_open()
        try:
            rows = Rows(turns)
            meta_text = json.dumps(dict(meta), ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"cannot store session {session_id!r}: meta must be JSON data ({exc})") from exc
        async with self._queued.of("session", session_id):
            await self._call(self._append, session_id, start, rows, meta_text, self._leases.of(session_id))

    def _append(self, conn: Conn, session_id: str, start: int, rows: Rows, meta: str, held: Held | None) -> None:
        expected = self._views.expected(session_id)
        committing = False
        try:
            with conn.transaction():
                fence(conn, session_id, held, str(self))
                row = conn.execute(_LOCK_ROW, (session_id,)).fetchone()
                if row is None:  # a new conversation: its row is made (and so locked) before anything is checked
                    conn.execute(f"INSERT INTO sessions (id, meta, length, rev, version, created, updated) "
                                 f"VALUES (%s, '{{}}', 0, 0, 0, {NOW}, {NOW}) ON CONFLICT (id) DO NOTHING",
                                 (session_id,))
                    row = conn.execute(_LOCK_ROW, (session_id,)).fetchone()
                assert row is not None  # made above, or made by another transaction that committed
                stored, rev, version = row
                if expected is not None and expected != version:
                    raise StoreConflict(
                        f"session {session_id!r} was {'created' if expected == 0 else 'changed'} by another writer "
                        f"since {self} last read or wrote it (it holds {stored} turns now); load it again")
                check_append(session_id, stored, start, ())  # raises before anything of this append is written
                if start < stored:
                    rev += 1  # a branch: its rows supersede the stored ones from `start` on
                written = conn.execute(f"UPDATE sessions SET meta = %s, length = %s, rev = %s, "
                                       f"version = nextval('session_versions'), updated = {NOW} "
                                       "WHERE id = %s RETURNING version",
                                       (meta, start + len(rows.texts), rev, session_id)).fetchone()
                assert written is not None  # the row is locked by this transaction
                with conn.cursor() as cur:
                    cur.executemany("INSERT INTO turns (session_id, idx, rev, data) VALUES (%s, %s, %s, %s)",
                                    [(session_id, start + i, rev, text) for i, text in enumerate(rows.texts)])
                keep_blobs(conn, session_id, rows.blobs)
                committing = True
        except StoreConflict:
            raise  # nothing written (fenced off, or this store's view is out of date: it stays so until a load)
        except BaseException:
            if committing:  # the commit failed: whether it landed is unknown, so the next append is not checked
                self._views.wrote(session_id, None)
            raise
        self._views.wrote(session_id, written[0])

    async def delete(self, session_id: str) -> bool:
        """Remove a conversation, its turns and its inbox, and the blobs no other conversation uses; whether it
        existed."""
        check_session_id(session_id)
        async with self._queued.of("session", session_id):
            return await self._call(self._delete, session_id, self._leases.of(session_id))

    def _delete(self, conn: Conn, session_id: str, held: Held | None) -> bool:
        try:
            with conn.transaction():  # the conversation, its inbox and its blobs go together (its lease stays)
                fence(conn, session_id, held, str(self))
                conn.execute("DELETE FROM inbox WHERE session_id = %s", (session_id,))
                existed = conn.execute("DELETE FROM sessions WHERE id = %s", (session_id,)).rowcount > 0
                forget_blobs(conn, session_id)
        except LeaseLost:
            raise  # nothing deleted
        except BaseException:
            self._views.wrote(session_id, None)
            raise
        self._views.wrote(session_id, 0)
        return existed

    # The inbox.

    async def post(self, session_id: str, message: Turn) -> None:
        """Queue ``message`` in the conversation's inbox, durably (see ``InboxStore``)."""
        check_session_id(session_id)
        message_id = check_posted(message)
        self._check_open()
        try:
            rows = Rows((message,))
        except (TypeError, ValueError) as exc:
            raise UsageError(f"cannot store a message for session {session_id!r}: its meta must be JSON data "
                             f"({exc})") from exc
        async with self._queued.of("session", session_id):
            await self._call(self._post, session_id, message_id, rows)

    @staticmethod
    def _post(conn: Conn, session_id: str, message_id: str, rows: Rows) -> None:
        with conn.transaction():
            if conn.execute("INSERT INTO inbox (session_id, message_id, data) VALUES (%s, %s, %s) "
                            "ON CONFLICT (session_id, message_id) DO NOTHING",
                            (session_id, message_id, rows.texts[0])).rowcount:
                keep_blobs(conn, session_id, rows.blobs)

    async def done(self, session_id: str, message_id: str) -> None:
        """Take a message out of the inbox for good."""
        check_session_id(session_id)
        async with self._queued.of("session", session_id):
            await self._call(self._done, session_id, message_id, self._leases.of(session_id))

    def _done(self, conn: Conn, session_id: str, message_id: str, held: Held | None) -> None:
        with conn.transaction():
            fence(conn, session_id, held, str(self))
            conn.execute("DELETE FROM inbox WHERE session_id = %s AND message_id = %s", (session_id, message_id))

    async def inbox(self, session_id: str) -> tuple[Turn, ...]:
        """The messages waiting in the conversation's inbox, oldest first."""
        check_session_id(session_id)
        return await self._call(self._inbox, session_id)

    def _inbox(self, conn: Conn, session_id: str) -> tuple[Turn, ...]:
        with conn.transaction():
            conn.execute(_SNAPSHOT)
            texts = [r[0] for r in conn.execute("SELECT data FROM inbox WHERE session_id = %s ORDER BY seq",
                                                (session_id,))]
            blobs = read_blobs(conn, texts)
        try:
            return tuple(Turn.from_dict(json.loads(t), where=f"waiting message {i}", blobs=blobs)
                         for i, t in enumerate(texts))
        except (ValueError, UsageError) as exc:
            raise StoreError(f"the inbox of session {session_id!r} in {self} is unreadable: {exc}") from exc

    async def inboxes(self) -> tuple[str, ...]:
        """The ids of the conversations with messages waiting, sorted."""
        return await self._call(lambda conn: tuple(r[0] for r in conn.execute(
            "SELECT DISTINCT session_id FROM inbox ORDER BY session_id")))

    # Checkpoints.

    async def save_checkpoint(self, key: str, data: Mapping[str, Any]) -> None:
        """Keep ``data`` under ``key``, replacing what it held, in one transaction (see ``CheckpointStore``)."""
        text = checkpoint_text(check_checkpoint_key(key), data)
        async with self._queued.of("checkpoint", key):
            await self._call(lambda conn: conn.execute(
                f"INSERT INTO checkpoints (key, data, updated) VALUES (%s, %s, {NOW}) "
                "ON CONFLICT (key) DO UPDATE SET data = excluded.data, updated = excluded.updated", (key, text)))

    async def load_checkpoint(self, key: str) -> Mapping[str, Any] | None:
        """What ``key`` holds, or ``None``."""
        check_checkpoint_key(key)
        row = await self._call(lambda conn: conn.execute(
            "SELECT data FROM checkpoints WHERE key = %s", (key,)).fetchone())
        return None if row is None else read_checkpoint(key, row[0], str(self))

    async def drop_checkpoint(self, key: str) -> None:
        """Forget what ``key`` holds."""
        check_checkpoint_key(key)
        async with self._queued.of("checkpoint", key):
            await self._call(lambda conn: conn.execute("DELETE FROM checkpoints WHERE key = %s", (key,)))

    async def prune_checkpoints(self, older_than: float) -> int:
        """Drop the checkpoints not saved for ``older_than`` seconds; how many (see ``SQLiteStore``)."""
        positive_number("older_than", older_than, unit="seconds")
        dropped: int = await self._call(lambda conn: conn.execute(
            f"DELETE FROM checkpoints WHERE updated < {NOW} - %s", (float(older_than),)).rowcount)
        return dropped

    # Listing.

    async def sessions(self) -> list[str]:
        """The ids of every stored conversation, sorted."""
        return await self._call(lambda conn: [r[0] for r in conn.execute("SELECT id FROM sessions ORDER BY id")])

    async def list_sessions(self, prefix: str = "", *, limit: int = 100) -> tuple[StoredSession, ...]:
        """The conversations whose id starts with ``prefix``, most recently updated first, at most ``limit``; a
        title is looked for among a conversation's first few turns."""
        check_listing(prefix, limit)
        return await self._call(self._list, prefix, limit)

    @staticmethod
    def _list(conn: Conn, prefix: str, limit: int) -> tuple[StoredSession, ...]:
        with conn.transaction():
            conn.execute(_SNAPSHOT)
            return read_listing(conn, prefix, limit)

    # Closing.

    def event_feed(self) -> PostgresEvents:
        """The feed carrying the events of this store's sessions between processes (``FeedStore``): a
        ``PostgresEvents`` on the same database, made on first use, keeping ``FEED_KEEP`` seconds of events, and
        closed with the store."""
        self._check_open()
        if self._feed is None:
            from session.stores._postgres_events import PostgresEvents

            self._feed = PostgresEvents(self._conninfo, keep=FEED_KEEP)
        return self._feed

    async def aclose(self) -> None:
        """Close the pool's connections (one in use closes when its call ends) and the event feed; later calls
        raise ``UsageError``. Closing twice is fine."""
        with anyio.CancelScope(shield=True):  # a cancelled close would leave the connections open
            if self._feed is not None:
                await self._feed.aclose()
            await self._db.aclose()

    async def __aenter__(self) -> PostgresStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __str__(self) -> str:
        return f"PostgreSQL store {self.url!r}"

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r})"
