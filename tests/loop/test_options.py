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


# -- sampling options and provider extras ----------------------------------------------------------------------


def test_sampling_options() -> None:
    options = Options(n=5, seed=-3, top_p=0.9, reasoning_effort="medium", extra={"top_k": 40})
    assert (options.n, options.seed, options.top_p, options.reasoning_effort) == (5, -3, 0.9, "medium")
    assert options.extra == {"top_k": 40}
    assert Options(top_p=1).top_p == 1 and Options(n=1).n == 1 and Options(seed=0).seed == 0
    for effort in ("minimal", "low", "medium", "high"):
        assert Options(reasoning_effort=effort).reasoning_effort == effort


@pytest.mark.parametrize("value", [0, -1, 2.0, "3", True])
def test_n_must_be_an_integer_of_at_least_1(value: Any) -> None:
    with pytest.raises(UsageError, match=r"n \(how many choices to return\) must be a positive integer or None"):
        Options(n=value)


@pytest.mark.parametrize("value", [1.5, "7", True, [1]])
def test_seed_must_be_an_integer(value: Any) -> None:
    with pytest.raises(UsageError, match="seed must be an integer"):
        Options(seed=value)


@pytest.mark.parametrize("value", [0, -0.1, 1.01, "0.9", True, float("nan")])
def test_top_p_must_be_above_0_and_at_most_1(value: Any) -> None:
    with pytest.raises(UsageError, match="top_p must be a number above 0 and at most 1"):
        Options(top_p=value)


@pytest.mark.parametrize("value", ["max", "HIGH", "", 1, ["low"]])
def test_reasoning_effort_must_be_a_known_level(value: Any) -> None:
    with pytest.raises(UsageError, match="reasoning_effort must be one of 'minimal', 'low', 'medium', 'high'"):
        Options(reasoning_effort=value)


@pytest.mark.parametrize(("value", "complaint"), [
    ([("top_k", 1)], "extra must be a mapping"),
    ("top_k=1", "extra must be a mapping"),
    ({1: "x"}, "keyed by body field names"),
    ({"": "x"}, "keyed by body field names"),
])
def test_extra_must_be_a_mapping_of_field_names(value: Any, complaint: str) -> None:
    with pytest.raises(UsageError, match=complaint):
        Options(extra=value)


def test_extra_is_a_read_only_copy() -> None:
    source = {"top_k": 40}
    options = Options(extra=source)
    source["top_k"] = 1
    assert options.extra == {"top_k": 40}
    with pytest.raises(TypeError):
        options.extra["top_k"] = 2  # type: ignore[index]


def test_options_with_different_extras_differ_and_stay_hashable() -> None:
    a = Options(extra={"top_k": 40})
    assert a == Options(extra={"top_k": 40})
    assert a != Options(extra={"top_k": 41}) and a != Options()
    assert hash(a) == hash(Options(extra={"top_k": 40}))
    assert hash(Options(n=2, seed=1, top_p=0.5, reasoning_effort="low")) == hash(
        Options(n=2, seed=1, top_p=0.5, reasoning_effort="low"))
    assert Options(seed=1) != Options(seed=2)


def test_merge_takes_every_sampling_option_the_override_sets() -> None:
    defaults = Options(model="m", n=2, seed=1, top_p=0.5, reasoning_effort="low", extra={"a": 1})
    merged = defaults.merge(Options(n=4, reasoning_effort="high"))
    assert merged == Options(model="m", n=4, seed=1, top_p=0.5, reasoning_effort="high", extra={"a": 1})


def test_merge_replaces_extra_whole() -> None:
    defaults = Options(extra={"a": 1, "b": 2})
    assert defaults.merge(Options(extra={"b": 3})).extra == {"b": 3}  # not merged key by key
    assert defaults.merge(Options(extra={})).extra == {}  # an empty mapping clears it
    assert defaults.merge(Options(temperature=0.1)).extra == {"a": 1, "b": 2}


def test_request_carries_the_run_path_last() -> None:
    assert Request(()).path == ""
    request = Request((), (), Options(), "SelfConsistency/sample 3/ReAct")
    assert request.path == "SelfConsistency/sample 3/ReAct"
    assert [f.name for f in attrs.fields(Request)][-1] == "path"


# -- what merge and construction keep while costing less -----------------------------------------------------------

_SETTINGS: dict[str, Any] = {"model": "m", "temperature": 0.5, "max_tokens": 9, "tool_choice": "none",
                             "output_schema": {"type": "object"}, "stop": ("END",), "n": 2, "seed": 4, "top_p": 0.5,
                             "reasoning_effort": "low", "extra": {"k": 1}, "run_tools": False}


@pytest.mark.parametrize("ours", [(), ("model", "temperature"), ("stop", "extra", "run_tools"), tuple(_SETTINGS)])
@pytest.mark.parametrize("theirs", [("model",), ("temperature", "n", "extra"), ("output_schema", "seed"),
                                    tuple(_SETTINGS)])
def test_merge_is_the_field_by_field_rule(ours: tuple[str, ...], theirs: tuple[str, ...]) -> None:
    mine = Options(**{name: _SETTINGS[name] for name in ours})
    other = {"model": "other", "temperature": 1.5, "max_tokens": 3, "tool_choice": "auto", "output_schema": {},
             "stop": ("X",), "n": 3, "seed": 5, "top_p": 0.25, "reasoning_effort": "high", "extra": {},
             "run_tools": True}
    given = Options(**{name: other[name] for name in theirs})
    merged = mine.merge(given)
    expected = {f.name: getattr(given if getattr(given, f.name) is not None else mine, f.name)
                for f in attrs.fields(Options)}
    assert merged == Options(**expected) and hash(merged) == hash(Options(**expected))
    assert type(merged) is Options
    assert mine == Options(**{name: _SETTINGS[name] for name in ours}), "merge changed the options it merged into"


def test_merge_into_options_that_set_nothing_is_the_override() -> None:
    given = Options(temperature=0.3, output_schema={"type": "object"})
    assert Options().merge(given) is given


def test_merge_of_something_else_than_options_checks_what_it_takes() -> None:
    override = type("Like", (), {f.name: None for f in attrs.fields(Options)})()
    override.temperature = 7  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match="temperature must be a number from 0 to 2"):
        Options().merge(override)
    override.temperature = 0.5  # type: ignore[attr-defined]
    merged = Options(model="m").merge(override)
    assert merged == Options(model="m", temperature=0.5) and type(merged) is Options


def test_fields_are_checked_in_field_order_on_construction_and_evolve() -> None:
    with pytest.raises(UsageError, match="temperature"):
        Options(temperature=5, max_tokens=0, n=0)
    with pytest.raises(UsageError, match="max_tokens must be a positive integer or None"):
        Options(max_tokens=0, n=0)
    with pytest.raises(UsageError, match="n \\(how many choices to return\\) must be a positive integer"):
        attrs.evolve(Options(model="m"), n=0)
    with pytest.raises(UsageError, match="run_tools must be True, False or None"):
        attrs.evolve(Options(), run_tools="yes")
