"""The SQLite store's file: its schema and version, opening it (made private when new, upgraded when old), the
bytes of images and files kept once by digest, and the reads that span conversations (listings)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from loop import Turn, UsageError
from loop.files import create_private
from session.stores._protocol import StoredSession, StoreError, title_of

_TITLE_TURNS = 8  # how many of a conversation's first turns a listing reads for its title
SCHEMA_VERSION = 5  # 3 added the inbox, 4 the checkpoints, 5 the blobs
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
CREATE TABLE IF NOT EXISTS blobs (
    digest      TEXT PRIMARY KEY,
    media_type  TEXT,
    bytes       BLOB NOT NULL,
    size        INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS blob_uses (
    session_id  TEXT NOT NULL,
    digest      TEXT NOT NULL,
    PRIMARY KEY (session_id, digest)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS blob_uses_digest ON blob_uses (digest);
"""


def connect(path: Path, synchronous: str) -> sqlite3.Connection:
    """A connection to the store's file at ``path``, in WAL mode with ``synchronous``, its schema current."""
    create_private(path)
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


class Rows:
    """Turns as the store writes them: the JSON text of each, with the bytes of its images and files kept apart
    (a ``digest`` in place of ``data``, see ``loop.codec``), and those bytes as rows for the blobs table, each once
    however many of the turns show it."""

    __slots__ = ("texts", "blobs")

    def __init__(self, turns: Sequence[Turn]) -> None:
        kept: dict[str, bytes] = {}
        written = [t.to_dict(blobs=kept) for t in turns]
        self.texts = [json.dumps(data, ensure_ascii=False) for data in written]
        self.blobs: list[tuple[str, str | None, bytes, int]] = []
        if kept:
            media_types: dict[str, Any] = {}
            for digest, media_type in _kept_apart(written):
                media_types.setdefault(digest, media_type)  # the type the bytes are first shown as
            self.blobs = [(digest, media_types.get(digest), data, len(data)) for digest, data in kept.items()]


def keep_blobs(conn: sqlite3.Connection, session_id: str, blobs: Sequence[tuple[str, str | None, bytes, int]]) -> None:
    """Write the ``blobs`` (``Rows.blobs``) not kept already, and that conversation ``session_id`` uses them, in
    the caller's transaction."""
    if blobs:
        conn.executemany("INSERT OR IGNORE INTO blobs (digest, media_type, bytes, size) VALUES (?, ?, ?, ?)", blobs)
        conn.executemany("INSERT OR IGNORE INTO blob_uses (session_id, digest) VALUES (?, ?)",
                         [(session_id, row[0]) for row in blobs])


def read_blobs(conn: sqlite3.Connection, texts: Iterable[str]) -> dict[str, bytes]:
    """The kept-apart bytes that the turns written as ``texts`` name, by digest: those and no others. A turn that
    is not JSON names none here (reading it says what is wrong with it)."""
    named: set[str] = set()
    for text in texts:
        if _DIGEST in text:  # most turns hold no image or file: their text is never parsed twice
            try:
                named.update(digest for digest, _ in _kept_apart([json.loads(text)]))
            except ValueError:
                continue
    found: dict[str, bytes] = {}
    digests = sorted(named)
    for at in range(0, len(digests), _CHUNK):
        chunk = digests[at:at + _CHUNK]
        found.update(conn.execute(f"SELECT digest, bytes FROM blobs WHERE digest IN ({', '.join('?' * len(chunk))})",
                                  chunk).fetchall())
    return found


def forget_blobs(conn: sqlite3.Connection, session_id: str) -> None:
    """Forget that conversation ``session_id`` uses any blobs, and drop the blobs no other conversation uses, in
    the caller's transaction."""
    conn.execute("DELETE FROM blobs WHERE digest IN (SELECT digest FROM blob_uses WHERE session_id = :id) AND NOT "
                 "EXISTS (SELECT 1 FROM blob_uses AS u WHERE u.digest = blobs.digest AND u.session_id != :id)",
                 {"id": session_id})
    conn.execute("DELETE FROM blob_uses WHERE session_id = ?", (session_id,))


_DIGEST = '"digest"'
_CHUNK = 500  # digests per query: well under SQLite's limit on the number of parameters


def _kept_apart(turns: Iterable[Any]) -> Iterable[tuple[str, Any]]:
    """The digest and media type of each part (or tool result's attachment) of the written ``turns`` whose bytes
    are kept apart; parts of any other shape are passed over (reading them says what is wrong)."""
    for turn in turns:
        parts = turn.get("parts") if isinstance(turn, Mapping) else None
        yield from _parts_kept_apart(parts)


def _parts_kept_apart(parts: Any) -> Iterable[tuple[str, Any]]:
    if not isinstance(parts, list):
        return
    for part in parts:
        if isinstance(part, Mapping):
            digest = part.get("digest")
            if isinstance(digest, str):
                yield digest, part.get("media_type")
            yield from _parts_kept_apart(part.get("attachments"))


def _text_only(text: str) -> Any:
    """The turn written as ``text``, read as JSON, without the parts whose bytes are kept apart: its text reads the
    same, and no blob need be read."""
    turn = json.loads(text)
    parts = turn.get("parts") if _DIGEST in text and isinstance(turn, dict) else None
    if isinstance(parts, list):
        turn["parts"] = [p for p in parts if next(iter(_parts_kept_apart([p])), None) is None]
    return turn


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
            title = title_of(Turn.from_dict(_text_only(t)) for t in first.values())
        except (ValueError, UsageError):  # an unreadable turn: listed without a title (``load`` says why)
            title = ""
        listed.append(StoredSession(session_id, title, length, updated))
    return tuple(listed)

