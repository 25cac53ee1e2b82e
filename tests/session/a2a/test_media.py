"""Files through A2A, sent by a2a-sdk's own client: a message's text, an image and a document as raw bytes, and an
image by URL reach the model as ``loop.Text``, ``loop.Image`` and ``loop.File`` parts, in order; raw image bytes
without a media type are told from their first bytes; and a part that cannot be read rejects the task, named,
before anything runs."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.helpers import new_data_part
from a2a.types import Part

from loop import File, Image, Request, Role, Text
from provider import Function
from tests.session.a2a.helpers import collect, in_process, sdk_client, send, state_of, task_of

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(40))
PDF = b"%PDF-1.4\n1 0 obj\n<<>>\nendobj\n"


@pytest.fixture
def anyio_backend() -> str:
    """a2a-sdk's request handler runs each task in asyncio tasks of its own: the served side is asyncio only."""
    return "asyncio"


class Seen:
    """The model: it keeps the parts of each request's last user turn and answers with their kinds."""

    def __init__(self) -> None:
        self.parts: list[tuple[Any, ...]] = []

    def __call__(self, request: Request) -> str:
        parts = [t for t in request.turns if t.role is Role.USER][-1].parts
        self.parts.append(parts)
        return ", ".join(type(p).__name__ for p in parts)


@pytest.mark.parametrize("streaming", [False, True])
async def test_text_and_file_parts_reach_the_model_as_images_and_files(streaming: bool) -> None:
    model = Seen()
    parts = [Part(text="What is in these?"), Part(raw=PNG, media_type="image/png", filename="chart.png"),
             Part(raw=PDF, media_type="application/pdf", filename="report.pdf"),
             Part(url="https://example.com/cat.jpg", media_type="image/jpeg")]
    async with in_process(Function(model)) as served:
        client = await sdk_client(served.client(), streaming=streaming)
        responses = await collect(client, send(parts=parts, context_id="media"))
        stored = served.session("media").state
    assert model.parts == [(Text("What is in these?"), Image(data=PNG, media_type="image/png"),
                            File(data=PDF, media_type="application/pdf", name="report.pdf"),
                            Image("https://example.com/cat.jpg", media_type="image/jpeg"))]
    answer = "Text, Image, File, Image"
    if streaming:
        [artifact] = [r.artifact_update.artifact for r in responses if r.HasField("artifact_update")]
        assert artifact.parts[0].text == answer
    else:
        task = task_of(responses)
        assert state_of(task) == "TASK_STATE_COMPLETED" and task.artifacts[0].parts[0].text == answer
    assert stored.turns[0].parts == model.parts[0], "the conversation keeps what the model saw"


async def test_raw_image_bytes_without_a_media_type_are_told_from_the_bytes() -> None:
    model = Seen()
    async with in_process(Function(model)) as served:
        client = await sdk_client(served.client(), streaming=False)
        task = task_of(await collect(client, send(parts=[Part(raw=PNG), Part(raw=PDF, filename="a.pdf")],
                                                  context_id="told")))
    assert state_of(task) == "TASK_STATE_COMPLETED"
    assert model.parts == [(Image(data=PNG), File(data=PDF, name="a.pdf"))]
    assert (model.parts[0][0].media_type, model.parts[0][1].media_type) == ("image/png", "application/pdf")


@pytest.mark.parametrize(("part", "code", "says"), [
    (Part(raw=PNG, media_type="image/jpeg"), "invalid_part", "parts[1] (raw): Image: media_type is 'image/jpeg' "
                                                             "but the bytes are image/png"),
    (Part(raw=b"some bytes", filename="notes"), "invalid_part", "parts[1] (notes): File: the media type cannot be "
                                                                "told from the bytes"),
    (Part(raw=PDF, media_type="image/svg+xml"), "invalid_part", "parts[1] (raw): Image: media_type must be one of"),
    (Part(raw=PDF, media_type="a pdf"), "invalid_part", "type/subtype"),
    (Part(url="ftp://example.com/a.png", media_type="image/png"), "invalid_part", "http(s) URL"),
    (new_data_part({"approved": True}), "unsupported_part", "parts[1] is a data part"),
    (Part(), "invalid_part", "parts[1] holds nothing"),
])
async def test_a_part_that_cannot_be_read_rejects_the_task_by_name(part: Part, code: str, says: str) -> None:
    model = Seen()
    async with in_process(Function(model)) as served:
        client = await sdk_client(served.client(), streaming=False)
        task = task_of(await collect(client, send(parts=[Part(text="see"), part], context_id="bad")))
        opened = served.session("bad")
    assert state_of(task) == "TASK_STATE_REJECTED"
    assert task.metadata["error"]["code"] == code
    assert says in task.status.message.parts[0].text, task.status.message.parts[0].text
    assert model.parts == [] and opened is None, "nothing ran, and the conversation was not even opened"


async def test_a_message_of_empty_text_alone_is_still_rejected() -> None:
    async with in_process(Function(Seen())) as served:
        client = await sdk_client(served.client(), streaming=False)
        task = task_of(await collect(client, send(parts=[Part(text=" "), Part(text="")], context_id="empty")))
    assert state_of(task) == "TASK_STATE_REJECTED" and task.metadata["error"]["code"] == "empty_message"
