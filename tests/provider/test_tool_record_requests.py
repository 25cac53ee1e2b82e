"""A tool whose parameters are records, as the OpenAI-compatible and Anthropic providers send it: the schema lands
where each API reads a tool's parameters, whole, valid, with no ``$ref``, and OpenAI's strict rules hold for it."""

import dataclasses
import json
from typing import Any, Optional

import attrs
import jsonschema
import pydantic

from loop import Options, Request, Role, State, Text, UseTool, tool
from provider import Anthropic, OpenAICompatible
from provider._strict import strict_compatible

@dataclasses.dataclass
class Point:
    x: float
    y: float


@attrs.frozen
class Stop:
    """One stop on a route.

    Args:
        name: the place
    """

    name: str
    at: Point
    minutes: Optional[int]


class Traveller(pydantic.BaseModel):
    name: str
    home: Optional["Address"]


class Address(pydantic.BaseModel):
    street: str
    city: str


@tool
def plan_route(stops: list[Stop], traveller: Traveller) -> str:
    """Plan a route through the stops.

    Args:
        stops: where to go, in order
        traveller: who goes
    """
    return ""


ORIGIN = Point(0, 0)


@tool
def hop(start: Point, end: Point = ORIGIN) -> str:
    """Hop."""
    return ""


REQUEST = Request(State().append(Role.USER, Text("Plan my day")).turns, (plan_route.spec, hop.spec),
                  Options(tool_choice=UseTool("plan_route")))


def has_ref(schema: Any) -> bool:
    if isinstance(schema, dict):
        return "$ref" in schema or "$defs" in schema or any(has_ref(v) for v in schema.values())
    if isinstance(schema, list):
        return any(has_ref(v) for v in schema)
    return False


def test_the_schemas_are_valid_inlined_objects() -> None:
    for spec in REQUEST.tools:
        schema = dict(spec.parameters)
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert not has_ref(schema)


def test_records_whose_fields_are_all_required_meet_openai_strict_rules() -> None:
    # Every object closed and listing all its properties as required: what strict mode asks of a schema.
    assert strict_compatible(plan_route.spec.parameters)
    assert not strict_compatible(hop.spec.parameters)  # end has a default, so it is not required


async def test_openai_sends_the_schema_as_the_function_parameters() -> None:
    async with OpenAICompatible("local-model", base_url="http://127.0.0.1:9/v1") as provider:
        body = provider.body(REQUEST)
    json.dumps(body)
    assert body["tools"] == [
        {"type": "function", "function": {"name": "plan_route", "description": "Plan a route through the stops.",
                                          "parameters": plan_route.spec.parameters}},
        {"type": "function", "function": {"name": "hop", "description": "Hop.", "parameters": hop.spec.parameters}},
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "plan_route"}}
    stop = body["tools"][0]["function"]["parameters"]["properties"]["stops"]["items"]
    assert stop["required"] == ["name", "at", "minutes"] and stop["additionalProperties"] is False
    assert stop["properties"]["at"]["properties"] == {"x": {"type": "number"}, "y": {"type": "number"}}


async def test_openai_strict_output_leaves_function_tools_unmarked() -> None:
    # strict is sent only for the structured answer (response_format or the forced output tool); a function tool's
    # schema goes as it is, so a record parameter with optional fields is sent the same way.
    async with OpenAICompatible("local-model", base_url="http://127.0.0.1:9/v1", strict_output=True,
                                structured_output="tool") as provider:
        body = provider.body(Request(REQUEST.turns, REQUEST.tools,
                                     Options(output_schema=plan_route.spec.parameters)))
    functions = {t["function"]["name"]: t["function"] for t in body["tools"]}
    assert "strict" not in functions["plan_route"] and "strict" not in functions["hop"]
    assert functions["final_answer"]["strict"] is True  # the same record schema qualifies as a strict answer
    assert functions["final_answer"]["parameters"] == plan_route.spec.parameters


async def test_anthropic_sends_the_schema_as_the_input_schema() -> None:
    async with Anthropic("claude-test", api_key="k") as provider:
        body = provider.body(REQUEST)
    json.dumps(body)
    assert body["tools"] == [
        {"name": "plan_route", "description": "Plan a route through the stops.",
         "input_schema": plan_route.spec.parameters},
        {"name": "hop", "description": "Hop.", "input_schema": hop.spec.parameters},
    ]
    assert body["tool_choice"] == {"type": "tool", "name": "plan_route"}
    traveller = body["tools"][0]["input_schema"]["properties"]["traveller"]
    assert traveller["properties"]["home"]["anyOf"][0]["required"] == ["street", "city"]
    assert traveller["description"] == "who goes"
