"""Bodies built to break the session API: lone surrogates and deeply nested JSON are refused at the door with
400, and no event, whatever text it holds, can make a session's event stream unreadable."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest

from loop import Delta, EventBus, Finish, Request, TextDelta
from provider import Function
from session.http import EventLog
from session.http._wire import dumps
from tests.session.http.helpers import SSE, TOKEN, in_process, on_socket, wait_turns
from tests.session.models import echo

LONE = b'{"text": "bad \\ud800"}'  # the JSON escape of a lone surrogate: valid JSON, not valid Unicode text
LONE_UTF8 = b'{"text": "bad \xed\xa0\x80"}'  # the same surrogate as (invalid) UTF-8 bytes, which json.loads takes


def nested(depth: int, inner: bytes = b"1") -> bytes:
    return b"[" * depth + inner + b"]" * depth


async def open_session(client: httpx.AsyncClient) -> str:
    response = await client.post("/sessions")
    assert response.status_code == 201, response.text
    return response.json()["id"]


@pytest.mark.parametrize("body", [LONE, LONE_UTF8], ids=["escape", "utf8"])
async def test_a_message_with_a_lone_surrogate_is_refused_at_the_door(body: bytes) -> None:
    async with in_process(Function(echo)) as served:
        client = served.client()
        session_id = await open_session(client)
        refused = await client.post(f"/sessions/{session_id}/messages", content=body)
        assert refused.status_code == 400
        error = refused.json()["error"]
        assert error["type"] == "bad_unicode"
        assert error["message"].startswith("'text' holds a lone UTF-16 surrogate")
        assert not served.session(session_id).busy
        assert (await client.get(f"/sessions/{session_id}/turns")).json()["turns"] == []
        # A surrogate pair is one character (here an emoji): it is text, and goes through.
        paired = await client.post(f"/sessions/{session_id}/messages", content=b'{"text": "hi \\ud83d\\ude00"}')
        assert paired.status_code == 202
        turns = await wait_turns(client, session_id, 2)
    assert turns[0]["parts"][0]["text"] == "hi \N{GRINNING FACE}"


async def test_a_lone_surrogate_anywhere_in_a_body_is_refused() -> None:
    async with in_process(Function(echo)) as served:
        client = served.client()
        session_id = await open_session(client)
        for path, body, where in [
            ("/sessions", b'{"note": ["ok", "\\udc00"]}', "note[1]"),
            (f"/sessions/{session_id}/interrupt", b'{"\\ud800": true}', "\\ud800"),
            (f"/sessions/{session_id}/messages", b'{"text": "fine", "meta": {"x": "\\udfff"}}', "meta.x"),
        ]:
            refused = await client.post(path, content=body)
            assert refused.status_code == 400, (path, refused.text)
            assert refused.json()["error"]["type"] == "bad_unicode"
            assert refused.json()["error"]["message"].startswith(f"{where!r} holds")
        assert served.manager.open_sessions == 1


async def test_no_event_can_make_the_event_stream_unreadable() -> None:
    async def model(request: Request) -> AsyncIterator[Delta]:
        yield TextDelta("bad \ud800 text")  # a model (or a tool) can hand over anything
        yield TextDelta(" and more")
        yield Finish("stop")

    async with on_socket(Function(model)) as served:
        client = served.client()
        session_id = await open_session(client)
        await client.post(f"/sessions/{session_id}/messages", json={"text": "go"})
        await wait_turns(client, session_id, 2)
        async with client.stream("GET", f"/sessions/{session_id}/events") as response:
            frames = await SSE(response).until("message_finished")
        bad = next(f for f in frames if f.event == "text_delta")
        async with client.stream("GET", f"/sessions/{session_id}/events",
                                 headers={"last-event-id": str(bad.id)}) as response:
            resumed = await SSE(response).until("message_finished")
    assert [f.data["text"] for f in frames if f.event == "text_delta"] == ["bad \ud800 text", " and more"]
    assert frames[-1].data["answer"] == "bad \ud800 text and more"
    assert resumed[0].id == bad.id + 1 and resumed[-1].event == "message_finished"


def test_an_event_log_entry_is_always_utf8() -> None:
    log = EventLog(EventBus())
    entry = log.record(TextDelta("a \udc80 b é"))
    assert entry.data.encode("utf-8")  # would raise for a lone surrogate sent as is
    assert json.loads(entry.data)["text"] == "a \udc80 b é"
    assert dumps({"text": "é"}) == '{"text": "é"}'  # valid text is still sent as UTF-8, not escaped


@pytest.mark.parametrize("path", ["/sessions", "/sessions/{id}/messages", "/sessions/{id}/interrupt"])
async def test_deeply_nested_json_is_refused_with_400(path: str) -> None:
    async with in_process(Function(echo)) as served:
        client = served.client()
        session_id = await open_session(client)
        url = path.format(id=session_id)
        for body in (nested(200_000), b'{"text": ' + nested(65) + b"}"):
            refused = await client.post(url, content=body)
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"] == {"type": "bad_json", "message": "the request body nests arrays "
                                               "and objects more than 64 deep"}
        assert served.manager.open_sessions == 1


async def test_nesting_up_to_the_limit_is_read_and_brackets_in_strings_do_not_count() -> None:
    async with in_process(Function(echo)) as served:
        client = served.client()
        session_id = await open_session(client)
        deep_enough = await client.post(f"/sessions/{session_id}/interrupt",
                                        content=b'{"note": ' + nested(63) + b"}")
        assert deep_enough.status_code == 200, deep_enough.text
        text = "[{" * 5000 + '\\"' + "[" * 100
        queued = await client.post(f"/sessions/{session_id}/messages", content=f'{{"text": "{text}"}}'.encode())
        assert queued.status_code == 202, queued.text
        turns = await wait_turns(client, session_id, 2)
    assert turns[0]["parts"][0]["text"] == "[{" * 5000 + '"' + "[" * 100


async def test_a_deep_body_leaves_the_connection_usable() -> None:
    async with on_socket(Function(echo)) as served:
        async with httpx.AsyncClient(base_url=served.transport_or_url, timeout=10,
                                     headers={"authorization": f"Bearer {TOKEN}"}) as client:
            session_id = await open_session(client)
            with anyio.fail_after(10):
                refused = await client.post(f"/sessions/{session_id}/messages", content=nested(200_000))
                after = await client.get(f"/sessions/{session_id}/turns")  # the same keep-alive connection
    assert refused.status_code == 400 and refused.json()["error"]["type"] == "bad_json"
    assert after.status_code == 200


@pytest.mark.parametrize("path", ["/sessions", "/sessions/{id}/interrupt"])
async def test_a_body_of_whitespace_json_does_not_know_is_refused(path: str) -> None:
    async with in_process(Function(echo)) as served:
        client = served.client()
        session_id = await open_session(client)
        refused = await client.post(path.format(id=session_id), content=b"\x0b\x0c")  # str.strip's, not JSON's
        accepted = await client.post(path.format(id=session_id), content=b" \t\r\n")  # JSON's: as no body
    assert refused.status_code == 400 and refused.json()["error"]["type"] == "bad_json"
    assert accepted.status_code in (200, 201)
