"""The parts of a Chat Completions request that shape the run rather than the conversation: ``response_format``
(a typed answer), the client's ``tools`` and ``tool_choice``. Each problem is an ``OpenAIError`` naming its
parameter, as OpenAI would answer it."""

from __future__ import annotations

import re
from typing import Any

from loop import OutputType, ToolChoice, ToolSpec, UsageError, UseTool
from session.openai._errors import OpenAIError, unsupported, wrong_type

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_EMPTY_PARAMETERS = {"type": "object", "properties": {}}
JSON_OBJECT = OutputType.of({"type": "object"})


def output_of(raw: Any) -> OutputType[Any] | None:
    """The typed answer ``response_format`` asks for: ``None`` for text, any JSON object for ``json_object``,
    the schema for ``json_schema`` (strict or not: the answer is validated either way)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise wrong_type("response_format", "an object", raw)
    kind = raw.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return JSON_OBJECT
    if kind != "json_schema":
        raise OpenAIError(400, f"Invalid value: {kind!r}. Supported values are: 'text', 'json_object' and "
                               "'json_schema'.", param="response_format.type", code="invalid_value")
    spec = raw.get("json_schema")
    if not isinstance(spec, dict):
        raise wrong_type("response_format.json_schema", "an object", spec)
    name = spec.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise OpenAIError(400, "Invalid 'response_format.json_schema.name': it must be 1 to 64 letters, digits, "
                               f"'_' or '-', got {name!r}.", param="response_format.json_schema.name",
                          code="invalid_value")
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise wrong_type("response_format.json_schema.strict", "a boolean", strict)
    schema = spec.get("schema", {})
    where = "response_format.json_schema.schema"
    if not isinstance(schema, dict):
        raise wrong_type(where, "an object", schema)
    remote = _remote_reference(schema)
    if remote is not None:
        raise unsupported(where, f"Invalid schema for response_format '{name}': the reference {remote!r} points "
                                 "outside the schema; only references within it ('#/$defs/...') are supported.")
    try:
        output = OutputType.of({**schema, "title": name})
        output.errors({})  # a schema whose references lead back to themselves never ends a check
    except UsageError as exc:
        raise OpenAIError(400, f"Invalid schema for response_format '{name}': {exc}", param=where,
                          code="invalid_schema") from None
    except RecursionError:
        raise OpenAIError(400, f"Invalid schema for response_format '{name}': its references lead back to "
                               "themselves without end.", param=where, code="invalid_schema") from None
    if output.backtracking:  # a backtracking match can take exponential time on a short answer
        raise OpenAIError(400, f"Invalid schema for response_format '{name}': it holds {output.backtracking[0]}. "
                               "Patterns are matched in linear time, by RE2: lookarounds and backreferences are not "
                               "supported, and only the schema's root may name a '$schema'.", param=where,
                          code="invalid_schema")
    return output


def _remote_reference(schema: Any) -> str | None:
    """The first ``$ref`` (or ``$dynamicRef``) in ``schema`` that leaves the document; the server never fetches one."""
    pending = [schema]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if key in ("$ref", "$dynamicRef") and isinstance(item, str) and not item.startswith("#"):
                    return item
                pending.append(item)
        elif isinstance(value, list):
            pending.extend(value)
    return None


def tools_of(raw: Any) -> tuple[ToolSpec, ...]:
    """The client's tools: ``[{"type": "function", "function": {"name", "description", "parameters"}}]``."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise wrong_type("tools", "an array", raw)
    specs: list[ToolSpec] = []
    for i, entry in enumerate(raw):
        at = f"tools[{i}]"
        if not isinstance(entry, dict):
            raise wrong_type(at, "an object", entry)
        if entry.get("type", "function") != "function":
            raise unsupported(f"{at}.type", f"Tools of type {entry.get('type')!r} are not supported; this endpoint "
                                            "takes function tools.")
        function = entry.get("function")
        if not isinstance(function, dict):
            raise wrong_type(f"{at}.function", "an object", function)
        name = function.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise OpenAIError(400, f"Invalid '{at}.function.name': it must be 1 to 64 letters, digits, '_' or '-', "
                                   f"got {name!r}.", param=f"{at}.function.name", code="invalid_value")
        if any(spec.name == name for spec in specs):
            raise OpenAIError(400, f"Invalid 'tools': the name {name!r} is given twice; tool names must be unique.",
                              param=f"{at}.function.name", code="duplicate_tool_name")
        description = function.get("description", "")
        if not isinstance(description, str):
            raise wrong_type(f"{at}.function.description", "a string", description)
        parameters = function.get("parameters", _EMPTY_PARAMETERS)
        if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
            raise OpenAIError(400, f"Invalid '{at}.function.parameters': a tool's parameters are a JSON schema of "
                                   "type 'object'.", param=f"{at}.function.parameters", code="invalid_value")
        specs.append(ToolSpec(name, description, parameters))
    return tuple(specs)


def tool_choice_of(raw: Any, offered: set[str]) -> ToolChoice | None:
    """``tool_choice`` as the run's turns take it; a named function must be one of the ``offered`` tools."""
    if raw is None:
        return None
    if raw in ("auto", "none", "required"):
        choice: ToolChoice = raw
        return choice
    if isinstance(raw, dict) and raw.get("type") == "function" and isinstance(raw.get("function"), dict):
        name = raw["function"].get("name")
        if not isinstance(name, str) or name not in offered:
            raise OpenAIError(400, f"Invalid 'tool_choice': no tool named {name!r} is offered (offered: "
                                   f"{', '.join(sorted(offered)) or 'none'}).", param="tool_choice.function.name",
                              code="invalid_value")
        return UseTool(name)
    raise OpenAIError(400, "Invalid 'tool_choice': expected 'auto', 'none', 'required' or "
                           "{\"type\": \"function\", \"function\": {\"name\": ...}}.", param="tool_choice",
                      code="invalid_value")
