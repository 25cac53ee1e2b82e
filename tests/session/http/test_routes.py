"""The HTTP conduit's routes, driven in process: sessions, messages, interrupts, turns, and every error."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from loop import Request, TurnStarted, UsageError
from provider import Function
from session import MemoryStore, MessageFailed, SQLiteStore, StoreError, StorePaused
from session._conduit import Conduit
from session.http import HTTPConduit
from tests.session.http.helpers import OTHER, TOKEN, in_process, key, wait_turns
from tests.session.models import echo


def gated(gate: anyio.Event) -> Function:
    """Echoes, but holds a message saying "wait" until ``gate`` is set."""

    async def reply(request: Request) -> str:
        if request.turns[-1].text == "wait":
            await gate.wait()
        return request.turns[-1].text.upper()

    return Function(reply)


async def post_and_start(served, session_id: str, text: str) -> None:  # type: ignore[no-untyped-def]
    """Post a message and return once its model turn has begun (the user turn is stored by then)."""
    with served.session(session_id).events.subscribe() as events:
        response = await served.client().post(f"/sessions/{session_id}/messages", json={"text": text})
        assert response.status_code == 202 and response.json()["position"] == 0
        with anyio.fail_after(5):
            async for event in events:
                if isinstance(event, TurnStarted):
                    return


def error_of(response) -> dict:  # type: ignore[no-untyped-def]
    assert response.headers["content-type"] == "application/json"
    return response.json()["error"]


async def test_open_send_and_read_the_stored_turns() -> None:
    async with in_process(Function(echo)) as served:
        client = served.client()
        created = await client.post("/sessions")
        assert created.status_code == 201
        session_id = created.json()["id"]
        assert len(session_id) >= 24 and created.headers["location"] == f"/sessions/{session_id}"
        sent = await client.post(f"/sessions/{session_id}/messages", json={"text": "hello"})
        assert sent.status_code == 202
        assert sent.json()["position"] == 0 and sent.json()["message_id"].startswith("msg_")
        turns = await wait_turns(client, session_id, 2)
    assert [(t["role"], t["parts"][0]["text"]) for t in turns] == [("user", "hello"), ("assistant", "HELLO")]
    assert turns[0]["meta"]["message_id"] == sent.json()["message_id"]


async def test_ids_come_from_the_manager_and_are_unguessable() -> None:
    async with in_process(Function(echo)) as served:
        client = served.client()
        ids = {(await client.post("/sessions")).json()["id"] for _ in range(5)}
        assert len(ids) == 5 and all(served.session(i) is not None for i in ids)


async def test_a_message_posted_while_a_turn_runs_is_queued() -> None:
    gate = anyio.Event()
    async with in_process(gated(gate)) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        await post_and_start(served, session_id, "wait")
        second = await client.post(f"/sessions/{session_id}/messages", json={"text": "next"})
        third = await client.post(f"/sessions/{session_id}/messages", json={"text": "last"})
        assert second.status_code == 202 and second.json()["position"] >= 1
        assert third.json()["position"] > second.json()["position"]
        gate.set()
        turns = await wait_turns(client, session_id, 6)
    assert [t["parts"][0]["text"] for t in turns] == ["wait", "WAIT", "next", "NEXT", "last", "LAST"]


async def test_interrupt_cancels_the_turn_and_reports_what_it_dropped() -> None:
    gate = anyio.Event()
    async with in_process(gated(gate)) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        session = served.session(session_id)
        await post_and_start(served, session_id, "wait")
        for text in ("queued one", "queued two"):
            await client.post(f"/sessions/{session_id}/messages", json={"text": text})
        response = await client.post(f"/sessions/{session_id}/interrupt", json={"drop_queued": True})
        assert response.status_code == 200 and response.json() == {"dropped": 2}
        with anyio.fail_after(5):
            while session.busy:
                await anyio.sleep(0.005)
        empty_body = await client.post(f"/sessions/{session_id}/interrupt")
        assert empty_body.status_code == 200 and empty_body.json() == {"dropped": 0}
        await client.post(f"/sessions/{session_id}/messages", json={"text": "after"})
        turns = await wait_turns(client, session_id, 3)
    assert [t["parts"][0]["text"] for t in turns] == ["wait", "after", "AFTER"]


async def test_interrupt_can_keep_the_queue() -> None:
    gate = anyio.Event()
    async with in_process(gated(gate)) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        await post_and_start(served, session_id, "wait")
        await client.post(f"/sessions/{session_id}/messages", json={"text": "kept"})
        response = await client.post(f"/sessions/{session_id}/interrupt", json={"drop_queued": False})
        assert response.json() == {"dropped": 0}
        turns = await wait_turns(client, session_id, 3)
    assert [t["parts"][0]["text"] for t in turns] == ["wait", "kept", "KEPT"]


async def test_delete_closes_the_session_and_the_next_request_reopens_its_conversation() -> None:
    store = MemoryStore()
    async with in_process(Function(echo), store=store) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        await client.post(f"/sessions/{session_id}/messages", json={"text": "keep me"})
        await wait_turns(client, session_id, 2)
        deleted = await client.delete(f"/sessions/{session_id}")
        assert deleted.status_code == 204 and deleted.content == b""
        assert served.session(session_id) is None
        stored = await store.load(key(session_id))
        assert stored is not None and [t.text for t in stored] == ["keep me", "KEEP ME"]
        turns = (await client.get(f"/sessions/{session_id}/turns")).json()
        assert turns["id"] == session_id and [t["parts"][0]["text"] for t in turns["turns"]] == ["keep me", "KEEP ME"]
        assert (await served.client(OTHER).get(f"/sessions/{session_id}/turns")).status_code == 404


async def test_reading_a_closed_session_opens_nothing() -> None:
    async with in_process(Function(echo), manager_options={"max_sessions": 1}) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        await client.post(f"/sessions/{session_id}/messages", json={"text": "stored"})
        await wait_turns(client, session_id, 2)
        await served.manager.close(key(session_id))  # as the idle reaper does
        other = (await client.post("/sessions")).json()["id"]  # takes the manager's only place
        turns = (await client.get(f"/sessions/{session_id}/turns")).json()["turns"]
        interrupted = await client.post(f"/sessions/{session_id}/interrupt")
        async with client.stream("HEAD", f"/sessions/{session_id}/events") as head:
            assert head.status_code == 200
        assert served.session(session_id) is None and served.session(other) is not None
        # Writing does need the session open: the manager is full, and says so.
        refused = await client.post(f"/sessions/{session_id}/messages", json={"text": "more"})
    assert [t["parts"][0]["text"] for t in turns] == ["stored", "STORED"]
    assert interrupted.json() == {"dropped": 0}
    assert refused.status_code == 503


async def test_a_session_never_written_to_is_gone_once_closed() -> None:
    async with in_process(Function(echo)) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        assert (await client.delete(f"/sessions/{session_id}")).status_code == 204
        assert (await client.get(f"/sessions/{session_id}/turns")).status_code == 404
        assert (await client.delete(f"/sessions/{session_id}")).status_code == 404
        # Nor does one the idle timeout closed, once its log is known here.
        idle = (await client.post("/sessions")).json()["id"]
        await served.manager.close(key(idle))
        assert (await client.get(f"/sessions/{idle}/turns")).status_code == 404


async def test_a_token_reaches_its_sessions_after_a_restart_and_no_other_token_does(tmp_path: Path) -> None:
    path = tmp_path / "conversations.db"
    async with SQLiteStore(path) as store, in_process(Function(echo), store=store) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        await client.post(f"/sessions/{session_id}/messages", json={"text": "before"})
        await wait_turns(client, session_id, 2)
    async with SQLiteStore(path) as store, in_process(Function(echo), store=store) as restarted:
        assert (await restarted.client(OTHER).get(f"/sessions/{session_id}/turns")).status_code == 404
        assert (await restarted.client(OTHER).post(f"/sessions/{session_id}/messages",
                                                   json={"text": "let me in"})).status_code == 404
        client = restarted.client()
        turns = (await client.get(f"/sessions/{session_id}/turns")).json()["turns"]
        assert [t["parts"][0]["text"] for t in turns] == ["before", "BEFORE"]
        assert (await client.post(f"/sessions/{session_id}/messages", json={"text": "after"})).status_code == 202
        turns = await wait_turns(client, session_id, 4)
    assert [t["parts"][0]["text"] for t in turns] == ["before", "BEFORE", "after", "AFTER"]


async def test_a_session_the_manager_closed_is_reopened_with_its_conversation() -> None:
    async with in_process(Function(echo)) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        await client.post(f"/sessions/{session_id}/messages", json={"text": "one"})
        await wait_turns(client, session_id, 2)
        await served.manager.close(key(session_id))  # as the idle reaper does
        assert len((await client.get(f"/sessions/{session_id}/turns")).json()["turns"]) == 2
        assert (await client.post(f"/sessions/{session_id}/interrupt")).json() == {"dropped": 0}
        assert (await client.post(f"/sessions/{session_id}/messages", json={"text": "two"})).status_code == 202
        turns = await wait_turns(client, session_id, 4)
    assert [t["parts"][0]["text"] for t in turns] == ["one", "ONE", "two", "TWO"]


SESSION_ROUTES = [
    ("DELETE", "", None),
    ("POST", "/messages", {"text": "hi"}),
    ("POST", "/interrupt", {}),
    ("GET", "/turns", None),
    ("GET", "/events", None),
]


@pytest.mark.parametrize(("method", "suffix", "body"), SESSION_ROUTES)
async def test_an_unknown_session_is_404(method: str, suffix: str, body: dict | None) -> None:
    async with in_process(Function(echo)) as served:
        response = await served.client().request(method, f"/sessions/nope{suffix}", json=body)
    assert response.status_code == 404
    assert error_of(response) == {"type": "not_found", "message": "no session 'nope'"}


@pytest.mark.parametrize(("method", "suffix", "body"), SESSION_ROUTES)
async def test_another_tokens_session_is_invisible(method: str, suffix: str, body: dict | None) -> None:
    async with in_process(Function(echo)) as served:
        mine, theirs = served.client(TOKEN), served.client(OTHER)
        session_id = (await mine.post("/sessions")).json()["id"]
        response = await theirs.request(method, f"/sessions/{session_id}{suffix}", json=body)
        assert response.status_code == 404 and error_of(response)["type"] == "not_found"
        assert (await mine.get(f"/sessions/{session_id}/turns")).status_code == 200
        assert served.session(session_id) is not None
        own = (await theirs.post("/sessions")).json()["id"]
        assert (await mine.get(f"/sessions/{own}/turns")).status_code == 404


@pytest.mark.parametrize("header", [None, "Bearer wrong-token", f"Basic {TOKEN}", "Bearer", f"bearer{TOKEN}"])
async def test_every_session_route_needs_a_valid_bearer_token(header: str | None) -> None:
    async with in_process(Function(echo)) as served:
        client = served.client(None)
        headers = {"authorization": header} if header else {}
        for method, path in [("POST", "/sessions"), ("GET", "/sessions/x/turns"), ("GET", "/nowhere")]:
            response = await client.request(method, path, headers=headers)
            assert response.status_code == 401, (method, path)
            assert error_of(response)["type"] == "unauthorized"
            assert response.headers["www-authenticate"].startswith("Bearer")
        assert served.manager.open_sessions == 0
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        assert (await client.get("/openapi.json")).status_code == 200


async def test_the_scheme_is_case_insensitive() -> None:
    async with in_process(Function(echo)) as served:
        response = await served.client(None).post("/sessions", headers={"authorization": f"bearer {TOKEN}"})
    assert response.status_code == 201


@pytest.mark.parametrize(("body", "status", "kind"), [
    (b"{not json", 400, "bad_json"),
    (b"", 400, "bad_json"),
    (b"\xff\xfe", 400, "bad_json"),
    (b'["text"]', 422, "invalid_request"),
    (b"{}", 422, "invalid_message"),
    (b'{"txt": "hi"}', 422, "invalid_message"),
    (b'{"text": 5}', 422, "invalid_message"),
    (b'{"text": null}', 422, "invalid_message"),
    (b'{"text": ""}', 422, "invalid_message"),
    (b'{"text": "   "}', 422, "invalid_message"),
])
async def test_a_bad_message_is_refused_and_nothing_is_queued(body: bytes, status: int, kind: str) -> None:
    async with in_process(Function(echo)) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        response = await client.post(f"/sessions/{session_id}/messages", content=body,
                                     headers={"content-type": "application/json"})
        assert response.status_code == status
        error = error_of(response)
        assert error["type"] == kind and error["message"]
        assert not served.session(session_id).busy
        assert (await client.get(f"/sessions/{session_id}/turns")).json()["turns"] == []


@pytest.mark.parametrize(("body", "status", "kind"), [
    (b"{not json", 400, "bad_json"),
    (b"\xff\xfe", 400, "bad_json"),
    (b'["x"]', 422, "invalid_request"),
])
async def test_a_malformed_body_opens_no_session(body: bytes, status: int, kind: str) -> None:
    async with in_process(Function(echo)) as served:
        response = await served.client().post("/sessions", content=body,
                                              headers={"content-type": "application/json"})
        assert response.status_code == status and error_of(response)["type"] == kind
        assert served.manager.open_sessions == 0


@pytest.mark.parametrize("body", [b"", b"  \n", b"{}"])
async def test_an_empty_body_or_object_opens_a_session(body: bytes) -> None:
    async with in_process(Function(echo)) as served:
        response = await served.client().post("/sessions", content=body)
    assert response.status_code == 201


@pytest.mark.parametrize("body", [b'{"drop_queued": "yes"}', b'{"drop_queued": 1}', b"[]"])
async def test_a_bad_interrupt_is_refused(body: bytes) -> None:
    async with in_process(Function(echo)) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        response = await client.post(f"/sessions/{session_id}/interrupt", content=body)
    assert response.status_code == 422 and error_of(response)["type"] == "invalid_request"


async def test_a_full_queue_is_429() -> None:
    gate = anyio.Event()
    async with in_process(gated(gate), manager_options={"queue_size": 1}) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        await post_and_start(served, session_id, "wait")
        assert (await client.post(f"/sessions/{session_id}/messages", json={"text": "fits"})).status_code == 202
        busy = await client.post(f"/sessions/{session_id}/messages", json={"text": "too many"})
        assert busy.status_code == 429 and busy.headers["retry-after"] == "1"
        assert error_of(busy)["type"] == "session_busy" and "waiting" in error_of(busy)["message"]
        gate.set()
        turns = await wait_turns(client, session_id, 4)
    assert [t["parts"][0]["text"] for t in turns] == ["wait", "WAIT", "fits", "FITS"]


class FlakyStore(MemoryStore):
    fail_load = False
    fail_append = False

    async def load(self, session_id):  # type: ignore[no-untyped-def]
        if self.fail_load:
            raise StoreError("the disk is on fire")
        return await super().load(session_id)

    async def append(self, session_id, start, turns, meta):  # type: ignore[no-untyped-def]
        if self.fail_append:
            raise StoreError("disk full")
        await super().append(session_id, start, turns, meta)


async def test_a_store_failure_opening_a_session_is_500_and_registers_nothing() -> None:
    store = FlakyStore()
    store.fail_load = True
    async with in_process(Function(echo), store=store) as served:
        client = served.client()
        response = await client.post("/sessions")
        assert response.status_code == 500
        error = error_of(response)
        assert error["type"] == "store_error" and "the disk is on fire" in error["message"]
        assert served.manager.open_sessions == 0 and await store.sessions() == []
        store.fail_load = False
        assert (await client.post("/sessions")).status_code == 201


async def test_a_store_failure_under_an_acknowledged_message_pauses_the_queue_and_loses_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("session._mainline.FIRST_PAUSE", 0.01)
    store = FlakyStore()
    async with in_process(Function(echo), store=store) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        await client.post(f"/sessions/{session_id}/messages", json={"text": "kept"})
        await wait_turns(client, session_id, 2)
        store.fail_append = True
        seen: list[object] = []
        with served.session(session_id).events.subscribe(buffer=None) as events:
            for text in ("waits", "behind"):
                assert (await client.post(f"/sessions/{session_id}/messages", json={"text": text})).status_code == 202
            with anyio.fail_after(5):
                async for event in events:
                    seen.append(event)
                    if sum(isinstance(e, StorePaused) for e in seen) == 2:
                        break
            health = (await client.get("/healthz")).json()
            turns = (await client.get(f"/sessions/{session_id}/turns")).json()["turns"]
            assert [t["parts"][0]["text"] for t in turns] == ["kept", "KEPT"], "nothing half-written"
            store.fail_append = False  # the disk has room again
            turns = await wait_turns(client, session_id, 6)
            seen.extend(events.drain())
    paused = [e for e in seen if isinstance(e, StorePaused)]
    assert paused[0].error == "StoreError: disk full" and paused[0].attempt == 1 and paused[1].attempt == 2
    assert health == {"status": "degraded", "store": "failing under 1 session's messages: StoreError: disk full"}
    assert not [e for e in seen if isinstance(e, MessageFailed)], "an acknowledged message is never said to fail"
    assert [t["parts"][0]["text"] for t in turns] == ["kept", "KEPT", "waits", "WAITS", "behind", "BEHIND"]
    assert await store.inbox(key(session_id)) == ()


async def test_a_store_failure_reopening_a_session_is_500_and_queues_nothing() -> None:
    store = FlakyStore()
    async with in_process(Function(echo), store=store) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        await served.manager.close(key(session_id))
        store.fail_load = True
        response = await client.post(f"/sessions/{session_id}/messages", json={"text": "lost"})
        assert response.status_code == 500 and error_of(response)["type"] == "store_error"
        assert served.session(session_id) is None
        store.fail_load = False
        assert (await client.post(f"/sessions/{session_id}/messages", json={"text": "again"})).status_code == 202
        turns = await wait_turns(client, session_id, 2)
    assert [t["parts"][0]["text"] for t in turns] == ["again", "AGAIN"]


async def test_unknown_routes_and_methods_answer_in_json() -> None:
    async with in_process(Function(echo)) as served:
        client = served.client()
        missing, wrong = await client.get("/sessions/x/y/z"), await client.get("/sessions/x/messages")
    assert missing.status_code == 404 and error_of(missing)["type"] == "not_found"
    assert wrong.status_code == 405 and error_of(wrong)["type"] == "method_not_allowed"
    assert "POST" in wrong.headers["allow"]


def test_the_conduit_is_a_conduit() -> None:
    assert isinstance(HTTPConduit(token="t"), Conduit)


def test_a_token_is_required_unless_serving_loopback_on_purpose() -> None:
    with pytest.raises(UsageError, match="needs a bearer token"):
        HTTPConduit()
    with pytest.raises(UsageError, match="without a token"):
        HTTPConduit(host="0.0.0.0", allow_no_token=True)
    with pytest.raises(UsageError, match="without a token"):
        HTTPConduit(host="example.com", allow_no_token=True)
    for bad in ("", "has space", [], ["ok", 5]):
        with pytest.raises(UsageError, match="token"):
            HTTPConduit(token=bad)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="max_body_bytes"):
        HTTPConduit(token="t", max_body_bytes=0)
    with pytest.raises(UsageError, match="port"):
        HTTPConduit(token="t", port=70000)
    assert HTTPConduit(host="0.0.0.0", token="t").tokens == ("t",)
    assert HTTPConduit(host="::1", allow_no_token=True).tokens is None


async def test_a_loopback_server_without_a_token_lets_everyone_in() -> None:
    async with in_process(Function(echo), token=None, allow_no_token=True) as served:
        client = served.client(None)
        created = await client.post("/sessions")
        assert created.status_code == 201
        session_id = created.json()["id"]
        assert (await client.get(f"/sessions/{session_id}/turns")).status_code == 200
