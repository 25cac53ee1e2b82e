"""The content of a message, read from each API's parts: text, and the images and files it shows (``loop.Image``,
``loop.File``). Each problem is an ``OpenAIError`` naming the part, as OpenAI would answer it. An image's URL is
passed on to the model, never fetched here."""

from __future__ import annotations

from typing import Any

from loop import File, Image, Part, Text, UsageError
from session.openai._errors import OpenAIError, missing, unsupported, wrong_type


def content_parts(content: Any, where: str) -> list[Part]:
    """A user message's content as parts: its text, and the images (``image_url``) and files (``file`` with
    ``file_data``, a data URL) it shows, in order. An image's URL is passed to the model, never fetched here."""
    if content is None:
        raise missing(where)
    if isinstance(content, str):
        return [Text(content)]
    if not isinstance(content, list):
        raise wrong_type(where, "a string or an array of content parts", content)
    parts: list[Part] = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        if not isinstance(part, dict):
            raise wrong_type(at, "an object", part)
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise wrong_type(f"{at}.text", "a string", text)
            if parts and isinstance(parts[-1], Text):  # text parts read as one text, a line each
                text = f"{parts[-1].text}\n{text}"
                parts.pop()
            parts.append(Text(text))
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str):
                raise wrong_type(f"{at}.image_url.url", "a string", url)
            parts.append(media(Image, f"{at}.image_url.url", url=url))
        elif kind == "file":
            file = part.get("file")
            if not isinstance(file, dict):
                raise wrong_type(f"{at}.file", "an object", file)
            if "file_id" in file:
                raise unsupported(f"{at}.file.file_id", "Uploaded files (file_id) are not supported: send the "
                                                        "file's bytes as file_data, a base64 data URL.")
            data, name = file.get("file_data"), file.get("filename")
            if not isinstance(data, str):
                raise wrong_type(f"{at}.file.file_data", "a string (a base64 data URL)", data)
            if name is not None and not isinstance(name, str):
                raise wrong_type(f"{at}.file.filename", "a string", name)
            parts.append(media(File, f"{at}.file.file_data", url=data, name=name))
        else:
            raise unsupported(f"{at}.type", f"Content parts of type {kind!r} are not supported: this endpoint "
                                            "reads text, image_url and file parts.")
    if not parts:
        raise OpenAIError(400, f"Invalid '{where}': empty array.", param=where, code="empty_array")
    return parts


def media(kind: type[Any], param: str, **fields: Any) -> Any:
    """``kind(**fields)`` (an ``Image`` or a ``File``), or 400 naming ``param`` and what is wrong with it."""
    try:
        return kind(**fields)
    except UsageError as exc:
        raise OpenAIError(400, f"Invalid '{param}': {exc}.", param=param, code="invalid_value") from None


def input_text(content: Any, where: str) -> str:
    """A message's (or an output's) text: a string, or its text parts joined by newlines."""
    if content is None:
        raise missing(where)
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise wrong_type(where, "a string or an array of content parts", content)
    pieces = []
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise wrong_type(f"{where}[{j}]", "an object", part)
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise wrong_type(f"{where}[{j}].text", "a string", text)
            pieces.append(text)
        elif kind != "refusal":
            raise unsupported(f"{where}[{j}].type", f"Content parts of type {kind!r} are not supported: this "
                                                     "endpoint reads text only.")
    return "\n".join(pieces)


def input_parts(content: Any, where: str) -> list[Part]:
    """A user message's content (or a function call's output) as parts: its text, and the images
    (``input_image``) and files (``input_file`` with ``file_data``, a data URL, or a ``file_url``) it shows."""
    if content is None:
        raise missing(where)
    if isinstance(content, str):
        return [Text(content)]
    if not isinstance(content, list):
        raise wrong_type(where, "a string or an array of content parts", content)
    parts: list[Part] = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        if not isinstance(part, dict):
            raise wrong_type(at, "an object", part)
        kind = part.get("type")
        if "file_id" in part and kind in ("input_image", "input_file"):
            raise unsupported(f"{at}.file_id", "Uploaded files (file_id) are not supported: send the bytes as a "
                                               "base64 data URL, or a URL.")
        if kind in ("input_text", "output_text", "text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise wrong_type(f"{at}.text", "a string", text)
            if parts and isinstance(parts[-1], Text):  # text parts read as one text, a line each
                text = f"{parts[-1].text}\n{text}"
                parts.pop()
            parts.append(Text(text))
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str):
                raise wrong_type(f"{at}.image_url", "a string", url)
            parts.append(media(Image, f"{at}.image_url", url=url))
        elif kind == "input_file":
            name = part.get("filename")
            if name is not None and not isinstance(name, str):
                raise wrong_type(f"{at}.filename", "a string", name)
            field = "file_data" if "file_data" in part else "file_url"
            url = part.get(field)
            if not isinstance(url, str):
                raise wrong_type(f"{at}.{field}", "a string", url)
            parts.append(media(File, f"{at}.{field}", url=url, name=name))
        elif kind != "refusal":
            raise unsupported(f"{at}.type", f"Content parts of type {kind!r} are not supported: this endpoint "
                                            "reads text, input_image and input_file parts.")
    return parts
