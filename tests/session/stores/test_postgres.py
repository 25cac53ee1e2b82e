"""PostgresStore against a real server (see ``pg_server``): the conformance check, the schema made and upgraded,
stores sharing a database, conflicts between writers, the password kept out of sight, the pool's size; and the
URL schemes ``open_store`` knows, the PostgreSQL ones among them. Every test runs on asyncio and on trio."""

from __future__ import annotations

import base64
import json
import logging
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog

from loop import Image, Role, Text, Turn, UsageError
from session import MemoryStore, SQLiteStore, StoreConflict, StoreError, open_store
from session.stores import _open
from session.stores._open import known_schemes, register_store
from session.testing import check_store
from tests.session.stores.pg_server import admin, in_schema, pg_schema, pg_url, require_psycopg, server_url, unavailable

require_psycopg("PostgresStore")

import psycopg  # noqa: E402

from session.stores._postgres import PostgresStore  # noqa: E402
from session.stores._postgres_sql import SCHEMA_VERSION  # noqa: E402
from session.stores._postgres_views import Views  # noqa: E402

__all__ = ["pg_schema", "pg_url"]  # fixtures, used by name

NOBODY = "127.0.0.1:1"  # a loopback port nothing listens on: connecting is refused at once


def turn(text: str) -> Turn:
    return Turn(Role.USER, [Text(text)])


def texts(state: Any) -> list[str]:
    assert state is not None
    return [t.text for t in state]


def fetch(sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with admin() as conn:
        rows: list[tuple[Any, ...]] = conn.execute(sql, args).fetchall()
        return rows


async def wait_until(done: Any, what: str, timeout: float = 10.0) -> None:
    """Wait until ``done()``; fail, saying ``what`` never happened, after ``timeout`` seconds."""
    with anyio.move_on_after(timeout):
        while not done():
            await anyio.sleep(0.01)
        return
    pytest.fail(f"waited {timeout:g} s, but never: {what}")


# The contract, and what the store keeps.

async def test_postgres_store_conforms(pg_url: str) -> None:
    stores: list[PostgresStore] = []

    def make() -> PostgresStore:
        stores.append(PostgresStore(pg_url))
        return stores[-1]

    try:
        await check_store(make)
    finally:
        for store in stores:
            await store.aclose()


async def test_the_tables_are_made_at_start_with_their_version(pg_url: str, pg_schema: str) -> None:
    store = PostgresStore(pg_url)
    assert fetch("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", pg_schema) == []
    with structlog.testing.capture_logs() as logs:
        assert await store.load("s") is None
    tables = {r[0] for r in fetch("SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                                  pg_schema)}
    assert tables == {"schema_version", "sessions", "turns", "inbox", "checkpoints", "blobs", "blob_uses", "leases"}
    assert fetch(f"SELECT version FROM {pg_schema}.schema_version") == [(SCHEMA_VERSION,)]
    assert [(e["event"], e["schema_from"]) for e in logs] == [("made the store's tables", 0)]
    await store.aclose()
    async with PostgresStore(pg_url) as again:  # a second start finds them current and changes nothing
        with structlog.testing.capture_logs() as logs:
            assert await again.load("s") is None
        assert logs == []
    assert fetch(f"SELECT version FROM {pg_schema}.schema_version") == [(SCHEMA_VERSION,)]


async def test_stores_starting_at_once_make_the_tables_once(pg_url: str, pg_schema: str) -> None:
    stores = [PostgresStore(pg_url) for _ in range(3)]
    try:
        with structlog.testing.capture_logs() as logs:
            async with anyio.create_task_group() as group:
                for n, store in enumerate(stores):
                    group.start_soon(store.append, f"s{n}", 0, [turn(str(n))], {})
        assert [e["event"] for e in logs] == ["made the store's tables"]  # the others waited, then found them
        assert [texts(await stores[0].load(f"s{n}")) for n in range(3)] == [["0"], ["1"], ["2"]]
    finally:
        for store in stores:
            await store.aclose()
    assert fetch(f"SELECT version FROM {pg_schema}.schema_version") == [(SCHEMA_VERSION,)]


# Schema 1, as the first release made it: no blobs (images and files inline, base64), no listing index.
SCHEMA_1 = """
CREATE TABLE schema_version (version integer NOT NULL);
INSERT INTO schema_version VALUES (1);
CREATE SEQUENCE session_versions;
CREATE TABLE sessions (id text PRIMARY KEY, meta text NOT NULL, length integer NOT NULL, rev integer NOT NULL,
                       version bigint NOT NULL, created double precision NOT NULL, updated double precision NOT NULL);
CREATE TABLE turns (session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE, idx integer NOT NULL,
                    rev integer NOT NULL, data text NOT NULL, PRIMARY KEY (session_id, idx, rev));
CREATE TABLE inbox (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, session_id text NOT NULL,
                    message_id text NOT NULL, data text NOT NULL, UNIQUE (session_id, message_id));
CREATE TABLE checkpoints (key text PRIMARY KEY, data text NOT NULL, updated double precision NOT NULL);
"""
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))


async def test_a_schema_1_database_is_upgraded_at_start_and_keeps_its_conversations(pg_schema: str) -> None:
    old = [turn("what is this?"), Turn(Role.USER, [Image(data=PNG)])]
    inline = [json.dumps(t.to_dict()) for t in old]
    assert base64.b64encode(PNG).decode() in inline[1]  # bytes inline, as schema 1 kept them
    with admin() as conn:
        conn.execute(f"SET search_path TO {pg_schema}")
        conn.execute(SCHEMA_1)
        conn.execute("INSERT INTO sessions VALUES ('old', '{\"k\": 1}', 2, 0, nextval('session_versions'), 1, 1)")
        conn.execute("INSERT INTO turns VALUES ('old', 0, 0, %s), ('old', 1, 0, %s)", inline)
        conn.execute("INSERT INTO checkpoints VALUES ('search', '{\"rollouts\": 3}', 1)")
    async with PostgresStore(in_schema(server_url(), pg_schema)) as store:
        with structlog.testing.capture_logs() as logs:
            state = await store.load("old")
        assert state is not None and state.turns == tuple(old) and state.meta == {"k": 1}
        assert [(e["event"], e["schema_from"], e["schema_to"]) for e in logs] == [
            ("upgraded the store's tables", 1, SCHEMA_VERSION)]
        assert await store.load_checkpoint("search") == {"rollouts": 3}
        await store.append("old", 2, [Turn(Role.USER, [Image(data=PNG)])], {})  # schema 2: kept apart, once
        again = await store.load("old")
        assert again is not None and again.turns == (*old, old[1])
        listed = await store.list_sessions()
        assert [(s.id, s.title, s.turns) for s in listed] == [("old", "what is this?", 3)]
    assert fetch(f"SELECT version FROM {pg_schema}.schema_version") == [(SCHEMA_VERSION,)]
    assert fetch(f"SELECT size FROM {pg_schema}.blobs") == [(len(PNG),)]


async def test_a_newer_schema_is_refused(pg_url: str, pg_schema: str) -> None:
    with admin() as conn:
        conn.execute(f"CREATE TABLE {pg_schema}.schema_version (version integer NOT NULL)")
        conn.execute(f"INSERT INTO {pg_schema}.schema_version VALUES (99)")
    async with PostgresStore(pg_url) as store:
        with pytest.raises(StoreError, match=f"store schema 99; this version reads up to {SCHEMA_VERSION}"):
            await store.load("s")


async def test_tables_of_another_program_are_left_alone(pg_url: str, pg_schema: str) -> None:
    with admin() as conn:
        conn.execute(f"CREATE TABLE {pg_schema}.sessions (mine integer)")
    async with PostgresStore(pg_url) as store:
        with pytest.raises(StoreError, match='"sessions" already exists.*a schema of its own'):
            await store.load("s")
    assert fetch(f"SELECT count(*) FROM information_schema.columns WHERE table_schema = '{pg_schema}' "
                 "AND table_name = 'sessions'") == [(1,)]
    assert fetch(f"SELECT count(*) FROM information_schema.tables WHERE table_schema = '{pg_schema}'") == [(1,)]


async def test_branches_keep_the_superseded_rows_as_a_record(pg_url: str, pg_schema: str) -> None:
    async with PostgresStore(pg_url) as store:
        await store.append("s", 0, [turn(t) for t in "abc"], {})
        await store.append("s", 1, [turn("B")], {})
        await store.append("s", 2, [turn("C")], {})
        assert texts(await store.load("s")) == ["a", "B", "C"]
        await store.append("s", 0, [], {})
        assert texts(await store.load("s")) == []
        await store.append("s", 0, [turn("x")], {})
        assert texts(await store.load("s")) == ["x"]
    rows = fetch(f"SELECT idx, rev FROM {pg_schema}.turns ORDER BY idx, rev")
    assert rows == [(0, 0), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1)]


async def test_a_refused_append_writes_nothing(pg_url: str, pg_schema: str) -> None:
    async with PostgresStore(pg_url) as store:
        await store.append("s", 0, [turn("kept")], {"k": 1})
        with pytest.raises(StoreConflict, match="gap"):
            await store.append("s", 2, [turn("lost")], {})
        with pytest.raises(StoreError, match="UnicodeEncodeError|surrogate") as info:
            await store.append("s", 1, [turn("fine"), turn("\ud800")], {"k": 2})  # no UTF-8 for a lone surrogate
        assert not isinstance(info.value, StoreConflict)
        with pytest.raises(UsageError, match="JSON"):
            await store.append("s", 1, [turn("lost")], {"bad": object()})
        state = await store.load("s")
        assert state is not None and texts(state) == ["kept"] and state.meta == {"k": 1}
        await store.append("s", 1, [turn("next")], {})  # the failures left the store usable
    assert fetch(f"SELECT count(*) FROM {pg_schema}.turns") == [(2,)]


async def test_deleting_drops_the_blobs_no_other_conversation_shows(pg_url: str, pg_schema: str) -> None:
    other = PNG + b"other"
    async with PostgresStore(pg_url) as store:
        await store.append("a", 0, [Turn(Role.USER, [Image(data=PNG)]), Turn(Role.USER, [Image(data=other)])], {})
        await store.append("b", 0, [Turn(Role.USER, [Image(data=PNG)])], {})
        assert await store.delete("a") is True and await store.delete("a") is False
        assert fetch(f"SELECT size FROM {pg_schema}.blobs") == [(len(PNG),)]
        state = await store.load("b")
        assert state is not None and state.turns[0].parts[0] == Image(data=PNG)
        await store.delete("b")
    assert fetch(f"SELECT count(*) FROM {pg_schema}.blobs") == [(0,)]


# Several stores on one database.

async def test_two_stores_on_one_database_see_each_others_writes(pg_url: str) -> None:
    async with PostgresStore(pg_url) as a, PostgresStore(pg_url) as b:
        await a.append("s", 0, [turn("from a")], {"by": "a"})
        seen = await b.load("s")
        assert seen is not None and texts(seen) == ["from a"] and seen.meta == {"by": "a"}
        await b.append("s", 1, [turn("from b")], {"by": "b"})
        assert texts(await a.load("s")) == ["from a", "from b"]
        await a.post("s", Turn(Role.USER, [Text("waiting")], {"message_id": "m1"}))
        assert await b.inboxes() == ("s",) and [t.text for t in await b.inbox("s")] == ["waiting"]
        await b.done("s", "m1")
        assert await a.inbox("s") == ()
        await b.save_checkpoint("k", {"n": 1})
        assert await a.load_checkpoint("k") == {"n": 1}
        assert [(s.id, s.turns) for s in await a.list_sessions()] == [("s", 2)]
        assert await a.delete("s") is True and await b.load("s") is None


async def test_concurrent_appends_from_two_stores_one_wins_the_other_conflicts(pg_schema: str) -> None:
    name = f"race-{uuid.uuid4().hex[:8]}"
    url = in_schema(server_url(), pg_schema, application_name=name)
    waiting = f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{name}' AND wait_event_type = 'Lock'"
    async with PostgresStore(url) as a, PostgresStore(url) as b:
        await a.append("s", 0, [turn("q")], {"by": "start"})
        assert texts(await a.load("s")) == texts(await b.load("s")) == ["q"]  # both hold it, one turn long
        outcomes: dict[str, object] = {}

        async def append(name: str, store: PostgresStore, said: list[str]) -> None:
            try:
                await store.append("s", 1, [turn(t) for t in said], {"by": name})
                outcomes[name] = "ok"
            except StoreConflict as exc:
                outcomes[name] = exc

        with psycopg.connect(server_url()) as holder, admin() as watcher:
            # The row stays locked until both appends wait on it: their transactions truly overlap.
            holder.execute(f"SELECT 1 FROM {pg_schema}.sessions WHERE id = 's' FOR UPDATE")
            async with anyio.create_task_group() as group:
                group.start_soon(append, "a", a, ["a1", "a2", "a3"])
                group.start_soon(append, "b", b, ["b1"])
                try:
                    await wait_until(lambda: watcher.execute(waiting).fetchone()[0] == 2, "both wait on the row")
                finally:
                    holder.commit()
        assert sorted(o if o == "ok" else "conflict" for o in outcomes.values()) == ["conflict", "ok"], outcomes
        winner = next(name for name, o in outcomes.items() if o == "ok")
        loser = "b" if winner == "a" else "a"
        assert "changed by another writer" in str(outcomes[loser])
        said = {"a": ["a1", "a2", "a3"], "b": ["b1"]}[winner]
    async with PostgresStore(url) as fresh:
        state = await fresh.load("s")
        assert state is not None and texts(state) == ["q", *said] and state.meta == {"by": winner}
    rows = fetch(f"SELECT data FROM {pg_schema}.turns ORDER BY idx")
    assert [json.loads(r[0])["parts"][0]["text"] for r in rows] == ["q", *said]  # nothing of the loser's


async def test_a_writer_whose_view_is_out_of_date_conflicts_until_it_loads_again(pg_url: str) -> None:
    async with PostgresStore(pg_url) as a, PostgresStore(pg_url) as b, PostgresStore(pg_url) as c:
        await a.append("s", 0, [turn("q")], {})
        assert texts(await b.load("s")) == ["q"]
        await a.append("s", 1, [turn("a's answer")], {})
        with pytest.raises(StoreConflict, match=r"'s' was changed by another writer .* 2 turns now\); load it again"):
            await b.append("s", 1, [turn("b's answer")], {})  # would have branched over a's answer
        with pytest.raises(StoreConflict):
            await b.append("s", 1, [turn("b's answer")], {})  # still out of date: no load since
        assert texts(await b.load("s")) == ["q", "a's answer"]
        await b.append("s", 1, [turn("b's branch")], {})  # seen, and chosen: a branch, as the contract says
        # A store that never saw the conversation appends as the contract says, unchecked.
        await c.append("s", 1, [turn("c's branch")], {})
        assert texts(await a.load("s")) == ["q", "c's branch"]
        # Two stores that both found a conversation absent: the second to create it conflicts.
        assert await a.load("new") is None and await b.load("new") is None
        await a.append("new", 0, [turn("a")], {})
        with pytest.raises(StoreConflict, match="'new' was created by another writer"):
            await b.append("new", 0, [turn("b")], {})
        # A conversation another store deleted is absent for a store that loads it again.
        assert await b.delete("s") is True
        assert await a.load("s") is None
        await a.append("s", 0, [turn("again")], {})


def test_a_load_that_began_before_an_append_ended_does_not_replace_the_appends_view() -> None:
    views = Views(limit=2)
    began = views.tick()  # a load starts, and reads version 1 ...
    views.wrote("s", 2)  # ... while an append commits version 2
    views.read("s", 1, began)
    assert views.expected("s") == 2
    views.read("s", 3, views.tick())  # a later load sees another writer's version 3
    assert views.expected("s") == 3
    views.wrote("s", None)  # a commit whose outcome was lost: unknown, so the next append is unchecked
    assert views.expected("s") is None
    views.wrote("t", 1)
    views.wrote("u", 1)
    assert views.expected("s") is None and views.expected("t") == views.expected("u") == 1  # oldest forgotten
    assert len(views._seen) == 2


# The connection: errors, passwords, the pool.

async def test_an_unreachable_server_is_a_store_error_saying_why() -> None:
    store = PostgresStore(f"postgresql://cl@{NOBODY}/cl", timeout=5)
    started = time.monotonic()
    with pytest.raises(StoreError, match=r"PostgreSQL store 'postgresql://cl@127.0.0.1:1/cl': cannot connect: "
                                         r"OperationalError: .*port 1 failed: Connection refused") as info:
        await store.load("s")
    assert time.monotonic() - started < 5 and "\n" not in str(info.value)
    with pytest.raises(StoreError, match="cannot connect"):  # and again: nothing was left half open
        await store.append("s", 0, [turn("t")], {})
    await store.aclose()
    with pytest.raises(UsageError, match="is closed"):
        await store.load("s")


@pytest.mark.parametrize("where", ["user info", "query", "PGPASSWORD"])
async def test_the_password_is_never_shown(where: str, monkeypatch: pytest.MonkeyPatch,
                                           caplog: pytest.LogCaptureFixture) -> None:
    secret = f"pw-{uuid.uuid4().hex}"
    url = {"user info": f"postgresql://cl:{secret}@{NOBODY}/cl",
           "query": f"postgresql://cl@{NOBODY}/cl?password={secret}",
           "PGPASSWORD": f"postgresql://cl@{NOBODY}/cl"}[where]
    if where == "PGPASSWORD":
        monkeypatch.setenv("PGPASSWORD", secret)
    store = PostgresStore(url)
    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as logs:
        with pytest.raises(StoreError) as info:
            await store.load("s")
    await store.aclose()
    shown = [repr(store), str(store), repr(vars(store)), store.url, "".join(traceback.format_exception(info.value)),
             caplog.text, repr(logs)]
    assert all(secret not in text for text in shown)
    if where != "PGPASSWORD":
        assert "***" in repr(store)
    with pytest.raises(UsageError, match="nonsense") as refused:  # libpq's parser says what is wrong
        PostgresStore(f"{url}{'&' if '?' in url else '?'}nonsense=1")
    assert secret not in str(refused.value)


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://u:p%40ss@h:5/db", "postgresql://u:***@h:5/db"),
    ("postgresql://u@h/db?sslmode=require&PASSWORD=x&password=y",
     "postgresql://u@h/db?sslmode=require&PASSWORD=***&password=***"),
    ("postgresql://u?x=1:secret@h/db", "postgresql://u?x=1:***@h/db"),  # malformed, masked as libpq reads it
    ("postgresql://u@h/db?application_name=a:b@c", "postgresql://u@h/db?application_name=a:b@c"),
    ("postgresql://u:@h/db", "postgresql://u:@h/db"),
])
def test_a_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert _open.masked_url(url) == shown


def password_role(schema: str, password: str) -> None:
    """Let role cl_password log in with ``password`` and keep tables in ``schema``; the test server must ask it
    for its password (.ci/postgres-setup.sh makes it so)."""
    from psycopg import sql

    with admin() as conn:
        asks = conn.execute("SELECT count(*) FROM pg_hba_file_rules WHERE 'cl_password' = ANY(user_name) "
                            "AND auth_method LIKE 'scram%'").fetchone()[0]
        if not asks:
            unavailable("the server does not ask role cl_password for a password (no scram-sha-256 line for it "
                        "in pg_hba.conf)")
        conn.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'cl_password') THEN "
                     "CREATE ROLE cl_password; END IF; END $$")
        conn.execute(sql.SQL("ALTER ROLE cl_password LOGIN PASSWORD {}").format(password))
        conn.execute(f"GRANT USAGE, CREATE ON SCHEMA {schema} TO cl_password")


async def test_a_password_is_checked_from_the_url_or_pgpassword(pg_schema: str, monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    secret, wrong = f"pw-{uuid.uuid4().hex}", f"wrong-{uuid.uuid4().hex}"
    password_role(pg_schema, secret)
    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as logs:
        await log_in_as_cl_password(pg_schema, secret, wrong, monkeypatch)
    assert logs and all(secret not in text and wrong not in text for text in (caplog.text, repr(logs)))


async def log_in_as_cl_password(pg_schema: str, secret: str, wrong: str, monkeypatch: pytest.MonkeyPatch) -> None:
    host = server_url().split("@", 1)[1]  # host:port/database...
    as_role = f"postgresql://cl_password:{{}}@{host}"
    async with PostgresStore(in_schema(as_role.format(secret), pg_schema)) as store:
        await store.append("s", 0, [turn("with the URL's password")], {})
    monkeypatch.setenv("PGPASSWORD", secret)
    async with PostgresStore(in_schema(f"postgresql://cl_password@{host}", pg_schema)) as store:
        assert texts(await store.load("s")) == ["with the URL's password"]
    async with PostgresStore(in_schema(as_role.format(wrong), pg_schema)) as store:
        with pytest.raises(StoreError, match='cannot connect: .*password authentication failed for user '
                                             '"cl_password"') as info:
            await store.load("s")
        text = "".join(traceback.format_exception(info.value))
        assert secret not in text and wrong not in text


async def test_the_pool_never_holds_more_connections_than_its_size(pg_schema: str) -> None:
    name = f"pool-{uuid.uuid4().hex[:8]}"
    count = f"SELECT count(*) FILTER (WHERE true), count(*) FILTER (WHERE wait_event_type = 'Lock') " \
            f"FROM pg_stat_activity WHERE application_name = '{name}'"
    async with PostgresStore(in_schema(server_url(), pg_schema, application_name=name), pool_size=2) as store:
        assert store.pool_size == 2
        await store.append("s", 0, [turn("t")], {})
        loaded: list[object] = []

        async def load() -> None:
            loaded.append(await store.load("s"))

        with psycopg.connect(server_url()) as holder, admin() as watcher:
            holder.execute(f"LOCK TABLE {pg_schema}.sessions IN ACCESS EXCLUSIVE MODE")
            async with anyio.create_task_group() as group:
                for _ in range(6):
                    group.start_soon(load)
                try:
                    await wait_until(lambda: watcher.execute(count).fetchone()[1] == 2, "two loads wait on the lock")
                    await anyio.sleep(0.3)  # time enough for a third connection, were the pool to make one
                    held = watcher.execute(count).fetchone()
                finally:
                    holder.commit()
            assert held == (2, 2)
            assert len(loaded) == 6 and all(texts(s) == ["t"] for s in loaded)
    with admin() as watcher:
        await wait_until(lambda: watcher.execute(count).fetchone()[0] == 0, "the connections closed")


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "4"])
def test_a_pool_size_must_be_a_positive_int(bad: object) -> None:
    with pytest.raises(UsageError, match="pool_size must be a positive int"):
        PostgresStore("postgresql://cl@127.0.0.1/cl", pool_size=bad)  # type: ignore[arg-type]


# open_store's URL schemes.

def test_open_store_opens_postgresql_and_postgres_urls() -> None:
    for scheme in ("postgresql", "postgres", "PostgreSQL"):
        store = open_store(f"{scheme}://cl:secret@127.0.0.1:54329/cl")
        assert isinstance(store, PostgresStore) and store.pool_size == 4 and "secret" not in repr(store)
    sized = open_store("postgresql://cl@127.0.0.1/cl?pool_size=7&application_name=x")
    assert isinstance(sized, PostgresStore) and sized.pool_size == 7 and sized.url.endswith("?application_name=x")
    with pytest.raises(UsageError, match="pool_size .* must be a positive int, got '0'"):
        open_store("postgresql://cl@127.0.0.1/cl?pool_size=0")
    with pytest.raises(UsageError, match="store URL 'postgres://x' names no database"):
        open_store("postgres://x")


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by the test are undone when it ends."""
    monkeypatch.setattr(_open, "_openers", dict(_open._openers))


def test_an_unknown_scheme_names_the_known_ones_and_hides_a_password(registry: None) -> None:
    with pytest.raises(UsageError) as info:
        open_store("redis://user:hunter22@127.0.0.1/0")
    message = str(info.value)
    assert message.startswith("unknown store URL 'redis://user:***@127.0.0.1/0'; use memory:// or sqlite:///")
    assert "postgresql://user@host[:port]/database" in message and "hunter22" not in message
    assert message.endswith("the schemes known: memory, postgres, postgresql, sqlite")


def test_a_registered_scheme_opens_its_urls(registry: None) -> None:
    opened: list[str] = []

    def open_mine(url: str) -> MemoryStore:
        opened.append(url)
        return MemoryStore()

    register_store("Mine+v1", open_mine, form="mine+v1://name")
    assert isinstance(open_store("mine+v1://a"), MemoryStore) and opened == ["mine+v1://a"]
    assert "mine+v1" in known_schemes()
    with pytest.raises(UsageError, match=r"or mine\+v1://name; the schemes known: memory, mine\+v1, "):
        open_store("nope://x")
    register_store("mine+v1", lambda url: "not a store")  # type: ignore[arg-type,return-value]
    with pytest.raises(UsageError, match=r"the opener of mine\+v1:// store URLs returned 'not a store'"):
        open_store("mine+v1://a")
    for scheme, opener in (("1bad", open_mine), ("a b", open_mine), ("ok", "not callable")):
        with pytest.raises(UsageError, match="store URL scheme|store opener"):
            register_store(scheme, opener)  # type: ignore[arg-type]


def test_an_entry_point_adds_a_scheme_loaded_only_when_used(registry: None, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "plugin_stores_xyz.py").write_text(
        "from session import MemoryStore\n\ndef open_it(url):\n    store = MemoryStore()\n    store.url = url\n"
        "    return store\n")
    info = tmp_path / "plugin_stores_xyz-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-stores-xyz\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[cognitive_loop.stores]\nxyz = plugin_stores_xyz:open_it\n"
                                           "broken = plugin_stores_xyz:missing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "plugin_stores_xyz", raising=False)
    assert {"xyz", "broken"} <= set(known_schemes()) and "plugin_stores_xyz" not in sys.modules
    with pytest.raises(UsageError, match="the schemes known: broken, memory, postgres, postgresql, sqlite, xyz"):
        open_store("other://x")
    assert "plugin_stores_xyz" not in sys.modules  # listing the schemes loaded no plugin
    store = open_store("xyz://somewhere")
    assert isinstance(store, MemoryStore) and store.url == "xyz://somewhere"  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match="the broken:// store opener from entry point 'plugin_stores_xyz:missing'"):
        open_store("broken://x")
    assert isinstance(open_store("memory://"), MemoryStore)  # the others still open


def test_sqlite_and_memory_open_as_before(tmp_path: Path) -> None:
    assert isinstance(open_store("memory://"), MemoryStore)
    store = open_store(f"sqlite:///{tmp_path}/x.db")
    assert isinstance(store, SQLiteStore) and store.path == tmp_path / "x.db"
    for bad in ("memory://x", "sqlite:///", "sqlite://x.db", "memory", 42):
        with pytest.raises(UsageError, match="unknown store URL .*; use memory:// or sqlite:///"):
            open_store(bad)  # type: ignore[arg-type]
