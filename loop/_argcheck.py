"""Checking a tool call's arguments: parsed from the model's JSON, then held to the tool's schema.

Schemas like the ones ``@tool`` writes (an object of scalars, enums, lists, sets, optionals and the closed
objects of records) get a compiled quick check; whatever it cannot vouch for goes to a full JSON Schema validator,
which also words the complaint.
Arguments that pass come back as ``CheckedArguments``, marked with the schema they passed, so a tool handed them
(``FunctionTool.call``) need not check them again.

The text comes from a model or a sandboxed program, so it is read defensively (``ArgumentChecker.loads``): nesting
is bounded before the parser, which recurses once per level, ever sees it, and numbers JSON cannot carry and lone
surrogates are refused, each with a short reason rather than an exception the caller did not expect.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import jsonschema

from loop.codec import json_depth
from loop.errors import UsageError

Check = Callable[[Any], bool]
_TYPES: dict[str, Check] = {
    "string": lambda v: type(v) is str,
    "integer": lambda v: type(v) is int,
    "number": lambda v: type(v) is int or type(v) is float,
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
}
_NOTES = {"description", "title", "default", "examples"}

MAX_JSON_DEPTH = 64
"""How deeply the arrays and objects of JSON read by ``ArgumentChecker.loads`` may nest. The parser recurses once
per level and some thousand levels exhaust the interpreter's stack; no tool's arguments need more than a few."""
MAX_INT_DIGITS = 4300
"""The most digits an integer read by ``ArgumentChecker.loads`` may have (Python's own default limit for
converting text to ``int``, kept whatever the process sets: converting more costs time quadratic in the digits)."""

# A JSON string, through its closing quote or the end of the text: possessive, so that it never backtracks, and it
# always matches once started, so a text full of unclosed quotes is still read once (not once per quote).
# A lone surrogate in parsed text comes from a \uD800-\uDFFF escape or from the text holding one itself.
_SURROGATE_IN_TEXT = re.compile("\\\\u[dD][89a-fA-F]|[\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _value_check(schema: Any) -> Check | None:
    """A check that is True only for values ``schema`` accepts; None when the schema is beyond it."""
    if not isinstance(schema, Mapping):
        return None
    keys = set(schema) - _NOTES
    if keys == {"anyOf"} and isinstance(schema["anyOf"], list):
        options: list[Check] = []
        for option in schema["anyOf"]:
            check = _value_check(option)
            if check is None:
                return None
            options.append(check)
        return lambda v: any(o(v) for o in options)
    enum = schema.get("enum")
    if enum is not None:
        if not isinstance(enum, list) or keys - {"enum", "type"}:
            return None
        # Compare types too: JSON's true is not 1, though Python's True == 1.
        return lambda v: any(type(v) is type(e) and v == e for e in enum)
    kind = schema.get("type")
    if kind == "array" and keys <= {"type", "items", "uniqueItems"}:
        items = _value_check(schema.get("items", {})) if "items" in schema else (lambda v: True)
        if items is None:
            return None
        if schema.get("uniqueItems") is True:
            return lambda v: type(v) is list and all(items(x) for x in v) and _distinct(v)
        return lambda v: type(v) is list and all(items(x) for x in v)
    if kind == "object":
        fields = _object_check(schema)
        return None if fields is None else (lambda v: type(v) is dict and fields(v))
    if isinstance(kind, str) and kind in _TYPES and keys == {"type"}:
        return _TYPES[kind]
    if not keys:
        return lambda v: True
    return None


def _distinct(values: list[Any]) -> bool:
    """True only when no two of ``values`` are equal as JSON counts equality: 1 and 1.0 are, true and 1 are not.
    False for values it cannot hash (lists, objects), which sends them on to the validator."""
    try:
        return len({(type(v) is bool, v) for v in values}) == len(values)
    except TypeError:
        return False


def _object_check(schema: Mapping[str, Any]) -> Check | None:
    if schema.get("type") != "object" or set(schema) - _NOTES - {"type", "properties", "required",
                                                                  "additionalProperties"}:
        return None
    closed = schema.get("additionalProperties", True)
    if closed not in (True, False) or not isinstance(schema.get("properties", {}), Mapping):
        return None
    checks = {}
    for name, sub in schema.get("properties", {}).items():
        sub_check = _value_check(sub)
        if sub_check is None:
            return None
        checks[name] = sub_check
    required = tuple(schema.get("required", ()))

    def check(arguments: Any) -> bool:
        for name in required:
            if name not in arguments:
                return False
        for name, value in arguments.items():
            value_check = checks.get(name)
            if value_check is None:
                if closed is False:
                    return False
            elif not value_check(value):
                return False
        return True

    return check


class CheckedArguments(dict[str, Any]):
    """Arguments that passed an ``ArgumentChecker``, marked with the schema they passed (``schema``).

    Only ``ArgumentChecker`` makes them. It sets ``schema`` after the copy rather than in an ``__init__`` of
    ours: a Python ``__init__`` would triple the cost of marking, which every checked tool call pays.
    """

    __slots__ = ("schema",)
    schema: Mapping[str, Any]


class ArgumentChecker:
    """Parses a call's raw JSON arguments and checks them against a tool's schema."""

    __slots__ = ("schema", "_validator", "_quick")

    def __init__(self, schema: Mapping[str, Any]) -> None:
        try:
            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            # An inconsistency of the stubs: types-jsonschema's Validator protocol (what validator_for returns)
            # types check_schema's schema as dict, while its concrete validators take any Mapping, as does
            # jsonschema itself (which reports a Mapping that is not a dict as not of type "object").
            cls.check_schema(schema)  # type: ignore[arg-type]
        except jsonschema.SchemaError as exc:
            raise UsageError(f"tool parameter schema is not a valid JSON schema: {exc.message}") from exc
        self.schema = schema
        self._validator = cls(schema)
        self._quick = _object_check(schema)

    def parse(self, raw: str) -> CheckedArguments | str:
        """The arguments as a dict, or a message telling the model what is wrong with them."""
        if not raw or not raw.strip():
            arguments: Any = {}
        else:
            try:
                arguments = read_json(raw)
            except ValueError as exc:
                return f"the arguments are not valid JSON ({exc}); send a JSON object matching the tool's schema"
        return self.check(arguments)

    @staticmethod
    def loads(text: str | bytes) -> Any:
        """JSON ``text`` (``bytes`` must be UTF-8) read as ``parse`` reads arguments, for other JSON from the same
        untrusted source. Raises ``ValueError`` with a short reason for text that is not JSON
        (``json.JSONDecodeError``), not UTF-8, nested more than ``MAX_JSON_DEPTH`` levels deep, holding a number
        JSON cannot carry (``1e999999``, ``NaN``, an integer of more than ``MAX_INT_DIGITS`` digits) or a string
        with a lone UTF-16 surrogate; never ``RecursionError``."""
        return read_json(text)

    def check(self, arguments: Any) -> CheckedArguments | str:
        """Already parsed ``arguments`` (JSON values) held to the schema: the same arguments, marked as checked, or
        a message saying what is wrong with them."""
        if not isinstance(arguments, dict):
            return f"the arguments must be a JSON object, got {type(arguments).__name__}"
        quick = self._quick
        if (quick is None or not quick(arguments)) and not self._validator.is_valid(arguments):
            problems = []
            for error in sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.path))[:5]:
                where = "/".join(str(p) for p in error.path) or "(top level)"
                problems.append(f"at {where}: {_complaint(error)}")
            return "the arguments do not match the tool's schema: " + "; ".join(problems)
        checked = CheckedArguments(arguments)
        checked.schema = self.schema
        return checked


def _complaint(error: jsonschema.ValidationError) -> str:
    if error.validator == "uniqueItems" and isinstance(error.instance, list):
        # The validator's own words ("has non-unique elements") do not say which value, nor why it matters.
        seen: list[Any] = []
        for value in error.instance:
            if any(_same(value, s) for s in seen):
                return f"{error.instance!r} holds {value!r} more than once; it is a set, so list each value once"
            seen.append(value)
    return str(error.message)


def _same(a: Any, b: Any) -> bool:
    return (type(a) is bool) == (type(b) is bool) and a == b


def read_json(text: str | bytes) -> Any:
    """``ArgumentChecker.loads``."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        data = bytes(text)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"not UTF-8: byte {data[exc.start]:#04x} at offset {exc.start:,}") from None
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and json_depth(text) > MAX_JSON_DEPTH:
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep")
    try:
        value = _DECODER.decode(text)
    except RecursionError:  # the depth is bounded above; this is the last resort should the stack be deep already
        raise ValueError("nested too deeply") from None
    if _SURROGATE_IN_TEXT.search(text) and _holds_lone_surrogate(value):
        raise ValueError("a lone UTF-16 surrogate in a string (like \\ud800 without its pair), which is not "
                         "Unicode text")
    return value


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large for JSON")
    return value


def _integer(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {digits:,} digits (at most {MAX_INT_DIGITS:,} are taken)")
    return int(text)


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_float=_number, parse_int=_integer, parse_constant=_constant)


def _holds_lone_surrogate(value: Any) -> bool:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False
