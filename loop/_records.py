"""Record classes: attrs classes, dataclasses, TypedDicts and pydantic models, the types whose values are JSON
objects with named fields. Which kind a class is, its fields, a pydantic model's schema with nothing left to
look up, and an instance's fields as JSON. pydantic is never imported here: a class can only be a pydantic model
if its program imported pydantic already.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Mapping
from typing import (Any, ClassVar, Literal, NotRequired, Protocol, Required, TypeGuard, get_args, get_origin,
                    get_type_hints)

import attrs

from loop.errors import UsageError

Kind = Literal["attrs", "dataclass", "typeddict", "pydantic"]
_DATA = frozenset({"default", "examples", "const", "enum"})  # keywords holding values, not schemas
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "dependentSchemas", "$defs"})  # names to schemas


class PydanticModel(Protocol):
    """What is used of a pydantic model class, without importing pydantic."""

    @classmethod
    def model_json_schema(cls) -> dict[str, Any]: ...

    @classmethod
    def model_validate(cls, obj: Any) -> Any: ...


class _TypedDictClass(Protocol):
    """What a TypedDict class has that a plain dict subclass has not (typing's and typing_extensions' alike)."""

    __required_keys__: ClassVar[frozenset[str]]
    __total__: ClassVar[bool]


def is_pydantic(spec: object) -> TypeGuard[type[PydanticModel]]:
    """Whether ``spec`` is a pydantic model class."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(spec, type) and issubclass(spec, pydantic.BaseModel)


def record_kind(hint: Any) -> Kind | None:
    """Which kind of record class ``hint`` is, or ``None`` when it is none."""
    if not isinstance(hint, type):
        return None
    if attrs.has(hint):
        return "attrs"
    if dataclasses.is_dataclass(hint):  # pydantic's dataclasses too: they validate in __init__
        return "dataclass"
    if _is_typeddict(hint):
        return "typeddict"
    if is_pydantic(hint):
        return "pydantic"
    return None


def _is_typeddict(hint: type) -> TypeGuard[type[_TypedDictClass]]:
    # typing_extensions' TypedDict is a different class from typing's before 3.13, so test the shape.
    return issubclass(hint, dict) and hasattr(hint, "__required_keys__") and hasattr(hint, "__total__")


@functools.lru_cache(maxsize=512)
def _type_hints(cls: type) -> dict[str, Any]:
    """The class's resolved type hints, read once per class: every typed answer built reads them."""
    return get_type_hints(cls, include_extras=True)


def record_fields(cls: type, where: str) -> list[tuple[str, Any, bool]]:
    """Each field of an attrs class, dataclass or TypedDict as (JSON key, type hint, required); ``where`` names
    the class in a ``UsageError``."""
    try:
        hints = _type_hints(cls)
    except Exception as exc:  # unresolved forward references and the like
        raise UsageError(f"{where}: cannot read the type hints of {cls.__name__}: {exc}") from exc
    if attrs.has(cls):
        declared = [(f.alias, f.name, f.default is attrs.NOTHING) for f in attrs.fields(cls) if f.init]
    elif not dataclasses.is_dataclass(cls) and _is_typeddict(cls):  # record_kind's order: a dataclass first
        fields = []
        for key, hint in hints.items():
            required = key in cls.__required_keys__
            if get_origin(hint) in (Required, NotRequired):
                required, hint = get_origin(hint) is Required, get_args(hint)[0]
            fields.append((key, hint, required))
        return fields
    else:
        declared = [(f.name, f.name, f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
                    for f in dataclasses.fields(cls) if f.init]
    missing = [name for _, name, _ in declared if name not in hints]
    if missing:
        raise UsageError(f"{where}: field {missing[0]!r} has no type annotation")
    return [(key, hints[name], required) for key, name, required in declared]


def pydantic_schema(cls: type[PydanticModel], where: str) -> dict[str, Any]:
    """The model's own JSON schema with every ``$ref`` replaced by what it points to, and each model's object
    closed (``"additionalProperties": false``) unless the model says otherwise (``extra="allow"``)."""
    try:
        schema = dict(cls.model_json_schema())
    except Exception as exc:  # pydantic's own error types
        raise UsageError(f"{where}: cannot write a JSON schema for {cls.__name__}: {exc}") from exc
    definitions = schema.pop("$defs", {})
    return _inline(schema, definitions if isinstance(definitions, Mapping) else {}, (), where)


def _inline(schema: Mapping[str, Any], definitions: Mapping[str, Any], through: tuple[str, ...],
            where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.removeprefix("#/$defs/")
        if name == ref or not isinstance(definitions.get(name), Mapping):
            raise UsageError(f"{where}: the schema refers to {ref!r}, which it does not define")
        if name in through:
            raise UsageError(f"{where}: {name} refers to itself; a recursive type cannot be inlined")
        out.update(_inline(definitions[name], definitions, (*through, name), where))
    for key, value in schema.items():
        if key == "$ref" and isinstance(ref, str):
            continue
        if key in _DATA:
            out[key] = value
        elif key in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {name: _inline(sub, definitions, through, where) if isinstance(sub, Mapping) else sub
                        for name, sub in value.items()}
        elif isinstance(value, Mapping):
            out[key] = _inline(value, definitions, through, where)
        elif isinstance(value, list):
            out[key] = [_inline(sub, definitions, through, where) if isinstance(sub, Mapping) else sub
                        for sub in value]
        else:
            out[key] = value
    if out.get("type") == "object" and isinstance(out.get("properties"), Mapping):
        out.setdefault("additionalProperties", False)
    return out


def record_json(value: Any) -> dict[str, Any] | None:
    """An instance of a record class as its fields by JSON key (values as they are), or ``None`` for anything
    else. A pydantic model is dumped as JSON by its aliases."""
    cls = type(value)
    if attrs.has(cls):
        return {f.alias: getattr(value, f.name) for f in attrs.fields(cls) if f.init}
    if dataclasses.is_dataclass(cls):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(cls) if f.init}
    if is_pydantic(cls):
        dumped: dict[str, Any] = value.model_dump(mode="json", by_alias=True)
        return dumped
    return None


def refusal(exc: Exception) -> str:
    """What a record class said when it refused a value, on one line: a pydantic ``ValidationError`` as each
    error's path and message, anything else as its type and message."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(exc, pydantic.ValidationError):
        lines = []
        for error in exc.errors()[:5]:
            where = ".".join(str(step) for step in error.get("loc", ()))
            lines.append(f"{where}: {error.get('msg')}" if where else str(error.get("msg")))
        return "; ".join(lines)
    return f"{type(exc).__name__}: {exc}"
