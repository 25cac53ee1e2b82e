"""PostgresEvents against a real server (see ``pg_server``): publishing and following, live across two instances
(two processes), resuming after an id, events too large for a notification, concurrent publishers, a listener
whose connection is lost, followers cancelled or left behind, retention, schemas kept apart, bad input and the
password kept out of sight. Every test runs on asyncio and on trio."""

from __future__ import annotations

import contextlib
import json
import threading
import traceback
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import pytest
import structlog

from loop import UsageError
from session import StoreError
from tests.session.stores.pg_server import admin, in_schema, pg_schema, pg_url, require_psycopg, server_url

require_psycopg("PostgresEvents")

from session.stores._postgres_events import EventFollower, PostgresEvents, StoredEvent  # noqa: E402
from session.stores import _postgres_listen  # noqa: E402
from session.stores._postgres_listen import INLINE_LIMIT, Listener, notice_payload, read_notice  # noqa: E402

__all__ = ["pg_schema", "pg_url"]  # fixtures, used by name

NOBODY = "127.0.0.1:1"  # a loopback port nothing listens on: connecting is refused at once


def fetch(sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with admin() as conn:
        rows: list[tuple[Any, ...]] = conn.execute(sql, args).fetchall()
        return rows


def execute(sql: str, *args: Any) -> None:
    with admin() as conn:
        conn.execute(sql, args)


async def wait_until(done: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Wait until ``done()``; fail, saying ``what`` never happened, after ``timeout`` seconds."""
    with anyio.move_on_after(timeout):
        while not done():
            await anyio.sleep(0.01)
        return
    pytest.fail(f"waited {timeout:g} s, but never: {what}")


async def take(follower: EventFollower, count: int) -> list[StoredEvent]:
    """The next ``count`` events of ``follower``, taken here; fails rather than hangs when they never come."""
    got: list[StoredEvent] = []
    with anyio.move_on_after(20):
        while len(got) < count:
            got.append(await follower.__anext__())
        return got
    pytest.fail(f"{follower!r} gave {len(got)} of {count} events: {got}")


class Seen:
    """What a follower running in the background (``following``) has given so far."""

    def __init__(self, follower: EventFollower) -> None:
        self.follower = follower
        self.events: list[StoredEvent] = []
        self.hold: anyio.Event | None = None  # while set, it stops taking events after the next one

    async def run(self) -> None:
        async for event in self.follower:
            self.events.append(event)
            if self.hold is not None:
                await self.hold.wait()

    async def first(self, count: int) -> list[StoredEvent]:
        """Its first ``count`` events, once it has them."""
        await wait_until(lambda: len(self.events) >= count, f"{count} events came (got {self.events})")
        return self.events[:count]


@contextlib.asynccontextmanager
async def following(follower: EventFollower) -> AsyncIterator[Seen]:
    """``follower`` taking events in the background while the block runs, then closed."""
    seen = Seen(follower)
    async with follower, anyio.create_task_group() as group:
        group.start_soon(seen.run)
        yield seen
        group.cancel_scope.cancel()


def listener(events: PostgresEvents) -> Listener:
    assert events._listener is not None
    return events._listener


async def listening(events: PostgresEvents, *followers: EventFollower) -> None:
    """Wait until ``events`` listens and each follower has read the table since and waits for notifications:
    from then on what is published reaches them by notification."""
    await wait_until(lambda: events._listener is not None and events._listener.pid is not None
                     and all(f._wake is not None and not f._stale for f in followers), "listening")


async def gone(pid: int | None) -> None:
    """Wait until the server process ``pid`` has ended."""
    assert pid is not None
    await wait_until(lambda: fetch("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", pid) == [(0,)],
                     f"server process {pid} ended")


def ids(got: list[StoredEvent]) -> list[int]:
    return [e.id for e in got]


def events(*items: str, main: bool = True) -> list[tuple[str, str, bool]]:
    return [("text_delta", json.dumps({"type": "text_delta", "text": text}), main) for text in items]


def texts(got: list[StoredEvent]) -> list[str]:
    return [json.loads(e.data)["text"] for e in got]


@pytest.fixture
def other_schema() -> Iterator[str]:
    schema = f"test_{uuid.uuid4().hex[:12]}"
    with admin() as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema
    finally:
        with admin() as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


# Publishing, following, resuming.

async def test_published_events_are_followed_from_the_start_in_order(pg_url: str, pg_schema: str) -> None:
    async with PostgresEvents(pg_url) as log:
        first = await log.publish("s", events("a", "b"))
        second = await log.publish("s", [("tool_call", "{}", False), *events("c")])
        await log.publish("other", events("elsewhere"))
        assert first == sorted(first) and second == sorted(second) and first[-1] < second[0]
        async with log.follow("s") as follower:
            got = await take(follower, 4)
            assert follower.position == second[-1]
    assert ids(got) == first + second
    assert [(e.type, e.main) for e in got] == [("text_delta", True)] * 2 + [("tool_call", False), ("text_delta", True)]
    assert texts([got[0], got[1], got[3]]) == ["a", "b", "c"]
    rows = fetch(f"SELECT id, session_id, type, data, main FROM {pg_schema}.events ORDER BY id")
    assert [(r[0], r[2], r[3], r[4]) for r in rows if r[1] == "s"] == [(e.id, e.type, e.data, e.main) for e in got]


async def test_another_instance_follows_live(pg_url: str) -> None:
    async with PostgresEvents(pg_url) as a, PostgresEvents(pg_url) as b:  # two processes, as far as they know
        async with following(b.follow("s")) as seen:
            await listening(b, seen.follower)
            reads = seen.follower.reads
            published = await a.publish("s", events("one"))
            published += await a.publish("s", events("two", "three"))
            await a.publish("not followed", events("x"))
            got = await seen.first(3)
            assert ids(got) == published and texts(got) == ["one", "two", "three"]
            assert seen.follower.reads == reads  # they came inline in the notifications
            last = await a.publish("s", events("last"))
            assert ids(await seen.first(4)) == published + last and ids(seen.events) == published + last
        assert b._followers == {}


async def test_a_follower_resumes_after_an_id(pg_url: str) -> None:
    async with PostgresEvents(pg_url) as a, PostgresEvents(pg_url) as b:
        published = await a.publish("s", events("a", "b", "c"))
        async with following(b.follow("s", after=published[1])) as seen:
            assert texts(await seen.first(1)) == ["c"]
            await listening(b, seen.follower)
            more = await a.publish("s", events("d"))
            assert ids(await seen.first(2)) == published[2:] + more
        async with following(b.follow("s", after=more[0])) as seen:  # at the newest: only what comes next
            await listening(b, seen.follower)
            later = await a.publish("s", events("e"))
            assert ids(await seen.first(1)) == later and ids(seen.events) == later


async def test_events_too_large_for_a_notification_are_fetched_by_id(pg_url: str) -> None:
    big = json.dumps({"type": "text_delta", "text": "é" * 9000})  # over NOTIFY's 8000 bytes on its own
    async with PostgresEvents(pg_url) as a, PostgresEvents(pg_url) as b:
        async with following(b.follow("s")) as seen:
            await listening(b, seen.follower)
            reads = seen.follower.reads
            published = await a.publish("s", [("text_delta", big, True), *events("small")])
            got = await seen.first(2)
            assert ids(got) == published and got[0].data == big and texts(got[1:]) == ["small"]
            await listening(b, seen.follower)
            assert seen.follower.reads == reads + 1  # the notification named them; the table gave them
            more = await a.publish("s", events("inline again"))
            assert ids(await seen.first(3)) == published + more and seen.follower.reads == reads + 1


def test_a_payload_carries_its_events_only_while_it_fits() -> None:
    small = [StoredEvent(7, "t", '"x"', True), StoredEvent(9, "u", "{}", False)]
    notice = read_notice(notice_payload("s", 5, small))
    assert notice is not None and notice.events == tuple(small)
    assert (notice.session_id, notice.after, notice.first, notice.last) == ("s", 5, 7, 9)
    for text in ("x" * (INLINE_LIMIT - 50), "€" * (INLINE_LIMIT // 3), "\"" * 5000):  # near the bound, by bytes
        batch = [StoredEvent(i, "text_delta", json.dumps(text), True) for i in (1, 2)]
        payload = notice_payload("s" * 256, 0, batch)
        assert len(payload.encode()) <= INLINE_LIMIT < 8000
        notice = read_notice(payload)
        assert notice is not None and (notice.first, notice.last) == (1, 2)
    assert read_notice(notice_payload("s", 0, [StoredEvent(1, "t", '"x"' * 100)])) is not None
    for junk in ("", "hello", "[]", '{"session": "s"}', '{"session": "s", "after": 0, "first": 1, "last": 1, '
                 '"events": [[1]]}'):
        assert read_notice(junk) is None  # someone else's notification on the channel: ignored


async def test_concurrent_publishers_give_every_follower_each_id_once_in_order(pg_url: str, pg_schema: str) -> None:
    publishers = [PostgresEvents(pg_url, pool_size=4) for _ in range(3)]
    a, b = publishers[0], publishers[1]
    per_task, tasks = 12, 6
    sizes = [1 + (n % 3) for n in range(per_task)]
    total = tasks * sum(sizes)

    async def publish(n: int) -> None:
        for size in sizes:
            await publishers[n % 3].publish("s", events(*(f"{n}.{i}" for i in range(size))))

    async def noise() -> None:  # another session's ids fall between this one's
        for n in range(per_task * tasks // 2):
            await publishers[n % 3].publish("noise", events("n"))

    try:
        async with following(a.follow("s")) as one, following(b.follow("s")) as two, \
                following(b.follow("s")) as three:
            await listening(a, one.follower)
            await listening(b, two.follower, three.follower)
            async with anyio.create_task_group() as group:
                group.start_soon(noise)
                for n in range(tasks):
                    group.start_soon(publish, n)
            for seen in (one, two, three):
                await seen.first(total)
        table = [r[0] for r in fetch(f"SELECT id FROM {pg_schema}.events WHERE session_id = 's' ORDER BY id")]
        assert len(table) == total
        for seen in (one, two, three):
            assert ids(seen.events) == table  # strictly rising, none missing, none twice
        async with b.follow("s") as late:
            assert ids(await take(late, total)) == table
    finally:
        for log in publishers:
            await log.aclose()


async def test_a_notification_that_does_not_follow_sends_the_follower_to_the_table(pg_url: str) -> None:
    async with PostgresEvents(pg_url) as log:
        async with following(log.follow("s")) as seen:
            await listening(log, seen.follower)
            published = await log.publish("s", events("a"))
            await seen.first(1)
            reads = seen.follower.reads
            fake = [StoredEvent(published[0] + 100, "text_delta", json.dumps({"text": "never published"}))]
            # A batch said to come after an id this follower never saw: its events are not taken on trust.
            log._on_payloads([notice_payload("s", published[0] + 50, fake)])
            await listening(log, seen.follower)
            assert seen.follower.reads == reads + 1 and ids(seen.events) == published
            # One that follows on from the last id it gave is taken as it is (this one only says so).
            log._on_payloads([notice_payload("s", published[0], fake)])
            assert ids(await seen.first(2)) == published + [fake[0].id] and seen.follower.reads == reads + 1


# The listening connection.

async def test_a_lost_listening_connection_loses_nothing(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async with PostgresEvents(pg_url) as a, PostgresEvents(pg_url) as b:
        async with following(b.follow("s")) as seen:
            await listening(b, seen.follower)
            before = await a.publish("s", events("before"))
            assert ids(await seen.first(1)) == before
            watcher = listener(b)
            back = threading.Event()  # holds the listener off until the test has published
            listen = watcher._listen

            def held() -> Any:
                assert back.wait(20)
                return listen()

            monkeypatch.setattr(watcher, "_listen", held)
            pid = watcher.pid
            assert fetch("SELECT query FROM pg_stat_activity WHERE pid = %s", pid)[0][0].startswith("LISTEN")
            with structlog.testing.capture_logs() as logs:
                fetch("SELECT pg_terminate_backend(%s)", pid)
                await wait_until(lambda: watcher.drops == 1, "the listener noticed its connection was lost")
                meanwhile = await a.publish("s", events("while", "nobody listened"))  # b is never notified
                back.set()
                got = await seen.first(3)
            assert ids(got[1:]) == meanwhile and texts(got[1:]) == ["while", "nobody listened"]
            assert watcher.connects == 2 and watcher.pid not in (None, pid)
            assert [e["event"] for e in logs] == ["lost the connection listening for events; connecting again",
                                                  "listening for events again"]
            after = await a.publish("s", events("after"))
            assert ids(await seen.first(4)) == before + meanwhile + after


async def test_the_listener_listens_again_after_every_loss(pg_url: str) -> None:
    async with PostgresEvents(pg_url) as a, PostgresEvents(pg_url) as b:
        async with following(b.follow("s")) as seen:
            published: list[int] = []
            for n in range(3):
                await listening(b, seen.follower)
                fetch("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE query LIKE 'LISTEN%%' AND pid = %s", listener(b).pid)
                published += await a.publish("s", events(f"after loss {n}"))
                await wait_until(lambda: listener(b).drops == n + 1, "the loss was noticed")
            assert ids(await seen.first(3)) == published
            assert listener(b).connects >= 3


async def test_a_cancelled_follower_unsubscribes_and_resumes_without_loss(pg_url: str, pg_schema: str) -> None:
    async with PostgresEvents(pg_url) as a, PostgresEvents(pg_url) as b:
        follower = b.follow("s")
        first = await a.publish("s", events("first"))
        got: list[StoredEvent] = []

        async def run() -> None:
            async for event in follower:
                got.append(event)

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await wait_until(lambda: bool(got), "the follower took the first event")
            await listening(b, follower)
            pid = listener(b).pid
            group.cancel_scope.cancel()  # while it waits for a notification
        assert [e.id for e in got] == first
        assert b._followers == {} and not listener(b).wanted
        await wait_until(lambda: listener(b).pid is None, "the listener closed its idle connection")
        await gone(pid)
        missed = await a.publish("s", events("while cancelled"))
        assert [e.id for e in await take(follower, 1)] == missed  # resumed: the table had it
        await follower.aclose()
        with pytest.raises(StopAsyncIteration):
            await follower.__anext__()
        assert b._followers == {}


async def test_a_slow_follower_falls_back_on_the_table_without_holding_up_others(pg_url: str) -> None:
    async with PostgresEvents(pg_url) as a, PostgresEvents(pg_url, buffer=2) as b:
        async with following(b.follow("s")) as slow, following(b.follow("s")) as quick:
            await listening(b, slow.follower, quick.follower)
            slow.hold = anyio.Event()
            published = await a.publish("s", events("first"))
            await slow.first(1)  # and now it holds, still following
            for n in range(20):
                published += await a.publish("s", events(str(n)))
            assert ids(await quick.first(21)) == published  # while the slow one took none
            assert len(slow.events) == 1 and len(slow.follower._notices) <= 2 and slow.follower._stale
            reads = slow.follower.reads
            slow.hold.set()
            assert ids(await slow.first(21)) == published and slow.follower.reads > reads


async def test_followers_end_and_the_listener_stops_at_once_when_their_events_close(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_postgres_listen, "HEALTH", 3600.0)  # a close that waited for the quiet check would hang
    a = PostgresEvents(pg_url)
    published = await a.publish("s", events("a"))
    follower = a.follow("s")
    got: list[StoredEvent] = []

    async def run() -> None:
        async for event in follower:
            got.append(event)

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await listening(a, follower)
        watcher = listener(a)
        pid = watcher.pid
        await a.aclose()  # run returns: the task group exits
    assert ids(got) == published
    assert a._listener is None and not watcher._thread.is_alive() and watcher.pid is None
    await gone(pid)
    with pytest.raises(UsageError, match="is closed"):
        a.follow("s")
    with pytest.raises(UsageError, match="is closed"):
        await a.publish("s", events("late"))
    await a.aclose()  # twice is fine


async def test_a_follower_whose_events_close_while_it_reads_ends(pg_url: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    a = PostgresEvents(pg_url)
    await a.publish("s", events("a"))
    follower = a.follow("s")
    read = a._read

    async def closing_first(session_id: str, after: int) -> list[StoredEvent]:
        await a.aclose()  # as when the server stops while a follower's read is on its way
        return await read(session_id, after)

    monkeypatch.setattr(a, "_read", closing_first)
    assert [event async for event in follower] == [], "it ends, as a follower of closed events does"
    assert follower.reads == 1


# Retention.

async def test_prune_drops_old_events(pg_url: str, pg_schema: str) -> None:
    async with PostgresEvents(pg_url) as log:
        old = await log.publish("s", events("old", "older"))
        new = await log.publish("s", events("new"))
        execute(f"UPDATE {pg_schema}.events SET at = at - 3600 WHERE id = ANY(%s)", old)
        assert await log.prune(60) == 2
        assert await log.prune(60) == 0
        async with log.follow("s") as follower:
            assert [e.id for e in await take(follower, 1)] == new
        with pytest.raises(UsageError, match="older_than must be a positive number of seconds"):
            await log.prune(0)


async def test_keep_drops_old_events_as_it_publishes(pg_url: str, pg_schema: str) -> None:
    async with PostgresEvents(pg_url) as plain, PostgresEvents(pg_url, keep=60) as keeping:
        old = await plain.publish("s", events("old"))
        execute(f"UPDATE {pg_schema}.events SET at = at - 3600 WHERE id = ANY(%s)", old)
        await plain.publish("s", events("not kept, not dropped"))
        assert fetch(f"SELECT count(*) FROM {pg_schema}.events") == [(2,)]
        new = await keeping.publish("t", events("new"))
        left = [r[0] for r in fetch(f"SELECT id FROM {pg_schema}.events ORDER BY id")]
        assert old[0] not in left and new[0] in left and len(left) == 2


# Where the table is, and who makes it.

async def test_schemas_keep_their_events_apart(pg_url: str, pg_schema: str, other_schema: str) -> None:
    async with PostgresEvents(pg_url) as here, PostgresEvents(in_schema(server_url(), other_schema)) as there:
        async with following(here.follow("s")) as seen:
            await listening(here, seen.follower)
            await there.publish("s", events("there"))
            published = await here.publish("s", events("here"))
            got = await seen.first(1)
            assert ids(got) == published and texts(got) == ["here"]
            more = await here.publish("s", events("here again"))
            assert ids(await seen.first(2)) == published + more
    tables = fetch("SELECT table_schema FROM information_schema.tables WHERE table_name = 'events' "
                   "AND table_schema IN (%s, %s) ORDER BY 1", pg_schema, other_schema)
    assert sorted(r[0] for r in tables) == sorted([pg_schema, other_schema])


async def test_instances_starting_at_once_make_the_table_once(pg_url: str, pg_schema: str) -> None:
    logs = [PostgresEvents(pg_url) for _ in range(4)]
    try:
        async with anyio.create_task_group() as group:
            for n, log in enumerate(logs):
                group.start_soon(log.publish, f"s{n}", events(str(n)))
    finally:
        for log in logs:
            await log.aclose()
    assert fetch(f"SELECT count(*) FROM {pg_schema}.events") == [(4,)]


# Bad input, and the server's errors.

@pytest.mark.parametrize("batch, message", [
    ("text", "events are a sequence of"),
    ({("t", "{}", True)}, "events are a sequence of"),
    ([["t", "{}", True]], "event 0 must be a"),
    ([("t", "{}")], "event 0 must be a"),
    ([("t", "{}", True), ("t", b"{}", True)], "event 1 must be a"),
    ([("t", "{}", 1)], "event 0 must be a"),
    ([("", "{}", True)], "event 0 must be a"),
    ([(None, "{}", True)], "event 0 must be a"),
    ([("t", '"\x00"', True)], "event 0's data holds a NUL character"),
    ([("t\udc80", "{}", True)], "event 0's type is not valid Unicode"),
])
async def test_bad_events_are_usage_errors(pg_url: str, pg_schema: str, batch: Any, message: str) -> None:
    async with PostgresEvents(pg_url) as log:
        with pytest.raises(UsageError, match=message):
            await log.publish("s", batch)
        assert await log.publish("s", []) == []
    assert fetch("SELECT count(*) FROM information_schema.tables WHERE table_schema = %s", pg_schema) == [(0,)]


async def test_bad_arguments_are_usage_errors(pg_url: str) -> None:
    async with PostgresEvents(pg_url) as log:
        for session_id in ("", None, 7, "x" * 257):
            with pytest.raises(UsageError, match="a session id is a non-empty string"):
                await log.publish(session_id, events("a"))  # type: ignore[arg-type]
            with pytest.raises(UsageError, match="a session id is a non-empty string"):
                log.follow(session_id)  # type: ignore[arg-type]
        for after in (-1, True, 1.5, "3"):
            with pytest.raises(UsageError, match="after"):
                log.follow("s", after)  # type: ignore[arg-type]
    bad: list[tuple[dict[str, Any], str]] = [
        ({"keep": 0}, "keep must be a positive number of seconds or None"), ({"buffer": 0}, "buffer"),
        ({"pool_size": True}, "pool_size"), ({"timeout": -1}, "timeout")]
    for settings, message in bad:
        with pytest.raises(UsageError, match=message):
            PostgresEvents(pg_url, **settings)
    with pytest.raises(UsageError, match="starts with postgresql://"):
        PostgresEvents("mysql://u@h/db")


async def test_server_errors_are_store_errors_without_the_password(caplog: pytest.LogCaptureFixture) -> None:
    secret = f"pw-{uuid.uuid4().hex}"
    log = PostgresEvents(f"postgresql://cl:{secret}@{NOBODY}/cl")
    with structlog.testing.capture_logs() as logs:
        with pytest.raises(StoreError, match=r"PostgreSQL events 'postgresql://cl:\*\*\*@127.0.0.1:1/cl': cannot "
                                             r"connect: OperationalError: .*refused") as info:
            await log.publish("s", events("a"))
        follower = log.follow("s")
        with pytest.raises(StoreError, match="cannot connect"):
            await follower.__anext__()
        assert log._followers == {}  # a failed step holds nothing
        assert log._listener is not None
        log._listener.want(True)  # as a follower waiting would (the failed one may have let go before it tried)
        await wait_until(lambda: bool(logs), "the listener said it cannot listen")
    await log.aclose()
    shown = [repr(log), str(log), "".join(traceback.format_exception(info.value)), caplog.text, repr(logs)]
    assert all(secret not in text for text in shown)
    assert logs[0]["event"] == "cannot listen for events; trying again" and "refused" in logs[0]["error"]


async def test_server_errors_in_a_call_are_store_errors(pg_url: str, pg_schema: str) -> None:
    async with PostgresEvents(pg_url) as log:
        await log.publish("s", events("a"))
        execute(f"ALTER TABLE {pg_schema}.events ADD CONSTRAINT short CHECK (length(data) < 100)")
        with pytest.raises(StoreError, match=r"PostgreSQL events .*: CheckViolation: .*\"short\"") as info:
            await log.publish("s", events("x" * 200))
        assert "\n" not in str(info.value)
