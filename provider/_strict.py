"""Whether a JSON schema qualifies for OpenAI's strict structured output."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_OBJECT_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems", "items")
_SCHEMAS = ("items", "additionalProperties", "unevaluatedProperties", "contains", "not", "if", "then", "else")


def strict_compatible(schema: Any) -> bool:
    """Whether ``schema`` meets what strict structured output demands of objects: the root is an object, and every
    object in it (nested in properties, ``items``, ``anyOf`` members, ``$defs``/``definitions``,
    ``additionalProperties`` and the other subschema keywords) has ``"additionalProperties": false`` and lists
    every one of its properties in ``required``. ``None`` (no schema) is not."""
    return isinstance(schema, Mapping) and _is_object(schema) and _closed(schema)


def _is_object(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    return kind == "object" or (isinstance(kind, (list, tuple)) and "object" in kind) or "properties" in schema


def _closed(schema: Any) -> bool:
    if not isinstance(schema, Mapping):
        return True  # true/false schemas hold no object to close
    if _is_object(schema):
        properties = schema.get("properties") or {}
        required = schema.get("required") or ()
        if (schema.get("additionalProperties") is not False or not isinstance(properties, Mapping)
                or not isinstance(required, (list, tuple)) or not set(properties) <= set(required)):
            return False
    subschemas: list[Any] = [schema.get(k) for k in _SCHEMAS if isinstance(schema.get(k), Mapping)]
    subschemas += [s for k in _SCHEMA_LISTS if isinstance(schema.get(k), (list, tuple)) for s in schema[k]]
    subschemas += [s for k in _OBJECT_MAPS if isinstance(schema.get(k), Mapping) for s in schema[k].values()]
    return all(_closed(s) for s in subschemas)
