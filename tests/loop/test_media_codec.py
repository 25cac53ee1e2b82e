"""The JSON form of ``Image`` and ``File`` parts and of tool results' attachments: inline as base64, or with their
bytes kept apart in a ``blobs`` dict under their digest, as stores keep them."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest

from loop import File, Image, Role, Text, ToolResult, Turn, UsageError
from loop.codec import blob_key, part_from_dict, part_to_dict

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(16))
PDF = b"%PDF-1.7\n1 0 obj\n"
PNG64 = base64.b64encode(PNG).decode()
PDF64 = base64.b64encode(PDF).decode()
PNG_KEY = "sha256:" + hashlib.sha256(PNG).hexdigest()
PDF_KEY = "sha256:" + hashlib.sha256(PDF).hexdigest()

# Each part, and its JSON text to the key order.
FORMS: list[tuple[Any, str]] = [
    (Image(data=PNG), f'{{"type": "image", "data": "{PNG64}", "media_type": "image/png"}}'),
    (Image("https://example.com/a.png"), '{"type": "image", "url": "https://example.com/a.png"}'),
    (Image("https://example.com/a", media_type="image/webp"),
     '{"type": "image", "url": "https://example.com/a", "media_type": "image/webp"}'),
    (File(data=PDF, name="a.pdf"), f'{{"type": "file", "data": "{PDF64}", "media_type": "application/pdf", '
                                   '"name": "a.pdf"}'),
    (File(data=b"hi", media_type="text/plain"), '{"type": "file", "data": "aGk=", "media_type": "text/plain"}'),
    (File("https://example.com/r.pdf"), '{"type": "file", "url": "https://example.com/r.pdf"}'),
    (ToolResult("c1", "chart", "done", attachments=(Image(data=PNG),)),
     f'{{"type": "tool_result", "call_id": "c1", "name": "chart", "content": "done", "is_error": false, '
     f'"attachments": [{{"type": "image", "data": "{PNG64}", "media_type": "image/png"}}]}}'),
]


@pytest.mark.parametrize(("part", "text"), FORMS, ids=lambda v: repr(v)[:30] if not isinstance(v, str) else "")
def test_each_part_is_written_with_its_bytes_as_base64_and_reads_back(part: Any, text: str) -> None:
    assert json.dumps(part_to_dict(part)) == text
    assert part_from_dict(json.loads(text)) == part


def test_a_tool_result_without_attachments_is_written_as_it_always_was() -> None:
    assert json.dumps(part_to_dict(ToolResult("c1", "add", "2"))) == (
        '{"type": "tool_result", "call_id": "c1", "name": "add", "content": "2", "is_error": false}')
    assert part_from_dict({"type": "tool_result", "call_id": "c1", "name": "add", "content": "2"}) == ToolResult(
        "c1", "add", "2", attachments=())


def test_a_turn_and_a_state_round_trip_through_json_text() -> None:
    from loop import State

    state = (State().append(Role.USER, Text("look"), Image(data=PNG), File(data=PDF, name="a.pdf"))
             .append(Role.TOOL, ToolResult("c1", "chart", "", attachments=(Image(data=PNG), File("https://x.io/r")))))
    again = State.from_json(state.to_json())
    assert again.turns == state.turns


BAD: dict[str, tuple[Any, str]] = {
    "bad base64": ({"type": "image", "data": "not base64!", "media_type": "image/png"},
                   "part: image.data is not valid base64"),
    "data not text": ({"type": "image", "data": 7}, "part: image.data must be base64 str, got int"),
    "no source": ({"type": "image", "media_type": "image/png"}, "part: Image needs a url or data"),
    "bad media type": ({"type": "image", "data": PNG64, "media_type": "image/tiff"},
                       "part: Image: media_type must be one of"),
    "unknown field": ({"type": "file", "url": "https://x.io", "size": 3},
                      "part: file part has unknown fields ['size']"),
    "attachments not a list": ({"type": "tool_result", "call_id": "c", "name": "n", "content": "", "attachments": {}},
                               "part: tool_result.attachments must be list of parts, got dict"),
    "text attached": ({"type": "tool_result", "call_id": "c", "name": "n", "content": "",
                       "attachments": [{"type": "text", "text": "x"}]},
                      "part: ToolResult.attachments holds Image and File parts only"),
    "bad attachment": ({"type": "tool_result", "call_id": "c", "name": "n", "content": "",
                        "attachments": [{"type": "image"}]}, "part, attachments 0: Image needs a url or data"),
}


@pytest.mark.parametrize(("data", "message"), BAD.values(), ids=BAD.keys())
def test_a_bad_media_part_names_the_problem(data: Any, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        part_from_dict(data)
    assert message in str(caught.value)


# -- bytes kept apart, by digest -------------------------------------------------------------------------------


def test_given_blobs_the_bytes_go_there_and_the_json_names_them_by_digest() -> None:
    blobs: dict[str, bytes] = {}
    assert part_to_dict(Image(data=PNG), blobs=blobs) == {"type": "image", "digest": PNG_KEY, "media_type": "image/png"}
    assert part_to_dict(File(data=PDF, name="a.pdf"), blobs=blobs) == {
        "type": "file", "digest": PDF_KEY, "media_type": "application/pdf", "name": "a.pdf"}
    assert blobs == {PNG_KEY: PNG, PDF_KEY: PDF}
    assert blob_key(PNG) == PNG_KEY == f"sha256:{Image(data=PNG).digest}"
    # A URL holds no bytes; other parts are written as without blobs.
    assert part_to_dict(Image("https://x.io/a.png"), blobs=blobs) == {"type": "image", "url": "https://x.io/a.png"}
    assert part_to_dict(Text("hi"), blobs=blobs) == {"type": "text", "text": "hi"}
    assert len(blobs) == 2


def test_the_same_bytes_are_kept_once_however_many_parts_show_them() -> None:
    blobs: dict[str, bytes] = {}
    turns = [Turn(Role.USER, (Image(data=PNG), Text("again"), Image(data=PNG))),
             Turn(Role.TOOL, (ToolResult("c1", "chart", "", attachments=(Image(data=PNG),)),))]
    written = [t.to_dict(blobs=blobs) for t in turns]
    assert blobs == {PNG_KEY: PNG}
    assert PNG64 not in json.dumps(written)
    assert written[1]["parts"][0]["attachments"] == [{"type": "image", "digest": PNG_KEY, "media_type": "image/png"}]
    assert [Turn.from_dict(w, blobs=blobs) for w in written] == turns


def test_reading_by_digest_needs_the_blob_and_checks_it() -> None:
    kept = {"type": "image", "digest": PNG_KEY, "media_type": "image/png"}
    assert part_from_dict(kept, blobs={PNG_KEY: PNG}) == Image(data=PNG)
    with pytest.raises(UsageError, match=f"turn, part 0: image part: its bytes are kept apart under '{PNG_KEY}', "
                                         "and no blobs were given"):
        Turn.from_dict({"role": "user", "parts": [kept]})
    with pytest.raises(UsageError, match=f"part: image part: no blob holds '{PNG_KEY}'"):
        part_from_dict(kept, blobs={})
    with pytest.raises(UsageError, match="does not hold the bytes it names"):
        part_from_dict(kept, blobs={PNG_KEY: PNG + b"tampered"})
    with pytest.raises(UsageError, match="image part has both data and digest"):
        part_from_dict({**kept, "data": PNG64}, blobs={PNG_KEY: PNG})
    with pytest.raises(UsageError, match="digest must be str, got int"):
        part_from_dict({"type": "image", "digest": 5}, blobs={})
    with pytest.raises(UsageError, match="text part has unknown fields \\['digest'\\]"):
        part_from_dict({"type": "text", "text": "x", "digest": PNG_KEY}, blobs={PNG_KEY: PNG})


def test_inline_data_still_reads_when_blobs_are_given() -> None:
    assert part_from_dict({"type": "image", "data": PNG64}, blobs={}) == Image(data=PNG)
