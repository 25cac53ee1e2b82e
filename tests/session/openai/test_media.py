"""Images and files through the OpenAI-compatible endpoints: ``image_url`` and ``file`` parts on Chat Completions,
``input_image`` and ``input_file`` on the Responses API, in user messages and in function call outputs, and an
agent's own tool returning an image. The model (``Function``) sees them as ``loop.Image`` and ``loop.File``
parts."""

import base64

import openai
import pytest

from loop import File, Image, Request, Role, Text, tool
from provider import tool_call
from tests.session.openai.clients_helpers import MODEL, results, serving
from tests.session.openai.test_server import TOKEN

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(40))
PDF = b"%PDF-1.4\n1 0 obj\n<<>>\nendobj\n"
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
PDF_URL = "data:application/pdf;base64," + base64.b64encode(PDF).decode()


def client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url, api_key=TOKEN, max_retries=0)


def describe(request: Request) -> str:
    """Names the media of the newest user turn: what the model was shown."""
    user = [t for t in request.turns if t.role is Role.USER][-1]
    return ", ".join(type(p).__name__ for p in user.parts)


@tool
async def snapshot() -> Image:
    """A picture of the screen."""
    return Image(data=PNG)


async def test_chat_completions_user_content_with_an_image_and_a_file() -> None:
    content = [{"type": "text", "text": "What is in these?"},
               {"type": "image_url", "image_url": {"url": PNG_URL, "detail": "low"}},
               {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
               {"type": "file", "file": {"file_data": PDF_URL, "filename": "report.pdf"}}]
    with serving(describe) as served:
        async with client(served.url) as api:
            reply = await api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}])
    assert reply.choices[0].message.content == "Text, Image, Image, File"
    parts = [t for t in served.requests[0].turns if t.role is Role.USER][-1].parts
    assert parts == (Text("What is in these?"), Image(data=PNG, media_type="image/png"),
                     Image("https://example.com/cat.png"), File(data=PDF, media_type="application/pdf",
                                                                  name="report.pdf"))


async def test_responses_input_image_and_input_file() -> None:
    item = {"role": "user", "content": [{"type": "input_text", "text": "Look"},
                                        {"type": "input_image", "image_url": PNG_URL, "detail": "auto"},
                                        {"type": "input_file", "file_data": PDF_URL, "filename": "r.pdf"}]}
    with serving(describe) as served:
        async with client(served.url) as api:
            response = await api.responses.create(model=MODEL, input=[item])
    assert response.output_text == "Text, Image, File"
    [image] = [p for t in served.requests[0].turns for p in t.parts if isinstance(p, Image)]
    assert image.data == PNG


async def test_a_function_call_output_with_an_image_reaches_the_model_as_an_attachment() -> None:
    def model(request: Request) -> object:
        done = results(request)
        if not done:
            return tool_call("screenshot", {})
        return f"{done[-1].content} + {len(done[-1].attachments)} image"

    screenshot = {"type": "function", "name": "screenshot", "parameters": {"type": "object", "properties": {}}}
    with serving(model) as served:
        async with client(served.url) as api:
            first = await api.responses.create(model=MODEL, input="Show me", tools=[screenshot])
            [call] = [item for item in first.output if item.type == "function_call"]
            output = [{"type": "input_text", "text": "the screen"}, {"type": "input_image", "image_url": PNG_URL}]
            second = await api.responses.create(
                model=MODEL, previous_response_id=first.id, tools=[screenshot],
                input=[{"type": "function_call_output", "call_id": call.call_id, "output": output}])
    assert second.output_text == "the screen + 1 image"
    assert results(served.requests[-1])[-1].attachments == (Image(data=PNG),)


async def test_an_agent_tool_returning_an_image_shows_it_to_the_model() -> None:
    def model(request: Request) -> object:
        done = results(request)
        return f"saw {[type(a).__name__ for a in done[-1].attachments]}" if done else tool_call("snapshot", {})

    with serving(model, tools=[snapshot]) as served:
        async with client(served.url) as api:
            reply = await api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Look"}])
    assert reply.choices[0].message.content == "saw ['Image']"
    assert f"← snapshot: [image/png, {len(PNG)} bytes]" in reply.choices[0].message.reasoning_content
    assert results(served.requests[-1])[-1].attachments[0].data == PNG


@pytest.mark.parametrize(("part", "param"), [
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%"}}, "messages[0].content[0].image_url.url"),
    ({"type": "image_url", "image_url": {"url": "ftp://example.com/a.png"}}, "messages[0].content[0].image_url.url"),
    ({"type": "file", "file": {"file_id": "file-1"}}, "messages[0].content[0].file.file_id"),
    ({"type": "input_audio", "input_audio": {}}, "messages[0].content[0].type"),
])
async def test_bad_media_is_refused_naming_the_part(part: dict, param: str) -> None:
    with serving(describe) as served:
        async with client(served.url) as api:
            with pytest.raises(openai.BadRequestError) as caught:
                await api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": [part]}])
    assert caught.value.param == param
    assert served.requests == []
