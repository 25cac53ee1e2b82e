"""Images and files through ``POST /sessions/{id}/messages``: ``{"parts": [...]}`` of text, image and file parts in
the codec's JSON form reach the model as ``loop.Text``, ``loop.Image`` and ``loop.File``; the event stream and
``GET /sessions/{id}/turns`` send the turn back in the very form it was posted in; and a part that cannot be read
is refused (422, naming it) before anything is queued. The OpenAPI document describes exactly that body."""

from __future__ import annotations

import base64
from typing import Any

import jsonschema
import pytest

from loop import File, Image, Request, Role, Text
from loop._parts import IMAGE_TYPES
from provider import Function
from session.http._openapi import OPENAPI
from session.http._wire import IMAGE_MEDIA_TYPES
from tests.session.http.helpers import SSE, in_process, on_socket, wait_turns

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(40))
PDF = b"%PDF-1.4\n1 0 obj\n<<>>\nendobj\n"
PNG64 = base64.b64encode(PNG).decode()
PDF64 = base64.b64encode(PDF).decode()
PARTS = [{"type": "text", "text": "What is in these?"},
         {"type": "image", "data": PNG64, "media_type": "image/png"},
         {"type": "image", "url": "https://example.com/cat.png"},
         {"type": "file", "data": PDF64, "media_type": "application/pdf", "name": "report.pdf"},
         {"type": "file", "url": "https://example.com/notes.txt", "media_type": "text/plain"}]


class Seen:
    """The model: it keeps the parts of each request's last user turn and answers with their kinds."""

    def __init__(self) -> None:
        self.parts: list[tuple[Any, ...]] = []

    def __call__(self, request: Request) -> str:
        parts = [t for t in request.turns if t.role is Role.USER][-1].parts
        self.parts.append(parts)
        return ", ".join(type(p).__name__ for p in parts)


def message_schema() -> jsonschema.Draft202012Validator:
    """The document's schema of a posted message, its references resolved within the document."""
    schema = {**OPENAPI["components"]["schemas"]["MessageIn"], "components": OPENAPI["components"]}
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


async def test_parts_reach_the_model_and_come_back_as_they_were_posted() -> None:
    model = Seen()
    async with on_socket(Function(model)) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        async with client.stream("GET", f"/sessions/{session_id}/events") as response:
            posted = await client.post(f"/sessions/{session_id}/messages", json={"parts": PARTS})
            frames = await SSE(response).until("message_finished")
        turns = await wait_turns(client, session_id, 2)
    assert posted.status_code == 202, posted.text
    assert model.parts == [(Text("What is in these?"), Image(data=PNG, media_type="image/png"),
                            Image("https://example.com/cat.png"),
                            File(data=PDF, media_type="application/pdf", name="report.pdf"),
                            File("https://example.com/notes.txt", media_type="text/plain"))]
    assert turns[0]["parts"] == PARTS, "the history sends the turn back in the form it was posted in"
    [stored] = [f.data["turn"] for f in frames if f.event == "turn_stored" and f.data["turn"]["role"] == "user"]
    assert stored["parts"] == PARTS, "so does the event stream"
    assert frames[-1].data["answer"] == "Text, Image, Image, File, File"


async def test_text_parts_alone_are_a_message_too() -> None:
    model = Seen()
    async with in_process(Function(model)) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        response = await client.post(f"/sessions/{session_id}/messages",
                                     json={"parts": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]})
        turns = await wait_turns(client, session_id, 2)
    assert response.status_code == 202
    assert model.parts == [(Text("one"), Text("two"))] and turns[1]["parts"] == [{"type": "text", "text": "Text, Text"}]


def _with(part: dict[str, Any]) -> dict[str, Any]:
    return {"parts": [{"type": "text", "text": "see"}, part]}


@pytest.mark.parametrize(("body", "says"), [
    ({"text": "hi", "parts": [{"type": "text", "text": "hi"}]}, "exactly one of them; got both"),
    ({"parts": []}, "'parts' must be a non-empty list"),
    ({"parts": "hi"}, "'parts' must be a non-empty list"),
    ({"parts": ["hi"]}, "parts[0] must be an object"),
    (_with({"type": "audio", "data": PNG64}), "parts[1].type must be 'text', 'image' or 'file'"),
    (_with({"type": ["image"]}), "parts[1].type must be"),
    (_with({"type": "text", "text": "  "}), "parts[1].text must be a non-empty string"),
    (_with({"type": "text", "text": "x", "lang": "en"}), "parts[1]: a text part has no field 'lang'"),
    (_with({"type": "image", "data": "%%%", "media_type": "image/png"}), "parts[1].data must be base64"),
    (_with({"type": "image", "data": "AAA", "media_type": "image/png"}), "parts[1].data must be base64"),
    (_with({"type": "image", "data": PNG64}), "parts[1]: 'data' needs its 'media_type'"),
    (_with({"type": "image", "data": PNG64, "media_type": "image/jpeg"}), "but the bytes are image/png"),
    (_with({"type": "image", "data": PDF64, "media_type": "application/pdf"}), "parts[1]: Image: media_type must "
                                                                              "be one of"),
    (_with({"type": "image", "url": "https://x.example/a.png", "media_type": "Image/PNG"}),
     "parts[1].media_type must be a lowercase type/subtype"),
    (_with({"type": "file", "data": PDF64, "media_type": "a pdf"}), "parts[1].media_type must be"),
    (_with({"type": "image", "url": "ftp://x.example/a.png"}), "parts[1].url must be an http(s) URL"),
    (_with({"type": "image", "url": "data:image/png;base64," + PNG64}), "parts[1].url must be an http(s) URL"),
    (_with({"type": "image", "url": "https://x.example/a.png", "data": PNG64, "media_type": "image/png"}),
     "exactly one of them"),
    (_with({"type": "image"}), "parts[1]: an image part holds a 'url' or 'data'"),
    (_with({"type": "file", "url": "https://x.example/a", "name": " "}), "parts[1].name must be a non-empty"),
    (_with({"type": "image", "digest": "sha256:00", "media_type": "image/png"}), "has no field 'digest'"),
])
async def test_a_bad_part_is_refused_naming_it_and_nothing_is_queued(body: dict[str, Any], says: str) -> None:
    model = Seen()
    async with in_process(Function(model)) as served:
        client = served.client()
        session_id = (await client.post("/sessions")).json()["id"]
        response = await client.post(f"/sessions/{session_id}/messages", json=body)
        turns = (await client.get(f"/sessions/{session_id}/turns")).json()["turns"]
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_message" and says in error["message"], error["message"]
    assert turns == [] and model.parts == []
    # The document refuses the same bodies, except bytes that contradict their media type (no schema can tell).
    assert message_schema().is_valid(body) == ("the bytes are" in says)


def test_the_document_takes_the_bodies_the_route_takes() -> None:
    schema = message_schema()
    for body in ({"text": "hi"}, {"parts": PARTS}, {"text": "hi", "other": 1}):
        schema.validate(body)
    for body in ({}, {"text": " "}, {"parts": [{"type": "image", "data": PNG64}]}):
        assert not schema.is_valid(body), body


def test_the_image_types_are_those_loop_images_take() -> None:
    assert IMAGE_MEDIA_TYPES == IMAGE_TYPES
