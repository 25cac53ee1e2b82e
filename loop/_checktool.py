"""``check_tool``: the conformance check of the ``Tool`` protocol (exported by ``loop.testing``)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from typing import Any

import anyio
import jsonschema

from loop._parts import ToolCall
from loop._pipeline import ToolPipeline
from loop._protocols import ToolSpec
from loop._executor import has
from loop._tools import _NAME, TimedTool, Tool, render
from loop.errors import ConformanceError, UsageError


async def check_tool(tool: Any, arguments: Mapping[str, Any], *, timeout: float = 10.0) -> None:
    """Check that ``tool`` keeps the ``Tool`` contract, calling it with ``arguments`` (which must fit its schema).

    The check asks for a ``spec``: a ``ToolSpec`` whose name a provider accepts (letters, digits, ``_``, ``-``,
    ``.``), a description the model can read, and parameters that are a valid JSON schema of an object; an
    optional ``timeout`` that is a positive number of seconds; an async ``call(arguments)`` whose value a model
    can be shown (text, or data that serialises as JSON); the same result through a step's tool pipeline, as a
    model's call; and two calls at once giving what two calls one after the other give. Each call is bounded by
    ``timeout`` seconds. Raises ``ConformanceError`` naming the first breach; returns ``None`` when it conforms.
    """
    if not has(tool, Tool):
        raise ConformanceError(f"{tool!r} is not a loop.Tool: it needs a spec and an async call(arguments)")
    spec = tool.spec
    if not isinstance(spec, ToolSpec):
        raise ConformanceError(f"{tool!r}: spec must be a loop.ToolSpec, got {spec!r}")
    if not _NAME.fullmatch(spec.name):
        raise ConformanceError(f"{tool!r}: the tool name {spec.name!r} must be letters, digits, '_', '-' or '.'")
    if not spec.description.strip():
        raise ConformanceError(f"{tool!r}: spec.description must say what the tool does; the model reads it")
    schema = dict(spec.parameters)
    if schema.get("type") != "object":
        raise ConformanceError(f"{tool!r}: spec.parameters must be the JSON schema of an object, got {schema!r}")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConformanceError(f"{tool!r}: spec.parameters is not a valid JSON schema: {exc.message}") from None
    problem = next(iter(jsonschema.Draft202012Validator(schema).iter_errors(dict(arguments))), None)
    if problem is not None:
        raise UsageError(f"check_tool's arguments do not fit {spec.name!r}'s schema: {problem.message}")
    limit = tool.timeout if isinstance(tool, TimedTool) else None  # as tool_timeout reads it
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit <= 0):
        raise ConformanceError(f"{tool!r}: timeout must be a positive number of seconds, got {limit!r}")
    if not inspect.iscoroutinefunction(tool.call):
        raise ConformanceError(f"{tool!r}: call(arguments) must be an async method")
    with anyio.fail_after(timeout):
        value = await tool.call(dict(arguments))
    try:
        shown = render(value)
    except (TypeError, ValueError) as exc:
        raise ConformanceError(f"{tool!r}: call returned {value!r}, which cannot be shown to a model: {exc}") from None
    pipeline = ToolPipeline([tool], timeout=timeout, max_result_chars=max(20_000, len(shown) + 1))
    call = ToolCall("check_1", spec.name, json.dumps(dict(arguments)))
    result = await pipeline.call(call)
    if result.is_error or result.content != shown:
        raise ConformanceError(f"{tool!r}: through a step's tool pipeline the call must give {shown!r}, got "
                               f"{result.content!r}{' (an error)' if result.is_error else ''}")
    together: list[Any] = []

    async def once() -> None:
        together.append(await pipeline.call(call))

    with anyio.fail_after(timeout):
        async with anyio.create_task_group() as group:
            group.start_soon(once)
            group.start_soon(once)
    failed = [r.content for r in together if r.is_error]
    if failed:
        raise ConformanceError(f"{tool!r}: two calls at once must both succeed, as a model may make them; got {failed}")
