"""The quick argument check never accepts what the JSON Schema validator rejects, and it covers @tool schemas."""

import enum
import itertools
from typing import Annotated, Literal, Optional

import jsonschema
import pytest

from loop import tool
from loop._argcheck import ArgumentChecker, CheckedArguments, _object_check


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@tool
def everything(
    name: str,
    count: int,
    ratio: float,
    flag: bool,
    tags: list[str],
    scores: list[float],
    mode: Literal["fast", "slow"],
    color: Color,
    maybe: Optional[int] = None,
    note: Annotated[str, "a note"] = "",
    level: Literal[1, 2] = 1,
) -> str:
    """Takes one of everything."""
    return "ok"


@tool
def sets(ids: set[int], weights: frozenset[float], colors: set[Color], anything: set = frozenset()) -> str:
    """Takes sets."""
    return "ok"


VALUES = [None, True, False, 0, 1, 2, -3, 1.0, 2.5, "", "red", "fast", "x", [], [1], ["a"], [1.5, 2], {}, {"a": 1},
          [1, 1], [1, 1.0], [1, True], [0, False], ["red", "red"], ["red", "blue"], [[1], [1]], [None, None]]


def schemas() -> list[dict]:
    return [
        dict(everything.spec.parameters),
        dict(sets.spec.parameters),
        {"type": "object", "properties": {"a": {"type": "integer"}}},
        {"type": "object", "properties": {"a": {"enum": [1, "1", None]}}, "required": ["a"]},
        {"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
         "additionalProperties": False},
        {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "number"}}}},
        {"type": "object", "properties": {"a": {}}, "required": ["a"], "additionalProperties": False},
    ]


@pytest.mark.parametrize("schema", schemas())
def test_the_quick_check_is_never_more_lenient_than_the_validator(schema: dict) -> None:
    quick = _object_check(schema)
    assert quick is not None
    validator = jsonschema.Draft202012Validator(schema)
    names = list(schema["properties"])[:3] + ["extra"]
    checked = 0
    for keys in itertools.chain.from_iterable(itertools.combinations(names, n) for n in range(len(names) + 1)):
        for values in itertools.islice(itertools.product(VALUES, repeat=len(keys)), 400):
            arguments = dict(zip(keys, values))
            if quick(arguments):
                assert validator.is_valid(arguments), (schema, arguments)
            checked += 1
    assert checked > 100


def test_tool_schemas_take_the_quick_path_for_good_arguments() -> None:
    quick = _object_check(everything.spec.parameters)
    assert quick is not None
    good = {"name": "n", "count": 3, "ratio": 0.5, "flag": True, "tags": ["a"], "scores": [1, 2.5],
            "mode": "fast", "color": "red", "maybe": None, "level": 2}
    assert quick(good)
    assert not quick({**good, "count": True})
    assert not quick({**good, "color": "green"})
    assert not quick({**good, "level": True})
    assert not quick({k: v for k, v in good.items() if k != "name"})
    assert not quick({**good, "unexpected": 1})


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "string", "minLength": 2}}},
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"type": "string"}}},
        {"type": "object", "patternProperties": {"^a": {"type": "string"}}},
        {"type": "object", "properties": {"a": {"type": ["string", "null"]}}},
        {"type": "object", "additionalProperties": {"type": "string"}},
    ],
)
def test_schemas_beyond_the_quick_check_go_to_the_validator(schema: dict) -> None:
    assert _object_check(schema) is None
    checker = ArgumentChecker(schema)
    assert isinstance(checker.parse('{"a": 1}'), str)


def test_the_validator_has_the_last_word_when_the_quick_check_declines() -> None:
    # JSON Schema counts 2.0 as an integer; the quick check does not, so the validator decides.
    checker = ArgumentChecker({"type": "object", "properties": {"n": {"type": "integer"}}})
    assert checker.parse('{"n": 2.0}') == {"n": 2.0}
    assert "not of type 'integer'" in checker.parse('{"n": "2"}')


def test_set_schemas_take_the_quick_path_and_refuse_repeats() -> None:
    quick = _object_check(sets.spec.parameters)
    assert quick is not None
    good = {"ids": [1, 2], "weights": [1, 2.5], "colors": ["red", "blue"], "anything": [1, True, "1", None]}
    assert quick(good)
    for repeated in ({"ids": [1, 1]}, {"weights": [1, 1.0]}, {"colors": ["red", "red"]}, {"anything": [[1], [1]]}):
        assert not quick({**good, **repeated})
    checker = ArgumentChecker(sets.spec.parameters)
    assert checker.check({**good, "anything": [[1], [2]]}) == {**good, "anything": [[1], [2]]}
    assert checker.check({**good, "weights": [2, 2.0]}) == (
        "the arguments do not match the tool's schema: at weights: [2, 2.0] holds 2.0 more than once; "
        "it is a set, so list each value once")


def test_arguments_that_pass_are_marked_with_the_schema_they_passed() -> None:
    checker = ArgumentChecker(everything.spec.parameters)
    assert checker.schema is everything.spec.parameters
    parsed = checker.parse('{"name": "n", "count": 1, "ratio": 1, "flag": true, "tags": [], "scores": [], '
                           '"mode": "slow", "color": "blue"}')
    assert type(parsed) is CheckedArguments and parsed.schema is everything.spec.parameters
    assert parsed["color"] == "blue" and isinstance(parsed, dict)
    assert checker.check([]) == "the arguments must be a JSON object, got list"
