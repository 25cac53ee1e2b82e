"""The PostgreSQL store's tables: their versions and the steps that make or upgrade them, and the statements that
span rows of several kinds (a conversation's turns with their newest revisions, the bytes of images and files
kept once by digest, listings); the leases' are in ``_postgres_leases``. Every function here runs in a worker
thread, on the connection it is given: ``migrate`` in a transaction of its own, the others inside the caller's.

Turns are kept as the SQLite store keeps them: one row per turn and revision, ``(session_id, idx, rev)``, only
ever inserted. A conversation's row holds its ``length`` and its current ``rev``; moving to a branch (an append
starting before the end) raises ``rev``, and the branch's rows supersede the older ones from the branch point on.
So the conversation is, for each ``idx`` below ``length``, the row with the highest ``rev``: the turns before a
branch point keep their older revisions, and the superseded rows stay as a record of what was tried.

Turns and meta are JSON *text* columns rather than ``jsonb``: a turn reads back exactly as written (``jsonb``
reorders keys and refuses ``\\u0000`` in strings), and the store never queries inside them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from loop import Turn, UsageError
from session.stores._protocol import StoredSession, StoreError, title_of
from session.stores._sqlite_file import _DIGEST, _kept_apart, _text_only

# Taken (for the migrating transaction only) while a store makes or upgrades its tables, so that two processes
# starting at once upgrade one after the other. Its value is "cl_store" in ASCII.
_MIGRATION_LOCK = 0x636C5F73746F7265

# The steps from each version to the next: MIGRATIONS[n] takes the tables from version n to n + 1. Released steps
# are never edited: a database made by an older version is upgraded by the steps it lacks.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (  # 1: conversations, one row per turn and revision, the inbox, checkpoints
        "CREATE SEQUENCE session_versions",
        """CREATE TABLE sessions (
            id       text PRIMARY KEY,
            meta     text NOT NULL,
            length   integer NOT NULL,
            rev      integer NOT NULL,
            version  bigint NOT NULL,
            created  double precision NOT NULL,
            updated  double precision NOT NULL)""",
        """CREATE TABLE turns (
            session_id  text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            idx         integer NOT NULL,
            rev         integer NOT NULL,
            data        text NOT NULL,
            PRIMARY KEY (session_id, idx, rev))""",
        """CREATE TABLE inbox (
            seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            session_id  text NOT NULL,
            message_id  text NOT NULL,
            data        text NOT NULL,
            UNIQUE (session_id, message_id))""",
        """CREATE TABLE checkpoints (
            key      text PRIMARY KEY,
            data     text NOT NULL,
            updated  double precision NOT NULL)""",
    ),
    (  # 2: the bytes of images and files kept apart, once each by digest, and listings by time of update
        """CREATE TABLE blobs (
            digest      text PRIMARY KEY,
            media_type  text,
            bytes       bytea NOT NULL,
            size        bigint NOT NULL)""",
        """CREATE TABLE blob_uses (
            session_id  text NOT NULL,
            digest      text NOT NULL,
            PRIMARY KEY (session_id, digest))""",
        "CREATE INDEX blob_uses_digest ON blob_uses (digest)",
        "CREATE INDEX sessions_updated ON sessions (updated DESC, id)",
    ),
    (  # 3: leases, one worker at a time per conversation, with a fencing epoch (see _postgres_leases)
        """CREATE TABLE leases (
            session_id  text PRIMARY KEY,
            holder      text NOT NULL,
            epoch       bigint NOT NULL,
            expires     double precision NOT NULL)""",
        "CREATE INDEX leases_holder ON leases (holder)",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)
"""The version of the tables this code reads and writes; ``schema_version`` holds the version of a database's."""

NOW = "extract(epoch FROM clock_timestamp())::double precision"
"""The server's clock, in seconds since the epoch: one clock for every process that shares the database."""


def migrate(conn: psycopg.Connection[Any], where: str) -> int:
    """Make the store's tables, or upgrade them to ``SCHEMA_VERSION``, in one transaction; the version they had
    (0: none). A database written by a newer version raises ``StoreError``, as do tables of another program
    under the same names."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        found = conn.execute("SELECT to_regclass('schema_version')").fetchone()
        if found is None or found[0] is None:  # looked up first: a role that may not create tables can use them
            conn.execute("CREATE TABLE schema_version (version integer NOT NULL)")
        row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
        version = row[0] if row is not None and row[0] is not None else 0
        if version > SCHEMA_VERSION:
            raise StoreError(f"{where} was written with store schema {version}; this version reads up to "
                             f"{SCHEMA_VERSION}")
        if version == SCHEMA_VERSION:
            return version
        for step in MIGRATIONS[version:]:
            for statement in step:
                try:
                    with conn.transaction():  # a savepoint: the error below names the statement that failed
                        conn.execute(statement)
                except psycopg.errors.DuplicateTable as exc:
                    raise StoreError(f"{where}: cannot make the store's tables ({exc}); a table of that name "
                                     "belongs to something else: give the store a schema of its own, "
                                     "?options=-csearch_path%3Dname in its URL") from None
        conn.execute("DELETE FROM schema_version")
        conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (SCHEMA_VERSION,))
    return version


def read_turns(conn: psycopg.Connection[Any], session_id: str, length: int) -> list[str]:
    """The JSON text of the conversation's turns, in order: for each index below ``length``, its newest revision.
    (Read backwards, newest first, the primary key's order serves ``DISTINCT ON`` without a sort.)"""
    rows = conn.execute("SELECT DISTINCT ON (idx) data FROM turns WHERE session_id = %s AND idx < %s "
                        "ORDER BY idx DESC, rev DESC", (session_id, length)).fetchall()
    return [row[0] for row in reversed(rows)]


def keep_blobs(conn: psycopg.Connection[Any], session_id: str,
               blobs: Sequence[tuple[str, str | None, bytes, int]]) -> None:
    """Write the ``blobs`` (``Rows.blobs``) not kept already, and that conversation ``session_id`` uses them.

    Each blob's row ends up locked by this transaction, whether it wrote it or found it (``DO UPDATE`` locks
    what it finds): a ``delete`` of another conversation that last used it waits for this transaction to end,
    and then sees this conversation's use. When such a delete removed the row first, the insert writes it
    again. Rows are locked in digest order, as ``forget_blobs`` locks them, so the two never deadlock."""
    if blobs:
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO blobs (digest, media_type, bytes, size) VALUES (%s, %s, %s, %s) "
                            "ON CONFLICT (digest) DO UPDATE SET size = blobs.size", sorted(blobs))
            cur.executemany("INSERT INTO blob_uses (session_id, digest) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                            [(session_id, row[0]) for row in blobs])


def forget_blobs(conn: psycopg.Connection[Any], session_id: str) -> None:
    """Forget that conversation ``session_id`` uses any blobs, and drop the blobs no other conversation uses.
    The candidates are locked first (see ``keep_blobs``); the check for other uses is a later statement, so it
    sees the uses that transactions holding those locks committed."""
    digests = [r[0] for r in conn.execute("DELETE FROM blob_uses WHERE session_id = %s RETURNING digest",
                                          (session_id,))]
    if digests:
        conn.execute("SELECT 1 FROM blobs WHERE digest = ANY(%s) ORDER BY digest FOR UPDATE", (digests,))
        conn.execute("DELETE FROM blobs WHERE digest = ANY(%s) AND NOT EXISTS "
                     "(SELECT 1 FROM blob_uses AS u WHERE u.digest = blobs.digest)", (digests,))


def read_blobs(conn: psycopg.Connection[Any], texts: Iterable[str]) -> dict[str, bytes]:
    """The kept-apart bytes that the turns written as ``texts`` name, by digest: those and no others."""
    named: set[str] = set()
    for text in texts:
        if _DIGEST in text:  # most turns hold no image or file: their text is never parsed twice
            try:
                named.update(digest for digest, _ in _kept_apart([json.loads(text)]))
            except ValueError:
                continue  # reading the turn says what is wrong with it
    if not named:
        return {}
    rows = conn.execute("SELECT digest, bytes FROM blobs WHERE digest = ANY(%s)", (sorted(named),)).fetchall()
    return {digest: bytes(data) for digest, data in rows}


TITLE_TURNS = 8  # how many of a conversation's first turns a listing reads for its title


def read_listing(conn: psycopg.Connection[Any], prefix: str, limit: int) -> tuple[StoredSession, ...]:
    """The conversations whose id starts with ``prefix``, most recently updated first, at most ``limit``; each
    title is looked for among the conversation's first ``TITLE_TURNS`` turns (in their newest revisions)."""
    rows = conn.execute("SELECT id, length, updated FROM sessions WHERE starts_with(id, %s) "
                        "ORDER BY updated DESC, id LIMIT %s", (prefix, limit)).fetchall()
    if not rows:
        return ()
    first: dict[str, list[str]] = {}
    for session_id, data in conn.execute(
        "SELECT DISTINCT ON (t.session_id, t.idx) t.session_id, t.data FROM turns AS t "
        "JOIN sessions AS s ON s.id = t.session_id "
        "WHERE t.session_id = ANY(%s) AND t.idx < least(s.length, %s) "
        "ORDER BY t.session_id, t.idx, t.rev DESC", ([r[0] for r in rows], TITLE_TURNS)
    ):
        first.setdefault(session_id, []).append(data)
    listed = []
    for session_id, length, updated in rows:
        try:
            title = title_of(Turn.from_dict(_text_only(t)) for t in first.get(session_id, ()))
        except (ValueError, UsageError):  # an unreadable turn: listed without a title (``load`` says why)
            title = ""
        listed.append(StoredSession(session_id, title, length, updated))
    return tuple(listed)
