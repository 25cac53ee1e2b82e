"""``OutputType``: a typed answer's schema, how to find its JSON in a reply, check it, and build the value."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar, cast, overload

import attrs
import jsonschema

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
        if isinstance(spec, Mapping):
            schema = copy.deepcopy(dict(spec))
            title = schema.get("title")
            return cls._make(title if isinstance(title, str) and title else "output", None, schema)
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
        return cls(name, python_type, schema=schema, validator=checker(schema))

    @property
    def schema(self) -> dict[str, Any]:
        """The JSON schema, as a fresh dict (changing it changes nothing here)."""
        return copy.deepcopy(self._schema)

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
