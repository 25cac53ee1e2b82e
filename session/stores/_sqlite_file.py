"""The SQLite store's file: its schema and version, opening it (made private when new, upgraded when old), and the
reads that span conversations (listings)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from loop import Turn, UsageError
from session.stores._protocol import StoredSession, StoreError, title_of

_TITLE_TURNS = 8  # how many of a conversation's first turns a listing reads for its title
SCHEMA_VERSION = 4  # 3 added the inbox, 4 the checkpoints
# Schema 1 stores kept run results (degraded, verification ...) in a conversation's meta. Upgrading marks
# those conversations, and loading one moves the results onto its last answer's outcome.
LEGACY = "__legacy_run_results__"
_UPGRADE_1 = f"""
UPDATE sessions SET meta = json_set(meta, '$.{LEGACY}', 1)
WHERE json_type(meta, '$.degraded') IS NOT NULL OR json_type(meta, '$.degraded_reason') IS NOT NULL
   OR json_type(meta, '$.verification') IS NOT NULL OR json_type(meta, '$.code_action') IS NOT NULL;
"""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id       TEXT PRIMARY KEY,
    meta     TEXT NOT NULL,
    length   INTEGER NOT NULL,
    rev      INTEGER NOT NULL,
    created  REAL NOT NULL,
    updated  REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS turns (
    session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    idx         INTEGER NOT NULL,
    rev         INTEGER NOT NULL,
    data        TEXT NOT NULL,
    PRIMARY KEY (session_id, idx, rev)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS inbox (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id  TEXT NOT NULL,
    message_id  TEXT NOT NULL,
    data        TEXT NOT NULL,
    UNIQUE (session_id, message_id)
);
CREATE TABLE IF NOT EXISTS checkpoints (
    key      TEXT PRIMARY KEY,
    data     TEXT NOT NULL,
    updated  REAL NOT NULL
);
"""


def connect(path: Path, synchronous: str) -> sqlite3.Connection:
    """A connection to the store's file at ``path``, in WAL mode with ``synchronous``, its schema current."""
    _create_private(path)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA busy_timeout = 5000")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(f"{path} was written with store schema {version}; this version reads "
                             f"up to {SCHEMA_VERSION}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("PRAGMA foreign_keys = ON")
        if version < SCHEMA_VERSION:
            upgrade = _UPGRADE_1 if version == 1 else ""
            conn.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} {upgrade} PRAGMA user_version = {SCHEMA_VERSION}; "
                               "COMMIT;")
    except BaseException:
        conn.close()
        raise
    return conn


def _create_private(path: Path) -> None:
    """Make the folder (0700) and the empty database file (0600) if they do not exist, so that the
    conversations are readable by their owner only; SQLite gives its -wal and -shm files the database's mode.
    An existing folder or file keeps the mode it has."""
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        pass


def read_listing(conn: sqlite3.Connection, prefix: str, limit: int) -> tuple[StoredSession, ...]:
    """The conversations whose id starts with ``prefix``, most recently updated first, at most ``limit``; each
    title is looked for among the conversation's first ``_TITLE_TURNS`` turns (in their newest revisions)."""
    rows = conn.execute("SELECT id, length, updated FROM sessions WHERE substr(id, 1, ?) = ? "
                        "ORDER BY updated DESC, id LIMIT ?", (len(prefix), prefix, limit)).fetchall()
    listed = []
    for session_id, length, updated in rows:
        first: dict[int, str] = {}  # ordered by (idx, rev): the last row seen per idx is its newest revision
        for idx, data in conn.execute("SELECT idx, data FROM turns WHERE session_id = ? AND idx < ? "
                                      "ORDER BY idx, rev", (session_id, min(length, _TITLE_TURNS))):
            first[idx] = data
        try:
            title = title_of(Turn.from_dict(json.loads(t)) for t in first.values())
        except (ValueError, UsageError):  # an unreadable turn: listed without a title (``load`` says why)
            title = ""
        listed.append(StoredSession(session_id, title, length, updated))
    return tuple(listed)

