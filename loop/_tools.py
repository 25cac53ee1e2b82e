"""Tools: the ``Tool`` protocol, ``@tool`` for plain functions, and the checks a call passes before it runs."""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import json
import re
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, Union, get_args, get_origin, get_type_hints, overload, runtime_checkable

import anyio
import attrs

from loop._protocols import ToolSpec
from loop._schema import function_schema
from loop.errors import UsageError


@runtime_checkable
class Tool(Protocol):
    """Something a model can call.

    ``spec`` tells the model the tool's name, purpose and JSON-schema parameters. ``call`` receives arguments
    already parsed and checked against that schema, and returns the result (a string, or data rendered as
    JSON). It may raise: the step turns any exception into an error result the model can read. A tool may also
    have a ``timeout`` attribute (seconds) overriding the step's per-tool timeout.
    """

    @property
    def spec(self) -> ToolSpec: ...

    async def call(self, arguments: Mapping[str, Any]) -> Any: ...


# ASCII only: model APIs refuse other tool names.
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class FunctionTool:
    """A ``Tool`` made from a typed, documented function (see ``tool``). Calling it calls the function."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        blocking: bool = True,
    ) -> None:
        if not callable(fn):
            raise UsageError(f"tool() needs a function, got {fn!r}")
        tool_name = name or getattr(fn, "__name__", None)
        if not isinstance(tool_name, str) or not _NAME.fullmatch(tool_name):
            raise UsageError(f"tool name must be letters, digits, '_', '-' or '.', got {tool_name!r}")
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
            raise UsageError(f"tool {tool_name!r}: timeout must be a positive number of seconds, got {timeout!r}")
        doc_description, parameters = function_schema(fn, tool_name)
        self.spec = ToolSpec(tool_name, description or doc_description or tool_name, parameters)
        self.timeout = timeout
        self._fn = fn
        self._async = inspect.iscoroutinefunction(fn)
        self._blocking = blocking
        self._enums = _enum_params(fn)
        functools.update_wrapper(self, fn)

    @property
    def name(self) -> str:
        return self.spec.name

    async def call(self, arguments: Mapping[str, Any]) -> Any:
        kwargs = dict(arguments)
        for key, enum_type in self._enums.items():
            if kwargs.get(key) is not None and not isinstance(kwargs[key], enum_type):
                kwargs[key] = enum_type(kwargs[key])
        if self._async:
            return await self._fn(**kwargs)
        if self._blocking:
            # A sync function may block (files, HTTP): run it off the event loop. If the turn is cancelled
            # the thread is abandoned, since Python cannot stop it.
            return await anyio.to_thread.run_sync(functools.partial(self._fn, **kwargs), abandon_on_cancel=True)
        return self._fn(**kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"FunctionTool({self.spec.name!r})"


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool: ...
@overload
def tool(
    *, name: str | None = ..., description: str | None = ..., timeout: float | None = ..., blocking: bool = ...
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    blocking: bool = True,
) -> Any:
    """Turn a typed, documented function (sync or async) into a ``Tool``.

    The parameter schema comes from the type hints; the description and per-parameter notes from the
    docstring (Google ``Args:`` or Sphinx ``:param x:`` style). A sync function runs in a worker thread unless
    ``blocking=False`` says it is quick and pure enough to run on the event loop.
    """
    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(f, name=name, description=description, timeout=timeout, blocking=blocking)

    return wrap(fn) if fn is not None else wrap


def _enum_params(fn: Callable[..., Any]) -> dict[str, type[enum.Enum]]:
    try:
        hints = get_type_hints(fn)
    except Exception:
        return {}
    enums: dict[str, type[enum.Enum]] = {}
    for key, hint in hints.items():
        if get_origin(hint) in (Union, types.UnionType):  # Optional[Unit] is converted too
            members = [a for a in get_args(hint) if a is not type(None)]
            hint = members[0] if len(members) == 1 else None
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            enums[key] = hint
    return enums


def index_tools(tools: Iterable[Tool], where: str) -> dict[str, Tool]:
    """``tools`` by name, each checked to be a ``Tool``; two with one name are refused (in ``where``)."""
    by_name: dict[str, Tool] = {}
    for t in tools:
        spec = getattr(t, "spec", None)
        if not isinstance(spec, ToolSpec) or not callable(getattr(t, "call", None)):
            raise UsageError(f"{t!r} is not a Tool (it needs a ToolSpec .spec and an async .call); "
                             "decorate plain functions with @tool")
        if spec.name in by_name:
            raise UsageError(f"two tools are named {spec.name!r}; tool names must be unique {where}")
        by_name[spec.name] = t
    return by_name


def render(value: Any) -> str:
    """A tool's return value as text for the model: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=json_default)


def json_default(value: Any) -> Any:
    """``json.dumps``'s ``default`` for tool results: attrs classes, dataclasses, enums, sets, bytes, else str."""
    if attrs.has(type(value)):
        return attrs.asdict(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with a note saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[truncated: the result had {len(text):,} characters; only the first {limit:,} are shown]"
