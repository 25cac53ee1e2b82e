"""The content of a message, read from each API's parts: text, and the images and files it shows (``loop.Image``,
``loop.File``). Each problem is an ``OpenAIError`` naming the part, as OpenAI would answer it. An image's URL is
passed on to the model, never fetched here. Consecutive text parts read as one text, a line each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loop import File, Image, Part, Text, UsageError
from session.openai._errors import OpenAIError, missing, unsupported, wrong_type

_PartReader = Callable[[dict[str, Any], str, Any], "Part | None"]  # (part, where, its type) -> the part, or skip
_TEXT_KINDS = ("input_text", "output_text", "text")


def content_parts(content: Any, where: str) -> list[Part]:
    """A Chat Completions user message's content as parts: ``text``, ``image_url`` and ``file`` (``file_data``,
    a data URL) parts, in order; an empty array is 400."""
    parts = _read(content, where, _chat_part)
    if not parts:
        raise OpenAIError(400, f"Invalid '{where}': empty array.", param=where, code="empty_array")
    return parts


def input_parts(content: Any, where: str) -> list[Part]:
    """A Responses API message's content (or a function call's output) as parts: ``input_text`` /
    ``output_text``, ``input_image`` (``image_url``: a URL or a data URL) and ``input_file`` (``file_data``, a
    data URL, or ``file_url``); ``refusal`` parts are left out."""
    return _read(content, where, _input_part)


def content_text(content: Any, where: str, *, kinds: tuple[str, ...] = _TEXT_KINDS) -> str:
    """A message's text: a string, or its text parts (of ``kinds``) joined by newlines; ``refusal`` parts are
    left out, and any other part is 400."""
    def text_only(part: dict[str, Any], at: str, kind: Any) -> Part | None:
        if kind in kinds:
            return _text(part, at)
        if kind == "refusal":
            return None
        raise unsupported(f"{at}.type", f"Content parts of type {kind!r} are not supported: this endpoint reads "
                                        "text only.")

    text = [p for p in _read(content, where, text_only) if isinstance(p, Text)]
    return text[0].text if text else ""


def media(kind: type[Any], param: str, **fields: Any) -> Any:
    """``kind(**fields)`` (an ``Image`` or a ``File``), or 400 naming ``param`` and what is wrong with it."""
    try:
        return kind(**fields)
    except UsageError as exc:
        raise OpenAIError(400, f"Invalid '{param}': {exc}.", param=param, code="invalid_value") from None


def _read(content: Any, where: str, read: _PartReader) -> list[Part]:
    if content is None:
        raise missing(where)
    if isinstance(content, str):
        return [Text(content)]
    if not isinstance(content, list):
        raise wrong_type(where, "a string or an array of content parts", content)
    parts: list[Part] = []
    for j, raw in enumerate(content):
        at = f"{where}[{j}]"
        if not isinstance(raw, dict):
            raise wrong_type(at, "an object", raw)
        part = read(raw, at, raw.get("type"))
        last = parts[-1] if parts else None
        if isinstance(part, Text) and isinstance(last, Text):
            parts.pop()
            part = Text(f"{last.text}\n{part.text}")
        if part is not None:
            parts.append(part)
    return parts


def _text(part: dict[str, Any], at: str) -> Text:
    text = part.get("text")
    if not isinstance(text, str):
        raise wrong_type(f"{at}.text", "a string", text)
    return Text(text)


def _chat_part(part: dict[str, Any], at: str, kind: Any) -> Part | None:
    if kind == "text":
        return _text(part, at)
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if not isinstance(url, str):
            raise wrong_type(f"{at}.image_url.url", "a string", url)
        return media(Image, f"{at}.image_url.url", url=url)
    if kind == "file":
        file = part.get("file")
        if not isinstance(file, dict):
            raise wrong_type(f"{at}.file", "an object", file)
        if "file_id" in file:
            raise unsupported(f"{at}.file.file_id", "Uploaded files (file_id) are not supported: send the file's "
                                                    "bytes as file_data, a base64 data URL.")
        data, name = file.get("file_data"), file.get("filename")
        if not isinstance(data, str):
            raise wrong_type(f"{at}.file.file_data", "a string (a base64 data URL)", data)
        if name is not None and not isinstance(name, str):
            raise wrong_type(f"{at}.file.filename", "a string", name)
        return media(File, f"{at}.file.file_data", url=data, name=name)
    raise unsupported(f"{at}.type", f"Content parts of type {kind!r} are not supported: this endpoint reads text, "
                                    "image_url and file parts.")


def _input_part(part: dict[str, Any], at: str, kind: Any) -> Part | None:
    if "file_id" in part and kind in ("input_image", "input_file"):
        raise unsupported(f"{at}.file_id", "Uploaded files (file_id) are not supported: send the bytes as a base64 "
                                           "data URL, or a URL.")
    if kind in _TEXT_KINDS:
        return _text(part, at)
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str):
            raise wrong_type(f"{at}.image_url", "a string", url)
        return media(Image, f"{at}.image_url", url=url)
    if kind == "input_file":
        name = part.get("filename")
        if name is not None and not isinstance(name, str):
            raise wrong_type(f"{at}.filename", "a string", name)
        field = "file_data" if "file_data" in part else "file_url"
        url = part.get(field)
        if not isinstance(url, str):
            raise wrong_type(f"{at}.{field}", "a string", url)
        return media(File, f"{at}.{field}", url=url, name=name)
    if kind == "refusal":
        return None
    raise unsupported(f"{at}.type", f"Content parts of type {kind!r} are not supported: this endpoint reads text, "
                                    "input_image and input_file parts.")
