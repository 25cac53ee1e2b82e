"""JSON bodies must be UTF-8 (RFC 8259): a body in UTF-16 or UTF-32 (with a byte-order mark or without), or that is
not UTF-8 at all, is refused with 400 and the API's own error shape, naming the problem, before it is parsed, on
every route that takes a JSON body: ``json.loads`` would have guessed its encoding while the depth and lone
surrogate checks read it as UTF-8, so a deep body or a lone surrogate slipped through to a 500. For UTF-8 bodies,
an escaped quote cannot put the depth check out of step with the parser."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from provider import Function
from session import SQLiteStore
from tests.session.http.helpers import in_process, on_socket
from tests.session.models import echo

DEEP = 5000


def message_fields(text: str = "hi") -> str:
    return f'"text": "{text}"'


def chat_fields(text: str = "hi") -> str:
    return f'"model": "agent", "messages": [{{"role": "user", "content": "{text}"}}]'


def deep(fields: str) -> str:
    """A body whose escaped quote (``"\\""``) ends a string early for a scan that reads UTF-16 as UTF-8, so the
    brackets after it look like string content to that scan."""
    return "{" + fields + ', "k": "\\"", "x": ' + "[" * DEEP + "]" * DEEP + "}"


def shallow(fields: str) -> str:
    return "{" + fields + "}"


# (how it is encoded, the body's encoding as the refusal names it)
ENCODINGS = [("utf-16-le", "UTF-16-LE"), ("utf-16-be", "UTF-16-BE"), ("utf-16", "UTF-16"),
             ("utf-32-le", "UTF-32-LE"), ("utf-32-be", "UTF-32-BE"), ("utf-32", "UTF-32")]


def bodies(fields_with: Callable[..., str]) -> list[tuple[str, bytes, str]]:
    """(case, body, words the refusal's message holds) for every way a body can fail to be UTF-8."""
    fields = fields_with()
    cases = []
    for codec, name in ENCODINGS:
        for shape, text in (("deep", deep(fields)), ("shallow", shallow(fields))):
            cases.append((f"{codec} {shape}", text.encode(codec), name))
    lone = "{" + fields_with("bad \ud800") + "}"  # a lone surrogate as a raw UTF-16 code unit
    cases.append(("utf-16-le lone surrogate", lone.encode("utf-16-le", "surrogatepass"), "UTF-16-LE"))
    escaped = "{" + fields_with("bad \\ud800") + "}"  # and as an escape, which the UTF-8 scan would not see
    cases.append(("utf-16-le escaped lone surrogate", escaped.encode("utf-16-le"), "UTF-16-LE"))
    cases.append(("utf-16-be escaped lone surrogate", escaped.encode("utf-16-be"), "UTF-16-BE"))
    cases.append(("not utf-8", ("{" + fields + ', "note": "').encode() + b'caf\xe9"}', "byte 0xe9 at offset"))
    cases.append(("a nul byte", ("{" + fields + "}").encode() + b"\x00", "NUL byte at offset"))
    return cases


def _openai_error(response: Any) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    return error


async def test_a_body_that_is_not_utf8_is_refused_on_the_session_api(tmp_path: Path) -> None:
    # The durable store, which cannot write a lone surrogate: one that got through would be a 500.
    async with SQLiteStore(tmp_path / "s.db") as store, on_socket(Function(echo), store=store) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        for path in (f"/sessions/{session_id}/messages", "/sessions", f"/sessions/{session_id}/interrupt"):
            for case, body, words in bodies(message_fields):
                response = await client.post(path, content=body, headers={"content-type": "application/json"})
                assert response.status_code == 400, (path, case, response.status_code, response.text)
                error = response.json()["error"]
                assert set(error) == {"type", "message"} and error["type"] == "bad_json", (path, case, error)
                message = error["message"]
                assert words in message and "UTF-8" in message, (path, case, message)
        assert (await client.get(f"/sessions/{session_id}/turns")).json()["turns"] == []
        assert served.manager.open_sessions == 1  # the refused POST /sessions opened none


async def test_a_body_that_is_not_utf8_is_refused_on_the_openai_api(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "s.db") as store, on_socket(Function(echo), store=store) as served:
        client = served.client()
        for case, body, words in bodies(chat_fields):
            response = await client.post("/v1/chat/completions", content=body,
                                         headers={"content-type": "application/json", "x-session-id": "kept"})
            assert response.status_code == 400, (case, response.status_code, response.text)
            error = _openai_error(response)
            assert error["type"] == "invalid_request_error" and error["code"] == "invalid_encoding", (case, error)
            assert words in error["message"] and "UTF-8" in error["message"], (case, error)
        assert served.manager.open_sessions == 0


@pytest.mark.parametrize("quote", ['"\\""', '"\\\\"', '"\\\\\\""', '"[\\"{"'], ids=["quote", "backslash",
                                                                                  "both", "brackets"])
async def test_escapes_do_not_put_the_depth_check_out_of_step(quote: str) -> None:
    tail = f', "k": {quote}, "x": ' + "[" * DEEP + "]" * DEEP + "}"
    async with on_socket(Function(echo)) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        refused = await client.post(f"/sessions/{session_id}/messages",
                                    content=("{" + message_fields() + tail).encode())
        assert refused.status_code == 400 and "nests arrays and objects" in refused.json()["error"]["message"]
        chat = await client.post("/v1/chat/completions", content=("{" + chat_fields() + tail).encode())
        assert chat.status_code == 400 and _openai_error(chat)["code"] == "json_too_deep"


async def test_a_utf8_body_with_a_byte_order_mark_is_still_read() -> None:
    # RFC 8259 lets a parser ignore a UTF-8 byte-order mark, and the server always has.
    async with in_process(Function(echo)) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        bom = b"\xef\xbb\xbf"
        posted = await client.post(f"/sessions/{session_id}/messages",
                                   content=bom + b"{" + message_fields().encode() + b"}")
        chat = await client.post("/v1/chat/completions", content=bom + b"{" + chat_fields().encode() + b"}")
    assert posted.status_code == 202, posted.text
    assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["content"] == "HI"


async def test_a_lone_surrogate_as_utf8_bytes_is_still_the_surrogate_error() -> None:
    async with in_process(Function(echo)) as served:
        chat = await served.client().post("/v1/chat/completions", content=b'{"model": "agent", "messages": '
                                          b'[{"role": "user", "content": "bad \xed\xa0\x80"}]}')
    assert chat.status_code == 400 and _openai_error(chat)["code"] == "invalid_unicode"
