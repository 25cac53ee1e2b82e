"""Hostile argument text (nested too deeply, numbers JSON cannot carry, lone surrogates) is refused with a message,
never an exception: ``ArgumentChecker.parse`` reads what a model or a sandboxed program sent."""

import pytest

from loop import ArgumentChecker, Role, State, Step, Text, tool
from loop._argcheck import MAX_JSON_DEPTH
from provider import Scripted, tool_call

ANYTHING = ArgumentChecker({"type": "object"})
DEEP = 50_000


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@tool
def echo(text: str) -> str:
    """Give the text back."""
    return text


def nested(depth: int) -> str:
    """Arguments whose value ``a`` nests arrays so that the whole text is ``depth`` levels deep."""
    return '{"a": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


@pytest.mark.parametrize(("raw", "words"), [
    ("[" * DEEP, f"nested more than {MAX_JSON_DEPTH} levels deep"),
    ("{" * DEEP, f"nested more than {MAX_JSON_DEPTH} levels deep"),
    (nested(DEEP), f"nested more than {MAX_JSON_DEPTH} levels deep"),
    (nested(MAX_JSON_DEPTH + 1), f"nested more than {MAX_JSON_DEPTH} levels deep"),
    ('{"a": 1e999999}', "the number 1e999999 is too large for JSON"),
    ('{"a": -1e999999}', "the number -1e999999 is too large for JSON"),
    ('{"a": NaN}', "NaN is not JSON"),
    ('{"a": -Infinity}', "-Infinity is not JSON"),
    ('{"a": 1' + "0" * 99_999 + "}", "an integer of 100,000 digits (at most 4,300 are taken)"),
    ('{"a": -' + "9" * 4_301 + "}", "an integer of 4,301 digits"),
    ('{"a": "\\ud800"}', "a lone UTF-16 surrogate"),
    ('{"a": ["ok", "\\udfff and more"]}', "a lone UTF-16 surrogate"),
    ('{"\\ud83d": 1}', "a lone UTF-16 surrogate"),
    ('{"a": "\ud800"}', "a lone UTF-16 surrogate"),  # the raw text itself holds one
])
def test_hostile_argument_text_is_refused_with_a_message(raw: str, words: str) -> None:
    problem = ANYTHING.parse(raw)
    assert isinstance(problem, str) and words in problem
    assert problem.startswith("the arguments are not valid JSON (")


@pytest.mark.parametrize(("raw", "value"), [
    (nested(MAX_JSON_DEPTH), None),
    ('{"a": "' + "[" * DEEP + '"}', "[" * DEEP),  # brackets inside strings do not nest
    ('{"a": "\\"[[[", "b": "\\\\"}', '"[[['),
    ('{"a": 1e308, "b": -2.5e-300}', 1e308),
    ('{"a": ' + "9" * 4_300 + "}", int("9" * 4_300)),
    ('{"a": "\\ud83d\\ude00"}', "\U0001F600"),  # a surrogate pair is one character
    ('{"a": "\U0001F600 caf\u00e9"}', "\U0001F600 caf\u00e9"),
])
def test_deep_but_allowed_and_unusual_but_valid_text_is_taken(raw: str, value: object) -> None:
    parsed = ANYTHING.parse(raw)
    assert isinstance(parsed, dict)
    if value is not None:
        assert parsed["a"] == value


def test_loads_reads_bytes_and_refuses_what_utf8_cannot_carry() -> None:
    assert ArgumentChecker.loads(b'{"a": "caf\xc3\xa9"}') == {"a": "caf\u00e9"}
    for data, words in [(b'{"a": "\xff"}', "not UTF-8"), (b'{"a": "\xed\xa0\x80"}', "not UTF-8"),
                        (b"[" * DEEP, "nested more than"), (b"{nope", "Expecting property name")]:
        with pytest.raises(ValueError, match=words):
            ArgumentChecker.loads(data)


def test_schema_checked_arguments_still_say_what_is_wrong() -> None:
    checker = ArgumentChecker(add.spec.parameters)
    assert checker.parse('{"a": 1, "b": 2}') == {"a": 1, "b": 2}
    problem = checker.parse('{"a": 1e999999, "b": 2}')
    assert isinstance(problem, str) and "too large for JSON" in problem


@pytest.mark.parametrize(("t", "raw", "words"), [
    (add, "[" * DEEP, "nested more than"),
    (add, '{"a": ' + "[" * DEEP + "1" + "]" * DEEP + ', "b": 1}', "nested more than"),
    (add, '{"a": 1e999999, "b": 1}', "too large for JSON"),
    (add, '{"a": 1' + "0" * 99_999 + ', "b": 1}', "100,000 digits"),
    (echo, '{"text": "\\ud800"}', "a lone UTF-16 surrogate"),
])
async def test_a_models_hostile_tool_call_becomes_an_error_result(t: object, raw: str, words: str) -> None:
    start = State().append(Role.USER, Text("go"))
    step = Step(Scripted([[tool_call(t.spec.name, raw, id="x")], "done"]), tools=[t])  # type: ignore[attr-defined]
    state = await step.turn(start)
    (result,) = state[-1].tool_results
    assert result.is_error and words in result.content
    state = await step.turn(state)
    assert state.answer == "done"
