"""A conversation as Chat Completions ``messages``."""

from __future__ import annotations

import json
import re
from typing import Any

from loop import File, Image, Role, Text, ToolResult, Turn, UsageError

WHO = "Chat Completions"


def _arguments(raw: str) -> str:
    """A call's arguments as sent back: as the model wrote them when they are a JSON object, else ``{}``.

    The call was answered with an error result already; servers that parse the history (vLLM, SGLang) reject
    the whole request over malformed arguments, which would make the conversation impossible to continue.
    """
    try:
        return raw if isinstance(json.loads(raw), dict) else "{}"
    except (TypeError, ValueError):
        return "{}"


def messages(turns: tuple[Turn, ...]) -> list[dict[str, Any]]:
    """``turns`` as Chat Completions messages. Reasoning and usage parts are not sent back.

    A user turn with images or files sends its content as an array of parts, in the turn's order: ``text``,
    ``image_url`` (the URL, or the bytes as a data URL) and ``file`` (the bytes as a data URL with a file
    name). Tool messages carry text only, so the images and files of a tool turn (its results'
    ``attachments``, and any it holds itself) follow its tool messages in one user message, each result's
    introduced by a line naming the call. The API has no file URLs, and images and files in a system or
    assistant turn have no place to go: these raise ``UsageError``, never left out.
    """
    out: list[dict[str, Any]] = []
    for turn in turns:
        role = turn.role
        if role is Role.TOOL:
            for result in turn.tool_results:
                out.append({"role": "tool", "tool_call_id": result.call_id, "content": result.content})
            attached = _tool_attachments(turn)
            if attached:
                out.append({"role": "user", "content": attached})
        elif _has_media(turn):
            if role is not Role.USER:
                part = next(p for p in turn.parts if isinstance(p, (Image, File)))
                raise UsageError(f"{WHO} cannot send {part!r} in {role.value} turns: images and files go in "
                                 "user turns and tool results")
            content = [_content(p) for p in turn.parts if isinstance(p, _SENT)]
            shown: dict[str, Any] = {"role": "user", "content": content}
            if turn.name is not None:
                shown["name"] = wire_name(turn.name)
            out.append(shown)
        elif role is Role.ASSISTANT:
            message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
            calls = turn.tool_calls
            if calls:
                message["tool_calls"] = [
                    {"id": c.id, "type": "function",
                     "function": {"name": c.name, "arguments": _arguments(c.arguments)}}
                    for c in calls
                ]
            elif message["content"] is None:
                message["content"] = ""
            if turn.name is not None:
                message["name"] = wire_name(turn.name)
            out.append(message)
        elif turn.name is not None:
            out.append({"role": role.value, "content": turn.text, "name": wire_name(turn.name)})
        else:
            out.append({"role": role.value, "content": turn.text})
    return out


_SENT = (Text, Image, File)


def _has_media(turn: Turn) -> bool:
    return any(isinstance(p, (Image, File)) for p in turn.parts)


def _content(part: Text | Image | File) -> dict[str, Any]:
    """One part of a user message's content array."""
    if isinstance(part, Text):
        return {"type": "text", "text": part.text}
    if isinstance(part, Image):
        return {"type": "image_url", "image_url": {"url": part.url if part.url is not None else part.data_url}}
    if part.data_url is None:
        raise UsageError(f"{WHO} cannot send {part!r}: its file inputs take the bytes, not a URL; give the "
                         "File its data")
    return {"type": "file", "file": {"file_data": part.data_url, "filename": part.filename}}


def _tool_attachments(turn: Turn) -> list[dict[str, Any]]:
    """The content of the user message that carries a tool turn's images and files, or none."""
    content: list[dict[str, Any]] = []
    for part in turn.parts:
        if isinstance(part, ToolResult) and part.attachments:
            content.append({"type": "text", "text": f"Attached to the result of {part.name} ({part.call_id}):"})
            content.extend(_content(a) for a in part.attachments)
        elif isinstance(part, (Image, File)):
            content.append(_content(part))
    return content


_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_-]")


def wire_name(name: str) -> str:
    """``name`` as a message ``name`` the API accepts (``^[a-zA-Z0-9_-]{1,64}$``): other characters become
    ``_`` and it is cut to 64 characters."""
    if _NAME.fullmatch(name):
        return name
    return _NOT_NAME.sub("_", name)[:64] or "_"
