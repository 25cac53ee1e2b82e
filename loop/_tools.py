"""Tools: the ``Tool`` protocol, ``@tool`` for plain functions, and the checks a call passes before it runs."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import inspect
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, Union, overload, runtime_checkable

import anyio
import attrs

from loop._argcheck import ArgumentChecker, CheckedArguments
from loop._parts import File, Image, Media, ToolCall, ToolResult
from loop.checks import positive_number
from loop._protocols import ToolSpec
from loop._context import RunContext, current_run_context
from loop._schema import context_parameters, conversions, function_schema, json_value
from loop._threads import _WORKERS
from loop.errors import UsageError

Policy = Callable[[RunContext[Any], str, Mapping[str, Any]], bool]
"""Whether a call needs approval: ``policy(context, tool_name, arguments)``, the arguments checked already."""
Gate = Union[bool, Policy]


def check_gate(gate: Any, who: str) -> Gate:
    """``gate`` when it is a bool or a policy function, else ``UsageError`` naming ``who``."""
    if isinstance(gate, bool) or callable(gate):
        return gate  # type: ignore[no-any-return]
    raise UsageError(f"{who}: needs_approval takes True, False, or a function (context, tool_name, arguments) -> "
                     f"bool; got {gate!r}")


@runtime_checkable
class Tool(Protocol):
    """Something a model can call.

    ``spec`` tells the model the tool's name, purpose and JSON-schema parameters. ``call`` receives arguments
    already parsed and checked against that schema, and returns the result (a string, data rendered as JSON,
    or an ``Image`` or ``File``, alone or in a list or tuple with text: see ``tool_result``). It may raise:
    the step turns any exception into an error result the model can read. A tool with its own time limit is a
    ``TimedTool``.
    """

    @property
    def spec(self) -> ToolSpec: ...

    async def call(self, arguments: Mapping[str, Any]) -> Any: ...


@runtime_checkable
class TimedTool(Tool, Protocol):
    """The optional ability of a tool to set its own time limit: ``timeout`` seconds, overriding the step's
    per-tool timeout (``None`` keeps the step's). ``FunctionTool`` has it (``@tool(timeout=...)``)."""

    timeout: float | None


def tool_timeout(tool: Tool, default: float) -> float:
    """The seconds a call of ``tool`` may take: its own ``timeout`` when it is a ``TimedTool`` that sets one."""
    own = tool.timeout if isinstance(tool, TimedTool) else None
    return own if own else default


# ASCII only: model APIs refuse other tool names.
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class FunctionTool:
    """A ``Tool`` made from a typed, documented function (see ``tool``). Calling it calls the function.

    ``call`` checks its arguments against the schema first, raising ``UsageError`` naming the bad one, unless an
    ``ArgumentChecker`` for this schema already passed them (as a step's tool pipeline does). It takes JSON values
    and the Python values the function takes (enum members, sets, tuples, record instances); enum and set
    parameters receive an enum member and a set or frozenset, record parameters their built value (see ``tool``).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        blocking: bool = True,
        needs_approval: Gate = False,
    ) -> None:
        if not callable(fn):
            raise UsageError(f"tool() needs a function, got {fn!r}")
        if isinstance(fn, type):  # calling it would make an instance, and its schema would be __init__'s
            raise UsageError(f"tool() takes a function, not the class {fn.__qualname__}: decorate a function or a "
                             "method (tool(obj.method)), or give the class a ToolSpec .spec and an async .call")
        tool_name = name or getattr(fn, "__name__", None)
        if not isinstance(tool_name, str) or not _NAME.fullmatch(tool_name):
            raise UsageError(f"tool name must be letters, digits, '_', '-' or '.', got {tool_name!r}")
        positive_number(f"tool {tool_name!r}: timeout", timeout, unit="seconds", optional=True)
        doc_description, parameters = function_schema(fn, tool_name)
        self.spec = ToolSpec(tool_name, description or doc_description or tool_name, parameters)
        self.timeout = timeout
        self.needs_approval = check_gate(needs_approval, f"tool {tool_name!r}")
        self._fn = fn
        self._async = inspect.iscoroutinefunction(fn)
        self._blocking = blocking
        self._schema = parameters
        self._conversions = conversions(fn, tool_name)
        self._context = context_parameters(fn)  # given the run's context on every call, never by the model
        self._checker: ArgumentChecker | None = None  # made on the first call that needs it
        functools.update_wrapper(self, fn)

    @property
    def name(self) -> str:
        return self.spec.name

    async def call(self, arguments: Mapping[str, Any]) -> Any:
        if type(arguments) is not CheckedArguments or arguments.schema is not self._schema:
            self._check(arguments)
        kwargs = dict(arguments)
        for key, convert in self._conversions.items():
            value = kwargs.get(key)
            if value is not None:
                kwargs[key] = convert(value)
        if self._context:
            context = current_run_context()
            for key in self._context:
                kwargs[key] = context
        if self._async:
            return await self._fn(**kwargs)
        if not self._blocking:
            return self._fn(**kwargs)
        # A sync function may block (files, HTTP): run it off the event loop. If the turn is cancelled
        # the thread is abandoned, since Python cannot stop it.
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio
            return await anyio.to_thread.run_sync(functools.partial(self._fn, **kwargs), abandon_on_cancel=True)
        return await _WORKERS.run(loop, self._fn, kwargs)

    def _check(self, arguments: Any) -> None:
        if not isinstance(arguments, Mapping):
            raise UsageError(f"tool {self.spec.name!r} takes its arguments as a mapping of names to values, "
                             f"got {type(arguments).__name__}")
        if self._checker is None:
            self._checker = ArgumentChecker(self.spec.parameters)
        problem = self._checker.check({key: json_value(value) for key, value in arguments.items()})
        if isinstance(problem, str):
            raise UsageError(f"tool {self.spec.name!r}: {problem}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"FunctionTool({self.spec.name!r})"


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool: ...
@overload
def tool(
    *, name: str | None = ..., description: str | None = ..., timeout: float | None = ..., blocking: bool = ...,
    needs_approval: Gate = ...,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    blocking: bool = True,
    needs_approval: Gate = False,
) -> Any:
    """Turn a typed, documented function (sync or async) into a ``Tool``.

    The parameter schema comes from the type hints; the description and per-parameter notes from the
    docstring (Google ``Args:`` or Sphinx ``:param x:`` style; a note on a name that is no parameter is a
    ``UsageError``). Parameters may be ``str``, ``int``, ``float``, ``bool``, ``Any``, ``list``, ``tuple``,
    ``set``, ``dict`` (``str`` keys), ``Literal``, an ``Enum``, ``Optional``, ``Annotated[T, "note"]``, or a
    record (an attrs class, dataclass, TypedDict or pydantic model), records nesting anywhere in these. A record
    is inlined (no ``$ref``) as a closed object requiring its fields without defaults, and reaches the function
    built: an instance, a dict for a TypedDict. A value its class refuses (a validator raises) is a ``UsageError``
    naming the argument, which a step turns into an error result. A sync function runs in a worker thread unless
    ``blocking=False`` says it is quick and pure enough to run on the event loop. It sees the caller's context
    variables; if the call is cancelled or times out, the thread is abandoned to finish on its own. At most
    ``THREAD_LIMIT`` (40) sync calls run at once in the process on asyncio; more wait their turn. On other event
    loops anyio's ``to_thread.run_sync`` runs them, under anyio's default thread limiter.

    ``needs_approval`` makes its calls wait for a person's approval (see ``loop.require_approval``): ``True``,
    or a policy ``(context, tool_name, arguments) -> bool`` deciding per call from who asks and with what.
    """
    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(f, name=name, description=description, timeout=timeout, blocking=blocking,
                            needs_approval=needs_approval)

    return wrap(fn) if fn is not None else wrap


def index_tools(tools: Tool | Iterable[Tool], where: str) -> dict[str, Tool]:
    """``tools`` by name, each checked to be a ``Tool``; two with one name are refused (in ``where``).

    One tool needs no list: ``tools=search`` is ``tools=[search]``.
    """
    if isinstance(getattr(tools, "spec", None), ToolSpec):
        items: Iterable[Any] = (tools,)
    elif isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Iterable):
        hint = "; decorate plain functions with @tool" if callable(tools) else ""
        raise UsageError(f"tools takes a Tool or a list of tools, got {tools!r}{hint}")
    else:
        items = tools
    by_name: dict[str, Tool] = {}
    for t in items:
        spec = getattr(t, "spec", None)
        if not isinstance(spec, ToolSpec) or not callable(getattr(t, "call", None)):
            raise UsageError(f"{t!r} is not a Tool (it needs a ToolSpec .spec and an async .call); "
                             "decorate plain functions with @tool")
        if spec.name in by_name:
            raise UsageError(f"two tools are named {spec.name!r}; tool names must be unique {where}")
        by_name[spec.name] = t
    return by_name


def render(value: Any) -> str:
    """A tool's return value as text for the model: strings as they are, anything else as JSON. Of a value that
    holds images or files (see ``tool_result``), the text alone: its other items, one a line."""
    if isinstance(value, str):
        return value
    if isinstance(value, (Image, File)) or (type(value) in (list, tuple) and _holds_media(value)):
        return _split(value)[0]
    return json.dumps(value, ensure_ascii=False, default=json_default)


def tool_result(call: ToolCall, value: Any, max_chars: int) -> ToolResult:
    """The result answering ``call`` with ``value``, the tool's return value.

    Its text is ``render(value)`` cut to ``max_chars`` characters (see ``truncate``). A tool may show the model
    images and files: a returned ``Image`` or ``File``, or a list or tuple holding some among its other items,
    goes in ``attachments``, in order, and the other items (strings as they are, the rest as JSON), one a
    line, make the text. A list or tuple without images or files is JSON, as before.
    """
    if isinstance(value, str):
        return ToolResult(call.id, call.name, truncate(value, max_chars))
    if isinstance(value, (Image, File)) or (type(value) in (list, tuple) and _holds_media(value)):
        text, attached = _split(value)
        return ToolResult(call.id, call.name, truncate(text, max_chars), attachments=attached)
    return ToolResult(call.id, call.name, truncate(render(value), max_chars))


def _holds_media(items: list[Any] | tuple[Any, ...]) -> bool:
    return any(isinstance(item, (Image, File)) for item in items)


def _split(value: Any) -> tuple[str, tuple[Media, ...]]:
    """The text and the attachments of a value holding images or files."""
    if isinstance(value, (Image, File)):
        return "", (value,)
    text = [render(item) for item in value if not isinstance(item, (Image, File))]
    return "\n".join(text), tuple(item for item in value if isinstance(item, (Image, File)))


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
