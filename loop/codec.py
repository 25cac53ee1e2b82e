"""The JSON form of parts and deltas: one table of tags and fields, used by everything that writes them.

``Turn.to_dict`` writes its parts with it, the session's event wire sends parts with it, and cassettes
record deltas with it. A part is its fields after a ``"type"`` tag::

    {"type": "tool_call", "id": "c1", "name": "add", "arguments": "{\\"a\\": 1}"}

An ``Image`` or ``File`` holds its bytes as base64 in ``data`` and leaves out the fields it does not have; a
tool result leaves out ``attachments`` when it has none, so data written before they existed reads unchanged::

    {"type": "image", "data": "iVBORw0KGgo...", "media_type": "image/png"}
    {"type": "file", "url": "https://example.com/a.pdf", "media_type": "application/pdf", "name": "a.pdf"}

Given a ``blobs`` dict, ``part_to_dict`` keeps bytes out of the JSON: it puts them in ``blobs`` under
``"sha256:<hex>"`` and writes that key as ``digest`` in place of ``data``, so a store keeps each image once
however many turns show it; ``part_from_dict`` given the same blobs reads them back (and checks their digest)::

    {"type": "image", "digest": "sha256:5f2b...", "media_type": "image/png"}

A delta is its fields followed by the tag (the order cassettes have always been written in). ``choice`` is
left out when it is 0 and a usage's ``model`` when it is ``None``, so deltas written before those fields
existed read unchanged; a usage delta holds its token counts untagged::

    {"usage": {"input_tokens": 3, "output_tokens": 4, ...}, "model": "gpt-4o", "type": "usage"}

Reading checks what it reads and raises ``UsageError`` naming ``where`` and the first problem: not an object,
an unknown tag, a missing or unknown field, a field holding the wrong JSON type, bad base64, or a digest
with no blob (or with a blob whose bytes are not the ones it names).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import re
from collections.abc import Callable, Mapping, MutableMapping
from types import MappingProxyType
from typing import Any

import attrs

from loop._parts import File, Image, Part, Reasoning, Text, ToolCall, ToolResult, Usage
from loop._protocols import Delta, Finish, ReasoningDelta, TextDelta, ToolCallDelta, UsageDelta
from loop.errors import UsageError

__all__ = ["Blobs", "blob_key", "delta_from_dict", "delta_to_dict", "json_depth", "part_from_dict", "part_to_dict"]

Blobs = MutableMapping[str, bytes]
"""Where ``part_to_dict`` puts the bytes of images and files: ``blob_key(data)`` to the bytes."""

# A JSON string, through its closing quote or the end of the text: possessive, so that it never backtracks, and
# it always matches once started, so a text full of unclosed quotes is still read once (not once per quote).
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_NESTING = tuple(1 if b in b"[{" else -1 if b in b"]}" else 0 for b in range(256))


def json_depth(text: str | bytes) -> int:
    """How deeply the arrays and objects of the JSON ``text`` (UTF-8 bytes, or text) nest, 0 for a lone value;
    brackets in strings do not count. It reads the text in one pass without recursion, so it is safe to ask of
    untrusted text before ``json.loads``, which recurses once per level."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    brackets = _JSON_STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    return max(0, max(itertools.accumulate(map(_NESTING.__getitem__, brackets))))

# What a field may hold in JSON, by the name its error message gives it.
_HOLDS: dict[str, Callable[[Any], bool]] = {
    "str": lambda v: isinstance(v, str),
    "str | None": lambda v: v is None or isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, Mapping),
    "base64 str": lambda v: isinstance(v, str),  # read into bytes by _fields
    "list of parts": lambda v: isinstance(v, list),  # read into a tuple of parts by _fields
}
_NONE: Mapping[str, str] = MappingProxyType({})
_TOKENS = dict.fromkeys(("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"), "int")


@attrs.frozen
class _Form:
    """How one class is written: its tag, the fields a reader must find and those it may find."""

    cls: type
    tag: str
    what: str  # how errors name it: "tool_call part", "text delta"
    required: Mapping[str, str]  # field: what it holds in JSON (a key of _HOLDS)
    optional: Mapping[str, str] = _NONE
    omitted: Mapping[str, Any] = _NONE  # field: the value it is left out at when written
    names: tuple[str, ...] = attrs.field(init=False)  # every field, in the class's order

    @names.default
    def _names(self) -> tuple[str, ...]:
        return tuple(f.name for f in attrs.fields(self.cls))


def _part(cls: type, tag: str, required: Mapping[str, str], optional: Mapping[str, str] = _NONE,
          omitted: Mapping[str, Any] = _NONE) -> _Form:
    return _Form(cls, tag, f"{tag} part", required, optional, omitted)


def _delta(cls: type, tag: str, required: Mapping[str, str], optional: Mapping[str, str] = _NONE) -> _Form:
    return _Form(cls, tag, f"{tag} delta", required, {**optional, "choice": "int"})


_PARTS = (
    _part(Text, "text", {"text": "str"}),
    _part(Reasoning, "reasoning", {"text": "str"}, {"signature": "str | None"}),
    _part(ToolCall, "tool_call", {"id": "str", "name": "str", "arguments": "str"}),
    _part(ToolResult, "tool_result", {"call_id": "str", "name": "str", "content": "str"},
          {"is_error": "bool", "attachments": "list of parts"}, {"attachments": ()}),
    # Written only when true: usage stored before ``estimated`` existed reads the same.
    _part(Usage, "usage", {}, {**_TOKENS, "estimated": "bool"}, {"estimated": False}),
    _part(Image, "image", {}, {"url": "str | None", "data": "base64 str", "media_type": "str | None"},
          dict.fromkeys(("url", "data", "media_type"))),
    _part(File, "file", {}, {"url": "str | None", "data": "base64 str", "media_type": "str | None",
                             "name": "str | None"},
          dict.fromkeys(("url", "data", "media_type", "name"))),
)
_DELTAS = (
    _delta(TextDelta, "text", {"text": "str"}),
    _delta(ReasoningDelta, "reasoning", {}, {"text": "str", "signature": "str | None"}),
    _delta(ToolCallDelta, "tool_call", {"index": "int"},
           {"id": "str | None", "name": "str | None", "arguments_fragment": "str"}),
    _delta(UsageDelta, "usage", {"usage": "object"}, {"model": "str | None"}),
    _delta(Finish, "finish", {"reason": "str"}),
)
_PART_TAGS = {form.tag: form for form in _PARTS}
_DELTA_TAGS = {form.tag: form for form in _DELTAS}
_PART_CLASSES = {form.cls: form for form in _PARTS}
_DELTA_CLASSES = {form.cls: form for form in _DELTAS}
_USAGE = _PART_TAGS["usage"]


def _form_of(value: Any, forms: Mapping[type, _Form], what: str) -> _Form:
    form = forms.get(type(value))
    if form is None:  # a subclass is written as the class it extends
        form = next((forms[cls] for cls in type(value).__mro__ if cls in forms), None)
        if form is None:
            raise UsageError(f"{value!r} is not {what}")
    return form


def blob_key(data: bytes) -> str:
    """The key ``part_to_dict`` keeps ``data`` under in its ``blobs``: ``"sha256:"`` and the bytes' SHA-256 in hex
    (an ``Image``'s or ``File``'s ``digest``)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def part_to_dict(part: Part, *, blobs: Blobs | None = None) -> dict[str, Any]:
    """``part`` as JSON-ready data: ``{"type": tag, **fields}`` (see ``part_from_dict``).

    Bytes (an ``Image``'s or ``File``'s, a tool result's attachments') are written as base64 in ``data``; given
    ``blobs``, they are put there instead, under ``blob_key(data)``, and the key is written as ``digest``.
    Raises ``UsageError`` when ``part`` is not a part.
    """
    form = _form_of(part, _PART_CLASSES, "a part (Text, ToolCall, ...)")
    out: dict[str, Any] = {"type": form.tag}
    omitted = form.omitted
    for name in form.names:
        value = getattr(part, name)
        if omitted and name in omitted and value == omitted[name] and type(value) is type(omitted[name]):
            continue
        if type(value) is bytes:
            if blobs is None:
                out[name] = base64.b64encode(value).decode("ascii")
            else:
                out["digest"] = key = blob_key(value)
                blobs[key] = value
        elif name == "attachments":
            out[name] = [part_to_dict(p, blobs=blobs) for p in value]
        else:
            out[name] = value
    return out


def part_from_dict(data: Any, *, where: str = "part", blobs: Mapping[str, bytes] | None = None) -> Part:
    """The part ``part_to_dict`` wrote; raises ``UsageError`` starting with ``where`` when ``data`` is not one.

    A ``digest`` in place of ``data`` is read from ``blobs``, which must hold bytes with that digest.
    """
    form = _form(data, _PART_TAGS, where, "part")
    if "digest" in data and form.cls in _BLOB_HOLDERS:
        fields = _fields(form, {k: v for k, v in data.items() if k != "digest"}, where)
        if "data" in fields:
            raise UsageError(f"{where}: {form.what} has both data and digest")
        fields["data"] = _blob(data["digest"], blobs, f"{where}: {form.what}")
    else:
        fields = _fields(form, data, where, blobs=blobs)
    try:
        part: Part = form.cls(**fields)
    except UsageError as exc:  # Image and File check their fields themselves
        raise UsageError(f"{where}: {exc}") from None
    return part


_BLOB_HOLDERS = (Image, File)


def _blob(digest: Any, blobs: Mapping[str, bytes] | None, where: str) -> bytes:
    """The bytes ``digest`` names in ``blobs``, checked to be the ones it names."""
    if not isinstance(digest, str):
        raise UsageError(f"{where}: digest must be str, got {type(digest).__name__}")
    if blobs is None:
        raise UsageError(f"{where}: its bytes are kept apart under {digest!r}, and no blobs were given to read them")
    found = blobs.get(digest)
    if found is None:
        raise UsageError(f"{where}: no blob holds {digest!r}")
    if not isinstance(found, bytes) or blob_key(found) != digest:
        raise UsageError(f"{where}: the blob kept under {digest!r} does not hold the bytes it names")
    return found


def delta_to_dict(delta: Delta) -> dict[str, Any]:
    """``delta`` as JSON-ready data: its fields and then ``"type"``, without a ``choice`` of 0 or a usage's
    ``model`` of ``None`` (see ``delta_from_dict``). Raises ``UsageError`` when ``delta`` is not a delta."""
    form = _form_of(delta, _DELTA_CLASSES, "a delta (TextDelta, ToolCallDelta, ...)")
    out = {name: getattr(delta, name) for name in form.names}
    if not out["choice"]:
        del out["choice"]
    if form.cls is UsageDelta:
        out["usage"] = usage = attrs.asdict(out["usage"])
        if not usage["estimated"]:
            del usage["estimated"]
        if out["model"] is None:
            del out["model"]
    out["type"] = form.tag
    return out


def delta_from_dict(data: Any, *, where: str = "delta") -> Delta:
    """The delta ``delta_to_dict`` wrote; raises ``UsageError`` starting with ``where`` when ``data`` is not one."""
    form = _form(data, _DELTA_TAGS, where, "delta")
    fields = _fields(form, data, where)
    if fields.get("choice", 0) < 0:
        raise UsageError(f"{where}: {form.tag}.choice must not be negative, got {fields['choice']}")
    if form.cls is UsageDelta:
        fields["usage"] = Usage(**_fields(_USAGE, fields["usage"], f"{where}, usage", tagged=False))
    delta: Delta = form.cls(**fields)
    return delta


def _form(data: Any, forms: Mapping[str, _Form], where: str, what: str) -> _Form:
    if not isinstance(data, Mapping):
        raise UsageError(f"{where}: expected an object, got {type(data).__name__}")
    tag = data.get("type")
    form = forms.get(tag) if isinstance(tag, str) else None
    if form is None:
        raise UsageError(f"{where}: unknown {what} type {tag!r} (expected one of {sorted(forms)})")
    return form


def _fields(form: _Form, data: Mapping[str, Any], where: str, *, tagged: bool = True,
            blobs: Mapping[str, bytes] | None = None) -> dict[str, Any]:
    """The fields of ``data`` that ``form`` names, each checked and read (base64 into bytes, parts into a tuple
    of parts, bytes kept apart from ``blobs``); ``tagged``: ``data`` has a ``"type"`` too."""
    missing = [name for name in form.required if name not in data]
    if missing:
        raise UsageError(f"{where}: {form.what} is missing {', '.join(missing)}")
    known = {**form.required, **form.optional}
    unknown = set(data) - set(known) - ({"type"} if tagged else set())
    if unknown:
        raise UsageError(f"{where}: {form.what} has unknown fields {sorted(unknown)}")
    out = {}
    for name, holds in known.items():
        if name in data:
            value = data[name]
            if not _HOLDS[holds](value):
                raise UsageError(f"{where}: {form.tag}.{name} must be {holds}, got {type(value).__name__}")
            if holds == "base64 str":
                value = _bytes(value, f"{where}: {form.tag}.{name}")
            elif holds == "list of parts":
                value = tuple(part_from_dict(p, where=f"{where}, {name} {i}", blobs=blobs) for i, p in enumerate(value))
            out[name] = value
    return out


def _bytes(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise UsageError(f"{where} is not valid base64") from None
