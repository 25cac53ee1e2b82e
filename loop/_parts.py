"""The vocabulary of a conversation: roles and the parts a turn is made of."""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import os
import re
from collections.abc import Iterable
from typing import Any, Union

import attrs

from loop.errors import UsageError


class Role(enum.StrEnum):
    """Who spoke a turn."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@attrs.frozen
class Text:
    """Plain text written by anyone."""

    text: str


@attrs.frozen
class Reasoning:
    """A model's visible reasoning. ``signature`` lets the provider that made it verify it on the way back."""

    text: str
    signature: str | None = None


@attrs.frozen
class ToolCall:
    """A model's request to run a tool. ``arguments`` is the raw JSON text the model wrote, possibly malformed."""

    id: str
    name: str
    arguments: str = "{}"


IMAGE_TYPES: tuple[str, ...] = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The media types an ``Image`` may have: the ones every supported model API reads."""

# How a file starts, for each type told from its bytes (WebP: "RIFF", four bytes of size, then "WEBP").
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
)
_MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*")
_HTTP_URL = re.compile(r"https?://[^\s/?#]+\S*", re.IGNORECASE)
_DATA_URL = re.compile(r"data:([^;,]*)((?:;[^;,]*)*),(.*)", re.DOTALL | re.IGNORECASE)
# The extension a file of each type is named with when it has no name of its own (see ``File.filename``).
_EXTENSIONS = {
    "application/pdf": ".pdf", "text/plain": ".txt", "text/markdown": ".md", "text/csv": ".csv",
    "text/html": ".html", "application/json": ".json", "image/png": ".png", "image/jpeg": ".jpg",
    "image/gif": ".gif", "image/webp": ".webp",
}
_BY_EXTENSION = {ext: media_type for media_type, ext in _EXTENSIONS.items()} | {".jpeg": "image/jpeg"}


def sniff(data: bytes) -> str | None:
    """The media type ``data`` starts like (PNG, JPEG, GIF, WebP, PDF), or ``None`` when it is none of these."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    return None


def _set(part: Any, name: str, value: Any) -> None:
    object.__setattr__(part, name, value)  # past the frozen guard, as attrs' own __init__ does


def _check_source(part: Image | File, what: str, allowed: tuple[str, ...] | None = None) -> None:
    """The checks ``Image`` and ``File`` share: exactly one of ``url`` and ``data``; an http(s) URL, or a data
    URL read into ``data`` and ``media_type``; ``data`` non-empty bytes; ``media_type`` a lowercase type/subtype
    (one of ``allowed`` when given), told from the bytes when not given."""
    url, data = part.url, part.data
    if url is not None and data is not None:
        raise UsageError(f"{what} takes a url or data, not both")
    if url is None and data is None:
        raise UsageError(f"{what} needs a url or data (bytes with their media_type)")
    if part.media_type is not None:
        if not isinstance(part.media_type, str) or not _MEDIA_TYPE.fullmatch(part.media_type.lower()):
            raise UsageError(f"{what}: media_type must be a type/subtype such as 'image/png', got {part.media_type!r}")
        _set(part, "media_type", part.media_type.lower())
    if url is not None:
        if not isinstance(url, str):
            raise UsageError(f"{what}: url must be a string, got {type(url).__name__}")
        if url[:5].lower() == "data:":
            _read_data_url(part, url, what)
        elif not _HTTP_URL.fullmatch(url):
            raise UsageError(f"{what}: url must be an http(s) URL or a data: URL, got {_short(url)!r}")
    if part.data is None:
        if part.media_type is not None:
            _check_allowed(part, what, allowed)
        return
    if not isinstance(part.data, bytes):
        raise UsageError(f"{what}: data must be bytes, got {type(part.data).__name__}")
    if not part.data:
        raise UsageError(f"{what}: data is empty")
    found = sniff(part.data)
    if part.media_type is None:
        if found is None:
            raise UsageError(f"{what}: the media type cannot be told from the bytes; give media_type")
        _set(part, "media_type", found)
    elif found is not None and found != part.media_type:
        _check_allowed(part, what, allowed)  # the type's own error first: it may be the one that is wrong
        raise UsageError(f"{what}: media_type is {part.media_type!r} but the bytes are {found}")
    _check_allowed(part, what, allowed)


def _read_data_url(part: Image | File, url: str, what: str) -> None:
    """Keep a data URL's bytes as ``data`` and its type as ``media_type``: inline bytes have one form."""
    match = _DATA_URL.fullmatch(url)
    params = match.group(2).lower().split(";") if match else []
    if match is None or "base64" not in params:
        raise UsageError(f"{what}: a data: URL must be base64 (data:<media type>;base64,...), got {_short(url)!r}")
    try:
        data = base64.b64decode(match.group(3), validate=True)
    except (binascii.Error, ValueError):
        raise UsageError(f"{what}: the data: URL does not hold valid base64") from None
    media_type = match.group(1).lower() or None
    if media_type is not None and not _MEDIA_TYPE.fullmatch(media_type):
        raise UsageError(f"{what}: the data: URL's media type {media_type!r} is not a type/subtype")
    if part.media_type is not None and media_type is not None and media_type != part.media_type:
        raise UsageError(f"{what}: media_type is {part.media_type!r} but the data: URL says {media_type!r}")
    _set(part, "url", None)
    _set(part, "data", data)
    if media_type is not None:
        _set(part, "media_type", media_type)


def _check_allowed(part: Image | File, what: str, allowed: tuple[str, ...] | None) -> None:
    if allowed is not None and part.media_type not in allowed:
        raise UsageError(f"{what}: media_type must be one of {', '.join(allowed)}, got {part.media_type!r}")


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else f"{text[:limit]}..."


def _described(part: Image | File, extra: str = "") -> str:
    """A short repr: the URL, or the media type, size and digest; never the bytes."""
    name = type(part).__name__
    if part.data is None:
        return f"{name}(url={_short(part.url or '', 80)!r}{extra})"
    digest = hashlib.sha256(part.data).hexdigest()
    return f"{name}({part.media_type}, {len(part.data):,} bytes, sha256:{digest[:12]}{extra})"


class _Media:
    """What ``Image`` and ``File`` both offer; each is an attrs class with ``url``, ``data`` and ``media_type``."""

    __slots__ = ()
    url: str | None
    data: bytes | None
    media_type: str | None

    @property
    def digest(self) -> str | None:
        """The SHA-256 of ``data`` in hex, which names the bytes wherever they are kept; ``None`` for a URL."""
        return None if self.data is None else hashlib.sha256(self.data).hexdigest()

    @property
    def data_url(self) -> str | None:
        """``data`` as a ``data:<media type>;base64,...`` URL, as model APIs take inline bytes; ``None`` for a URL."""
        if self.data is None:
            return None
        return f"data:{self.media_type};base64,{base64.b64encode(self.data).decode('ascii')}"


@attrs.frozen(repr=False)
class Image(_Media):
    """An image shown to a model: at ``url`` (http or https), or ``data`` bytes of ``media_type``.

    ``media_type`` is one of ``IMAGE_TYPES``; with ``data`` it may be left out and is told from the bytes,
    and one that the bytes contradict is refused. A ``data:`` URL is read into ``data`` and ``media_type``, so
    inline bytes have one form. Anything else (both or neither of ``url`` and ``data``, empty data, another
    media type) raises ``UsageError`` naming the problem. The repr shows the size and type, never the bytes.
    User turns and tool results carry images (``ToolResult.attachments``); the providers send them the way
    their APIs take them.
    """

    url: str | None = None
    data: bytes | None = attrs.field(default=None, kw_only=True)
    media_type: str | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        _check_source(self, "Image", IMAGE_TYPES)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Image:
        """The image in the file at ``path``, its media type told from its first bytes (PNG, JPEG, GIF, WebP)."""
        with open(path, "rb") as f:
            data = f.read()
        if sniff(data) not in IMAGE_TYPES:
            raise UsageError(f"{os.fspath(path)!r} is not a PNG, JPEG, GIF or WebP image")
        return cls(data=data)

    def __repr__(self) -> str:
        return _described(self)


@attrs.frozen(repr=False)
class File(_Media):
    """A document shown to a model (a PDF, a text file): at ``url``, or ``data`` bytes of ``media_type``,
    with an optional file ``name``.

    ``media_type`` is any type/subtype (``application/pdf``, ``text/plain``); with ``data`` it may be left out
    when the bytes tell it (PDF and the image types). Which types reach a model depends on the provider: one
    that cannot send a file says so with a ``UsageError``. The checks and the data-URL reading are
    ``Image``'s; ``name``, when given, is a non-empty string.
    """

    url: str | None = None
    data: bytes | None = attrs.field(default=None, kw_only=True)
    media_type: str | None = attrs.field(default=None, kw_only=True)
    name: str | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        _check_source(self, "File")
        if self.name is not None and (not isinstance(self.name, str) or not self.name.strip()):
            raise UsageError(f"File: name must be a non-empty string or None, got {self.name!r}")

    @property
    def filename(self) -> str:
        """``name``, or ``"file"`` with the usual extension of its media type, for APIs that want a file name."""
        if self.name is not None:
            return self.name
        return "file" + _EXTENSIONS.get(self.media_type or "", "")

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, media_type: str | None = None) -> File:
        """The file at ``path``, named by its base name, its media type told from its bytes or its extension
        (``.pdf``, ``.txt``, ``.md``, ``.csv``, ``.html``, ``.json``) when not given."""
        with open(path, "rb") as f:
            data = f.read()
        name = os.path.basename(os.fspath(path))
        guessed = media_type or sniff(data) or _BY_EXTENSION.get(os.path.splitext(name)[1].lower())
        if guessed is None:
            raise UsageError(f"the media type of {os.fspath(path)!r} cannot be told; give media_type")
        return cls(data=data, media_type=guessed, name=name)

    def __repr__(self) -> str:
        return _described(self, "" if self.name is None else f", name={self.name!r}")


Media = Union[Image, File]
"""What a user turn or a tool result may attach besides text."""


def _attachments(value: Any) -> tuple[Media, ...]:
    if type(value) is tuple and not value:
        return value  # the usual result: nothing attached
    if isinstance(value, (str, bytes, Image, File)) or not isinstance(value, Iterable):
        raise UsageError(f"ToolResult.attachments must be a sequence of Image or File parts, got {value!r}")
    attached = tuple(value)
    for item in attached:
        if not isinstance(item, (Image, File)):
            raise UsageError(f"ToolResult.attachments holds Image and File parts only, got {item!r}")
    return attached


@attrs.frozen
class ToolResult:
    """The answer to one ``ToolCall``; ``is_error`` tells the model the call failed and why (in ``content``).

    ``attachments`` are the images and files the tool returned beside its text (see ``loop.tool``); ``content``
    is always the text alone.
    """

    call_id: str
    name: str
    content: str
    is_error: bool = False
    attachments: tuple[Media, ...] = attrs.field(default=(), converter=_attachments)


@attrs.frozen
class Usage:
    """Tokens a provider call consumed. Usages add up with ``+``. ``estimated``: the counts are an estimate
    (the server reported none), and so is any sum they are part of."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    estimated: bool = False

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.estimated or other.estimated,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


Part = Union[Text, Reasoning, ToolCall, ToolResult, Usage, Image, File]
PART_TYPES: tuple[type, ...] = (Text, Reasoning, ToolCall, ToolResult, Usage, Image, File)
