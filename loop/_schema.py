"""JSON schemas from Python type hints and docstrings, for ``@tool`` and typed answers; and values between JSON
and those hints. Record classes (attrs classes, dataclasses, TypedDicts, pydantic models) are described inline as
closed objects, with no ``$ref``, which every model API takes.
"""

from __future__ import annotations

import enum
import functools
import inspect
import re
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

import jsonschema

from loop._context import is_run_context
from loop._records import pydantic_schema, record_fields, record_json, record_kind, refusal
from loop.errors import UsageError

_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}
_SEQUENCES = (list, tuple, set, frozenset, Sequence)


def type_schema(hint: Any, where: str, outer: frozenset[type] = frozenset()) -> dict[str, Any]:
    """The JSON schema of one type hint; raises ``UsageError`` naming ``where`` for a type it cannot express.

    Record classes are inlined wherever they sit in the hint. ``outer`` holds the records being described
    around this hint, so that a record that contains itself is refused rather than inlined without end.
    """
    if hint is Any:
        return {}
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    kind = record_kind(hint)
    if kind == "pydantic":
        return pydantic_schema(hint, where)
    if kind:
        return record_schema(hint, where, outer)
    origin = get_origin(hint)
    args = get_args(hint)
    if origin is Annotated:
        schema = type_schema(args[0], where, outer)
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
        return {"anyOf": [type_schema(a, where, outer) for a in args]}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    if origin in _SEQUENCES or hint in (list, tuple, set, frozenset):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return {"type": "array", "prefixItems": [type_schema(a, where, outer) for a in args],
                    "minItems": len(args), "maxItems": len(args)}
        item = args[0] if args else Any
        schema = {"type": "array", "items": type_schema(item, where, outer)}
        if origin in (set, frozenset) or hint in (set, frozenset):
            schema["uniqueItems"] = True  # the function receives a set, so a repeated value would be lost
        return schema
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        if args and args[0] is not str:
            raise UsageError(f"{where}: dictionary keys must be str for JSON, got {args[0]!r}")
        value = args[1] if len(args) == 2 else Any
        return {"type": "object", "additionalProperties": type_schema(value, where, outer)}
    raise UsageError(
        f"{where}: cannot describe type {hint!r} in JSON schema (use str, int, float, bool, list, tuple, set, "
        "dict, Literal, an Enum, Optional, Annotated, an attrs class, a dataclass, a TypedDict or a pydantic model)"
    )


def record_schema(cls: type, where: str, outer: frozenset[type] = frozenset()) -> dict[str, Any]:
    """The closed object schema of an attrs class, dataclass or TypedDict (``where`` names it in errors): every
    field a property, those without defaults ``required``, the docstring's summary and field notes as
    descriptions."""
    if cls in outer:
        raise UsageError(f"{where}: {cls.__name__} refers to itself; a recursive type cannot be inlined")
    doc = cls.__dict__.get("__doc__") or ""
    if doc.startswith(cls.__name__ + "("):  # dataclasses write their signature as the docstring
        doc = ""
    summary, notes = parse_docstring(doc)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for key, hint, needed in record_fields(cls, where):
        properties[key] = _noted(type_schema(hint, f"{where}, field {key!r}", outer | {cls}), hint, notes.get(key))
        if needed:
            required.append(key)
    schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return {"description": summary, **schema} if summary else schema


def _noted(schema: dict[str, Any], hint: Any, note: str | None) -> dict[str, Any]:
    """``schema`` described by a docstring's ``note`` on its parameter or field, unless the hint carries its own
    (``Annotated[T, "note"]``); the note wins over a record class's own summary, which says less about this use."""
    if note is None or (get_origin(hint) is Annotated and any(isinstance(a, str) for a in get_args(hint)[1:])):
        return schema
    schema["description"] = note
    return schema


_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters|Attributes)\s*:\s*$")
# The other sections of Google-style docstrings (as Sphinx's napoleon reads them): their lines are no parameters.
_OTHER_SECTION = re.compile(r"^\s*(Returns?|Raises?|Yields?|Examples?|Notes?|Warnings?|Warns|See Also|Todo|"
                            r"References|Methods|Attention|Caution|Danger|Error|Hint|Important|Tip)\s*:\s*$")
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
    header = entry = 0  # how deep the Args: header and its entries are indented
    for line in lines:
        indent = len(line) - len(line.lstrip())  # cleandoc has turned tabs into spaces
        if _SECTION.match(line):
            mode, current, header, entry = "args", None, indent, -1
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
        elif mode == "args" and line.strip():
            if indent <= header:  # back at the header's depth: the section is over
                mode, current = "skip", None
                continue
            if entry < 0:
                entry = indent
            arg = _ARG_LINE.match(line)
            if arg and indent <= entry:
                current = arg.group(1)
                params[current] = arg.group(2).strip()
            elif current:  # deeper than the entries: the note goes on
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
    parameters = inspect.signature(fn).parameters
    for param in parameters.values():
        where = f"tool {name!r}, parameter {param.name!r}"
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise UsageError(f"{where}: *args and **kwargs cannot be described to a model; name each parameter")
        if param.kind is param.POSITIONAL_ONLY:
            raise UsageError(f"{where}: positional-only parameters cannot be passed by name from JSON")
        if param.name not in hints:
            raise UsageError(f"{where}: has no type annotation (the model needs one to call it)")
        if is_run_context(hints[param.name]):
            continue  # the call receives the run's context; the model never sees or sends it
        schema = _noted(type_schema(hints[param.name], where), hints[param.name], docs.get(param.name))
        if param.default is param.empty:
            required.append(param.name)
        elif _jsonable(param.default):
            schema["default"] = param.default.value if isinstance(param.default, enum.Enum) else param.default
        properties[param.name] = schema
    unknown = [key for key in docs if key not in parameters]
    if unknown:
        # A misspelt or renamed parameter: its note would silently describe nothing.
        raise UsageError(f"tool {name!r}: the docstring describes {unknown[0]!r}, which is not one of its "
                         f"parameters ({', '.join(parameters) or 'it has none'}); rename or remove that entry")
    schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return description, schema


def _jsonable(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool, enum.Enum))


def context_parameters(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The parameters of ``fn`` annotated ``RunContext``: each call passes them the run's context."""
    try:
        hints = get_type_hints(fn)
    except Exception:
        return ()
    return tuple(key for key, hint in hints.items() if key != "return" and is_run_context(hint))


def conversions(fn: Callable[..., Any], name: str) -> dict[str, Callable[[Any], Any]]:
    """For each parameter whose type JSON cannot carry (an enum, a set, a record), how to make it from its JSON
    value. A value a record's class refuses is a ``UsageError`` naming tool ``name``, the argument and why."""
    try:
        hints = get_type_hints(fn)
    except Exception:
        return {}
    found: dict[str, Callable[[Any], Any]] = {}
    for key, hint in hints.items():
        if key == "return" or is_run_context(hint):
            continue
        if _mentions_record(hint):
            found[key] = functools.partial(_build_argument, hint, f"tool {name!r}: the argument {key!r}")
            continue
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


def _mentions_record(hint: Any) -> bool:
    return record_kind(hint) is not None or any(_mentions_record(a) for a in get_args(hint))


def _build_argument(hint: Any, what: str, value: Any) -> Any:
    try:
        return build(hint, value)
    except Exception as exc:  # the record's own validators refused a value its schema allows
        raise UsageError(f"{what} fits the schema, but its type refused it: {refusal(exc)}") from exc


def build(hint: Any, value: Any) -> Any:
    """The Python value of a JSON ``value`` valid for ``hint``: records built, nested ones too (a TypedDict stays a
    dict; a pydantic model is validated by pydantic), enums made members, arrays made the tuples and sets the hint
    names, integers made floats where it says float. A value already of a record's class is kept as it is.
    Raises what a record class raises when it refuses the value (its validators)."""
    kind = record_kind(hint)
    if kind == "pydantic":
        return value if isinstance(value, hint) else hint.model_validate(value)
    if kind:
        if kind != "typeddict" and isinstance(value, hint):
            return value
        fields = {key: field_hint for key, field_hint, _ in record_fields(hint, hint.__name__)}
        made = {key: build(fields[key], item) for key, item in value.items()}
        return made if kind == "typeddict" else hint(**made)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if hint is float and type(value) is int:
        return float(value)
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        return build(args[0], value)
    if origin in (Union, types.UnionType):
        arms = [a for a in args if a is not type(None)]
        if value is None and len(arms) < len(args):
            return None
        for arm in arms:
            if len(arms) == 1 or jsonschema.Draft202012Validator(type_schema(arm, "")).is_valid(value):
                return build(arm, value)
        return value
    if origin in _SEQUENCES and isinstance(value, (list, tuple, set, frozenset)):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return tuple(build(a, v) for a, v in zip(args, value))
        items = [build(args[0], v) for v in value] if args else list(value)
        return items if origin in (list, Sequence) else origin(items)
    if origin in (dict, Mapping) and isinstance(value, Mapping) and len(args) == 2:
        return {key: build(args[1], item) for key, item in value.items()}
    return value


def json_value(value: Any) -> Any:
    """A Python value as the JSON value it stands for, for checking a direct call against the schema."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_value(v) for v in value]
    if isinstance(value, Mapping):
        return {k: json_value(v) for k, v in value.items()}
    fields = record_json(value)
    return value if fields is None else json_value(fields)
