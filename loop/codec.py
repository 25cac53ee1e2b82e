"""The JSON form of parts and deltas: one table of tags and fields, used by everything that writes them.

``Turn.to_dict`` writes its parts with it, the session's event wire sends parts with it, and cassettes
record deltas with it. A part is its fields after a ``"type"`` tag::

    {"type": "tool_call", "id": "c1", "name": "add", "arguments": "{\\"a\\": 1}"}

A delta is its fields followed by the tag (the order cassettes have always been written in). ``choice`` is
left out when it is 0 and a usage's ``model`` when it is ``None``, so deltas written before those fields
existed read unchanged; a usage delta holds its token counts untagged::

    {"usage": {"input_tokens": 3, "output_tokens": 4, ...}, "model": "gpt-4o", "type": "usage"}

Reading checks what it reads and raises ``UsageError`` naming ``where`` and the first problem: not an object,
an unknown tag, a missing or unknown field, or a field holding the wrong JSON type.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from loop._parts import Part, Reasoning, Text, ToolCall, ToolResult, Usage
from loop._protocols import Delta, Finish, ReasoningDelta, TextDelta, ToolCallDelta, UsageDelta
from loop.errors import UsageError

__all__ = ["delta_from_dict", "delta_to_dict", "json_depth", "part_from_dict", "part_to_dict"]

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
    names: tuple[str, ...] = attrs.field(init=False)  # every field, in the class's order

    @names.default
    def _names(self) -> tuple[str, ...]:
        return tuple(f.name for f in attrs.fields(self.cls))


def _part(cls: type, tag: str, required: Mapping[str, str], optional: Mapping[str, str] = _NONE) -> _Form:
    return _Form(cls, tag, f"{tag} part", required, optional)


def _delta(cls: type, tag: str, required: Mapping[str, str], optional: Mapping[str, str] = _NONE) -> _Form:
    return _Form(cls, tag, f"{tag} delta", required, {**optional, "choice": "int"})


_PARTS = (
    _part(Text, "text", {"text": "str"}),
    _part(Reasoning, "reasoning", {"text": "str"}, {"signature": "str | None"}),
    _part(ToolCall, "tool_call", {"id": "str", "name": "str", "arguments": "str"}),
    _part(ToolResult, "tool_result", {"call_id": "str", "name": "str", "content": "str"}, {"is_error": "bool"}),
    _part(Usage, "usage", {}, {**_TOKENS, "estimated": "bool"}),
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


def part_to_dict(part: Part) -> dict[str, Any]:
    """``part`` as JSON-ready data: ``{"type": tag, **fields}`` (see ``part_from_dict``).

    Raises ``UsageError`` when ``part`` is not a part.
    """
    form = _form_of(part, _PART_CLASSES, "a part (Text, ToolCall, ...)")
    out: dict[str, Any] = {"type": form.tag}
    for name in form.names:
        out[name] = getattr(part, name)
    if out.get("estimated") is False:
        del out["estimated"]  # written only when true: usage stored before it existed reads the same
    return out


def part_from_dict(data: Any, *, where: str = "part") -> Part:
    """The part ``part_to_dict`` wrote; raises ``UsageError`` starting with ``where`` when ``data`` is not one."""
    form = _form(data, _PART_TAGS, where, "part")
    part: Part = form.cls(**_fields(form, data, where))
    return part


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


def _fields(form: _Form, data: Mapping[str, Any], where: str, *, tagged: bool = True) -> dict[str, Any]:
    """The fields of ``data`` that ``form`` names, each checked; ``tagged``: ``data`` has a ``"type"`` too."""
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
            out[name] = value
    return out
