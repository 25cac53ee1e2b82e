"""``@tool``: typed, documented functions become tools with JSON-schema parameters."""

import enum
import threading
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Optional

import pytest

from loop import (
    ArgumentChecker,
    FunctionTool,
    Step,
    Tool,
    ToolResult,
    ToolSpec,
    UsageError,
    index_tools,
    tool,
)
from provider import Scripted
from tests.loop.one_call import run_one

class Unit(enum.Enum):
    CELSIUS = "c"
    FAHRENHEIT = "f"


def test_schema_from_type_hints() -> None:
    @tool
    def everything(
        s: str,
        i: int,
        f: float,
        b: bool,
        numbers: list[int],
        weights: dict[str, float],
        mode: Literal["fast", "slow"],
        unit: Unit,
        maybe: Optional[int],
        noted: Annotated[str, "what to look for"],
        limit: int = 10,
        fallback: Unit = Unit.CELSIUS,
        label: str | None = None,
        anything: Any = "x",
    ) -> str:
        return ""

    params = everything.spec.parameters
    assert params["type"] == "object" and params["additionalProperties"] is False
    assert params["required"] == ["s", "i", "f", "b", "numbers", "weights", "mode", "unit", "maybe", "noted"]
    assert params["properties"] == {
        "s": {"type": "string"},
        "i": {"type": "integer"},
        "f": {"type": "number"},
        "b": {"type": "boolean"},
        "numbers": {"type": "array", "items": {"type": "integer"}},
        "weights": {"type": "object", "additionalProperties": {"type": "number"}},
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "unit": {"enum": ["c", "f"]},
        "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "noted": {"type": "string", "description": "what to look for"},
        "limit": {"type": "integer", "default": 10},
        "fallback": {"enum": ["c", "f"], "default": "c"},
        "label": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "anything": {"default": "x"},
    }


def test_description_and_parameter_notes_from_a_google_docstring() -> None:
    @tool
    def weather(city: str, days: int = 1) -> str:
        """Look up the weather forecast.

        Uses the national service.

        Args:
            city (str): The city to look up,
                in any language.
            days: How many days ahead.

        Returns:
            The forecast.
        """
        return ""

    assert weather.spec.name == "weather"
    assert weather.spec.description == "Look up the weather forecast.\n\nUses the national service."
    props = weather.spec.parameters["properties"]
    assert props["city"]["description"] == "The city to look up, in any language."
    assert props["days"]["description"] == "How many days ahead."


def test_parameter_notes_from_a_sphinx_docstring() -> None:
    @tool
    def convert(value: float, unit: Unit) -> float:
        """Convert a temperature.

        :param value: the temperature
            to convert
        :param Unit unit: the unit it is in
        :returns: the converted value
        """
        return value

    assert convert.spec.description == "Convert a temperature."
    props = convert.spec.parameters["properties"]
    assert props["value"]["description"] == "the temperature to convert"
    assert props["unit"]["description"] == "the unit it is in"


def test_annotated_description_wins_over_the_docstring() -> None:
    @tool
    def find(q: Annotated[str, "search terms"]) -> str:
        """Find.

        Args:
            q: query
        """
        return q

    assert find.spec.parameters["properties"]["q"]["description"] == "search terms"


def test_name_description_and_timeout_can_be_given() -> None:
    @tool(name="lookup.v2", description="Look something up.", timeout=2.5)
    def look(q: str) -> str:
        """Ignored docstring."""
        return q

    assert look.spec == ToolSpec("lookup.v2", "Look something up.", look.spec.parameters)
    assert look.name == "lookup.v2" and look.timeout == 2.5
    assert repr(look) == "FunctionTool('lookup.v2')"


def test_tool_specs_compare_by_value_including_parameters() -> None:
    schema = {"type": "object", "properties": {}}
    assert ToolSpec("t", "d", schema) == ToolSpec("t", "d", dict(schema))
    assert ToolSpec("t", "d", schema) != ToolSpec("t", "d", {"type": "object", "properties": {"x": {}}})
    assert hash(ToolSpec("t", "d", schema)) == hash(ToolSpec("t", "d", {}))


def test_an_undocumented_tool_is_described_by_its_name() -> None:
    @tool
    def ping() -> str:
        return "pong"

    assert ping.spec.description == "ping"
    assert ping.spec.parameters == {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    assert ping.timeout is None


async def test_decorated_functions_stay_callable() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    @tool
    async def shout(text: str) -> str:
        """Shout."""
        return text.upper()

    assert isinstance(add, FunctionTool) and isinstance(add, Tool)
    assert add(2, 3) == 5 and add(a=1, b=1) == 2
    assert await shout("hey") == "HEY"
    assert add.__name__ == "add" and add.__doc__ == "Add."
    assert await add.call({"a": 4, "b": 5}) == 9
    assert await shout.call({"text": "x"}) == "X"


async def test_sync_tools_run_in_a_worker_thread_unless_not_blocking() -> None:
    @tool
    def where() -> int:
        return threading.get_ident()

    @tool(blocking=False)
    def here() -> int:
        return threading.get_ident()

    loop_thread = threading.get_ident()
    assert await where.call({}) != loop_thread
    assert await here.call({}) == loop_thread
    assert (await run_one(where, {})).content != str(loop_thread)
    assert (await run_one(here, {})).content == str(loop_thread)


async def test_enum_parameters_receive_the_enum_member() -> None:
    seen: list[Any] = []

    @tool
    def set_unit(unit: Unit, also: Optional[Unit] = None, noted: Annotated[Unit, "u"] = Unit.CELSIUS) -> str:
        seen.extend([unit, also, noted])
        return unit.name

    result = await run_one(set_unit, {"unit": "f", "also": "c", "noted": "f"})
    assert result == ToolResult("x", "set_unit", "FAHRENHEIT")
    assert seen == [Unit.FAHRENHEIT, Unit.CELSIUS, Unit.FAHRENHEIT]
    seen.clear()
    assert not (await run_one(set_unit, {"unit": "c", "also": None})).is_error
    assert seen == [Unit.CELSIUS, None, Unit.CELSIUS]
    assert (await run_one(set_unit, {"unit": "kelvin"})).is_error


class Upper:
    """A hand-written tool: any object with a ``ToolSpec`` and an async ``call``."""

    spec = ToolSpec("upper", "Upper-case text.", {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
    })
    timeout = 5.0

    async def call(self, arguments: Mapping[str, Any]) -> str:
        return str(arguments["text"]).upper()


async def test_a_hand_written_tool_works_in_a_step() -> None:
    upper = Upper()
    assert isinstance(upper, Tool)
    assert await run_one(upper, {"text": "abc"}) == ToolResult("x", "upper", "ABC")
    assert "'text' is a required property" in (await run_one(upper, {})).content


def test_a_tool_with_an_invalid_schema_is_refused_by_the_step() -> None:
    class Broken(Upper):
        spec = ToolSpec("broken", "Bad schema.", {"type": "no-such-type"})

    with pytest.raises(UsageError, match="not a valid JSON schema"):
        Step(Scripted([]), tools=[Broken()])


def no_annotation(x) -> str:  # type: ignore[no-untyped-def]
    return ""


def star_args(*items: int) -> str:
    return ""


def star_kwargs(**options: str) -> str:
    return ""


def positional_only(x: int, /) -> str:
    return ""


def unsupported(when: bytes) -> str:
    return ""


def int_keys(counts: dict[int, str]) -> str:
    return ""


def unresolved(x: "NoSuchType") -> str:  # type: ignore[name-defined]  # noqa: F821
    return ""


BAD_FUNCTIONS = {
    "missing annotation": (no_annotation, "parameter 'x': has no type annotation"),
    "*args": (star_args, "*args and **kwargs cannot be described"),
    "**kwargs": (star_kwargs, "*args and **kwargs cannot be described"),
    "positional-only": (positional_only, "positional-only parameters"),
    "unsupported type": (unsupported, "cannot describe type <class 'bytes'>"),
    "non-str dict keys": (int_keys, "dictionary keys must be str"),
    "unresolvable hint": (unresolved, "cannot read its type hints"),
}


@pytest.mark.parametrize(("fn", "message"), BAD_FUNCTIONS.values(), ids=BAD_FUNCTIONS.keys())
def test_functions_that_cannot_be_described_are_refused(fn: Any, message: str) -> None:
    with pytest.raises(UsageError, match="tool '") as caught:
        tool(fn)
    assert message in str(caught.value)


@pytest.mark.parametrize("name", ["has space", "slash/name", "wetter_für_köln", 5, None])
def test_bad_names_are_refused(name: Any) -> None:
    nameless = lambda: ""  # noqa: E731 - its __name__ is "<lambda>", which is not a tool name either
    with pytest.raises(UsageError, match="tool name must be letters, digits"):
        tool(name=name)(nameless)


@pytest.mark.parametrize("timeout", [0, -1, "5", float("nan")])
def test_bad_timeouts_are_refused(timeout: Any) -> None:
    with pytest.raises(UsageError, match="timeout must be a positive number of seconds"):
        tool(timeout=timeout)(star_kwargs)


def test_non_callables_are_refused() -> None:
    with pytest.raises(UsageError, match="needs a function"):
        FunctionTool("not a function")  # type: ignore[arg-type]


# -- sets ------------------------------------------------------------------------------------------------------


async def test_set_parameters_say_unique_items_and_receive_a_set() -> None:
    seen: list[Any] = []

    @tool
    def tag(ids: set[int], units: frozenset[Unit], pairs: Optional[set[tuple[int, int]]] = None) -> str:
        """Tag things."""
        seen.extend([ids, units, pairs])
        return "ok"

    properties = tag.spec.parameters["properties"]
    assert properties["ids"] == {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    assert properties["units"] == {"type": "array", "items": {"enum": ["c", "f"]}, "uniqueItems": True}
    result = await run_one(tag, {"ids": [3, 1], "units": ["f"], "pairs": [[1, 2], [2, 1]]})
    assert not result.is_error, result.content
    assert seen == [{1, 3}, frozenset({Unit.FAHRENHEIT}), {(1, 2), (2, 1)}]
    assert type(seen[0]) is set and type(seen[1]) is frozenset
    seen.clear()
    assert not (await run_one(tag, {"ids": [], "units": [], "pairs": None})).is_error
    assert seen == [set(), frozenset(), None]


async def test_a_set_argument_with_duplicates_is_refused_before_the_function_runs() -> None:
    ran: list[Any] = []

    @tool
    def tag(ids: set[int]) -> str:
        """Tag things."""
        ran.append(ids)
        return "ok"

    result = await run_one(tag, {"ids": [1, 2, 1]})
    assert result.is_error and ran == []
    assert "at ids: [1, 2, 1] holds 1 more than once; it is a set, so list each value once" in result.content
    with pytest.raises(UsageError, match="holds 1 more than once"):
        await tag.call({"ids": [1, 2, 1]})
    assert ran == []


# -- calling a tool directly --------------------------------------------------------------------------------------


@tool
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"a": "1", "b": 2}, (r"^tool 'add': the arguments do not match the tool's schema: "
                              r"at a: '1' is not of type 'integer'$")),
        ({"b": 2}, r"'a' is a required property"),
        ({"a": 1, "c": 2}, r"\('c' was unexpected\)"),
        ({"a": True}, r"at a: True is not of type 'integer'"),
    ],
)
async def test_calling_a_tool_directly_checks_its_arguments(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        await add.call(arguments)


async def test_calling_a_tool_directly_refuses_what_is_not_arguments() -> None:
    with pytest.raises(UsageError, match="tool 'add' takes its arguments as a mapping of names to values"):
        await add.call([1, 2])  # type: ignore[arg-type]


async def test_calling_a_tool_directly_takes_python_values_the_function_takes() -> None:
    @tool
    def describe(unit: Unit, ids: set[int], pair: tuple[int, int], names: list[str]) -> str:
        """Describe."""
        return f"{unit.name} {sorted(ids)} {pair} {names}"

    arguments = {"unit": Unit.CELSIUS, "ids": frozenset({2, 1}), "pair": (1, 2), "names": ("x",)}
    assert await describe.call(arguments) == "CELSIUS [1, 2] (1, 2) ('x',)"
    assert await describe.call({"unit": "f", "ids": [1], "pair": [1, 2], "names": []}) == "FAHRENHEIT [1] [1, 2] []"


async def test_arguments_a_step_checked_are_not_checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[Any] = []
    real = ArgumentChecker.check

    def counting(self: ArgumentChecker, arguments: Any) -> Any:
        checked.append(arguments)
        return real(self, arguments)

    monkeypatch.setattr(ArgumentChecker, "check", counting)
    assert (await run_one(add, {"a": 1, "b": 2})).content == "3"
    assert checked == [{"a": 1, "b": 2}]
    assert await add.call({"a": 1}) == 1
    assert len(checked) == 2


# -- one tool without a list ---------------------------------------------------------------------------------------


def test_a_step_takes_one_tool_without_a_list() -> None:
    assert Step(Scripted([]), tools=add).tools == (add,)
    upper = Upper()
    assert index_tools(upper, "here") == {"upper": upper}


@pytest.mark.parametrize("tools", [{"add": add}, "add", add.__wrapped__, None])
def test_what_is_neither_a_tool_nor_a_list_of_tools_is_refused(tools: Any) -> None:
    with pytest.raises(UsageError, match=r"^tools takes a Tool or a list of tools, got "):
        index_tools(tools, "here")


async def test_a_tool_of_ones_own_sets_its_time_limit_as_a_timed_tool() -> None:
    import anyio

    from loop import TimedTool, ToolCall, ToolPipeline, ToolSpec, tool_timeout

    class Slow:
        spec = ToolSpec("slow", "Waits.", {"type": "object", "properties": {}})
        timeout = 0.05

        async def call(self, arguments: object) -> str:
            await anyio.sleep(5)
            return "never"

    class Untimed:
        spec = ToolSpec("untimed", "Answers.", {"type": "object", "properties": {}})

        async def call(self, arguments: object) -> str:
            return "ok"

    assert isinstance(Slow(), TimedTool) and not isinstance(Untimed(), TimedTool)
    assert tool_timeout(Slow(), 60) == 0.05 and tool_timeout(Untimed(), 60) == 60
    with anyio.fail_after(2):
        result = await ToolPipeline([Slow(), Untimed()]).call(ToolCall("c1", "slow", "{}"))
    assert result.is_error and "timed out after 0.05 seconds" in result.content
