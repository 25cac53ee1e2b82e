"""``Options``: validated per-call settings that merge field by field."""

from typing import Any

import attrs
import pytest

from loop import Options, Request, UsageError, UseTool


def test_defaults_are_all_unset() -> None:
    options = Options()
    assert all(getattr(options, f.name) is None for f in attrs.fields(Options))


def test_valid_options() -> None:
    options = Options(model="m", temperature=0.7, max_tokens=100, tool_choice=UseTool("search"),
                      output_schema={"type": "object"}, stop=["END", "STOP"])
    assert options.tool_choice == UseTool("search")
    assert options.stop == ("END", "STOP")
    assert Options(stop="END").stop == ("END",)
    assert Options(temperature=0).temperature == 0 and Options(temperature=2).temperature == 2
    for choice in ("auto", "none", "required"):
        assert Options(tool_choice=choice).tool_choice == choice  # type: ignore[arg-type]


def test_options_are_frozen() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        Options().model = "m"  # type: ignore[misc]


@pytest.mark.parametrize("value", [-0.1, 2.01, "0.5", float("nan")])
def test_temperature_must_be_from_0_to_2(value: Any) -> None:
    with pytest.raises(UsageError, match="temperature must be a number from 0 to 2"):
        Options(temperature=value)


@pytest.mark.parametrize("value", [0, -5, 1.5, "100", True])
def test_max_tokens_must_be_a_positive_integer(value: Any) -> None:
    with pytest.raises(UsageError, match="max_tokens must be a positive integer"):
        Options(max_tokens=value)


@pytest.mark.parametrize("value", ["any", "AUTO", "", 1, {"name": "x"}])
def test_tool_choice_must_be_a_known_value_or_use_tool(value: Any) -> None:
    with pytest.raises(UsageError, match="tool_choice must be 'auto', 'none', 'required' or UseTool"):
        Options(tool_choice=value)


@pytest.mark.parametrize("name", ["", None, 3])
def test_use_tool_needs_a_tool_name(name: Any) -> None:
    with pytest.raises(UsageError, match="UseTool needs the name of a tool"):
        UseTool(name)


def test_merge_override_fields_win_and_unset_fields_keep_defaults() -> None:
    defaults = Options(model="base", temperature=0.2, max_tokens=500, stop=("X",))
    merged = defaults.merge(Options(temperature=0.7, tool_choice="none"))
    assert merged == Options(model="base", temperature=0.7, max_tokens=500, tool_choice="none", stop=("X",))
    assert defaults.temperature == 0.2 and defaults.tool_choice is None


def test_merge_zero_temperature_counts_as_set() -> None:
    assert Options(temperature=1.0).merge(Options(temperature=0)).temperature == 0


def test_merge_carries_output_schema() -> None:
    schema = {"type": "object", "properties": {"route": {"enum": ["a", "b"]}}}
    merged = Options(model="m").merge(Options(output_schema=schema))
    assert merged.output_schema == schema and merged.model == "m"


def test_options_asking_for_different_schemas_differ_and_stay_hashable() -> None:
    a = Options(output_schema={"type": "object"})
    assert a == Options(output_schema={"type": "object"})
    assert a != Options(output_schema={"type": "array"})
    assert a != Options()
    assert hash(a) == hash(Options(output_schema={"type": "object"}))


def test_merge_none_or_empty_returns_self() -> None:
    defaults = Options(model="m")
    assert defaults.merge(None) is defaults
    assert defaults.merge(Options()) is defaults


def test_request_defaults() -> None:
    request = Request(())
    assert request.tools == () and request.options == Options()
