"""Writing the stub module a sandboxed program imports to call host tools, and the signatures shown to models."""

from __future__ import annotations

import keyword
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loop import ToolSpec, UsageError

_RUNTIME = (Path(__file__).with_name("_toolstub.py")).read_text(encoding="utf-8")
# Names the stub module defines itself; a tool may not take one of them.
RESERVED = frozenset({"final", "ToolError", "ToolCallRefused", "ToolCallLimit"})
_SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None",
            "array": "list", "object": "dict"}


def python_name(tool_name: str) -> str:
    """The Python function name for a tool: ``web.search`` and ``web-search`` become ``web_search``."""
    name = re.sub(r"\W", "_", tool_name, flags=re.ASCII)
    if not name or name[0].isdigit():
        name = "tool_" + name
    if keyword.iskeyword(name):
        name += "_"
    return name


def function_names(specs: Sequence[ToolSpec]) -> dict[str, str]:
    """Tool name -> Python name, refusing two tools that would share a name or take a reserved one."""
    names: dict[str, str] = {}
    taken: dict[str, str] = {}
    for spec in specs:
        name = python_name(spec.name)
        if name in RESERVED or name.startswith("_"):
            raise UsageError(f"tool {spec.name!r} cannot be bridged under the name {name!r}: the stub module "
                             f"defines {sorted(RESERVED)} and private '_' names itself; rename the tool")
        if name in taken:
            raise UsageError(f"tools {taken[name]!r} and {spec.name!r} would both be called {name}() in the "
                             "sandbox; rename one")
        taken[name] = spec.name
        names[spec.name] = name
    return names


def _parameters(spec: ToolSpec) -> tuple[list[str], list[str], bool]:
    """Required and optional parameter names, and whether they all work as Python parameter names."""
    schema = spec.parameters
    properties = schema.get("properties", {}) if isinstance(schema, Mapping) else {}
    required = [n for n in schema.get("required", ()) if n in properties] if isinstance(schema, Mapping) else []
    optional = [n for n in properties if n not in required]
    plain = all(n.isidentifier() and not keyword.iskeyword(n) and n not in ("self",) for n in properties)
    return required, optional, plain


def type_text(schema: Any) -> str:
    """A short Python-style type for a JSON schema, for the model to read."""
    if not isinstance(schema, Mapping):
        return "Any"
    if "enum" in schema and isinstance(schema["enum"], list):
        return "Literal[" + ", ".join(repr(v) for v in schema["enum"]) + "]"
    for union in ("anyOf", "oneOf"):
        if isinstance(schema.get(union), list):
            return " | ".join(type_text(s) for s in schema[union])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(_SCALARS.get(k, "Any") for k in kind)
    if kind == "array" and isinstance(schema.get("items"), Mapping):
        return f"list[{type_text(schema['items'])}]"
    return _SCALARS.get(kind, "Any") if isinstance(kind, str) else "Any"


def signature(spec: ToolSpec, name: str) -> str:
    """``name(a: float, b: float, limit: int = None)`` — how the program calls the tool."""
    required, optional, plain = _parameters(spec)
    if not plain:
        return f"{name}(**arguments)"
    properties = spec.parameters.get("properties", {})
    params = [f"{n}: {type_text(properties[n])}" for n in required]
    params += [f"{n}: {type_text(properties[n])} = None" for n in optional]
    return f"{name}({', '.join(params)})"


def listing(specs: Sequence[ToolSpec], module: str) -> str:
    """The tools as the program sees them: one signature and description per tool, for a prompt."""
    names = function_names(specs)
    lines = []
    for spec in specs:
        description = " ".join(spec.description.split())
        lines.append(f"- {module}.{signature(spec, names[spec.name])}: {description}")
    return "\n".join(lines)


def module_source(specs: Sequence[ToolSpec]) -> str:
    """The whole stub module: the call runtime, then one function per tool."""
    names = function_names(specs)
    parts = [_RUNTIME]
    for spec in specs:
        name = names[spec.name]
        required, optional, plain = _parameters(spec)
        if plain:
            params = ", ".join([*required, *(f"{n}=None" for n in optional)])
            pairs = ", ".join(f"{n!r}: {n}" for n in (*required, *optional))
            body = f"_drop_unset({{{pairs}}}, {tuple(optional)!r})"
        else:
            params, body = "**arguments", "arguments"
        parts.append(f"\n\ndef {name}({params}):\n    ok, value = _call({spec.name!r}, {body})\n"
                     f"    if ok:\n        return value\n    raise value\n\n\n{name}.__doc__ = {spec.description!r}\n")
    names_list = ", ".join(repr(n) for n in [*names.values(), "final", "ToolError", "ToolCallRefused",
                                              "ToolCallLimit"])
    parts.append(f"\n__all__ = [{names_list}]\n")
    return "".join(parts)
