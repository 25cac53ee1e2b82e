"""PostgresStore's leases (``LeaseStore``) against a real server (see ``pg_server``): taking, renewing, releasing
and losing them, the fencing of a deposed holder's writes, a race for a lapsed lease, a store that takes none,
and the upgrade of a schema-2 database. Every test runs on asyncio and on trio."""

from __future__ import annotations

import json
import math
import uuid
from typing import Any

import anyio
import pytest
import structlog

from loop import Role, Text, Turn, UsageError
from session import StoreConflict, StoreError
from session.stores._protocol import Lease, LeaseLost, LeaseStore
from session.testing import ConformanceError, check_lease_store
from tests.session.stores.pg_server import admin, in_schema, pg_schema, pg_url, require_psycopg, server_url

require_psycopg("PostgresStore")

import psycopg  # noqa: E402

from session.stores import _postgres  # noqa: E402
from session.stores._postgres import PostgresStore  # noqa: E402
from session.stores._postgres_sql import MIGRATIONS, SCHEMA_VERSION  # noqa: E402
from session.stores._postgres_views import HeldLeases  # noqa: E402

__all__ = ["pg_schema", "pg_url"]  # fixtures, used by name

NOBODY = "postgresql://cl@127.0.0.1:1/cl"  # nothing listens there: a call that connects fails at once
SHORT = 0.2  # a lease these tests let lapse (waited out with LAPSE), never asked to be live
LAPSE = SHORT + 0.1
LONG = 60.0


def turn(text: str) -> Turn:
    return Turn(Role.USER, [Text(text)])


def posted(message_id: str) -> Turn:
    return Turn(Role.USER, [Text(f"message {message_id}")], {"message_id": message_id})


def texts(state: Any) -> list[str]:
    assert state is not None
    return [t.text for t in state]


def fetch(sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with admin() as conn:
        rows: list[tuple[Any, ...]] = conn.execute(sql, args).fetchall()
        return rows


def server_now() -> float:
    now: float = fetch("SELECT extract(epoch FROM clock_timestamp())::double precision")[0][0]
    return now


async def wait_until(done: Any, what: str, timeout: float = 10.0) -> None:
    """Wait until ``done()``; fail, saying ``what`` never happened, after ``timeout`` seconds."""
    with anyio.move_on_after(timeout):
        while not done():
            await anyio.sleep(0.01)
        return
    pytest.fail(f"waited {timeout:g} s, but never: {what}")


# The contract.

async def test_postgres_store_passes_the_lease_conformance_check(pg_url: str) -> None:
    stores: list[PostgresStore] = []

    def make() -> PostgresStore:
        stores.append(PostgresStore(pg_url))
        return stores[-1]

    try:
        await check_lease_store(make)
    finally:
        for store in stores:
            await store.aclose()
    assert len(stores) == 3 and all(isinstance(store, LeaseStore) for store in stores)


async def test_the_check_fails_a_store_whose_writes_are_not_fenced(pg_url: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_postgres, "fence", lambda *args: None)
    stores: list[PostgresStore] = []

    def make() -> PostgresStore:
        stores.append(PostgresStore(pg_url))
        return stores[-1]

    try:
        with pytest.raises(ConformanceError, match="append: a store holding no lease may not write"):
            await check_lease_store(make)
    finally:
        for store in stores:
            await store.aclose()


# Taking, renewing and releasing.

async def test_acquire_renew_and_release(pg_url: str, pg_schema: str) -> None:
    async with PostgresStore(pg_url) as a, PostgresStore(pg_url) as b:
        before = server_now()
        lease = await a.acquire("s", "worker-a", LONG)
        after = server_now()
        assert lease is not None and (lease.session_id, lease.holder, lease.epoch) == ("s", "worker-a", 1)
        assert before + LONG <= lease.expires <= after + LONG  # by the server's clock
        assert await b.acquire("s", "worker-b", LONG) is None
        again = await a.acquire("s", "worker-a", LONG)
        assert again is not None and again.epoch == 1 and again.expires >= lease.expires
        other = await b.acquire("t", "worker-a", LONG)  # a holder's leases may be taken through any store
        assert other is not None and (other.holder, other.epoch) == ("worker-a", 1)
        assert await a.renew("worker-a", LONG) == ("s", "t")  # the holder's, whichever store took them
        assert await a.renew("worker-b", LONG) == ()
        await b.release("s", "worker-b")  # not its lease: nothing changes
        assert fetch(f"SELECT holder, epoch, expires > 0 FROM {pg_schema}.leases WHERE session_id = 's'") == [
            ("worker-a", 1, True)]
        await a.release("s", "worker-a")
        assert fetch(f"SELECT holder, epoch, expires FROM {pg_schema}.leases WHERE session_id = 's'") == [
            ("worker-a", 1, -math.inf)]  # lapsed at once; the row and its epoch stay
        assert await a.renew("worker-a", LONG) == ("t",)  # a released lease is never renewed
        taken = await b.acquire("s", "worker-b", LONG)
        assert taken is not None and taken.epoch == 2
        await b.release("s", "worker-b")
        mine_again = await a.acquire("s", "worker-a", LONG)
        assert mine_again is not None and mine_again.epoch == 3  # a new lease, even for an earlier holder
        await a.release("s", "worker-a")
        anew = await a.acquire("s", "worker-a", LONG)
        assert anew is not None and anew.epoch == 4  # taking back one's own released lease is a new lease too


async def test_a_lease_lapses_after_its_ttl_and_goes_to_whoever_asks(pg_url: str) -> None:
    async with PostgresStore(pg_url) as a, PostgresStore(pg_url) as b:
        first = await a.acquire("s", "worker-a", SHORT)
        assert first is not None and first.epoch == 1
        await a.append("s", 0, [turn("a's")], {})
        await anyio.sleep(LAPSE)
        await a.append("s", 1, [turn("a's, lapsed")], {})  # a lapsed lease nobody took is still the holder's
        assert await a.renew("worker-a", SHORT) == ("s",)  # and renewing it keeps its epoch
        same = await a.acquire("s", "worker-a", SHORT)
        assert same is not None and same.epoch == 1
        await anyio.sleep(LAPSE)
        taken = await b.acquire("s", "worker-b", LONG)
        assert taken is not None and taken.epoch == 2
        assert await a.renew("worker-a", LONG) == ()  # taken over
        assert texts(await b.load("s")) == ["a's", "a's, lapsed"]


async def test_of_twenty_concurrent_acquires_of_a_lapsed_lease_exactly_one_wins(pg_schema: str) -> None:
    name = f"race-{uuid.uuid4().hex[:8]}"
    url = in_schema(server_url(), pg_schema, application_name=name)
    waiting = f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{name}' AND wait_event_type = 'Lock'"
    stores = [PostgresStore(url, pool_size=1) for _ in range(20)]  # a store's own acquires of one id take turns
    try:
        lapsing = await stores[0].acquire("s", "first", SHORT)
        assert lapsing is not None
        await anyio.sleep(LAPSE)
        won: list[Lease] = []

        async def take(n: int) -> None:
            lease = await stores[n].acquire("s", f"racer-{n}", LONG)
            if lease is not None:
                won.append(lease)

        with psycopg.connect(server_url()) as holder, admin() as watcher:
            # The lease row stays locked until all twenty statements wait on it: they truly race.
            holder.execute(f"SELECT 1 FROM {pg_schema}.leases WHERE session_id = 's' FOR UPDATE")
            async with anyio.create_task_group() as group:
                for n in range(20):
                    group.start_soon(take, n)
                try:
                    await wait_until(lambda: watcher.execute(waiting).fetchone()[0] == 20, "all twenty wait")
                finally:
                    holder.commit()
        assert len(won) == 1 and won[0].epoch == 2
        assert fetch(f"SELECT holder, epoch FROM {pg_schema}.leases") == [(won[0].holder, 2)]
        assert [await store.acquire("s", "first", LONG) for store in stores[:3]] == [None] * 3
    finally:
        for store in stores:
            await store.aclose()


# Fencing.

async def test_a_deposed_holder_cannot_append_done_or_delete_nor_get_its_epoch_back(pg_url: str,
                                                                                    pg_schema: str) -> None:
    async with PostgresStore(pg_url) as a, PostgresStore(pg_url) as b:
        assert await a.acquire("s", "worker-a", SHORT) is not None
        await a.append("s", 0, [turn("q")], {"by": "a"})
        await a.post("s", posted("m1"))
        await anyio.sleep(LAPSE)
        taken = await b.acquire("s", "worker-b", SHORT)
        assert taken is not None and taken.epoch == 2
        before = fetch(f"SELECT id, meta, length, version FROM {pg_schema}.sessions")
        for write in (lambda: a.append("s", 1, [turn("late")], {"by": "a"}), lambda: a.done("s", "m1"),
                      lambda: a.delete("s")):
            with pytest.raises(LeaseLost, match=r"'worker-a' lost the lease of session 's' \(epoch 1\) in "
                                                r"PostgreSQL store .*: 'worker-b' holds it now \(epoch 2\); "
                                                "nothing was written") as info:
                await write()
            assert isinstance(info.value, StoreConflict)
        assert fetch(f"SELECT id, meta, length, version FROM {pg_schema}.sessions") == before
        assert fetch(f"SELECT count(*) FROM {pg_schema}.turns") == [(1,)]
        assert [t.meta["message_id"] for t in await a.inbox("s")] == ["m1"]
        await a.post("s", posted("m2"))  # posting is never fenced
        await anyio.sleep(LAPSE)  # b's lease lapses too, untaken: a's writes are still fenced by its epoch
        with pytest.raises(LeaseLost, match="epoch 1"):
            await a.append("s", 1, [turn("late")], {})
        async with PostgresStore(pg_url) as c:  # the same holder, through another store: a new lease
            renamed = await c.acquire("s", "worker-a", SHORT)
            assert renamed is not None and renamed.epoch == 3
        with pytest.raises(LeaseLost, match=r"'worker-a' lost the lease .* 'worker-a' holds it now \(epoch 3\)"):
            await a.append("s", 1, [turn("late")], {})  # the holder's name is not enough: the epoch is checked
        back = await a.acquire("s", "worker-a", LONG)
        assert back is not None and back.epoch == 3  # never its old epoch
        await a.append("s", 1, [turn("a again")], {})
        await a.done("s", "m1")
        with pytest.raises(LeaseLost, match="'worker-b' lost the lease of session 's' \\(epoch 2\\)"):
            await b.append("s", 2, [turn("b")], {})
        assert await b.renew("worker-b", LONG) == ()  # so b forgets its lease, and holds none ...
        with pytest.raises(LeaseLost, match="is leased to 'worker-a'.*holds no lease of it"):
            await b.append("s", 2, [turn("b")], {})  # ... while a's is live
        assert texts(await b.load("s")) == ["q", "a again"]


async def test_a_store_holding_no_lease_cannot_write_while_another_is_live_but_can_post(pg_url: str) -> None:
    async with PostgresStore(pg_url) as a, PostgresStore(pg_url) as c:
        await c.append("s", 0, [turn("before any lease")], {})
        assert await a.acquire("s", "worker-a", LONG) is not None
        with pytest.raises(LeaseLost, match="is leased to 'worker-a'"):
            await c.append("s", 1, [turn("c's")], {})
        await c.post("s", posted("m1"))
        assert [t.meta["message_id"] for t in await a.inbox("s")] == ["m1"]
        for write in (lambda: c.done("s", "m1"), lambda: c.delete("s")):
            with pytest.raises(LeaseLost):
                await write()
        assert await a.lapsed() == ()  # a message waits, but its lease is live
        await a.release("s", "worker-a")
        assert await a.lapsed() == ("s",)
        await c.append("s", 1, [turn("c's, once released")], {})
        await c.done("s", "m1")
        assert texts(await a.load("s")) == ["before any lease", "c's, once released"] and await a.inbox("s") == ()


async def test_a_takeover_waits_for_a_fenced_write_under_way(pg_schema: str) -> None:
    name = f"fence-{uuid.uuid4().hex[:8]}"
    url = in_schema(server_url(), pg_schema, application_name=name)
    waiting = f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{name}' AND wait_event_type = 'Lock'"
    async with PostgresStore(url) as a, PostgresStore(url) as b:
        assert await a.acquire("s", "worker-a", SHORT) is not None
        await a.append("s", 0, [turn("q")], {})
        await anyio.sleep(LAPSE)
        taken: list[Lease | None] = []

        async def take_over() -> None:
            taken.append(await b.acquire("s", "worker-b", LONG))

        with psycopg.connect(server_url()) as holder, admin() as watcher:
            # a's append has checked its lease, then waits on the conversation's row; b's takeover must wait for it.
            holder.execute(f"SELECT 1 FROM {pg_schema}.sessions WHERE id = 's' FOR UPDATE")
            async with anyio.create_task_group() as group:
                group.start_soon(a.append, "s", 1, [turn("a's, under way")], {})
                await wait_until(lambda: watcher.execute(waiting).fetchone()[0] == 1, "a's append waits")
                group.start_soon(take_over)
                try:
                    await wait_until(lambda: watcher.execute(waiting).fetchone()[0] == 2, "the takeover waits too")
                    assert taken == []
                finally:
                    holder.commit()
        assert len(taken) == 1 and taken[0] is not None and taken[0].epoch == 2
        assert texts(await b.load("s")) == ["q", "a's, under way"]  # the new holder sees the write it waited for


# A store that takes no lease, and the calls' arguments and errors.

async def test_a_store_taking_no_lease_writes_as_before_and_makes_no_lease_rows(pg_url: str, pg_schema: str) -> None:
    async with PostgresStore(pg_url) as store:
        await store.append("s", 0, [turn("q")], {})
        await store.post("s", posted("m1"))
        await store.done("s", "m1")
        await store.append("s", 1, [turn("a")], {})
        assert texts(await store.load("s")) == ["q", "a"]
        await store.post("t", posted("m2"))
        assert await store.lapsed() == ("t",)  # never leased: free
        assert await store.delete("s") is True and await store.load("s") is None
    assert fetch(f"SELECT count(*) FROM {pg_schema}.leases") == [(0,)]


@pytest.mark.parametrize(("call", "match"), [
    (lambda s: s.acquire("", "w", 1), "a session id"),
    (lambda s: s.acquire("x" * 257, "w", 1), "a session id"),
    (lambda s: s.acquire("s", "", 1), "holder is a non-empty string of at most 256"),
    (lambda s: s.acquire("s", "w" * 257, 1), "holder is a non-empty string"),
    (lambda s: s.acquire("s", 7, 1), "holder is a non-empty string"),
    (lambda s: s.acquire("s", "w", 0), "ttl must be a positive, finite number of seconds, got 0"),
    (lambda s: s.acquire("s", "w", -1.5), "ttl must be"),
    (lambda s: s.acquire("s", "w", math.inf), "ttl must be"),
    (lambda s: s.acquire("s", "w", math.nan), "ttl must be"),
    (lambda s: s.acquire("s", "w", True), "ttl must be"),
    (lambda s: s.acquire("s", "w", "1"), "ttl must be"),
    (lambda s: s.renew("", 1), "holder is"),
    (lambda s: s.renew("w", 0), "ttl must be"),
    (lambda s: s.release("", "w"), "a session id"),
    (lambda s: s.release("s", None), "holder is"),
])
async def test_bad_arguments_are_usage_errors_before_anything_connects(call: Any, match: str) -> None:
    async with PostgresStore(NOBODY, timeout=5) as store:
        with pytest.raises(UsageError, match=match):
            await call(store)


async def test_the_servers_errors_are_store_errors(pg_url: str, pg_schema: str) -> None:
    async with PostgresStore(NOBODY, timeout=5) as store:
        with pytest.raises(StoreError, match="cannot connect"):
            await store.acquire("s", "w", 1)
    async with PostgresStore(pg_url) as store:
        assert await store.lapsed() == ()
        with admin() as conn:
            conn.execute(f"DROP TABLE {pg_schema}.leases")
        for call in (lambda: store.acquire("s", "w", 1), lambda: store.renew("w", 1),
                     lambda: store.release("s", "w"), store.lapsed, lambda: store.append("s", 0, [turn("q")], {})):
            with pytest.raises(StoreError, match='UndefinedTable: relation "leases" does not exist'):
                await call()


def test_a_renewal_forgets_only_the_leases_it_found_gone() -> None:
    held = HeldLeases()
    held.acquired("s", "w", Lease("s", "w", 1, 0.0))
    held.acquired("t", "w", Lease("t", "w", 1, 0.0))
    held.acquired("u", "other", Lease("u", "other", 1, 0.0))
    expected = held.of_holder("w")
    assert expected == {"s": ("w", 1), "t": ("w", 1)}
    held.acquired("t", "w", Lease("t", "w", 3, 0.0))  # taken again, with a new epoch, while the renewal ran
    held.renewed(expected, ())
    assert (held.of("s"), held.of("t"), held.of("u")) == (None, ("w", 3), ("other", 1))
    held.acquired("u", "w", None)  # w asked and was refused: the lease of u is not w's to forget
    held.released("u", "w")
    assert held.of("u") == ("other", 1)
    held.acquired("t", "w", None)  # refused: w's lease of t is gone
    assert held.of("t") is None


# The upgrade from schema 2.

async def test_a_schema_2_database_gains_leases_and_keeps_its_data(pg_schema: str) -> None:
    assert SCHEMA_VERSION == 3
    with admin() as conn:
        conn.execute(f"SET search_path TO {pg_schema}")
        conn.execute("CREATE TABLE schema_version (version integer NOT NULL)")
        for statement in (*MIGRATIONS[0], *MIGRATIONS[1]):  # released steps: never edited
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version VALUES (2)")
        conn.execute("INSERT INTO sessions VALUES ('old', '{\"k\": 1}', 1, 0, nextval('session_versions'), 1, 1)")
        conn.execute("INSERT INTO turns VALUES ('old', 0, 0, %s)", (json.dumps(turn("kept").to_dict()),))
        conn.execute("INSERT INTO inbox (session_id, message_id, data) VALUES ('old', 'm1', %s)",
                     (json.dumps(posted("m1").to_dict()),))
        conn.execute("INSERT INTO checkpoints VALUES ('search', '{\"rollouts\": 3}', 1)")
    async with PostgresStore(in_schema(server_url(), pg_schema)) as store:
        with structlog.testing.capture_logs() as logs:
            state = await store.load("old")
        assert [(e["event"], e["schema_from"], e["schema_to"]) for e in logs] == [
            ("upgraded the store's tables", 2, 3)]
        assert state is not None and texts(state) == ["kept"] and state.meta == {"k": 1}
        assert await store.inbox("old") == (posted("m1"),) and await store.load_checkpoint("search") == {"rollouts": 3}
        assert await store.lapsed() == ("old",)  # waiting, and never leased
        lease = await store.acquire("old", "worker", LONG)
        assert lease is not None and lease.epoch == 1 and await store.lapsed() == ()
        await store.append("old", 1, [turn("new")], {})
        assert texts(await store.load("old")) == ["kept", "new"]
    assert fetch(f"SELECT version FROM {pg_schema}.schema_version") == [(3,)]
