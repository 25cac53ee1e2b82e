"""``@tool`` parameters typed with records: attrs classes, dataclasses, TypedDicts and pydantic models, alone and
nested; the schemas the model is shown, the values the function receives, and the refusals for misuse."""

import dataclasses
import enum
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any, NotRequired, Optional, TypedDict

import attrs
import jsonschema
import pydantic
import pytest

from loop import FunctionTool, Request, Role, State, Step, Text, ToolResult, UsageError, tool
from provider import Function, Scripted, tool_call
from tests.loop.one_call import START, run_one


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@attrs.frozen
class Item:
    """One line of an order.

    Args:
        name: what is sold
        quantity: how many, at least one
    """

    name: str
    quantity: int = attrs.field(default=1, validator=attrs.validators.gt(0))
    color: Color = Color.RED


@dataclasses.dataclass
class Point:
    x: float
    y: float
    label: str = ""


@dataclasses.dataclass
class Address:
    """Where an order goes."""

    street: str
    at: Optional[Point] = None


class Movie(TypedDict):
    title: str
    year: int
    filmed_at: NotRequired[Point]


@attrs.frozen
class Order:
    items: list[Item]
    ship_to: Address
    gift: bool = False


class Pet(pydantic.BaseModel):
    """A pet."""

    name: str = pydantic.Field(description="what it answers to")
    legs: int = 4


class Owner(pydantic.BaseModel):
    pets: list[Pet]
    favourite: Optional[Pet] = None


@dataclasses.dataclass
class Even:
    n: int

    def __post_init__(self) -> None:
        if self.n % 2:
            raise ValueError(f"{self.n} is odd; give an even number")


class Booking(pydantic.BaseModel):
    nights: int

    @pydantic.field_validator("nights")
    @classmethod
    def at_most_a_fortnight(cls, nights: int) -> int:
        if nights > 14:
            raise ValueError("at most 14 nights")
        return nights


def refs(schema: Any) -> Iterator[str]:
    """Every ``$ref`` and ``$defs`` key anywhere in ``schema``."""
    if isinstance(schema, dict):
        yield from (key for key in schema if key in ("$ref", "$defs", "definitions"))
        for value in schema.values():
            yield from refs(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from refs(value)


def objects(schema: Any) -> Iterator[dict[str, Any]]:
    """Every object schema with properties anywhere in ``schema``."""
    if isinstance(schema, dict):
        if schema.get("type") == "object" and "properties" in schema:
            yield schema
        for value in schema.values():
            yield from objects(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from objects(value)


received: list[Any] = []


@tool
def place_order(order: Order, note: Optional[str] = None) -> str:
    """Place an order.

    Args:
        order: the order to place
        note: a note for the packer
    """
    received.append(order)
    return f"{len(order.items)} lines to {order.ship_to.street}"


@tool
def catalogue(movies: list[Movie], by_code: dict[str, Item], where: Optional[Point] = None) -> str:
    """File movies and items."""
    received.extend([movies, by_code, where])
    return "filed"


@tool
def adopt(owner: Owner, extra: Optional[Pet] = None, herd: Optional[list[Pet]] = None) -> str:
    """Adopt pets."""
    received.extend([owner, extra, herd])
    return "adopted"


@tool
def check(even: Even, booking: Booking) -> str:
    """Check things."""
    received.extend([even, booking])
    return "checked"


@tool
def label(item: Item) -> str:
    """Label one item.

    Args:
        item: the item to label
    """
    received.append(item)
    return item.name


TOOLS = [place_order, catalogue, adopt, check, label]


@pytest.fixture(autouse=True)
def fresh() -> None:
    received.clear()


# -- schemas ----------------------------------------------------------------------------------------------------


ITEM = {
    "description": "One line of an order.",
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "what is sold"},
        "quantity": {"type": "integer", "description": "how many, at least one"},
        "color": {"enum": ["red", "blue"]},
    },
    "required": ["name"],
    "additionalProperties": False,
}
POINT = {
    "type": "object",
    "properties": {"x": {"type": "number"}, "y": {"type": "number"}, "label": {"type": "string"}},
    "required": ["x", "y"],
    "additionalProperties": False,
}


def test_an_attrs_record_with_nested_records_is_inlined_as_closed_objects() -> None:
    order = place_order.spec.parameters["properties"]["order"]
    assert order == {
        "description": "the order to place",  # the parameter's own note wins over the class's summary
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": ITEM},
            "ship_to": {
                "description": "Where an order goes.",
                "type": "object",
                "properties": {"street": {"type": "string"}, "at": {"anyOf": [POINT, {"type": "null"}]}},
                "required": ["street"],
                "additionalProperties": False,
            },
            "gift": {"type": "boolean"},
        },
        "required": ["items", "ship_to"],
        "additionalProperties": False,
    }
    assert place_order.spec.parameters["required"] == ["order"]


def test_a_record_parameter_without_a_note_keeps_the_class_summary() -> None:
    @tool
    def ship(address: Address) -> str:
        """Ship."""
        return address.street

    assert ship.spec.parameters["properties"]["address"]["description"] == "Where an order goes."


def test_records_inside_lists_dicts_and_optionals() -> None:
    properties = catalogue.spec.parameters["properties"]
    movie = properties["movies"]["items"]
    assert movie["required"] == ["title", "year"] and movie["additionalProperties"] is False
    assert movie["properties"]["filmed_at"] == POINT
    assert properties["by_code"] == {"type": "object", "additionalProperties": ITEM}
    assert properties["where"] == {"anyOf": [POINT, {"type": "null"}], "default": None}
    assert catalogue.spec.parameters["required"] == ["movies", "by_code"]


def test_a_pydantic_model_is_its_own_schema_inlined_and_closed() -> None:
    owner = adopt.spec.parameters["properties"]["owner"]
    pet = owner["properties"]["pets"]["items"]
    assert pet["description"] == "A pet."
    assert pet["properties"]["name"]["description"] == "what it answers to"
    assert pet["required"] == ["name"]
    assert pet["properties"]["legs"]["default"] == 4
    assert owner["properties"]["favourite"]["anyOf"] == [pet, {"type": "null"}]
    assert adopt.spec.parameters["properties"]["herd"]["anyOf"][0] == {"type": "array", "items": pet}
    for found in objects(adopt.spec.parameters):
        assert found["additionalProperties"] is False


def test_a_pydantic_model_that_allows_extra_keys_keeps_its_object_open() -> None:
    class Loose(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="allow")
        name: str

    @tool
    def take(loose: Loose) -> str:
        """Take."""
        return loose.name

    assert take.spec.parameters["properties"]["loose"]["additionalProperties"] is True


@pytest.mark.parametrize("made", TOOLS, ids=lambda t: t.name)
def test_every_schema_is_valid_json_schema_without_references(made: FunctionTool) -> None:
    schema = made.spec.parameters
    jsonschema.Draft202012Validator.check_schema(schema)
    assert list(refs(schema)) == []
    json.dumps(schema)  # nothing in it but JSON
    for found in objects(schema):
        assert set(found["required"]) <= set(found["properties"])


# -- values the function receives --------------------------------------------------------------------------------


ORDER = {
    "items": [{"name": "tea", "quantity": 2, "color": "blue"}, {"name": "cup"}],
    "ship_to": {"street": "1 High St", "at": {"x": 1, "y": 2.5}},
}


async def test_the_function_receives_built_attrs_and_dataclass_instances() -> None:
    result = await run_one(place_order, {"order": ORDER})
    assert result == ToolResult("x", "place_order", "2 lines to 1 High St")
    (order,) = received
    assert order == Order(
        items=[Item("tea", 2, Color.BLUE), Item("cup")],
        ship_to=Address("1 High St", Point(1.0, 2.5)),
    )
    assert type(order.ship_to.at.x) is float  # a JSON integer where the field is a float


async def test_typed_dicts_stay_dicts_with_their_records_built() -> None:
    arguments = {
        "movies": [{"title": "Heat", "year": 1995, "filmed_at": {"x": 0, "y": 0}}, {"title": "Ran", "year": 1985}],
        "by_code": {"T1": {"name": "tea"}},
        "where": None,
    }
    assert not (await run_one(catalogue, arguments)).is_error
    movies, by_code, where = received
    assert movies == [{"title": "Heat", "year": 1995, "filmed_at": Point(0.0, 0.0)}, {"title": "Ran", "year": 1985}]
    assert all(type(m) is dict for m in movies)
    assert by_code == {"T1": Item("tea")} and where is None


async def test_pydantic_models_are_validated_by_pydantic() -> None:
    arguments = {"owner": {"pets": [{"name": "rex"}], "favourite": {"name": "tweety", "legs": 2}},
                 "herd": [{"name": "a"}, {"name": "b"}]}
    assert not (await run_one(adopt, arguments)).is_error
    owner, extra, herd = received
    assert owner == Owner(pets=[Pet(name="rex")], favourite=Pet(name="tweety", legs=2))
    assert extra is None and herd == [Pet(name="a"), Pet(name="b")]


async def test_optional_fields_take_their_defaults_and_optional_records_may_be_left_out() -> None:
    assert not (await run_one(place_order, {"order": {"items": [], "ship_to": {"street": "x"}}})).is_error
    assert received == [Order(items=[], ship_to=Address("x"), gift=False)]
    received.clear()
    assert not (await run_one(catalogue, {"movies": [], "by_code": {}})).is_error
    assert received == [[], {}, None]


async def test_a_direct_call_takes_instances_as_well_as_json() -> None:
    order = Order(items=[Item("tea")], ship_to=Address("x", Point(1, 2)))
    assert await place_order.call({"order": order}) == "1 lines to x"
    assert received[0] is order
    assert await adopt.call({"owner": Owner(pets=[]), "extra": {"name": "rex"}}) == "adopted"
    assert received[1:] == [Owner(pets=[]), Pet(name="rex"), None]


# -- arguments that are wrong ----------------------------------------------------------------------------------


async def test_an_argument_that_breaks_the_schema_is_an_error_result_and_nothing_runs() -> None:
    result = await run_one(place_order, {"order": {"items": [{"name": "tea", "size": 3}], "ship_to": {}}})
    assert result.is_error and received == []
    assert result.content.startswith("error: the arguments do not match the tool's schema: ")
    assert "at order/items/0: Additional properties are not allowed ('size' was unexpected)" in result.content
    assert "at order/ship_to: 'street' is a required property" in result.content
    with pytest.raises(UsageError, match="'street' is a required property"):
        await place_order.call({"order": {"items": [], "ship_to": {}}})


@pytest.mark.parametrize(
    ("made", "arguments", "problem"),
    [
        (label, {"item": {"name": "tea", "quantity": 0}}, "the argument 'item' fits the schema, but its type "
                                                          "refused it: ValueError: 'quantity' must be > 0: 0"),
        (check, {"even": {"n": 3}, "booking": {"nights": 2}},
         "the argument 'even' fits the schema, but its type refused it: ValueError: 3 is odd; give an even number"),
        (check, {"even": {"n": 2}, "booking": {"nights": 20}},
         "the argument 'booking' fits the schema, but its type refused it: nights: Value error, at most 14 nights"),
    ],
    ids=["attrs validator", "dataclass __post_init__", "pydantic validator"],
)
async def test_a_value_its_class_refuses_is_an_error_result_naming_the_argument(
    made: FunctionTool, arguments: dict[str, Any], problem: str
) -> None:
    result = await run_one(made, arguments)
    assert result.is_error and received == []
    assert result.content == f"error: the tool raised UsageError: tool {made.name!r}: {problem}"
    with pytest.raises(UsageError, match="fits the schema, but its type refused it"):
        await made.call(arguments)


@pytest.mark.parametrize(
    "arguments",
    [
        {"order": ORDER},
        {"order": {**ORDER, "gift": True}},
        {"order": {**ORDER, "gift": 1}},
        {"order": {**ORDER, "extra": 1}},
        {"order": {"items": [{"name": "tea", "color": "green"}], "ship_to": {"street": "x"}}},
        {"order": {"items": [], "ship_to": {"street": "x", "at": {"x": 1}}}},
        {"order": {"items": [], "ship_to": {"street": "x", "at": None}}},
        {"order": {"items": {}, "ship_to": {"street": "x"}}},
        {"order": []},
    ],
)
def test_record_arguments_take_the_quick_check_which_never_passes_what_the_schema_refuses(
    arguments: dict[str, Any],
) -> None:
    from loop._argcheck import _object_check

    quick = _object_check(place_order.spec.parameters)
    assert quick is not None
    valid = jsonschema.Draft202012Validator(place_order.spec.parameters).is_valid(arguments)
    assert quick(arguments) == valid


# -- end to end through a step -------------------------------------------------------------------------------


async def test_a_scripted_model_calls_a_record_tool_through_a_step() -> None:
    provider = Scripted([[tool_call("place_order", {"order": ORDER}, id="c1")], "Ordered."])
    step = Step(provider, tools=[place_order])
    state = await step.turn(START)
    state = await step.turn(state)
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert state[2].tool_results == (ToolResult("c1", "place_order", "2 lines to 1 High St"),)
    (spec,) = provider.requests[0].tools
    assert spec == place_order.spec
    assert received[0].items[0] == Item("tea", 2, Color.BLUE)


async def test_a_function_model_reads_the_record_schema_and_fills_it_in() -> None:
    def model(request: Request) -> Any:
        if request.turns[-1].role is Role.TOOL:
            return f"Done: {request.turns[-1].tool_results[0].content}"
        (spec,) = request.tools
        item = spec.parameters["properties"]["item"]
        assert item["additionalProperties"] is False and item["required"] == ["name"]
        return tool_call(spec.name, {"item": {name: "x" if prop.get("type") == "string" else "blue"
                                              for name, prop in item["properties"].items() if name != "quantity"}})

    step = Step(Function(model), tools=[label])
    state = await step.turn(State().append(Role.USER, Text("label something")))
    state = await step.turn(state)
    assert state[-1].text == "Done: x"
    assert received == [Item("x", 1, Color.BLUE)]


# -- refusals ------------------------------------------------------------------------------------------------------


def test_tool_refuses_a_class_naming_the_fix() -> None:
    with pytest.raises(UsageError) as caught:
        tool(Item)
    message = str(caught.value)
    assert message.startswith("tool() takes a function, not the class Item: ")
    assert "decorate a function or a method" in message and "ToolSpec .spec and an async .call" in message


def misnamed(city: str, days: int = 1) -> str:
    """Forecast.

    Args:
        city: the city
        day: how many days ahead
    """
    return city


def sphinx_misnamed(city: str) -> str:
    """Forecast.

    :param town: the city
    """
    return city


def undocumented_parameterless() -> str:
    """Ping.

    Args:
        verbose: say more
    """
    return "pong"


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (misnamed, "tool 'misnamed': the docstring describes 'day', which is not one of its parameters "
                   "(city, days); rename or remove that entry"),
        (sphinx_misnamed, "the docstring describes 'town', which is not one of its parameters (city)"),
        (undocumented_parameterless, "describes 'verbose', which is not one of its parameters (it has none)"),
    ],
    ids=["google", "sphinx", "no parameters"],
)
def test_a_docstring_entry_naming_no_parameter_is_refused(fn: Any, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        tool(fn)
    assert message in str(caught.value)


def test_other_docstring_sections_and_deeper_lines_are_not_taken_for_parameters() -> None:
    @tool
    def forecast(city: str) -> str:
        """Forecast.

        Args:
            city: the city,
                for example: Paris
        Note:
            Cached: for an hour.
        Warning:
            Slow: sometimes.

        Returns:
            text: the forecast
        """
        return city

    assert forecast.spec.parameters["properties"]["city"]["description"] == "the city, for example: Paris"


@attrs.frozen
class Tree:
    children: "list[Tree]"


class Branch(pydantic.BaseModel):
    twigs: "list[Branch]"


def grow(tree: Tree) -> str:
    return ""


def sprout(branch: Branch) -> str:
    return ""


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (grow, "tool 'grow', parameter 'tree', field 'children': Tree refers to itself; a recursive type cannot be "
               "inlined"),
        (sprout, "tool 'sprout', parameter 'branch': Branch refers to itself; a recursive type cannot be inlined"),
    ],
    ids=["attrs", "pydantic"],
)
def test_a_recursive_record_is_refused(fn: Any, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        tool(fn)
    assert str(caught.value) == message


def test_a_record_field_that_cannot_be_described_is_named() -> None:
    @dataclasses.dataclass
    class Odd:
        when: complex

    def odd(value: Odd) -> str:
        return ""

    with pytest.raises(UsageError, match=r"tool 'odd', parameter 'value', field 'when': cannot describe type"):
        tool(odd)


def test_records_need_no_pydantic_import() -> None:
    program = textwrap.dedent("""
        import dataclasses, sys
        from loop import tool

        @dataclasses.dataclass
        class P:
            x: int

        @tool
        def f(p: P) -> int:
            return p.x

        assert "pydantic" not in sys.modules, "pydantic was imported"
    """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
