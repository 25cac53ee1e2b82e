"""JSON schemas from Python type hints and docstrings, for ``@tool``; and values between JSON and those hints."""

from __future__ import annotations

import enum
import inspect
import re
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

from loop.errors import UsageError

_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}


def type_schema(hint: Any, where: str) -> dict[str, Any]:
    """The JSON schema of one type hint; raises ``UsageError`` naming ``where`` for a type it cannot express."""
    if hint is Any:
        return {}
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    origin = get_origin(hint)
    args = get_args(hint)
    if origin is Annotated:
        schema = type_schema(args[0], where)
        notes = [a for a in args[1:] if isinstance(a, str)]
        if notes:
            schema["description"] = " ".join(notes)
        return schema
    if origin is Literal:
        kinds = {type(a) for a in args}
        schema = {"enum": list(args)}
        if len(kinds) == 1 and next(iter(kinds)) in _SCALARS:
            schema.update(_SCALARS[next(iter(kinds))])
        return schema
    if origin in (Union, types.UnionType):
        return {"anyOf": [type_schema(a, where) for a in args]}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    if origin in (list, tuple, set, frozenset, Sequence) or hint in (list, tuple, set, frozenset):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return {"type": "array", "prefixItems": [type_schema(a, where) for a in args], "minItems": len(args),
                    "maxItems": len(args)}
        item = args[0] if args else Any
        schema = {"type": "array", "items": type_schema(item, where)}
        if origin in (set, frozenset) or hint in (set, frozenset):
            schema["uniqueItems"] = True  # the function receives a set, so a repeated value would be lost
        return schema
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        if args and args[0] is not str:
            raise UsageError(f"{where}: dictionary keys must be str for JSON, got {args[0]!r}")
        value = args[1] if len(args) == 2 else Any
        return {"type": "object", "additionalProperties": type_schema(value, where)}
    raise UsageError(
        f"{where}: cannot describe type {hint!r} in JSON schema "
        "(use str, int, float, bool, list, tuple, set, dict, Literal, an Enum, Optional or Annotated)"
    )


_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Params)\s*:\s*$")
_OTHER_SECTION = re.compile(r"^\s*(Returns?|Raises|Yields|Examples?|Notes?)\s*:\s*$")
_ARG_LINE = re.compile(r"^\s*\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX = re.compile(r"^\s*:param\s+(?:\w+\s+)?(\w+)\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google- or Sphinx-style docstring into the summary and a description per parameter."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    current: str | None = None
    mode = "summary"
    for line in lines:
        if _SECTION.match(line):
            mode, current = "args", None
            continue
        if _OTHER_SECTION.match(line):
            mode, current = "skip", None
            continue
        sphinx = _SPHINX.match(line)
        if sphinx:
            current = sphinx.group(1)
            params[current] = sphinx.group(2).strip()
            mode = "sphinx"
            continue
        if mode == "summary":
            summary.append(line)
        elif mode == "args":
            arg = _ARG_LINE.match(line)
            if arg and not line.startswith((" " * 8, "\t\t")):
                current = arg.group(1)
                params[current] = arg.group(2).strip()
            elif current and line.strip():
                params[current] = f"{params[current]} {line.strip()}".strip()
        elif mode == "sphinx" and current and line.strip() and not line.lstrip().startswith(":"):
            params[current] = f"{params[current]} {line.strip()}"
    return "\n".join(summary).strip(), params


def function_schema(fn: Callable[..., Any], name: str) -> tuple[str, dict[str, Any]]:
    """The description and parameter schema of ``fn``, from its signature, hints and docstring."""
    try:
        hints = get_type_hints(fn, include_extras=True)
    except Exception as exc:  # unresolved forward references and the like
        raise UsageError(f"tool {name!r}: cannot read its type hints: {exc}") from exc
    description, docs = parse_docstring(inspect.getdoc(fn))
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        where = f"tool {name!r}, parameter {param.name!r}"
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise UsageError(f"{where}: *args and **kwargs cannot be described to a model; name each parameter")
        if param.kind is param.POSITIONAL_ONLY:
            raise UsageError(f"{where}: positional-only parameters cannot be passed by name from JSON")
        if param.name not in hints:
            raise UsageError(f"{where}: has no type annotation (the model needs one to call it)")
        schema = type_schema(hints[param.name], where)
        if param.name in docs and "description" not in schema:
            schema["description"] = docs[param.name]
        if param.default is param.empty:
            required.append(param.name)
        elif _jsonable(param.default):
            schema["default"] = param.default.value if isinstance(param.default, enum.Enum) else param.default
        properties[param.name] = schema
    schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return description, schema


def _jsonable(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool, enum.Enum))


def conversions(fn: Callable[..., Any]) -> dict[str, Callable[[Any], Any]]:
    """For each parameter whose type JSON cannot carry (an enum, a set), how to make it from its JSON value."""
    try:
        hints = get_type_hints(fn)
    except Exception:
        return {}
    found: dict[str, Callable[[Any], Any]] = {}
    for key, hint in hints.items():
        if get_origin(hint) in (Union, types.UnionType):  # Optional[Unit] is converted too
            members = [a for a in get_args(hint) if a is not type(None)]
            hint = members[0] if len(members) == 1 else None
        convert = _conversion(hint)
        if convert is not None:
            found[key] = convert
    return found


def _conversion(hint: Any) -> Callable[[Any], Any] | None:
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        enum_type = hint
        return lambda value: value if isinstance(value, enum_type) else enum_type(value)
    kind = get_origin(hint) or hint
    if kind not in (set, frozenset):
        return None
    args = get_args(hint)
    item = args[0] if args else Any
    # A set's items must be hashable: JSON arrays inside become tuples, as a tuple hint says they are.
    convert_item = tuple if (get_origin(item) or item) is tuple else _conversion(item)
    if convert_item is None:
        return lambda value: value if type(value) is kind else kind(value)
    return lambda value: kind(convert_item(x) for x in value)


def json_value(value: Any) -> Any:
    """A Python value as the JSON value it stands for, for checking a direct call against the schema."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_value(v) for v in value]
    if isinstance(value, Mapping):
        return {k: json_value(v) for k, v in value.items()}
    return value
