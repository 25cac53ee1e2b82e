"""``OutputType``: schemas from classes and dicts, JSON found in replies, validation with paths, typed values."""

import dataclasses
import enum
from typing import Annotated, Any, Literal, NotRequired, Optional, TypedDict

import attrs
import pytest

from loop import OutputType, UsageError
from tests.json_errors import json_error


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@attrs.frozen
class Item:
    """One line of an order.

    Args:
        name: what is sold
    """

    name: str
    price: float
    color: Color = Color.RED


@attrs.frozen
class Order:
    items: list[Item]
    customer: Item | None = None
    note: Optional[str] = None
    size: Literal["s", "m", "l"] = "m"
    by_code: dict[str, Item] = attrs.Factory(dict)


@dataclasses.dataclass
class Point:
    x: float
    y: float
    label: str = ""
    tags: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Path:
    points: list[Point]
    closed: bool


class Movie(TypedDict):
    title: str
    year: int
    rating: NotRequired[float]
    where: NotRequired[list[Point]]


@attrs.frozen
class Node:
    children: "list[Node]"


ORDER = {
    "items": [{"name": "tea", "price": 3.5}, {"name": "cup", "price": 2, "color": "blue"}],
    "customer": {"name": "ann", "price": 0},
    "size": "l",
    "by_code": {"T1": {"name": "tea", "price": 3.5}},
}


def test_attrs_class_gives_a_closed_schema_with_nested_classes_inlined() -> None:
    item = {
        "description": "One line of an order.",
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "what is sold"},
            "price": {"type": "number"},
            "color": {"enum": ["red", "blue"]},
        },
        "required": ["name", "price"],
        "additionalProperties": False,
    }
    output = OutputType.of(Order)
    assert output.name == "Order"
    assert output.python_type is Order
    assert output.schema == {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": item},
            "customer": {"anyOf": [item, {"type": "null"}]},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "size": {"enum": ["s", "m", "l"], "type": "string"},
            "by_code": {"type": "object", "additionalProperties": item},
        },
        "required": ["items"],
        "additionalProperties": False,
    }


def test_attrs_value_round_trips_to_nested_instances() -> None:
    assert OutputType.of(Order).parse(ORDER) == Order(
        items=[Item("tea", 3.5), Item("cup", 2.0, Color.BLUE)],
        customer=Item("ann", 0.0),
        size="l",
        by_code={"T1": Item("tea", 3.5)},
    )
    value = OutputType.of(Order).parse({"items": []})
    assert value == Order(items=[]) and value.customer is None


def test_json_integers_become_floats_where_the_field_is_a_float() -> None:
    (item,) = OutputType.of(Order).parse({"items": [{"name": "tea", "price": 3}]}).items
    assert type(item.price) is float


def test_dataclass_with_defaults_and_a_list_of_dataclasses() -> None:
    output = OutputType.of(Path)
    assert output.name == "Path"
    point = output.schema["properties"]["points"]["items"]
    assert point["required"] == ["x", "y"]
    assert point["additionalProperties"] is False
    assert "description" not in point  # a dataclass's generated docstring is only its signature
    value = {"points": [{"x": 1, "y": 2.5}, {"x": 0, "y": 0, "label": "o", "tags": ["a"]}], "closed": True}
    assert output.parse(value) == Path([Point(1.0, 2.5), Point(0.0, 0.0, "o", ["a"])], closed=True)


def test_typed_dict_keeps_its_required_keys_and_parses_to_a_dict() -> None:
    output = OutputType.of(Movie)
    assert output.name == "Movie"
    schema = output.schema
    assert schema["required"] == ["title", "year"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["rating"] == {"type": "number"}
    value = output.parse({"title": "Heat", "year": 1995, "where": [{"x": 1, "y": 2}]})
    assert value == {"title": "Heat", "year": 1995, "where": [Point(1.0, 2.0)]}
    assert type(value) is dict


def test_pydantic_model_uses_its_own_schema_and_validation() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Pet(pydantic.BaseModel):
        name: str
        legs: int = 4

    class Owner(pydantic.BaseModel):
        pets: list[Pet]

    output = OutputType.of(Owner)
    assert output.name == "Owner"
    assert output.python_type is Owner
    assert output.schema == Owner.model_json_schema()
    value = output.parse({"pets": [{"name": "rex"}, {"name": "tweety", "legs": 2}]})
    assert value == Owner(pets=[Pet(name="rex"), Pet(name="tweety", legs=2)])
    assert output.errors({"pets": [{"legs": "x"}]}) == [
        "$.pets[0]: 'name' is a required property",
        "$.pets[0].legs: 'x' is not of type 'integer'",
    ]


def test_pydantic_validators_that_refuse_a_schema_valid_value_raise_usage_error() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Even(pydantic.BaseModel):
        n: int

        @pydantic.field_validator("n")
        @classmethod
        def even(cls, n: int) -> int:
            if n % 2:
                raise ValueError("n must be even")
            return n

    with pytest.raises(UsageError, match="(?s)cannot build Even from the value: .*n must be even"):
        OutputType.of(Even).parse({"n": 3})


def test_raw_schema_dict_is_used_as_given() -> None:
    schema = {"title": "Verdict", "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    output = OutputType.of(schema)
    assert output.name == "Verdict"
    assert output.python_type is None
    assert output.schema == schema
    assert output.parse({"ok": True, "why": "extra keys are allowed here"}) == {"ok": True,
                                                                                "why": "extra keys are allowed here"}
    assert OutputType.of({"type": "array"}).name == "output"


def test_of_returns_an_output_type_as_is_and_equal_specs_give_equal_types() -> None:
    output = OutputType.of(Order)
    assert OutputType.of(output) is output
    assert OutputType.of(Order) == output
    assert hash(OutputType.of(Order)) == hash(output)
    assert OutputType.of(Order) != OutputType.of(Path)


def test_schema_is_a_copy() -> None:
    output = OutputType.of(Point)
    output.schema["properties"].clear()
    assert output.schema["required"] == ["x", "y"]
    assert output.errors({"x": 1}) == ["$: 'y' is a required property"]


@pytest.mark.parametrize(
    ("spec", "given"),
    [
        (int, "the class builtins.int"),
        (str, "the class builtins.str"),
        (Point(1, 2), "Point(x=1, y=2, label='', tags=[]), an instance of Point"),
        (list[Point], "an instance of GenericAlias"),
        ("Point", "'Point', an instance of str"),
        (None, "None, an instance of NoneType"),
    ],
)
def test_anything_else_is_refused_naming_what_was_given_and_what_is_accepted(spec: Any, given: str) -> None:
    with pytest.raises(UsageError) as caught:
        OutputType.of(spec)
    message = str(caught.value)
    assert "an attrs class, a dataclass, a TypedDict, a pydantic model or a JSON-schema dict" in message
    assert given in message


def test_invalid_json_schema_is_refused() -> None:
    with pytest.raises(UsageError, match="not a valid JSON schema"):
        OutputType.of({"type": "thing"})
    with pytest.raises(UsageError, match="is not JSON"):
        OutputType.of({"type": "object", "default": object()})


def test_types_a_schema_cannot_express_are_refused_naming_the_field() -> None:
    @attrs.frozen
    class ByNumber:
        rows: dict[int, Item]

    @dataclasses.dataclass
    class Odd:
        when: complex

    with pytest.raises(UsageError, match="field 'rows': dictionary keys must be str"):
        OutputType.of(ByNumber)
    with pytest.raises(UsageError, match="Node refers to itself"):
        OutputType.of(Node)
    with pytest.raises(UsageError, match="output type Odd, field 'when': cannot describe type"):
        OutputType.of(Odd)


def test_annotated_notes_and_tuples_of_records() -> None:
    @dataclasses.dataclass
    class Segment:
        ends: tuple[Point, Point]
        kind: Annotated[Item | None, "what it carries"] = None

    output = OutputType.of(Segment)
    ends = output.schema["properties"]["ends"]
    assert ends["minItems"] == ends["maxItems"] == 2
    assert output.schema["properties"]["kind"]["description"] == "what it carries"
    value = output.parse({"ends": [{"x": 0, "y": 0}, {"x": 1, "y": 1}], "kind": {"name": "pipe", "price": 1}})
    assert value == Segment((Point(0.0, 0.0), Point(1.0, 1.0)), Item("pipe", 1.0))


# -- extract -------------------------------------------------------------------------------------------------

POINT = OutputType.of(Point)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"x": 1, "y": 2}', {"x": 1, "y": 2}),
        ('\n  [1, 2]  \n', [1, 2]),
        ("42", 42),
        ("null", None),
        ('Here it is:\n```json\n{"x": 1, "y": 2}\n```\nDone.', {"x": 1, "y": 2}),
        ('First:\n```json\n{"x": 0, "y": 0}\n```\nBetter:\n```JSON\n{"x": 9, "y": 9}\n```', {"x": 9, "y": 9}),
        ('```\n{"x": 1, "y": 2}\n```', {"x": 1, "y": 2}),
        ('```{"x": 1, "y": 2}\n```', {"x": 1, "y": 2}),
        ('```python\nd = {"x": 5}\n```\n```json\n{"x": 1, "y": 2}\n```', {"x": 1, "y": 2}),
        ('```json\n{"x": 1,}\n```\nor rather ```json\n{"x": 3, "y": 4}\n```', {"x": 3, "y": 4}),
        ('The point is {"x": 1, "y": 2, "tags": ["a"]} as asked.', {"x": 1, "y": 2, "tags": ["a"]}),
        ('As [1] shows, the point is {"x": 1, "y": 2}.', {"x": 1, "y": 2}),
        ('I first thought {"x": 0, "y": 0} but it is {"x": 1, "y": 2}.', {"x": 1, "y": 2}),
        ('Broken {x} then {"x": 1, "y": 2}', {"x": 1, "y": 2}),
        ('Not a point: {"a": {"b": 1}} (see [2])', {"a": {"b": 1}}),
    ],
)
def test_extract_finds_the_json_value(text: str, expected: Any) -> None:
    assert POINT.extract(text) == expected


TRAILING_COMMA = '{"x": 1,\n}'


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("The point is at one, two.", 'the answer holds no JSON value; it begins: "The point is at one, two."'),
        ("", 'the answer holds no JSON value; it begins: ""'),
        ('{"x": 1 "y": 2}', "it looks like JSON but does not parse (Expecting ',' delimiter at line 1, column 9)"),
        (f"Here:\n```json\n{TRAILING_COMMA}\n```", f"its fenced block does not parse ({json_error(TRAILING_COMMA)})"),
        ("Use {x: 1}.", "the { at character 4 does not start valid JSON"),
        ('```json\n{"x": [1, 2], "y": 2,}\n```', "its fenced block does not parse"),
        ("[" * 100_000, "nested too deeply"),
    ],
)
def test_extract_says_why_there_is_no_json_value(text: str, why: str) -> None:
    with pytest.raises(UsageError) as caught:
        POINT.extract(text)
    assert str(caught.value).startswith("the answer holds no JSON value")
    assert why in str(caught.value)


def test_extract_quotes_only_the_start_of_a_long_answer() -> None:
    with pytest.raises(UsageError) as caught:
        POINT.extract("word " * 500)
    assert str(caught.value).endswith('it begins: "' + ("word " * 32)[:160] + '…"')


def test_extract_takes_text_only() -> None:
    with pytest.raises(UsageError, match="extract reads a model's reply as str"):
        POINT.extract(b"{}")  # type: ignore[arg-type]


# -- errors and parse ----------------------------------------------------------------------------------------


def test_errors_name_each_problem_by_its_path() -> None:
    value = {
        "items": [{"name": "a", "price": 1}, {"name": "b", "price": 2}, {"name": "c", "price": "x"}],
        "size": "xl",
        "by_code": {"a b": {"name": "d", "price": 1, "colour": "red"}},
        "extra": True,
    }
    assert OutputType.of(Order).errors(value) == [
        "$: Additional properties are not allowed ('extra' was unexpected)",
        "$.by_code[\"a b\"]: Additional properties are not allowed ('colour' was unexpected)",
        "$.items[2].price: 'x' is not of type 'number'",
        "$.size: 'xl' is not one of ['s', 'm', 'l']",
    ]
    assert OutputType.of(Order).errors(ORDER) == []


def test_parse_refuses_an_invalid_value_listing_its_problems() -> None:
    with pytest.raises(UsageError) as caught:
        OutputType.of(Order).parse({"items": [{"name": "a"}], "size": 3})
    assert str(caught.value) == (
        "the value does not match the Order schema: $.items[0]: 'price' is a required property; "
        "$.size: 3 is not one of ['s', 'm', 'l']; $.size: 3 is not of type 'string'"
    )


def test_parse_reports_a_class_that_refuses_a_schema_valid_value() -> None:
    @attrs.frozen
    class Positive:
        n: int = attrs.field(validator=attrs.validators.gt(0))

    with pytest.raises(UsageError, match="cannot build Positive from the value: 'n' must be > 0"):
        OutputType.of(Positive).parse({"n": -1})
