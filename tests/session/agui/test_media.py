"""Images and files through ``POST /agui``: a user message's image and document parts (their bytes inline, or a URL)
reach the model as ``loop.Image`` and ``loop.File`` parts and come back in the snapshot as the parts they were; a
thread seeded with them keeps them; AG-UI 0.x ``binary`` parts are upgraded as the protocol's client does; a
frontend tool's result carries its images as attachments; and every part that cannot be read is refused, named,
before anything reaches the model."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from ag_ui.core import DocumentPart, ImagePart, TextPart

from loop import File, Image, Request, Role, Text
from provider import Function, tool_call
from tests.session.agui.helpers import in_process, run, run_input, user

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(40))
PDF = b"%PDF-1.4\n1 0 obj\n<<>>\nendobj\n"
PNG64 = base64.b64encode(PNG).decode()
PDF64 = base64.b64encode(PDF).decode()
IMAGE = {"type": "image", "source": {"type": "data", "value": PNG64, "mimeType": "image/png"}}
REPORT = {"type": "document", "source": {"type": "data", "value": PDF64, "mimeType": "application/pdf"},
          "metadata": {"filename": "report.pdf"}}


class Seen:
    """The model: it remembers each request's user turns' parts and answers with the newest one's part kinds."""

    def __init__(self) -> None:
        self.users: list[list[tuple[Any, ...]]] = []

    def __call__(self, request: Request) -> str:
        users = [t.parts for t in request.turns if t.role is Role.USER]
        self.users.append(users)
        return ", ".join(type(p).__name__ for p in users[-1])


def shows(content: list[dict[str, Any]], id: str = "u1") -> dict[str, Any]:
    return {"id": id, "role": "user", "content": content}


async def test_image_and_document_parts_reach_the_model_and_come_back_in_the_snapshot() -> None:
    model = Seen()
    content = [{"type": "text", "text": "What is in these?"}, IMAGE,
               {"type": "image", "source": {"type": "url", "value": "https://example.com/cat.png"}}, REPORT]
    async with in_process(Function(model)) as served:
        client = served.client()
        events = await run(client, run_input("media-1", [shows(content)]))
        stored = (await client.get("/sessions/media-1/turns")).json()["turns"]
    assert events[-1].result == {"status": "ok", "answer": "Text, Image, Image, File"}
    assert model.users[0][-1] == (Text("What is in these?"), Image(data=PNG, media_type="image/png"),
                                  Image("https://example.com/cat.png"),
                                  File(data=PDF, media_type="application/pdf", name="report.pdf"))
    [mine, _answer] = events[-2].messages
    assert mine.id == "u1", "the client's message keeps its id: its text and media match"
    assert [type(p) for p in mine.content] == [TextPart, ImagePart, ImagePart, DocumentPart]
    assert mine.content[1].source.value == PNG64 and mine.content[1].source.mime_type == "image/png"
    assert mine.content[2].source.value == "https://example.com/cat.png"
    assert mine.content[3].metadata == {"filename": "report.pdf"}
    assert [p["type"] for p in stored[0]["parts"]] == ["text", "image", "image", "file"]


async def test_a_snapshot_sent_back_runs_on_with_the_media_kept_once() -> None:
    model = Seen()
    async with in_process(Function(model)) as served:
        client = served.client()
        first = await run(client, run_input("media-2", [shows([{"type": "text", "text": "Look"}, IMAGE])]))
        back = [m.model_dump(by_alias=True, mode="json") for m in first[-2].messages]
        await run(client, run_input("media-2", [*back, user("And now?", "u2")], run="run-2"))
    assert model.users[1] == [(Text("Look"), Image(data=PNG)), (Text("And now?"),)]


async def test_a_new_thread_is_seeded_with_the_media_of_earlier_messages() -> None:
    model = Seen()
    messages = [shows([IMAGE], "a"), {"id": "b", "role": "assistant", "content": "A chart."}, user("Of what?", "c")]
    async with in_process(Function(model)) as served:
        await run(served.client(), run_input("media-3", messages))
    assert model.users[0] == [(Image(data=PNG),), (Text("Of what?"),)]


async def test_legacy_binary_parts_are_read_as_media() -> None:
    model = Seen()
    content = [{"type": "text", "text": "Read"},
               {"type": "binary", "mimeType": "image/png", "data": PNG64},
               {"type": "binary", "mimeType": "application/pdf", "data": PDF64, "filename": "a.pdf"},
               {"type": "binary", "mimeType": "text/plain", "url": "https://example.com/notes.txt", "id": "up-1"}]
    async with in_process(Function(model)) as served:
        events = await run(served.client(), run_input("media-4", [shows(content)]))
    assert model.users[0][-1] == (Text("Read"), Image(data=PNG), File(data=PDF, name="a.pdf"),
                                  File("https://example.com/notes.txt", media_type="text/plain"))
    assert [p.type for p in events[-2].messages[0].content] == ["text", "image", "document", "document"]


async def test_a_frontend_tools_image_result_is_an_attachment_the_model_sees() -> None:
    seen: list[Any] = []

    def model(request: Request) -> Any:
        last = request.turns[-1]
        if last.role is Role.TOOL:
            seen.append(last.tool_results[0])
            return "I see the screen"
        return tool_call("screenshot", {}, id="s1")

    frontend = [{"name": "screenshot", "description": "The user's screen.",
                 "parameters": {"type": "object", "properties": {}}}]
    async with in_process(Function(model)) as served:
        client = served.client()
        first = await run(client, run_input("media-5", [user("look at my screen")], tools=frontend))
        back = [m.model_dump(by_alias=True, mode="json") for m in first[-2].messages]
        answer = {"id": "r1", "role": "tool", "toolCallId": "s1",
                  "content": [{"type": "text", "text": "here"}, IMAGE]}
        second = await run(client, run_input("media-5", [*back, answer], run="run-2", tools=frontend))
    assert second[-1].result == {"status": "ok", "answer": "I see the screen"}
    assert (seen[0].content, seen[0].attachments) == ("here", (Image(data=PNG),))
    [result] = [m for m in second[-2].messages if m.role == "tool"]
    assert [p.type for p in result.content] == ["text", "image"]
    assert second[-2].messages[0].id == "u1"


def _part(part: dict[str, Any]) -> list[dict[str, Any]]:
    return [shows([{"type": "text", "text": "see"}, part])]


@pytest.mark.parametrize(("messages", "named", "says"), [
    (_part({"type": "image", "source": {"type": "data", "value": "%%%", "mimeType": "image/png"}}),
     "messages[0].content[1].source.value", "base64"),
    (_part({"type": "image", "source": {"type": "data", "value": PDF64, "mimeType": "application/pdf"}}),
     "messages[0].content[1]", "media_type must be one of"),
    (_part({"type": "document", "source": {"type": "data", "value": PDF64, "mimeType": "a pdf"}}),
     "messages[0].content[1]", "type/subtype"),
    (_part({"type": "image", "source": {"type": "data", "value": PNG64, "mimeType": "image/jpeg"}}),
     "messages[0].content[1]", "the bytes are image/png"),
    (_part({"type": "image", "source": {"type": "url", "value": "ftp://example.com/a.png"}}),
     "messages[0].content[1]", "http(s) URL"),
    (_part({"type": "image", "source": {"type": "file", "value": "file-abc", "provider": "openai"}}),
     "messages[0].content[1].source", "'file' source"),
    (_part({"type": "binary", "mimeType": "image/png", "id": "upload-7"}), "messages[0].content[1]", "upload id"),
    (_part({"type": "binary", "data": PNG64}), "messages[0].content[1].mimeType", "media type"),
    (_part({"type": "sticker", "id": "s"}), "messages[0].content[1]", "sticker"),
    ([shows([IMAGE], "a"), {"id": "b", "role": "assistant", "content": "ok"},
      shows([{"type": "document", "source": {"type": "data", "value": "", "mimeType": "text/plain"}}], "c")],
     "messages[2].content[0]", "data is empty"),
])
async def test_a_part_that_cannot_be_read_is_refused_by_name(messages: list[dict[str, Any]], named: str,
                                                              says: str) -> None:
    model = Seen()
    async with in_process(Function(model)) as served:
        response = await served.client().post("/agui", json=run_input("media-bad", messages))
        turns = await served.client().get("/sessions/media-bad/turns")
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request"
    assert named in error["message"] and says in error["message"], error["message"]
    assert model.users == [] and turns.status_code == 404, "nothing reached the model or the store"
