"""``Image`` and ``File`` parts: their checks, repr, digest and data URL, their place in turns and tool results,
and tools that return them through the tool pipeline and ``Step``. Their JSON form is in ``test_media_codec.py``."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import pytest

from loop import (EventBus, File, Image, Role, State, Step, Text, ToolCall, ToolFinished, ToolPipeline, ToolResult,
                  Turn, UsageError, tool)
from loop.testing import check_tool
from provider import Function, Scripted, tool_call

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(40))
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF" + bytes(20)
GIF = b"GIF89a\x01\x00\x01\x00" + bytes(10)
WEBP = b"RIFF\x24\x00\x00\x00WEBPVP8 " + bytes(20)
PDF = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n"


# -- checks -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "media_type"), [(PNG, "image/png"), (JPEG, "image/jpeg"), (GIF, "image/gif"),
                                                  (WEBP, "image/webp")])
def test_an_image_of_bytes_has_its_media_type_told_from_them(data: bytes, media_type: str) -> None:
    image = Image(data=data)
    assert (image.url, image.data, image.media_type) == (None, data, media_type)
    assert Image(data=data, media_type=media_type.upper()) == image  # given, it is kept, in lower case


def test_an_image_at_a_url_needs_no_media_type() -> None:
    image = Image("https://example.com/cat.png")
    assert (image.url, image.data, image.media_type, image.digest, image.data_url) == (
        "https://example.com/cat.png", None, None, None, None)
    assert Image("http://example.com/a.webp", media_type="image/webp").media_type == "image/webp"


BAD_IMAGES: dict[str, tuple[dict[str, Any], str]] = {
    "neither": ({}, "Image needs a url or data"),
    "both": ({"url": "https://example.com/a.png", "data": PNG}, "Image takes a url or data, not both"),
    "empty data": ({"data": b"", "media_type": "image/png"}, "Image: data is empty"),
    "text data": ({"data": "iVBORw0KGgo=", "media_type": "image/png"}, "Image: data must be bytes, got str"),
    "bytearray": ({"data": bytearray(PNG)}, "Image: data must be bytes, got bytearray"),
    "unknown bytes": ({"data": b"plain text"}, "the media type cannot be told from the bytes; give media_type"),
    "not an image type": ({"data": b"hello", "media_type": "text/plain"},
                          "Image: media_type must be one of image/png, image/jpeg, image/gif, image/webp, "
                          "got 'text/plain'"),
    "bmp": ({"url": "https://example.com/a.bmp", "media_type": "image/bmp"}, "got 'image/bmp'"),
    "malformed type": ({"data": PNG, "media_type": "png"}, "media_type must be a type/subtype such as 'image/png'"),
    "contradicted": ({"data": JPEG, "media_type": "image/png"},
                     "Image: media_type is 'image/png' but the bytes are image/jpeg"),
    "ftp url": ({"url": "ftp://example.com/a.png"}, "url must be an http(s) URL or a data: URL, got 'ftp://"),
    "no host": ({"url": "https://"}, "url must be an http(s) URL or a data: URL"),
    "url not text": ({"url": b"https://example.com"}, "Image: url must be a string, got bytes"),
    "data url not base64": ({"url": "data:image/png,%89PNG"}, "a data: URL must be base64"),
    "data url bad base64": ({"url": "data:image/png;base64,@@@"}, "the data: URL does not hold valid base64"),
    "data url of text": ({"url": "data:text/plain;base64,aGk="}, "media_type must be one of image/png, "),
    "data url of no type": ({"url": "data:foo;base64,aGk="}, "the data: URL's media type 'foo' is not a type/subtype"),
    "data url of another type": ({"url": "data:image/gif;base64," + base64.b64encode(GIF).decode(),
                                  "media_type": "image/png"}, "media_type is 'image/png' but the data: URL says"),
}


@pytest.mark.parametrize(("fields", "message"), BAD_IMAGES.values(), ids=BAD_IMAGES.keys())
def test_a_bad_image_is_refused_naming_the_problem(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match="^Image") as caught:
        Image(**fields)
    assert message in str(caught.value)


def test_a_data_url_is_read_into_bytes_and_media_type() -> None:
    image = Image("data:image/png;base64," + base64.b64encode(PNG).decode())
    assert image == Image(data=PNG, media_type="image/png") and image.url is None
    assert Image(image.data_url) == image  # the data URL it makes reads back as itself
    assert Image(f"DATA:IMAGE/PNG;charset=x;BASE64,{base64.b64encode(PNG).decode()}").data == PNG
    assert Image("data:;base64," + base64.b64encode(GIF).decode()).media_type == "image/gif"  # told from the bytes


def test_a_file_takes_any_media_type_and_a_name() -> None:
    doc = File(data=b"a,b\n1,2\n", media_type="text/csv", name="table.csv")
    assert (doc.media_type, doc.name, doc.filename) == ("text/csv", "table.csv", "table.csv")
    assert File(data=PDF).media_type == "application/pdf"
    assert File(data=PDF).filename == "file.pdf"  # a name for APIs that want one
    assert File(data=b"x", media_type="application/x-thing").filename == "file"
    remote = File("https://example.com/report.pdf")
    assert (remote.media_type, remote.filename, remote.digest) == (None, "file", None)


BAD_FILES: dict[str, tuple[dict[str, Any], str]] = {
    "neither": ({"name": "a.pdf"}, "File needs a url or data"),
    "both": ({"url": "https://example.com/a.pdf", "data": PDF}, "File takes a url or data, not both"),
    "empty": ({"data": b"", "media_type": "text/plain"}, "File: data is empty"),
    "no type": ({"data": b"hello"}, "File: the media type cannot be told from the bytes; give media_type"),
    "bad type": ({"data": b"hello", "media_type": "text"}, "File: media_type must be a type/subtype"),
    "contradicted": ({"data": PDF, "media_type": "text/plain"}, "media_type is 'text/plain' but the bytes are "
                                                                 "application/pdf"),
    "empty name": ({"data": PDF, "name": " "}, "File: name must be a non-empty string or None, got ' '"),
    "name not text": ({"data": PDF, "name": 3}, "File: name must be a non-empty string or None, got 3"),
}


@pytest.mark.parametrize(("fields", "message"), BAD_FILES.values(), ids=BAD_FILES.keys())
def test_a_bad_file_is_refused_naming_the_problem(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        File(**fields)
    assert message in str(caught.value)


def test_the_repr_shows_size_type_and_digest_never_the_bytes() -> None:
    big = Image(data=PNG + bytes(2_000_000))
    assert repr(big) == f"Image(image/png, 2,000,056 bytes, sha256:{hashlib.sha256(big.data or b'').hexdigest()[:12]})"
    assert repr(File(data=PDF, name="a.pdf")).startswith("File(application/pdf, 23 bytes, sha256:")
    assert repr(File(data=PDF, name="a.pdf")).endswith(", name='a.pdf')")
    assert repr(Image("https://example.com/" + "x" * 500)) == f"Image(url='https://example.com/{'x' * 60}...')"
    assert "PNG" not in repr(ToolResult("c1", "chart", "", attachments=(Image(data=PNG),)))


def test_the_digest_is_the_sha256_of_the_bytes_and_the_data_url_holds_them() -> None:
    image = Image(data=PNG)
    assert image.digest == hashlib.sha256(PNG).hexdigest()
    assert image.data_url == "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert File(data=b"hi", media_type="text/plain").data_url == "data:text/plain;base64,aGk="


def test_parts_are_frozen_values() -> None:
    image = Image(data=PNG)
    assert image == Image(data=PNG) and hash(image) == hash(Image(data=PNG))
    assert image != Image(data=PNG + b"\x00")
    with pytest.raises(AttributeError):
        image.data = GIF  # type: ignore[misc]


def test_from_file_tells_the_type_from_the_bytes_or_the_extension(tmp_path: Path) -> None:
    (tmp_path / "photo.bin").write_bytes(JPEG)
    assert Image.from_file(tmp_path / "photo.bin") == Image(data=JPEG, media_type="image/jpeg")
    (tmp_path / "notes.txt").write_bytes(b"hello")
    with pytest.raises(UsageError, match="notes.txt' is not a PNG, JPEG, GIF or WebP image"):
        Image.from_file(tmp_path / "notes.txt")
    assert File.from_file(tmp_path / "notes.txt") == File(data=b"hello", media_type="text/plain", name="notes.txt")
    (tmp_path / "paper").write_bytes(PDF)
    assert File.from_file(str(tmp_path / "paper")).media_type == "application/pdf"
    (tmp_path / "data.xyz").write_bytes(b"?")
    with pytest.raises(UsageError, match="cannot be told; give media_type"):
        File.from_file(tmp_path / "data.xyz")
    assert File.from_file(tmp_path / "data.xyz", media_type="application/x-xyz").name == "data.xyz"


# -- in turns and tool results ------------------------------------------------------------------------------


def test_user_and_tool_turns_hold_them_and_text_is_the_text_parts_only() -> None:
    image, doc = Image(data=PNG), File(data=PDF, name="a.pdf")
    user = Turn(Role.USER, [Text("What is "), image, Text("this?"), doc])
    assert user.parts == (Text("What is "), image, Text("this?"), doc)
    assert user.text == "What is this?"
    assert Turn(Role.USER, (image,)).text == ""
    state = State().append(Role.USER, image).append(Role.TOOL, ToolResult("c1", "x", "ok"), doc)
    assert state.turns[1].parts[1] is doc


def test_a_tool_result_holds_attachments_as_a_tuple_of_images_and_files() -> None:
    image, doc = Image(data=PNG), File(data=PDF)
    result = ToolResult("c1", "chart", "the chart", attachments=[image, doc])
    assert result.attachments == (image, doc)
    assert ToolResult("c1", "chart", "x").attachments == ()
    assert ToolResult("c1", "chart", "x") == ToolResult("c1", "chart", "x", False, ())
    bad_values: list[Any] = [Text("x"), [Text("x")], "img", image]
    for bad in bad_values:
        with pytest.raises(UsageError, match="attachments"):
            ToolResult("c1", "chart", "x", attachments=bad)


# -- tools that return them ----------------------------------------------------------------------------------


@tool
def chart(title: str) -> Any:
    """Draw a chart.

    Args:
        title: what the chart shows.
    """
    return Image(data=PNG)


@tool
async def report(kind: str) -> Any:
    """A report in several pieces.

    Args:
        kind: "mixed", "plain" or "record".
    """
    if kind == "mixed":
        return ["Sales rose.", Image(data=PNG), {"q1": 3}, File(data=PDF, name="sales.pdf"), "See the PDF."]
    if kind == "plain":
        return ["no", "media"]  # a list without images or files is JSON, as always
    return ("tuple", Image("https://example.com/x.png"))


def call(name: str, arguments: str, id: str = "c1") -> ToolCall:
    return ToolCall(id, name, arguments)


async def test_a_tool_returning_an_image_answers_with_it_attached_and_no_text() -> None:
    (result,) = await ToolPipeline([chart]).run((call("chart", '{"title": "sales"}'),))
    assert result == ToolResult("c1", "chart", "", attachments=(Image(data=PNG),))


async def test_text_and_media_in_a_list_go_to_content_and_attachments_in_order() -> None:
    pipeline = ToolPipeline([report])
    mixed, plain, pair = await pipeline.run((call("report", '{"kind": "mixed"}', "c1"),
                                             call("report", '{"kind": "plain"}', "c2"),
                                             call("report", '{"kind": "record"}', "c3")))
    assert mixed == ToolResult("c1", "report", 'Sales rose.\n{"q1": 3}\nSee the PDF.',
                               attachments=(Image(data=PNG), File(data=PDF, name="sales.pdf")))
    assert plain == ToolResult("c2", "report", '["no", "media"]')
    assert pair == ToolResult("c3", "report", "tuple", attachments=(Image("https://example.com/x.png"),))


async def test_the_text_of_a_result_with_attachments_is_still_cut_to_the_limit() -> None:
    @tool
    def long_caption() -> Any:
        """A picture with a long caption."""
        return ["x" * 100, Image(data=GIF)]

    (result,) = await ToolPipeline([long_caption], max_result_chars=10).run((call("long_caption", "{}"),))
    assert result.content.startswith("x" * 10 + "\n[truncated: the result had 100 characters")
    assert result.attachments == (Image(data=GIF),)


async def test_a_step_puts_the_attachments_in_the_tool_turn_and_the_model_sees_them() -> None:
    seen: list[Turn] = []

    def reply(request: Any) -> Any:
        seen.extend(request.turns)
        return [tool_call("chart", {"title": "sales"}, id="c1")] if len(request.turns) == 1 else "A rising line."


    step = Step(Function(reply), tools=[chart])
    state = await step.turn(State().append(Role.USER, Text("Chart the sales"), Image(data=JPEG)))
    assert state[2].parts == (ToolResult("c1", "chart", "", attachments=(Image(data=PNG),)),)
    state = await step.turn(state)
    assert state.answer == "A rising line."
    assert seen[0].parts == (Text("Chart the sales"), Image(data=JPEG))
    assert seen[-1].tool_results[0].attachments == (Image(data=PNG),)


async def test_scripted_replies_drive_an_image_tool_like_any_other() -> None:
    state = await Step(Scripted([[tool_call("chart", {"title": "t"}, id="k")]]), tools=[chart]).turn(
        State().append(Role.USER, Text("go")))
    assert state.last is not None and state.last.tool_results[0].attachments == (Image(data=PNG),)


async def test_events_carry_the_result_with_its_attachments() -> None:
    bus = EventBus()
    with bus.subscribe() as events:
        pipeline = ToolPipeline([chart], events=bus)
        value = await pipeline.invoke(call("chart", "{}"), {"title": "t"})
        await pipeline.run((call("chart", '{"title": "t"}', "c2"),))
        finished = [e for e in events.drain() if isinstance(e, ToolFinished)]
    assert value == Image(data=PNG)  # invoke hands back the tool's own value
    assert [e.result.attachments for e in finished] == [(Image(data=PNG),), (Image(data=PNG),)]


async def test_an_image_tool_passes_the_tool_conformance_check() -> None:
    await check_tool(chart, {"title": "sales"})
    await check_tool(report, {"kind": "mixed"})
