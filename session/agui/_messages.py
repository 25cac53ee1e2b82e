"""AG-UI messages and a session's turns, both ways: the conversation a ``RunAgentInput`` holds, as turns to seed a
new thread with and the message to run; and a stored conversation as the messages of a ``MESSAGES_SNAPSHOT``.

Message ids. A turn seeded from the client's messages keeps the client's id (in its ``meta``, under
``"agui_id"``); a user turn the client sent later keeps the id the client gives that message in the input (matched
from the end, by text: see ``client_ids``), so the client's list keeps its order; any other turn is
``turn-<index>``, its place in the conversation, which is also the id its text and calls are streamed under while
it is written, so a snapshot names the messages the stream built. A turn's reasoning is the message
``turn-<index>-reasoning``; a tool result is ``result-<call id>``.

Mapping. System and developer messages are system turns; user and assistant messages are user and assistant
turns; consecutive tool messages are one tool turn answering the calls of the assistant message before them (a
tool message's ``error`` makes an error result). Activity and reasoning messages are the client's display, not
conversation, and are left out. An assistant message whose calls the conversation goes on without answering gets
"not answered" results, as a session gives them, so the seeded history is one a model accepts.

Content. A user message's content is a string or a list of parts: text parts, and media parts (image, audio,
video, document) whose ``source`` holds the bytes (``data``, base64) or a URL. An image part is a ``loop.Image``,
the others a ``loop.File`` named by the part's ``metadata.filename`` (where ``@ag-ui/client`` puts a legacy
binary part's file name); a tool message's media parts are its result's ``attachments``. A ``file`` source (a
handle only the model provider that issued it can read), bad base64 or a media type the part cannot have is
refused, naming the part. A snapshot writes media back as the parts they were read from. A URL is passed on to
the model, never fetched here.

Before validation, ``upgrade_parts`` turns AG-UI 0.x ``binary`` parts into those media parts, as the protocol's
own client does before it sends them; one that holds only an upload ``id`` is refused, naming it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any, Union

import attrs
from ag_ui.core import (AssistantMessage, AudioPart, DataSource, DocumentPart, FileSource, FunctionCall, ImagePart,
                        ReasoningMessage, SystemMessage, TextPart, ToolMessage, UrlSource, UserMessage, VideoPart)
from ag_ui.core import ToolCall as AGUIToolCall
from ag_ui.core import Message as AGUIMessage

from loop import File, Image, Part, Reasoning, Role, Text, ToolCall, ToolResult, Turn, UsageError
from session._message import UNANSWERED
from session.agui._errors import invalid

ID_KEY = "agui_id"  # where a seeded turn keeps the id its client gave the message
LEFT_OPEN = {"status": "pending", "reason": "left for the client to answer"}
_MEDIA_PARTS = (ImagePart, AudioPart, VideoPart, DocumentPart)
_PART_TYPES = ("text", "image", "audio", "video", "document")


@attrs.frozen
class Conversation:
    """What a ``RunAgentInput``'s messages hold: the turns before its new message (``history``), and that message:
    the user's text (a string), the user's parts when it shows images or files (``Text``, ``Image`` and ``File``
    parts), the results of the calls the last assistant message left for the client (``ToolResult`` parts), or
    ``None`` when the input ends with none of these (a run that only resumes interrupts)."""

    history: tuple[Turn, ...]
    message: Union[str, tuple[Part, ...], None]


def message_id(turn: Turn, index: int, client: Mapping[int, str] | None = None) -> str:
    """The id of the message ``turn``, the ``index``-th of its conversation, goes by (``client``: the ids the
    client gives its user messages, by turn index, from ``client_ids``)."""
    given = turn.meta.get(ID_KEY)
    if isinstance(given, str) and given:
        return given
    if client is not None and index in client:
        return client[index]
    return f"turn-{index}"


def client_ids(turns: Sequence[Turn], messages: Sequence[Any]) -> dict[int, str]:
    """The ids the client's input ``messages`` give the user turns of ``turns``, by turn index: the last user
    message is the last user turn, and so on back, as long as their texts agree. The input holds the client's view
    of the conversation (the last snapshot and its new message): with these ids a snapshot names the client's own
    messages as it does, so its list keeps them where they are."""
    users = [(i, t.text) for i, t in enumerate(turns) if t.role is Role.USER and ID_KEY not in t.meta]
    given = [(message.id, _said(message.content)) for message in messages if message.role == "user"]
    out = {}
    for (index, text), (mid, said) in zip(reversed(users), reversed(given)):
        if text != said:
            break
        out[index] = mid
    return out


def reasoning_id(message: str) -> str:
    return f"{message}-reasoning"


def result_id(call_id: str) -> str:
    return f"result-{call_id}"


def upgrade_parts(body: dict[str, Any]) -> None:
    """Ready the content parts of ``body``'s messages (a ``RunAgentInput`` as JSON) for validation, in place: an
    AG-UI 0.x ``binary`` part becomes the media part that replaced it, as ``@ag-ui/client`` makes it (by the
    part's ``mimeType``, an image, audio, video or document part whose source is its ``data``, base64, or else its
    ``url``, its ``filename`` kept as ``metadata.filename``). ``Problem`` (422) naming a binary part that holds only
    an upload ``id`` (the bytes it names were uploaded somewhere this server cannot read), or a part of a type the
    protocol does not have (validation would name only the content, not the part)."""
    messages = body.get("messages")
    for i, message in enumerate(messages if isinstance(messages, list) else ()):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "binary":
                content[j] = _upgraded(part, f"messages[{i}].content[{j}]")
            elif message.get("role") in ("user", "tool") and isinstance(kind, str) and kind not in _PART_TYPES:
                raise invalid(f"messages[{i}].content[{j}].type: parts of type {kind[:40]!r} are not supported; "
                              f"this agent reads {', '.join(_PART_TYPES)} parts")


def _upgraded(part: dict[str, Any], where: str) -> dict[str, Any]:
    media_type = part.get("mimeType", part.get("mime_type"))
    if not isinstance(media_type, str):
        raise invalid(f"{where}.mimeType: a binary part names its media type, as a string such as 'image/png'")
    for field in ("data", "url", "filename"):
        if part.get(field) is not None and not isinstance(part[field], str):
            raise invalid(f"{where}.{field} must be a string, got {type(part[field]).__name__}")
    if part.get("data"):
        source = {"type": "data", "value": part["data"], "mimeType": media_type}
    elif part.get("url"):
        source = {"type": "url", "value": part["url"], "mimeType": media_type}
    else:
        raise invalid(f"{where}: a binary part that holds only an upload id ({part.get('id')!r}) names bytes this "
                      "server cannot read; send them as 'data' (base64) or a 'url'")
    kind = next((k for k in ("image", "audio", "video") if media_type.lower().startswith(f"{k}/")), "document")
    upgraded: dict[str, Any] = {"type": kind, "source": source}
    if part.get("filename"):
        upgraded["metadata"] = {"filename": part["filename"]}
    return upgraded


def read_messages(messages: Sequence[Any]) -> Conversation:
    """The conversation ``messages`` (validated ``ag_ui.core`` messages) hold; ``Problem`` (422) naming the first
    message that cannot be read."""
    turns: list[Turn] = []
    open_calls: dict[str, ToolCall] = {}  # calls of the last assistant message not answered yet
    results: list[ToolResult] = []
    last_role: str | None = None
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        role = message.role
        if role in ("activity", "reasoning"):
            continue
        if role == "tool":
            call = open_calls.pop(message.tool_call_id, None)
            if call is None:
                raise invalid(f"{where}.toolCallId: {message.tool_call_id!r} answers no open tool call of the "
                              "assistant message before it")
            results.append(_result(call, message, f"{where}.content"))
            last_role = role
            continue
        if results or open_calls:  # the calls before this message are answered, or were never going to be
            results += [ToolResult(c.id, c.name, UNANSWERED, is_error=True) for c in open_calls.values()]
            turns.append(Turn(Role.TOOL, results))
            results, open_calls = [], {}
        meta = {ID_KEY: message.id}
        if role in ("system", "developer"):
            turns.append(Turn(Role.SYSTEM, [Text(message.content)], meta))
        elif role == "user":
            turns.append(Turn(Role.USER, content_parts(message.content, f"{where}.content") or [Text("")], meta))
        else:  # assistant
            calls = [ToolCall(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or ()]
            text = message.content or ""
            if not text and not calls:
                continue  # an empty message says nothing a model could read
            turns.append(Turn(Role.ASSISTANT, ([Text(text)] if text else []) + calls, meta))
            open_calls = {c.id: c for c in calls}
        last_role = role
    if last_role == "tool":
        if open_calls:
            raise invalid(f"the tool messages answer some of the calls of the assistant message before them, not "
                          f"{', '.join(open_calls)}; send one tool message for each call")
        earlier = list(turns)
        earlier[-1] = _left_for_client(earlier[-1])
        return Conversation(tuple(earlier), tuple(results))
    if results or open_calls:
        results += [ToolResult(c.id, c.name, UNANSWERED, is_error=True) for c in open_calls.values()]
        turns.append(Turn(Role.TOOL, results))
    if last_role == "user":
        last = turns[-1]
        if any(isinstance(p, (Image, File)) for p in last.parts):
            return Conversation(tuple(turns[:-1]), last.parts)
        if not last.text.strip():
            raise invalid(f"messages[{len(messages) - 1}].content: the last user message is empty")
        return Conversation(tuple(turns[:-1]), last.text)
    return Conversation(tuple(turns), None)


def _left_for_client(turn: Turn) -> Turn:
    """The assistant turn whose calls the input's last messages answer, marked as having left them for the client
    (outcome ``pending``), so that a thread seeded with it keeps them open for those results."""
    return Turn(turn.role, turn.parts, {**turn.meta, "outcome": LEFT_OPEN}, turn.name)


def _result(call: ToolCall, message: Any, where: str) -> ToolResult:
    """A tool message as the result of ``call``: its text parts (joined by newlines) are the content, its media
    the attachments."""
    parts = content_parts(message.content, where)
    content = "\n".join(p.text for p in parts if isinstance(p, Text))
    media = [p for p in parts if isinstance(p, (Image, File))]
    error = message.error
    return ToolResult(call.id, call.name, content or (error or ""), is_error=error is not None, attachments=media)


def content_parts(content: Any, where: str) -> list[Part]:
    """A message's content as parts: its text (consecutive text parts as one, a line each, empty ones left out)
    and the images and files it shows, in order; ``Problem`` (422) naming the part that cannot be read."""
    if isinstance(content, str):
        return [Text(content)] if content else []
    parts: list[Part] = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        if isinstance(part, TextPart):
            if not part.text:
                continue
            if parts and isinstance(parts[-1], Text):
                parts[-1] = Text(f"{parts[-1].text}\n{part.text}")
            else:
                parts.append(Text(part.text))
        elif isinstance(part, _MEDIA_PARTS):
            parts.append(_media(part, at))
        else:
            raise invalid(f"{at}: parts of type {getattr(part, 'type', type(part).__name__)!r} are not supported; "
                          "this agent reads text, image, audio, video and document parts")
    return parts


def _media(part: Any, where: str) -> Image | File:
    """A media part as an ``Image`` (an image part) or a ``File`` (the others, named by ``metadata.filename``)."""
    source = part.source
    if isinstance(source, FileSource):
        raise invalid(f"{where}.source: a 'file' source ({source.value[:80]!r}) is a handle only the model provider "
                      "that issued it can read; send the bytes (source type 'data', base64) or a URL (type 'url')")
    fields: dict[str, Any] = {"media_type": source.mime_type}
    if isinstance(source, DataSource):
        try:
            fields["data"] = base64.b64decode(source.value, validate=True)
        except (binascii.Error, ValueError):
            raise invalid(f"{where}.source.value: the data is not valid base64") from None
    else:
        fields["url"] = source.value
    try:
        if isinstance(part, ImagePart):
            return Image(**fields)
        metadata = part.metadata
        name = metadata.get("filename") if isinstance(metadata, dict) else None
        return File(**fields, name=name if isinstance(name, str) and name.strip() else None)
    except UsageError as exc:
        raise invalid(f"{where}: {exc}") from None


def _said(content: Any) -> str:
    """The text of a user message's content as its turn's ``text`` reads it (no media read, none refused)."""
    if isinstance(content, str):
        return content
    pieces: list[str] = []
    after_text = False
    for part in content:
        if isinstance(part, TextPart):
            if part.text:
                pieces.append(f"\n{part.text}" if after_text else part.text)
                after_text = True
        else:
            after_text = False
    return "".join(pieces)


def _content_out(parts: Sequence[Part]) -> Union[str, list[Any]]:
    """Parts as a message's content: its text when it is text alone, else AG-UI parts."""
    if not any(isinstance(p, (Image, File)) for p in parts):
        return "".join(p.text for p in parts if isinstance(p, Text))
    out: list[Any] = []
    for part in parts:
        if isinstance(part, Text):
            if part.text:
                out.append(TextPart(text=part.text))
        elif isinstance(part, (Image, File)):
            out.append(_media_out(part))
    return out


def _media_out(part: Image | File) -> Any:
    media_type = part.media_type
    if part.data is not None:
        source: Any = DataSource(value=base64.b64encode(part.data).decode("ascii"), mime_type=media_type or "")
    else:
        source = UrlSource(value=part.url or "", mime_type=media_type)
    if isinstance(part, Image):
        return ImagePart(source=source)
    kind = {"audio": AudioPart, "video": VideoPart}.get((media_type or "").split("/")[0], DocumentPart)
    return kind(source=source, metadata=None if part.name is None else {"filename": part.name})


def snapshot_messages(turns: Sequence[Turn], messages: Sequence[Any] = ()) -> list[AGUIMessage]:
    """The conversation ``turns`` as AG-UI messages, for a ``MESSAGES_SNAPSHOT`` answering an input that held
    ``messages``."""
    client = client_ids(turns, messages)
    out: list[AGUIMessage] = []
    for index, turn in enumerate(turns):
        mid = message_id(turn, index, client)
        if turn.role is Role.SYSTEM:
            out.append(SystemMessage(id=mid, content=turn.text))
        elif turn.role is Role.USER:
            out.append(UserMessage(id=mid, content=_content_out(turn.parts)))
        elif turn.role is Role.ASSISTANT:
            reasoning = "".join(p.text for p in turn.parts if isinstance(p, Reasoning))
            if reasoning:
                out.append(ReasoningMessage(id=reasoning_id(mid), content=reasoning))
            calls = [AGUIToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
                     for c in turn.tool_calls]
            out.append(AssistantMessage(id=mid, content=turn.text or None, tool_calls=calls or None))
        else:
            for result in turn.tool_results:
                content = _content_out([Text(result.content), *result.attachments]) if result.attachments \
                    else result.content
                out.append(ToolMessage(id=result_id(result.call_id), tool_call_id=result.call_id,
                                       content=content, error=result.content if result.is_error else None))
    return out
