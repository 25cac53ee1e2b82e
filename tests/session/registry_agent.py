"""Any pattern of the registry as a served agent: ``make_agent`` builds the pattern named by
``REGISTRY_PATTERN`` with the settings below, over a step with one tool, and ``demo_provider`` is a model
that answers whatever a pattern asks: a typed answer with a value of its schema, a forced tool with arguments
that fit, anything else with text. ``python -m session serve tests.session.registry_agent:make_agent``."""

from __future__ import annotations

import json
import os
from typing import Any

from cognitive import Pattern, Stage, build
from loop import Budget, Executor, Request, UseTool, tool
from provider import Function, tool_call
from sandbox import ExecResult, FunctionSandbox
from verifier import FunctionVerifier, NoSecrets, passed


@tool
async def look(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


TOOLS = [look]


def _fits(schema: Any) -> Any:
    """A small value that fits the JSON ``schema``."""
    if not isinstance(schema, dict):
        return "x"
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return _fits(schema[key][0])
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        return {name: _fits(sub) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        return [_fits(schema.get("items", {}))] * schema.get("minItems", 0)
    return {"string": "an answer", "integer": 1, "number": 1.0, "boolean": True, "null": None}.get(kind, "x")


def answer(request: Request) -> Any:
    options = request.options
    if options.output_schema is not None:
        return json.dumps(_fits(dict(options.output_schema)))
    choice = options.tool_choice
    if isinstance(choice, UseTool):
        spec = next(s for s in request.tools if s.name == choice.name)
        return tool_call(spec.name, _fits(dict(spec.parameters)))
    last = request.turns[-1]
    if last.role == "user" and "look" in [s.name for s in request.tools] and options.tool_choice != "none":
        return tool_call("look", {"topic": "it"})
    return "The answer is 42."


def demo_provider() -> Function:
    return Function(answer)


def _run_program(argv: Any, **_: Any) -> ExecResult:
    return ExecResult(0, "42\n", "")


def settings(name: str, step: Executor) -> dict[str, Any]:
    """What the pattern ``name`` must be given besides the step."""
    return {
        "chain": {"stages": [Stage("notes", "Note what matters.", step), Stage("final", "Answer from {notes}.", step)]},
        "code-action": {"sandbox": FunctionSandbox(_run_program)},
        "reflexion": {"evaluator": FunctionVerifier(lambda state: passed(), name="fine")},
        "router": {"choices": {"direct": "single-shot", "tools": "react"}},
        "self-refine": {"critic": FunctionVerifier(lambda state: passed(), name="fine")},
        "with-budget": {"budget": Budget(max_turns=20)},
        "with-guardrails": {"output": NoSecrets()},
        "with-verification": {"verifiers": FunctionVerifier(lambda state: passed(), name="fine")},
        "with-output": {"output_type": {"type": "object", "properties": {"answer": {"type": "string"}},
                                        "required": ["answer"]}},
    }.get(name, {})


def make_agent(step: Executor) -> Pattern:
    name = os.environ["REGISTRY_PATTERN"]
    return build(name, step, **settings(name, step))
