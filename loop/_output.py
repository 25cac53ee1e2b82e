"""``OutputType``: a typed answer's schema, how to find its JSON in a reply, check it, and build the value.

The schema's regular expressions (``pattern``, ``patternProperties``) are matched by RE2, in time linear in the
text: Python's backtracking ``re``, which jsonschema uses, takes exponential time for a pattern such as
``^(a+)+$`` on a short text that almost matches, and holds the interpreter meanwhile. Only a pattern RE2 cannot
compile (a lookaround, a backreference) falls back to ``re``; ``OutputType.backtracking`` names them, so that a
schema from an untrusted client can be refused.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar, cast, overload

import attrs
import jsonschema
import re2  # type: ignore[import-untyped]  # google-re2 ships no type information
from referencing.jsonschema import lookup_recursive_ref

from loop._records import is_pydantic, record_kind
from loop._schema import build, record_schema
from loop.errors import UsageError

T = TypeVar("T")

_ACCEPTED = "an attrs class, a dataclass, a TypedDict, a pydantic model or a JSON-schema dict"
_FENCE = re.compile(r"```([^\n`]*)\n(.*?)```", re.DOTALL)
_OPENER = re.compile(r"[{\[]")
_NAME = re.compile(r"[A-Za-z_]\w*")
_MAX_SPANS = 1000  # bounds the prose scan, which tries each '{' or '[' in turn until one parses
_DECODER = json.JSONDecoder()
_RE2 = re2.Options()
_RE2.log_errors = False  # a pattern RE2 refuses is reported by OutputType.backtracking, not on standard error
# ECMA-262's \uXXXX (JSON Schema's regular expressions are ECMA's), which RE2 writes \x{XXXX}; not after an
# escaping backslash. The look-behind starts a match only at the first backslash of a run: linear.
_ECMA_UNICODE = re.compile(r"(?<!\\)((?:\\\\)*)\\u([0-9A-Fa-f]{4})")


_BY_CLASS: weakref.WeakKeyDictionary[type, OutputType[Any]] = weakref.WeakKeyDictionary()
"""Each class's output type, built once (the class is kept alive by its users, not by this cache)."""


@attrs.frozen
class OutputType(Generic[T]):
    """The shape asked of an answer: its ``name``, its JSON ``schema``, and the Python type it becomes.

    Build one with ``OutputType.of(spec)``. ``python_type`` is the class asked for, or ``None`` for a bare
    JSON schema. Objects in schemas made from classes are closed (``"additionalProperties": false``) and list
    their fields without defaults as ``required``.
    """

    name: str
    python_type: type | None
    _schema: dict[str, Any] = attrs.field(alias="schema", hash=False, repr=False)
    _validator: Any = attrs.field(alias="validator", eq=False, repr=False)

    @overload
    @classmethod
    def of(cls, spec: OutputType[T]) -> OutputType[T]: ...

    @overload
    @classmethod
    def of(cls, spec: type[T]) -> OutputType[T]: ...

    @overload
    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> OutputType[dict[str, Any]]: ...

    @classmethod
    def of(cls, spec: Any) -> OutputType[Any]:
        """The output type of ``spec``: an attrs class, a dataclass, a TypedDict, a pydantic model, a JSON-schema
        dict, or an ``OutputType`` (returned as is). Raises ``UsageError`` for anything else."""
        if isinstance(spec, OutputType):
            return spec
        if isinstance(spec, type):
            known = _BY_CLASS.get(spec)
            if known is None:  # building one checks its schema, which costs milliseconds: once per class
                known = _BY_CLASS[spec] = cls._of_class(spec)
            return known
        if isinstance(spec, Mapping):
            schema = copy.deepcopy(dict(spec))
            title = schema.get("title")
            return cls._make(title if isinstance(title, str) and title else "output", None, schema)
        return cls._of_class(spec)

    @classmethod
    def _of_class(cls, spec: Any) -> OutputType[Any]:
        if is_pydantic(spec):
            try:
                schema = spec.model_json_schema()
            except Exception as exc:  # pydantic's own error types; it is never imported here
                raise UsageError(f"cannot write a JSON schema for {spec.__name__}: {exc}") from exc
            return cls._make(spec.__name__, spec, schema)
        if record_kind(spec):
            return cls._make(spec.__name__, spec, record_schema(spec, f"output type {spec.__name__}"))
        raise UsageError(f"an output type must be {_ACCEPTED}; got {_describe(spec)}")

    @classmethod
    def _make(cls, name: str, python_type: type | None, schema: dict[str, Any]) -> OutputType[Any]:
        try:
            json.dumps(schema)
            checker = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            checker.check_schema(schema)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"the schema of {name!r} is not JSON: {exc}") from exc
        except jsonschema.SchemaError as exc:
            raise UsageError(f"the schema of {name!r} is not a valid JSON schema: {exc.message}") from exc
        return cls(name, python_type, schema=schema, validator=_linear(checker)(schema))

    @property
    def schema(self) -> dict[str, Any]:
        """The JSON schema, as a fresh dict (changing it changes nothing here)."""
        return copy.deepcopy(self._schema)

    @property
    def backtracking(self) -> tuple[str, ...]:
        """What in the schema is checked by Python's backtracking ``re`` rather than by RE2, each described: a
        pattern RE2 cannot compile (a lookaround, a backreference), and a ``$schema`` below the root (jsonschema
        checks a subschema that names its own dialect with that dialect's stock validator). Empty when every
        regular expression is matched in linear time. Such a check can take exponential time on a short text,
        so a schema from an untrusted client should have none. Every ``pattern`` string and ``patternProperties``
        key anywhere in the schema counts, even one inside ``const`` or ``examples``."""
        found: list[str] = []
        pending: list[tuple[Any, bool]] = [(self._schema, True)]
        while pending:
            value, root = pending.pop()
            if isinstance(value, dict):
                for key, item in value.items():
                    patterns = ([item] if key == "pattern" and isinstance(item, str)
                                else list(item) if key == "patternProperties" and isinstance(item, dict) else [])
                    found += [why for why in map(_refusal, patterns) if why is not None]
                    if key == "$schema" and not root:
                        found.append(f"a '$schema' below the root ({item!r}), whose subschema jsonschema would "
                                     "check with its stock validator")
                pending.extend((item, False) for item in reversed(list(value.values())))
            elif isinstance(value, list):
                pending.extend((item, False) for item in reversed(value))
        return tuple(dict.fromkeys(found))

    def extract(self, text: str) -> Any:
        """The JSON value in a model's reply.

        The whole text if it is JSON; else the last ```json (or bare ```) fenced block that parses; else, in the
        prose, the last outermost ``{...}``/``[...]`` that matches the schema, or failing that the longest one
        that parses (unless the whole text or a fenced block looked like JSON but broke). Raises ``UsageError``
        saying "the answer holds no JSON value", why, and how the text begins.
        """
        if not isinstance(text, str):
            raise UsageError(f"extract reads a model's reply as str, got {_describe(text)}")
        stripped = text.strip()
        why = ""
        try:
            return _loads(stripped)
        except ValueError as exc:
            if stripped.startswith(("{", "[")):
                why = f": it looks like JSON but does not parse ({exc})"
        for match in reversed(list(_FENCE.finditer(text))):
            info, body = match.group(1).strip(), match.group(2)
            if info.startswith(("{", "[")):  # a block opened without a newline after the fence
                info, body = "", match.group(1) + "\n" + body
            if info.lower() in ("", "json"):
                try:
                    return _loads(body)
                except ValueError as exc:
                    why = why or f": its fenced block does not parse ({exc})"
        found: list[tuple[int, Any]] = []  # (length, value) of each outermost span that parses
        why_span, start = "", 0
        for _ in range(_MAX_SPANS):
            opener = _OPENER.search(text, start)
            if opener is None:
                break
            try:
                value, end = _loads(text, opener.start())
            except ValueError as exc:
                where = f"the {opener.group()} at character {opener.start()}"
                why_span = why_span or f": {where} does not start valid JSON ({exc})"
                start = opener.start() + 1
                continue
            found.append((end - opener.start(), value))
            start = end
        valid = [value for _, value in found if self._validator.is_valid(value)]
        if valid:
            return valid[-1]
        # A scrap found inside a broken JSON block would hide the parse error, which is what needs fixing.
        if found and not why:
            return max(found, key=lambda f: f[0])[1]
        raise UsageError(f"the answer holds no JSON value{why or why_span}; it begins: {_excerpt(text)}")

    def errors(self, value: Any) -> list[str]:
        """What is wrong with ``value`` against the schema, one line per problem with its path
        (``$.items[2].price: 'x' is not of type 'number'``); empty when it is valid."""
        problems = sorted(self._validator.iter_errors(value),
                          key=lambda e: [(0, p) if isinstance(p, int) else (1, p) for p in e.absolute_path])
        return [f"{_path(e.absolute_path)}: {e.message}" for e in problems]

    def parse(self, value: Any) -> T:
        """``value`` (a JSON value) as the Python type: an instance of the attrs class or dataclass (nested ones
        built too), the dict for a TypedDict or a bare schema, ``model_validate`` for a pydantic model.
        Raises ``UsageError`` if it does not validate."""
        problems = self.errors(value)
        if problems:
            shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
            raise UsageError(f"the value does not match the {self.name} schema: {shown}")
        return self._build(value)

    def _build(self, value: Any) -> T:
        """``value``, already checked against the schema, as the Python type (see ``parse``)."""
        kind = self.python_type
        try:
            if kind is None:
                built = value
            else:
                built = build(kind, value)
        except UsageError:
            raise
        except Exception as exc:  # the class's own validators (attrs, __post_init__, pydantic) refused it
            raise UsageError(f"cannot build {self.name} from the value: {exc}") from exc
        # A T by the check above: the value matched the schema written for T, and was built as T's class.
        return cast(T, built)


def _re2(pattern: str) -> Any:
    """``pattern`` compiled by RE2; raises ``re2.error`` when RE2 cannot compile it."""
    return re2.compile(_ECMA_UNICODE.sub(r"\1\\x{\2}", pattern), _RE2)


def _refusal(pattern: str) -> str | None:
    """Why RE2 cannot compile ``pattern``, or ``None`` when it can."""
    try:
        _re2(pattern)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        return f"the pattern {pattern!r}, which RE2 cannot compile ({reason})"
    return None


@functools.lru_cache(maxsize=1024)
def _search(pattern: str) -> Callable[[str], bool]:
    """Whether ``pattern`` matches somewhere in a text, as JSON Schema asks: by RE2, in linear time; by ``re``
    only for a pattern RE2 cannot compile (see ``OutputType.backtracking``)."""
    try:
        linear = _re2(pattern)
    except re2.error:
        backtracking = re.compile(pattern)
        return lambda text: backtracking.search(text) is not None

    def search(text: str) -> bool:
        try:
            return linear.search(text) is not None
        except UnicodeEncodeError:  # a lone surrogate: RE2 reads its UTF-8 form (ED A0 80) as one character
            return linear.search(text.encode("utf-8", "surrogatepass")) is not None

    return search


# jsonschema's keywords that match regular expressions, written again around ``_search``; each is the same as
# jsonschema's own (jsonschema/_keywords.py, _utils.py), messages included, but for the matching.

def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[jsonschema.ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern)(instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any
                        ) -> Iterator[jsonschema.ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        matches = _search(pattern)
        for key, value in instance.items():
            if matches(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance: Mapping[str, Any], schema: Any) -> list[str]:
    properties = schema.get("properties", {})
    patterns = [_search(pattern) for pattern in schema.get("patternProperties", {})]
    return [key for key in instance if key not in properties and not any(match(key) for match in patterns)]


def _extras(extras: Sequence[Any]) -> str:
    return f"{', '.join(repr(extra) for extra in extras)} {'was' if len(extras) == 1 else 'were'}"


def _additional_properties(validator: Any, additional: Any, instance: Any, schema: Any
                           ) -> Iterator[jsonschema.ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = set(_additional(instance, schema))
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield jsonschema.ValidationError(f"{joined} {verb} not match any of the regexes: {patterns}")
        else:
            yield jsonschema.ValidationError(
                f"Additional properties are not allowed ({_extras(sorted(extras, key=str))} unexpected)")


def _evaluated(validator: Any, instance: Mapping[str, Any], schema: Any) -> set[str]:
    """The keys of ``instance`` that ``schema`` evaluates (for ``unevaluatedProperties``), following references
    and the applicators that passed."""
    if not isinstance(schema, Mapping):
        return set()
    keys: set[str] = set()
    for keyword in ("$ref", "$dynamicRef", "$recursiveRef"):
        if keyword in schema:
            resolved = (lookup_recursive_ref(validator._resolver) if keyword == "$recursiveRef"
                        else validator._resolver.lookup(schema[keyword]))
            keys |= _evaluated(validator.evolve(schema=resolved.contents, _resolver=resolved.resolver), instance,
                               resolved.contents)
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        keys |= properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        if (subschema := schema.get(keyword)) is not None:
            keys |= {key for key, value in instance.items() if validator.evolve(schema=subschema).is_valid(value)}
    for pattern in schema.get("patternProperties", {}):
        keys |= {key for key in instance if _search(pattern)(key)}
    for key, subschema in schema.get("dependentSchemas", {}).items():
        if key in instance:
            keys |= _evaluated(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        keys |= {key for subschema in schema.get(keyword, []) if validator.evolve(schema=subschema).is_valid(instance)
                 for key in _evaluated(validator, instance, subschema)}
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys |= _evaluated(validator, instance, schema["if"]) | _evaluated(validator, instance, schema.get("then"))
        else:
            keys |= _evaluated(validator, instance, schema.get("else"))
    return keys


def _unevaluated_properties(validator: Any, unevaluated: Any, instance: Any, schema: Any
                            ) -> Iterator[jsonschema.ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated(validator, instance, schema)
    refused = [key for key in instance if key not in evaluated
               and any(True for _ in validator.descend(instance[key], unevaluated, path=key, schema_path=key))]
    if refused and unevaluated is False:
        yield jsonschema.ValidationError(
            f"Unevaluated properties are not allowed ({_extras(sorted(refused, key=str))} unexpected)")
    elif refused:
        yield jsonschema.ValidationError("Unevaluated properties are not valid under the given schema "
                                         f"({_extras(refused)} unevaluated and invalid)")


_KEYWORDS = {"pattern": _pattern, "patternProperties": _pattern_properties,
             "additionalProperties": _additional_properties, "unevaluatedProperties": _unevaluated_properties}


@functools.cache
def _linear(checker: Any) -> Any:
    """jsonschema's validator class ``checker``, matching regular expressions with ``_search``."""
    keywords = {k: f for k, f in _KEYWORDS.items() if k in checker.VALIDATORS}
    return jsonschema.validators.extend(checker, keywords)  # type: ignore[no-untyped-call]  # untyped in the stubs


def _path(path: Sequence[Any]) -> str:
    return "$" + "".join(f"[{step}]" if isinstance(step, int) else f".{step}" if _NAME.fullmatch(step)
                         else f"[{json.dumps(step)}]" for step in path)


def _loads(text: str, start: int | None = None) -> Any:
    """``json.loads`` (or ``raw_decode`` from ``start``), every failure a ``ValueError`` with a short reason."""
    try:
        return json.loads(text) if start is None else _DECODER.raw_decode(text, start)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _excerpt(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return f'"{flat}"' if len(flat) <= limit else f'"{flat[:limit]}…"'


def _describe(spec: Any) -> str:
    if isinstance(spec, type):
        return f"the class {spec.__module__}.{spec.__qualname__}"
    shown = repr(spec)
    return f"{shown if len(shown) <= 80 else shown[:80] + '…'}, an instance of {type(spec).__qualname__}"
