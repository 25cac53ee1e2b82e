"""``Template``: prompt text whose placeholders are filled from a conversation's state, read by path.

    Template("Write about {topic} in {limit} words. The last section said: {sections#-1@text}",
             "limit=plan@word_limits#$current")

A placeholder ``{...}`` holds either an alias name, bound by the template's ``name=path`` arguments, or a path
written in place (see ``cognitive.prompts._paths`` for the path language and where root names are looked up).
``{{`` and ``}}`` are literal braces. Everything is checked when the template is built, so a typo fails where
the template is written, not at some later turn; rendering can then fail only because a path names nothing in
that state, and the error says where the path stopped resolving.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from types import MappingProxyType
from typing import Any

import attrs

from cognitive.prompts._paths import PathSyntax, Roots, StatePath, TemplateError, locate, parse
from loop import State

_Chunk = tuple[str, str | None]  # literal text, then the placeholder that follows it (None after the last)
_PLAIN_STR: Any = object.__str__  # a class whose __str__ is this one has no text of its own
_Found = tuple[str, str | None, int]  # a chunk and where its placeholder starts in the text


class Template:
    """Prompt text with ``{placeholder}`` slots filled from a ``State`` by ``render``.

    ``bindings`` are ``"name=path"`` strings: the placeholder ``{name}`` shows the value at ``path``. A bare
    ``"name"`` binds ``{name}`` to the root value of that name, which is what ``{name}`` reads anyway; it only
    declares the read. ``aliases`` is the same as a mapping (``{"name": "path"}``). Any other placeholder is
    itself a path: ``{plan@title}``, ``{turns#-1@text}``. In the text an alias also starts a path, standing for
    the path it is bound to (with ``section=plan@sections#$step``, ``{section@title}`` reads
    ``plan@sections#$step@title``), and shadows a root of the same name; paths in bindings always start from
    roots, so aliases never refer to each other.

    Raises ``TemplateError`` (a ``loop.UsageError``) when built from a malformed template, naming the problem
    and where it is: an unbalanced brace, an empty placeholder, a bad path, an alias name given twice, an alias
    no placeholder uses, or an alias name after ``#$`` (which takes a root name, and an alias is not one).

    Values are shown with ``str``, except: ``None`` shows as nothing (an absent answer or an optional field
    leaves no ``None`` in the prompt); mappings, sequences, sets, and attrs or dataclass instances without a
    ``__str__`` of their own show as one line of JSON (their nested values the same way); an enum member shows
    its value.
    """

    __slots__ = ("_text", "_aliases", "_chunks", "_fields")

    def __init__(self, text: str, *bindings: str, aliases: Mapping[str, str] | None = None) -> None:
        if not isinstance(text, str):
            raise TemplateError(f"a template's text is a str, got {type(text).__name__}: {text!r}")
        table: dict[str, StatePath] = {}
        origin: dict[str, str] = {}
        for number, binding in enumerate(bindings, 2):  # the text is argument 1
            where = f"template binding {binding!r} (argument {number})"
            name, path = _binding(binding, where)
            if name in table:
                raise TemplateError(f"{where}: the alias {name!r} is already bound, by {origin[name]}")
            table[name], origin[name] = path, where
        if aliases is not None and not isinstance(aliases, Mapping):
            raise TemplateError(f"a template's aliases are a mapping of name to path, got {type(aliases).__name__}")
        for name, path_text in (aliases or {}).items():
            where = f"template alias {name!r}"
            if name in table:
                raise TemplateError(f"{where}: the alias {name!r} is already bound, by {origin[name]}")
            if not isinstance(name, str) or not name.isidentifier():
                raise TemplateError(f"{where}: an alias name must be an identifier, so that a placeholder can name it")
            table[name], origin[name] = _path(path_text, f"{where} = {path_text!r}", 0), where
        self._text = text
        self._aliases = MappingProxyType({name: path.text for name, path in table.items()})
        chunks = _split(text)
        fields: dict[str, StatePath] = {}
        used: set[str] = set()
        for _, field, offset in chunks:
            if field is None or field in fields:
                continue
            path = _path(field, "template text", offset, text, f"in placeholder '{{{field}}}': ")
            for root in path.index_roots:
                if root in table:
                    raise TemplateError(
                        f"template text, {locate(text, offset)}: in placeholder '{{{field}}}', '#${root}' reads the "
                        f"root value {root!r}, but {root!r} is an alias in this template; '#$' takes a root name, so "
                        "store the index where a root can reach it, or name it differently", path=field)
            alias = table.get(path.root)
            if alias is not None:  # the alias stands for its path: '{section@title}' reads 'plan@sections#0@title'
                used.add(path.root)
                path = StatePath.parse(alias.text + field[len(path.root):])
            fields[field] = path
        self._chunks: tuple[_Chunk, ...] = tuple((literal, field) for literal, field, _ in chunks)
        unused = [name for name in table if name not in used]
        if unused:
            raise TemplateError(f"{origin[unused[0]]}: no placeholder in the template text uses it (as "
                                f"'{{{unused[0]}}}' or as the start of a path)")
        self._fields = fields

    @property
    def text(self) -> str:
        """The template as written."""
        return self._text

    @property
    def aliases(self) -> Mapping[str, str]:
        """Each alias name and the path it is bound to."""
        return self._aliases

    @property
    def names(self) -> tuple[str, ...]:
        """The placeholders, each once, in the order they first appear: alias names and paths written in place."""
        return tuple(self._fields)

    @property
    def paths(self) -> tuple[str, ...]:
        """The paths the template reads, each once, in the order their placeholders first appear."""
        return tuple(dict.fromkeys(path.text for path in self._fields.values()))

    @property
    def roots(self) -> tuple[str, ...]:
        """The root names the paths start from or index by (``#$name``), each once, in order.

        A name here that is not passed to ``render`` and is not a conversation name (``CONVERSATION_ROOTS``)
        is a key of ``state.meta`` the template needs; a path through ``meta`` itself (``meta@key``) names its
        key in ``paths``.
        """
        return tuple(dict.fromkeys(root for path in self._fields.values() for root in path.roots))

    def render(self, state: State, values: Mapping[str, Any] | None = None, /, **more: Any) -> str:
        """The text with every placeholder filled from ``state``.

        ``values`` and ``more`` (which wins on a name given in both) are root values for this render only;
        they come before the conversation names and ``state.meta``. Raises ``TemplateError`` naming the path
        and where it stopped resolving when a value is missing.
        """
        if not isinstance(state, State):
            raise TemplateError(f"Template.render takes a loop.State, got {type(state).__name__}")
        if values is not None and not isinstance(values, Mapping):
            raise TemplateError(f"Template.render's values are a mapping, got {type(values).__name__}")
        roots = Roots(state, {**values, **more} if values else more)
        shown = {name: show(path.resolve(roots)) for name, path in self._fields.items()}
        return "".join(literal if field is None else literal + shown[field] for literal, field in self._chunks)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Template):
            return NotImplemented
        return self._text == other._text and dict(self._aliases) == dict(other._aliases)

    def __hash__(self) -> int:
        return hash((self._text, tuple(sorted(self._aliases.items()))))

    def __repr__(self) -> str:
        bound = "".join(f", {f'{name}={path}'!r}" for name, path in self._aliases.items())
        return f"Template({self._text!r}{bound})"


def _binding(binding: Any, where: str) -> tuple[str, StatePath]:
    if not isinstance(binding, str):
        raise TemplateError(f"{where}: a binding is a str 'name=path' or a plain name, got {type(binding).__name__}")
    name, equals, path_text = binding.partition("=")
    if not equals:
        if not binding.isidentifier():
            path = _path(binding, where, 0)  # a malformed path gets its own message first
            raise TemplateError(f"{where}: a binding without '=' is a plain name and binds the placeholder of that "
                                f"name; to bind a path, give it a name: 'name={path.text}'", path=binding)
        return binding, StatePath.parse(binding)
    if not name:
        raise TemplateError(f"{where}, column 1: the alias name before '=' is missing")
    if not name.isidentifier():
        raise TemplateError(f"{where}, column 1: the alias name {name!r} must be an identifier, so that a "
                            "placeholder can name it")
    return name, _path(path_text, where, len(name) + 1)


def _path(text: Any, where: str, offset: int, source: str | None = None, lead: str = "") -> StatePath:
    """``text`` parsed as a path; a syntax error names ``where`` and the column (or line and column in ``source``)
    where it is, counting the path as starting at ``offset``."""
    if not isinstance(text, str):
        raise TemplateError(f"{where}: a path is a str, got {type(text).__name__}")
    try:
        return StatePath(text, *parse(text))
    except PathSyntax as exc:
        at = offset + exc.offset
        place = f"column {at + 1}" if source is None else locate(source, at)
        raise TemplateError(f"{where}, {place}: {lead}{exc.problem}", path=text) from None


def _split(text: str) -> list[_Found]:
    """``text`` cut into literal text and placeholders, braces unescaped; raises ``TemplateError`` where it is
    malformed."""
    chunks: list[_Found] = []
    literal: list[str] = []
    i, size = 0, len(text)
    while i < size:
        c = text[i]
        if c == "{":
            if text.startswith("{", i + 1):
                literal.append("{")
                i += 2
                continue
            close = text.find("}", i + 1)
            if close < 0:
                _fail(text, i, "'{' is never closed (write '{{' for a literal brace)")
            inner = text.find("{", i + 1, close)
            if inner >= 0:
                _fail(text, i, "this '{' opens a placeholder that holds another '{' (write '{{' and '}}' for "
                               "literal braces)")
            field = text[i + 1:close]
            if not field:
                _fail(text, i, "empty placeholder '{}': name a value or a path (positional fields are not "
                               "supported; write '{{}}' for literal braces)")
            chunks.append(("".join(literal), field, i + 1))
            literal = []
            i = close + 1
        elif c == "}":
            if not text.startswith("}", i + 1):
                _fail(text, i, "single '}' (write '}}' for a literal brace)")
            literal.append("}")
            i += 2
        else:
            stops = [at for at in (text.find("{", i), text.find("}", i)) if at >= 0]
            end = min(stops) if stops else size
            literal.append(text[i:end])
            i = end
    chunks.append(("".join(literal), None, size))
    return chunks


def _fail(text: str, offset: int, problem: str) -> None:
    raise TemplateError(f"template text, {locate(text, offset)}: {problem}")


def show(value: Any) -> str:
    """``value`` as it appears in a rendered template (see ``Template``)."""
    if value is None:
        return ""
    if isinstance(value, enum.Enum):
        return show(value.value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (int, float)):
        return str(value)
    if _structured(value):
        return json.dumps(_plain(value, set()), ensure_ascii=False, separators=(", ", ": "))
    return str(value)


def _structured(value: Any) -> bool:
    if isinstance(value, (Mapping, AbstractSet)) or (isinstance(value, Sequence) and not isinstance(value, (bytes,
                                                                                                    bytearray))):
        return True
    kind = type(value)
    return (attrs.has(kind) or dataclasses.is_dataclass(kind)) and kind.__str__ is _PLAIN_STR


def _plain(value: Any, active: set[int]) -> Any:
    """``value`` as JSON data: containers and records become lists and objects, anything else its text."""
    if value is None or isinstance(value, bool) or (isinstance(value, (int, float)) and
                                                    not isinstance(value, enum.Enum)):
        return value
    if isinstance(value, (str, enum.Enum)):
        return show(value)
    if id(value) in active:
        return "..."  # a value that contains itself
    active.add(id(value))
    try:
        if isinstance(value, Mapping):
            return {k if isinstance(k, str) else show(k): _plain(v, active) for k, v in value.items()}
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple reads better by name
            return {name: _plain(v, active) for name, v in zip(value._fields, value)}
        if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
            return [_plain(v, active) for v in value]
        if isinstance(value, AbstractSet):
            items = [_plain(v, active) for v in value]
            try:
                return sorted(items)
            except TypeError:
                return items
        kind = type(value)
        if kind.__str__ is _PLAIN_STR:
            if attrs.has(kind):
                names = [f.name for f in attrs.fields(kind)]
            elif dataclasses.is_dataclass(kind):
                names = [f.name for f in dataclasses.fields(kind)]
            else:
                names = []
            if names:
                return {n: _plain(getattr(value, n), active) for n in names if not n.startswith("_")}
        return str(value)
    finally:
        active.discard(id(value))
