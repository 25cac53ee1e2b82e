"""A conversation as the Responses API's ``instructions`` and ``input`` items, and the signature that carries a
reasoning item's id and encrypted content on a ``loop.Reasoning`` part."""

from __future__ import annotations

import json
from typing import Any

from loop import File, Image, Reasoning, Role, Text, ToolCall, ToolResult, Turn, UsageError

REASONING_SIGNATURE = "openai-reasoning:"
"""How the signature of a ``Reasoning`` part made by ``OpenAIResponses`` starts: this prefix, the reasoning
item's id, ``:``, then its ``encrypted_content`` (empty when the server sent none). Item ids (``rs_...``) hold no
``:``; the prefix keeps these signatures apart from other providers' (Anthropic signs thinking in base64)."""


def reasoning_signature(item_id: str, encrypted: str) -> str:
    """The ``Reasoning.signature`` that brings reasoning item ``item_id`` back on the next request."""
    return f"{REASONING_SIGNATURE}{item_id}:{encrypted}"


def read_signature(signature: str | None) -> tuple[str, str] | None:
    """The item id and encrypted content a signature made by ``reasoning_signature`` carries; ``None`` for any
    other signature (reasoning from another provider, or none), which cannot go back to the Responses API."""
    if not signature or not signature.startswith(REASONING_SIGNATURE):
        return None
    item_id, sep, encrypted = signature[len(REASONING_SIGNATURE):].partition(":")
    if not sep or not item_id:
        return None
    return item_id, encrypted


def arguments(raw: str) -> str:
    """A call's arguments as sent back: as the model wrote them when they are a JSON object, else ``{}``.

    A call with malformed arguments was answered with an error result already; the API parses the history and
    would refuse the whole request over them, which would make the conversation impossible to continue.
    """
    try:
        return raw if isinstance(json.loads(raw), dict) else "{}"
    except (TypeError, ValueError):
        return "{}"


def _message(role: str, content: str | list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": content}


def _media(part: Image | File) -> dict[str, Any]:
    """An ``input_image`` or ``input_file`` content item."""
    if isinstance(part, Image):
        return {"type": "input_image", "image_url": part.url if part.url is not None else part.data_url,
                "detail": "auto"}
    if part.data_url is None:
        return {"type": "input_file", "file_url": part.url}
    return {"type": "input_file", "filename": part.filename, "file_data": part.data_url}


def _has_media(turn: Turn) -> bool:
    return any(isinstance(p, (Image, File)) for p in turn.parts)


def _refuse_media(turn: Turn) -> None:
    for part in turn.parts:
        if isinstance(part, (Image, File)):
            raise UsageError(f"the Responses API cannot take {part!r} in {turn.role.value} turns: images and "
                             "files go in user turns and tool results")


def _user_content(turn: Turn) -> list[dict[str, Any]]:
    """A user turn with images or files as content items in its parts' order, each run of text one
    ``input_text``, the speaker's name before the first."""
    content: list[dict[str, Any]] = []
    text: list[str] = []
    prefix = f"{turn.name}: " if turn.name is not None else ""

    def flush() -> None:
        nonlocal prefix
        if "".join(text):
            content.append({"type": "input_text", "text": prefix + "".join(text)})
            prefix = ""
        text.clear()

    for part in turn.parts:
        if isinstance(part, Text):
            text.append(part.text)
        elif isinstance(part, (Image, File)):
            flush()
            content.append(_media(part))
    flush()
    return content


def _output(result: ToolResult) -> str | list[dict[str, Any]]:
    """A ``function_call_output``'s ``output``: the text, or with attachments an array of the text (unless
    empty) and their items."""
    if not result.attachments:
        return result.content
    output = [{"type": "input_text", "text": result.content}] if result.content else []
    output.extend(_media(a) for a in result.attachments)
    return output


def _reasoning(part: Reasoning, *, stored: bool) -> dict[str, Any] | None:
    """``part`` as a ``reasoning`` input item, or ``None`` when it cannot go back: it was not made by this API,
    or it carries no encrypted content and the response was not stored (so its id names nothing)."""
    carried = read_signature(part.signature)
    if carried is None:
        return None
    item_id, encrypted = carried
    if not encrypted and not stored:
        return None
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": item_id,
        "summary": [{"type": "summary_text", "text": part.text}] if part.text else [],
    }
    if encrypted:
        item["encrypted_content"] = encrypted
    return item


def _assistant(turn: Turn, *, stored: bool) -> list[dict[str, Any]]:
    """An assistant turn's parts in their order: reasoning items, one message per run of text, function calls."""
    items: list[dict[str, Any]] = []
    text: list[str] = []
    prefix = f"{turn.name}: " if turn.name is not None else ""

    def flush() -> None:
        nonlocal prefix
        if "".join(text):
            items.append(_message("assistant", prefix + "".join(text)))
            prefix = ""
        text.clear()

    for part in turn.parts:
        if isinstance(part, Text):
            text.append(part.text)
            continue
        flush()
        if isinstance(part, Reasoning):
            reasoning = _reasoning(part, stored=stored)
            if reasoning is not None:
                items.append(reasoning)
        elif isinstance(part, ToolCall):
            items.append({"type": "function_call", "call_id": part.id, "name": part.name,
                          "arguments": arguments(part.arguments)})
        elif isinstance(part, (Image, File)):
            _refuse_media(turn)
    flush()
    return items


def input_items(turns: tuple[Turn, ...], *, stored: bool = False) -> tuple[str, list[dict[str, Any]]]:
    """``turns`` as the request's ``instructions`` and ``input`` items.

    Leading system turns become ``instructions`` (joined by blank lines); later ones stay ``system`` messages
    where they stand. User text is a ``user`` message; an assistant turn becomes, in its parts' order, its
    reasoning items (only those this API made: see ``REASONING_SIGNATURE``), a message for its text and a
    ``function_call`` per call; each tool result is a ``function_call_output``. Messages have no field for a
    speaker's name, so a named user or assistant turn has ``"{name}: "`` put before its text. ``stored``: the
    responses are kept by the server (``store: true``), so a reasoning item without encrypted content can go
    back by its id alone.
    """
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for turn in turns:
        role = turn.role
        if role is Role.SYSTEM:
            _refuse_media(turn)
            if not items:
                if turn.text:
                    instructions.append(turn.text)
            else:
                items.append(_message("system", turn.text))
        elif role is Role.TOOL:
            items.extend({"type": "function_call_output", "call_id": r.call_id, "output": _output(r)}
                         for r in turn.parts if isinstance(r, ToolResult))
            own = [_media(p) for p in turn.parts if isinstance(p, (Image, File))]
            if own:
                items.append(_message("user", own))
        elif role is Role.ASSISTANT:
            items.extend(_assistant(turn, stored=stored))
        elif _has_media(turn):
            items.append(_message(role.value, _user_content(turn)))
        else:
            text = turn.text if turn.name is None else f"{turn.name}: {turn.text}"
            items.append(_message(role.value, text))
    return "\n\n".join(instructions), items
