"""``Turn``: one message of a conversation, and its JSON form."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from loop.codec import Blobs, part_from_dict, part_to_dict
from loop._parts import PART_TYPES, Part, Role, Text, ToolCall, ToolResult, Usage
from loop.errors import UsageError

EMPTY: Mapping[str, Any] = MappingProxyType({})


class TurnKind(enum.StrEnum):
    """The kinds of turn ``loop`` itself adds (``loop.ask``): the ``"kind"`` in a turn's ``meta``, read by
    ``Turn.kind``. Kinds are open values: every package names the kinds it adds itself (``cognitive.PatternKind``
    for the patterns'), and any string in ``meta["kind"]`` is one. A member equals its plain string, which is
    what is stored, so readers compare ``turn.kind == TurnKind.VERIFICATION``.
    """

    VERIFICATION = "verification"
    """A system turn holding a report on the last answer, asking for a fixed one; ``meta["attempt"]`` counts the
    retries from 1 (``loop.ask``'s corrections, ``cognitive.WithVerification``'s reports)."""
    OUTPUT_FORMAT = "output_format"
    """A system turn asking for the answer again in the shape of the output type's schema."""


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
    def kind(self) -> str | None:
        """What the turn is for, from ``meta["kind"]`` (see ``TurnKind``): ``None`` for a turn of the conversation
        itself, or a ``meta["kind"]`` that is not a string."""
        kind = self.meta.get("kind")
        return kind if isinstance(kind, str) else None

    @property
    def text(self) -> str:
        """The turn's ``Text`` parts joined; empty when it has none (images and files are not text)."""
        parts = self.parts
        if len(parts) == 1:  # the usual turn: one part, no list to make
            part = parts[0]
            return part.text if type(part) is Text else ""
        return "".join([p.text for p in parts if type(p) is Text])  # a list: quicker than a generator

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        for part in self.parts:
            if type(part) is ToolCall:
                return tuple([p for p in self.parts if type(p) is ToolCall])
        return ()  # the usual answer, and every user or tool turn: no list to make

    @property
    def tool_results(self) -> tuple[ToolResult, ...]:
        return tuple([p for p in self.parts if type(p) is ToolResult])

    @property
    def usage(self) -> Usage | None:
        total = None
        for p in self.parts:
            if type(p) is Usage:
                total = p if total is None else total + p
        return total

    def to_dict(self, *, blobs: Blobs | None = None) -> dict[str, Any]:
        """The turn as plain JSON-ready data (see ``from_dict``); given ``blobs``, the bytes of its images and
        files are put there and named by digest (see ``loop.codec.part_to_dict``)."""
        out: dict[str, Any] = {"role": self.role.value, "parts": [part_to_dict(p, blobs=blobs) for p in self.parts]}
        if self.meta:
            out["meta"] = dict(self.meta)
        if self.name is not None:
            out["name"] = self.name
        return out

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "turn", blobs: Mapping[str, bytes] | None = None) -> Turn:
        """Rebuild a turn from ``to_dict`` output, reading bytes kept apart from ``blobs``; raises ``UsageError``
        naming the first problem found."""
        if not isinstance(data, Mapping):
            raise UsageError(f"{where}: expected an object, got {type(data).__name__}")
        written: Any = data.get("role")
        try:
            role = Role(written)
        except ValueError:
            raise UsageError(f"{where}: unknown role {written!r} (expected one of {[r.value for r in Role]})") from None
        raw_parts = data.get("parts", [])
        if not isinstance(raw_parts, list):
            raise UsageError(f"{where}: 'parts' must be a list")
        meta = data.get("meta", {})
        if not isinstance(meta, Mapping):
            raise UsageError(f"{where}: 'meta' must be an object")
        name = data.get("name")
        if name is not None and (not isinstance(name, str) or not name):
            raise UsageError(f"{where}: 'name' must be a non-empty string")
        parts = tuple(part_from_dict(p, where=f"{where}, part {i}", blobs=blobs) for i, p in enumerate(raw_parts))
        return cls(role, parts, meta, name)


# The slots of a turn, set past the frozen guard (as the constructor does).
_SET_ROLE, _SET_PARTS, _SET_META, _SET_NAME = (Turn.__dict__[field].__set__
                                               for field in ("role", "parts", "meta", "name"))


def trusted_turn(role: Role, parts: tuple[Part, ...], meta: Mapping[str, Any] = EMPTY) -> Turn:
    """A turn of parts and meta its maker built as the constructor would leave them (a ``Role``, a tuple of
    loop parts, a read-only meta, no name), made without running the constructor's checks again: the turns a
    step builds on every model call and tool call."""
    turn = object.__new__(Turn)
    _SET_ROLE(turn, role)
    _SET_PARTS(turn, parts)
    _SET_META(turn, meta)
    _SET_NAME(turn, None)
    return turn


def made_turn(role: Role | str, parts: tuple[Part, ...], meta: Mapping[str, Any] | None = None,
              name: str | None = None) -> Turn:
    """``Turn(role, parts, meta, name)`` for a ``parts`` tuple, without the constructor's conversions when there is
    nothing to convert (a ``Role``, loop parts, a read-only or no meta, no name): a turn a step submits, once per
    message a session runs."""
    if type(role) is Role and name is None and (not meta or type(meta) is MappingProxyType):
        for part in parts:
            if type(part) not in _EXACT_PARTS:
                break
        else:
            return trusted_turn(role, parts, meta or EMPTY)
    return Turn(role, parts, meta or EMPTY, name)
