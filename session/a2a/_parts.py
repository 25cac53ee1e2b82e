"""Reading a task's message: its text parts, and the files it shows as ``loop.Image`` (an ``image/*`` media type)
and ``loop.File`` parts (any other, named by the part's ``filename``). An A2A part holds a file as ``raw`` bytes
or a ``url``, with its ``media_type`` (which ``raw`` bytes of a type their first bytes tell may leave out). A URL
is passed on to the model, never fetched here.

A message this agent cannot read ends its task ``rejected`` before anything runs, the part named by its place
(``parts[1]``): a data part (data parts answer approvals, ``session.a2a._approvals``), a part that holds
nothing, a file with a bad media type or bytes that contradict it, or a message with neither text nor files.
"""

from __future__ import annotations

from typing import Any

from a2a.types import Message, TaskState

from loop import File, Image, Part, Text, UsageError
from session.a2a._ending import Ending, refused

_REJECTED = TaskState.TASK_STATE_REJECTED
_READS = "This agent reads text parts and files (raw bytes or a URL)"


def message_content(message: Message | None) -> str | tuple[Part, ...] | Ending:
    """What a task's message says: its text (its text parts joined by newlines) when that is all it holds, else
    its text and files as parts, in order (consecutive text parts as one, a line each); or the ending of a task
    whose message this agent cannot read (see the module docstring)."""
    parts: list[Part] = []
    texts: list[str] = []
    for i, part in enumerate(message.parts if message is not None else ()):
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
            if not part.text:
                continue
            if parts and isinstance(parts[-1], Text):
                parts[-1] = Text(f"{parts[-1].text}\n{part.text}")
            else:
                parts.append(Text(part.text))
        elif kind in ("raw", "url"):
            read = _file(part, kind, i)
            if isinstance(read, Ending):
                return read
            parts.append(read)
        elif kind is None:
            return refused(f"parts[{i}] holds nothing: a part is text, a file (raw bytes or a URL) or data.",
                           code="invalid_part", state=_REJECTED)
        else:
            return refused(f"{_READS}; parts[{i}] is a {kind} part.", code="unsupported_part", state=_REJECTED)
    if all(isinstance(p, Text) for p in parts):  # text alone, read as it always was
        text = "\n".join(texts)
        if not text.strip():
            return refused("The message has no text to answer.", code="empty_message", state=_REJECTED)
        return text
    return tuple(parts)


def _file(part: Any, kind: str, index: int) -> Image | File | Ending:
    """A file part as an ``Image`` (``image/*``) or a ``File``, or the ending that names what is wrong with it."""
    media_type = part.media_type or None
    source: dict[str, Any] = {"data": bytes(part.raw)} if kind == "raw" else {"url": part.url}
    try:
        if media_type is None and kind == "raw":
            media_type = File(**source).media_type  # told from the bytes (PNG, JPEG, GIF, WebP, PDF)
        if (media_type or "").lower().startswith("image/"):
            return Image(**source, media_type=media_type)
        return File(**source, media_type=media_type, name=part.filename or None)
    except UsageError as exc:
        return refused(f"parts[{index}] ({part.filename or kind}): {exc}.", code="invalid_part", state=_REJECTED)
