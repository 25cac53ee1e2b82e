"""``Turn``: one message of a conversation, and its JSON form."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from loop._parts import PART_TYPES, Part, Reasoning, Role, Text, ToolCall, ToolResult, Usage
from loop.errors import UsageError

EMPTY: Mapping[str, Any] = MappingProxyType({})


def _freeze_meta(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if not value:
        return EMPTY
    if isinstance(value, MappingProxyType):
        return value
    if not isinstance(value, Mapping):
        raise UsageError(f"a turn's meta must be a mapping, got {type(value).__name__}")
    return MappingProxyType(dict(value))


def _role(value: Any) -> Role:
    if type(value) is Role:
        return value  # the usual case, without the Enum lookup
    try:
        return Role(value)
    except ValueError:
        raise UsageError(f"unknown role {value!r} (expected one of {[r.value for r in Role]})") from None


_EXACT_PARTS = frozenset(PART_TYPES)
_NOT_PARTS = (str, *PART_TYPES)  # iterable or not, none of these is a sequence of parts


def _parts(value: Any) -> tuple[Part, ...]:
    if type(value) is tuple:
        parts = value  # the usual case: no copy
    elif isinstance(value, _NOT_PARTS) or not isinstance(value, Iterable):
        raise UsageError(f"a turn's parts must be a sequence of loop parts, got {value!r}")
    else:
        parts = tuple(value)
    for part in parts:
        if type(part) not in _EXACT_PARTS and not isinstance(part, PART_TYPES):
            raise UsageError(f"a turn's parts must be loop parts (Text, ToolCall, ...), got {part!r}")
    return parts


def _check_name(_: Any, __: Any, value: Any) -> None:
    # One identity test in the usual case (no name): turns are made per step and per state append.
    if value is not None and (type(value) is not str or not value):
        raise UsageError(f"a turn's name must be a non-empty string or None, got {value!r}")


@attrs.frozen
class Turn:
    """One message: who spoke (``role``), what was said (``parts``), and free-form ``meta``.

    ``name`` optionally says which speaker of that role spoke, for conversations with several agents or
    users; providers send it where their API has a place for it. Unlike ``meta`` it is part of what was said:
    it takes part in equality and is sent to the model.
    """

    role: Role = attrs.field(converter=_role)
    parts: tuple[Part, ...] = attrs.field(default=(), converter=_parts)
    meta: Mapping[str, Any] = attrs.field(default=EMPTY, converter=_freeze_meta, eq=False, hash=False)
    name: str | None = attrs.field(default=None, validator=_check_name)

    @property
    def text(self) -> str:
        """The turn's ``Text`` parts joined; empty when it has none."""
        return "".join(p.text for p in self.parts if type(p) is Text)

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(p for p in self.parts if type(p) is ToolCall)

    @property
    def tool_results(self) -> tuple[ToolResult, ...]:
        return tuple(p for p in self.parts if type(p) is ToolResult)

    @property
    def usage(self) -> Usage | None:
        total = None
        for p in self.parts:
            if type(p) is Usage:
                total = p if total is None else total + p
        return total

    def to_dict(self) -> dict[str, Any]:
        """The turn as plain JSON-ready data (see ``from_dict``)."""
        out: dict[str, Any] = {"role": self.role.value, "parts": [_part_to_dict(p) for p in self.parts]}
        if self.meta:
            out["meta"] = dict(self.meta)
        if self.name is not None:
            out["name"] = self.name
        return out

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "turn") -> Turn:
        """Rebuild a turn from ``to_dict`` output; raises ``UsageError`` naming the first problem found."""
        if not isinstance(data, Mapping):
            raise UsageError(f"{where}: expected an object, got {type(data).__name__}")
        role = data.get("role")
        try:
            role = Role(role)
        except ValueError:
            raise UsageError(f"{where}: unknown role {role!r} (expected one of {[r.value for r in Role]})") from None
        raw_parts = data.get("parts", [])
        if not isinstance(raw_parts, list):
            raise UsageError(f"{where}: 'parts' must be a list")
        meta = data.get("meta", {})
        if not isinstance(meta, Mapping):
            raise UsageError(f"{where}: 'meta' must be an object")
        name = data.get("name")
        if name is not None and (not isinstance(name, str) or not name):
            raise UsageError(f"{where}: 'name' must be a non-empty string")
        parts = tuple(_part_from_dict(p, f"{where}, part {i}") for i, p in enumerate(raw_parts))
        return cls(role, parts, meta, name)


_FIELDS: dict[str, tuple[type, tuple[str, ...], tuple[str, ...]]] = {
    # type tag: (class, required fields, optional fields)
    "text": (Text, ("text",), ()),
    "reasoning": (Reasoning, ("text",), ("signature",)),
    "tool_call": (ToolCall, ("id", "name", "arguments"), ()),
    "tool_result": (ToolResult, ("call_id", "name", "content"), ("is_error",)),
    "usage": (Usage, (), ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")),
}
_TAGS = {cls: tag for tag, (cls, _, _) in _FIELDS.items()}


def _part_to_dict(part: Part) -> dict[str, Any]:
    out = {"type": _TAGS[type(part)]}
    out.update(attrs.asdict(part, recurse=False))
    return out


def _part_from_dict(data: Any, where: str) -> Part:
    if not isinstance(data, Mapping):
        raise UsageError(f"{where}: expected an object, got {type(data).__name__}")
    tag = data.get("type")
    if tag not in _FIELDS:
        raise UsageError(f"{where}: unknown part type {tag!r} (expected one of {sorted(_FIELDS)})")
    cls, required, optional = _FIELDS[tag]
    missing = [name for name in required if name not in data]
    if missing:
        raise UsageError(f"{where}: {tag} part is missing {', '.join(missing)}")
    unknown = set(data) - set(required) - set(optional) - {"type"}
    if unknown:
        raise UsageError(f"{where}: {tag} part has unknown fields {sorted(unknown)}")
    kwargs = {k: data[k] for k in (*required, *optional) if k in data}
    for name in attrs.fields(cls):
        if name.name in kwargs and name.type in ("str", "int", "bool", "str | None"):
            _check_type(kwargs[name.name], name.type, f"{where}: {tag}.{name.name}")
    return cls(**kwargs)


def _check_type(value: Any, declared: str, where: str) -> None:
    ok = {
        "str": isinstance(value, str),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "str | None": value is None or isinstance(value, str),
    }[declared]
    if not ok:
        raise UsageError(f"{where} must be {declared}, got {type(value).__name__}")
