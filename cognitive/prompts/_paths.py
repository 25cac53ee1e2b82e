"""State paths: a small language for reading one value out of a conversation, as ``plan@steps#-1@title``.

A path is a root name followed by any number of segments:

    plan                 the root value named ``plan``
    plan@title           key ``title`` of it when it is a mapping holding that key, else its attribute ``title``
    plan@steps#0         item 0 of a sequence (``#-1`` is the last item); on a mapping, the key ``0``
    sections#$current    the item (or mapping key) whose index is the root value named ``current``

Roots, in the order they are looked up (the first that has the name wins):

1. values passed for this one read (``read(state, values, **more)``, ``Template.render``): the caller chose them,
   so they override everything, e.g. a stage handing the previous stage's output in as ``input``;
2. the conversation's names, a fixed set (``CONVERSATION_ROOTS``): ``input`` (the text of the latest user turn),
   ``answer`` (``state.answer``), ``turns`` (``state.turns``), ``outcome`` (``state.outcome``) and ``meta``
   (``state.meta`` itself). They come before meta so that what ``{input}`` means never depends on what some
   earlier stage stored; a meta key with one of these names is read as ``meta@input``;
3. the keys of ``state.meta``, where earlier stages keep their outputs.

The conversation names are always present but may be ``None`` (no user turn yet, no answer yet, no outcome).
A root name starts with a letter or ``_`` and holds letters, digits, ``_`` and ``-``; a key after ``@`` may also
start with a digit. Attributes whose name starts with ``_`` and methods are never read: a path reads data.
"""

from __future__ import annotations

import inspect
import reprlib
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from loop import Role, State, UsageError

CONVERSATION_ROOTS = frozenset({"input", "answer", "turns", "outcome", "meta"})
_DIGITS = frozenset("0123456789")
_HINTS = {
    ".": "'.' is not part of the path language; read a key or attribute with '@' (as in 'plan@title')",
    "[": "index with '#' (as in 'steps#0'), not with brackets",
    "]": "index with '#' (as in 'steps#0'), not with brackets",
    "$": "'$' only follows '#' (as in 'sections#$current')",
    "=": "'=' names an alias, which is given as a Template argument ('name=path'), not inside a path",
    ":": "format specs (':') are not supported; give the value already formatted",
    "!": "conversions ('!r', '!s') are not supported",
}


class TemplateError(UsageError):
    """Raised when a template or path is malformed (when it is built) or a path cannot be read (when rendered).

    ``path`` is the path that could not be read or parsed, when there is one.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class PathSyntax(Exception):
    """A path could not be parsed: ``offset`` is where in the path text, ``problem`` says what is wrong.

    Internal: ``StatePath.parse`` and ``Template`` turn it into a ``TemplateError`` naming where the path came from.
    """

    def __init__(self, offset: int, problem: str) -> None:
        super().__init__(problem)
        self.offset = offset
        self.problem = problem


@attrs.frozen
class _Key:
    name: str


@attrs.frozen
class _Index:
    index: int


@attrs.frozen
class _IndexBy:
    root: str


_Segment = _Key | _Index | _IndexBy


def _is_name_char(c: str) -> bool:
    return c.isalnum() or c in "_-"


def _name_end(text: str, start: int) -> int:
    end = start
    while end < len(text) and _is_name_char(text[end]):
        end += 1
    return end


def _unexpected(c: str) -> str:
    if c.isspace():
        return "a path holds no spaces"
    return _HINTS.get(c, f"unexpected character {c!r}")


def _root_name(text: str, start: int, what: str) -> int:
    """The end of the root name starting at ``start``; raises ``PathSyntax`` when there is none."""
    end = _name_end(text, start)
    if end == start:
        if start == len(text) or text[start] in "@#":
            raise PathSyntax(start, f"{what} is missing")
        raise PathSyntax(start, _unexpected(text[start]))
    if text[start] in _DIGITS or text[start] == "-":
        raise PathSyntax(start, f"{what} must start with a letter or '_', got {text[start:end]!r}")
    return end


def parse(text: str) -> tuple[str, tuple[_Segment, ...], tuple[int, ...]]:
    """The root, the segments and where each part ends (root first) of ``text``; raises ``PathSyntax``."""
    if not text:
        raise PathSyntax(0, "the path is empty")
    end = _root_name(text, 0, "the path's root name")
    root = text[:end]
    segments: list[_Segment] = []
    ends = [end]
    i = end
    while i < len(text):
        c = text[i]
        if c == "@":
            end = _name_end(text, i + 1)
            if end == i + 1:
                if end == len(text) or text[end] in "@#":
                    raise PathSyntax(i, "empty segment: '@' must be followed by a key or attribute name")
                raise PathSyntax(end, _unexpected(text[end]))
            segments.append(_Key(text[i + 1:end]))
        elif c == "#":
            start = i + 1
            if start < len(text) and text[start] == "$":
                end = _root_name(text, start + 1, "the name after '#$'")
                segments.append(_IndexBy(text[start + 1:end]))
            else:
                digits = start + (start < len(text) and text[start] == "-")
                end = digits
                while end < len(text) and text[end] in _DIGITS:
                    end += 1
                if end == digits or (end < len(text) and _is_name_char(text[end])):
                    token = text[start:_name_end(text, digits)] or text[start:start + 1]
                    if not token or token in "@#":
                        raise PathSyntax(i, "empty segment: '#' must be followed by an integer or '$name'")
                    raise PathSyntax(start, f"'#' must be followed by an integer or '$name', got {token!r}")
                segments.append(_Index(int(text[start:end])))
        else:
            raise PathSyntax(i, _unexpected(c))
        ends.append(end)
        i = end
    return root, tuple(segments), tuple(ends)


def locate(text: str, offset: int) -> str:
    """``line L, column C`` (both from 1) of ``offset`` in ``text``."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"line {line}, column {column}"


class Roots:
    """The root values of one read: given values, then the conversation names, then ``state.meta``."""

    __slots__ = ("state", "values")

    def __init__(self, state: State, values: Mapping[str, Any]) -> None:
        if not isinstance(state, State):
            raise TemplateError(f"paths are read from a loop.State, got {type(state).__name__}")
        self.state = state
        self.values = values

    def has(self, name: str) -> bool:
        return name in self.values or name in CONVERSATION_ROOTS or name in self.state.meta

    def get(self, name: str) -> Any:
        """The root value ``name``; call ``has`` first (a name it does not hold raises ``KeyError``)."""
        if name in self.values:
            return self.values[name]
        state = self.state
        if name == "input":
            return next((t.text for t in state.reversed() if t.role is Role.USER), None)
        if name == "answer":
            return state.answer
        if name == "turns":
            return state.turns
        if name == "outcome":
            return state.outcome
        if name == "meta":
            return state.meta
        return state.meta[name]

    def missing(self, name: str) -> str:
        given = f"values given: {_names(self.values)}; " if self.values else ""
        return (f"no value named {name!r} ({given}keys of state.meta: {_names(self.state.meta)}; "
                f"conversation names: {', '.join(sorted(CONVERSATION_ROOTS))})")


def _names(mapping: Mapping[Any, Any], limit: int = 12) -> str:
    keys = [repr(k) for k in mapping]
    if not keys:
        return "none"
    return ", ".join(keys[:limit]) + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def _is_sequence(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))


def _kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if _is_sequence(value):
        return "a sequence"
    return f"a {type(value).__name__}"


def _key(value: Any, name: str, where: str) -> Any:
    if value is None:
        raise LookupError(f"{where!r} is None, so it has no key or attribute {name!r}")
    if isinstance(value, Mapping):
        try:
            if name in value:
                return value[name]
        except TypeError:  # a mapping whose keys cannot be compared with a str
            pass
    if not name.startswith("_"):
        try:
            found = getattr(value, name)
        except AttributeError:
            pass
        except Exception as exc:  # a property that failed: say which read it was
            raise TemplateError(f"reading {name!r} of {where!r} raised {type(exc).__name__}: {exc}") from exc
        else:
            if not inspect.isroutine(found):
                return found
    if isinstance(value, Mapping):
        hint = f" (it is a mapping with keys {_names(value)})"
    elif _is_sequence(value):
        hint = f" (it is a sequence of {len(value)} items; index it with '#', as in '{where}#0')"
    elif name.startswith("_"):
        hint = f" ({_kind(value)}; attributes starting with '_' are not read)"
    else:
        hint = f" ({_kind(value)})"
    raise LookupError(f"{where!r} has no key or attribute {name!r}{hint}")


def _index(value: Any, index: Any, where: str, shown: str) -> Any:
    if value is None:
        raise LookupError(f"{where!r} is None, so it cannot be indexed")
    if isinstance(value, Mapping):
        try:
            if index in value:
                return value[index]
        except TypeError:  # a mapping whose keys cannot be compared with the index
            pass
        raise LookupError(f"{where!r} has no key {index!r} (it is a mapping with keys {_names(value)})")
    if _is_sequence(value):
        if not isinstance(index, int) or isinstance(index, bool):
            raise LookupError(f"{where!r} is a sequence, so its index must be an int; {shown} is a "
                              f"{type(index).__name__}")
        size = len(value)
        if -size <= index < size:
            return value[index]
        items = "1 item" if size == 1 else f"{size} items"
        raise LookupError(f"{where!r} has {items}, {shown} is out of range")
    raise LookupError(f"{where!r} is {_kind(value)}, which '#' cannot index (it indexes sequences and mappings)")


class StatePath:
    """One parsed path (see the module docstring for the language); ``StatePath.parse(text)`` checks it.

    ``read(state, values, **more)`` returns the value it names; ``root`` is the root name and ``roots`` every
    root name it reads (its root and the names after ``#$``), which for a pipeline stage says which keys of
    ``state.meta`` it depends on.
    """

    __slots__ = ("text", "root", "_segments", "_ends")

    def __init__(self, text: str, root: str, segments: tuple[_Segment, ...], ends: tuple[int, ...]) -> None:
        self.text = text
        self.root = root
        self._segments = segments
        self._ends = ends

    @classmethod
    def parse(cls, text: str) -> StatePath:
        """The path ``text``; raises ``TemplateError`` naming the problem and its column."""
        if not isinstance(text, str):
            raise TemplateError(f"a path is a str, got {type(text).__name__}: {text!r}")
        try:
            return cls(text, *parse(text))
        except PathSyntax as exc:
            raise TemplateError(f"path {text!r}, column {exc.offset + 1}: {exc.problem}", path=text) from None

    @property
    def index_roots(self) -> tuple[str, ...]:
        """The root names after ``#$``, each once, in order."""
        return tuple(dict.fromkeys(s.root for s in self._segments if isinstance(s, _IndexBy)))

    @property
    def roots(self) -> tuple[str, ...]:
        """Every root name the path reads: ``root``, then ``index_roots``, each once."""
        return tuple(dict.fromkeys((self.root, *self.index_roots)))

    def read(self, state: State, values: Mapping[str, Any] | None = None, /, **more: Any) -> Any:
        """The value this path names in ``state`` (roots: ``values`` and ``more``, the conversation names,
        ``state.meta``); raises ``TemplateError`` naming where the path stopped resolving."""
        return self.resolve(Roots(state, {**(values or {}), **more}))

    def resolve(self, roots: Roots) -> Any:
        """``read`` over roots already gathered (a template reads all its paths over one ``Roots``)."""
        text = self.text
        try:
            value = self._root(roots, self.root, "")
            for segment, start in zip(self._segments, self._ends):
                where = text[:start]
                if isinstance(segment, _Key):
                    value = _key(value, segment.name, where)
                elif isinstance(segment, _Index):
                    value = _index(value, segment.index, where, f"index {segment.index}")
                else:
                    name = segment.root
                    index = self._root(roots, name, f" (for '#${name}')")
                    if not isinstance(index, (int, str)) or isinstance(index, bool):
                        raise LookupError(f"'#${name}' indexes with {name!r}, which must be an int or a str; "
                                          f"it is {_kind(index)}: {reprlib.repr(index)}")
                    value = _index(value, index, where, f"index {index!r} (the value of {name!r})")
        except LookupError as exc:
            raise TemplateError(f"template path {text!r}: {exc.args[0]}", path=text) from None
        except TemplateError as exc:
            raise TemplateError(f"template path {text!r}: {exc}", path=text) from exc.__cause__
        return value

    @staticmethod
    def _root(roots: Roots, name: str, context: str) -> Any:
        if not roots.has(name):
            raise LookupError(roots.missing(name) + context)
        return roots.get(name)

    def __eq__(self, other: object) -> bool:
        return self.text == other.text if isinstance(other, StatePath) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"StatePath({self.text!r})"
