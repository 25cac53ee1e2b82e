"""``SchemaVerifier``: PASS for an answer holding valid JSON, FAIL with a report a model can act on."""

import dataclasses
import json

import attrs
import pytest

from loop import OutputType, Role, State, Text, UsageError
from tests.json_errors import json_error
from verifier import Result, SchemaVerifier, Status, Verifier, run_all
from verifier.testing import check_verifier


@dataclasses.dataclass
class Line:
    name: str
    price: float


@dataclasses.dataclass
class Bill:
    lines: list[Line]
    total: float


def answered(text: str) -> State:
    return State().append(Role.USER, Text("Bill me.")).append(Role.ASSISTANT, Text(text))


GOOD = answered('Here is the bill:\n```json\n{"lines": [{"name": "tea", "price": 3.5}], "total": 3.5}\n```')
SCHEMA_BLOCK = "```json\n" + json.dumps(OutputType.of(Bill).schema, indent=2) + "\n```"


def test_is_a_verifier_named_schema_by_default() -> None:
    check = SchemaVerifier(Bill)
    assert isinstance(check, Verifier)
    assert check.name == "schema"
    assert SchemaVerifier(Bill, name="bill").name == "bill"
    assert check.output == OutputType.of(Bill)


async def test_valid_json_passes() -> None:
    assert await SchemaVerifier(Bill).verify(GOOD) == Result("schema", Status.PASS)
    plain = answered('{"lines": [], "total": 0}')
    assert (await SchemaVerifier(Bill, name="bill").verify(plain)).status is Status.PASS


async def test_a_raw_schema_and_an_output_type_work_too() -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    assert (await SchemaVerifier(schema).verify(answered('{"ok": true}'))).ok
    assert not (await SchemaVerifier(OutputType.of(schema)).verify(answered('{"ok": "yes"}'))).ok


async def test_no_answer_fails_saying_so_and_showing_the_schema() -> None:
    result = await SchemaVerifier(Bill).verify(State().append(Role.USER, Text("Bill me.")))
    assert result.status is Status.FAIL
    assert result.report == (
        "There is no answer to check: the conversation has no assistant reply with text.\n\n"
        "Reply with one JSON value that follows this schema:\n\n" + SCHEMA_BLOCK
    )


async def test_an_answer_without_json_fails_quoting_its_start() -> None:
    result = await SchemaVerifier(Bill).verify(answered("The total is three fifty."))
    assert result.status is Status.FAIL
    assert result.report == (
        "The answer cannot be read as `Bill`: the answer holds no JSON value; "
        'it begins: "The total is three fifty.".\n\n'
        "Reply with one JSON value that follows this schema:\n\n" + SCHEMA_BLOCK
    )


async def test_invalid_json_fails_with_the_parse_error() -> None:
    broken = '{"lines": [], "total": 3,}'
    result = await SchemaVerifier(Bill).verify(answered(f"```json\n{broken}\n```"))
    assert result.status is Status.FAIL
    assert result.report.startswith(
        "The answer cannot be read as `Bill`: the answer holds no JSON value: its fenced block does not parse "
        f"({json_error(broken)}); "
        'it begins: "```json {"lines": [], "total": 3,} ```".\n\n'
    )
    assert result.report.endswith(SCHEMA_BLOCK)


async def test_validation_errors_are_listed_with_their_paths() -> None:
    answer = '{"lines": [{"name": "tea", "price": 1}, {"name": "cup", "price": "cheap"}], "tip": 1}'
    result = await SchemaVerifier(Bill).verify(answered(answer))
    assert result.status is Status.FAIL
    assert result.report == (
        "The answer's JSON does not match the `Bill` schema (3 problems):\n\n"
        "- $: 'total' is a required property\n"
        "- $: Additional properties are not allowed ('tip' was unexpected)\n"
        "- $.lines[1].price: 'cheap' is not of type 'number'\n\n"
        "Reply with one JSON value that follows this schema:\n\n" + SCHEMA_BLOCK
    )


async def test_one_problem_is_counted_in_the_singular() -> None:
    result = await SchemaVerifier(Bill).verify(answered('{"lines": []}'))
    assert "does not match the `Bill` schema (1 problem):\n\n- $: 'total' is a required property\n\n" in result.report


async def test_at_most_twenty_problems_are_listed() -> None:
    lines = [{"name": "x", "price": "free"} for _ in range(25)]
    result = await SchemaVerifier(Bill).verify(answered(json.dumps({"lines": lines, "total": 0})))
    assert "(25 problems)" in result.report
    assert "- $.lines[19].price: 'free' is not of type 'number'\n- … and 5 more\n\n" in result.report
    assert "$.lines[20]" not in result.report


async def test_a_class_that_refuses_a_schema_valid_value_fails() -> None:
    @attrs.frozen
    class Count:
        n: int = attrs.field(validator=attrs.validators.ge(0))

    result = await SchemaVerifier(Count).verify(answered('{"n": -2}'))
    assert result.status is Status.FAIL
    assert result.report.startswith(
        "The answer's JSON matches the schema but is refused: cannot build Count from the value: 'n' must be >= 0"
    )


async def test_runs_under_run_all() -> None:
    bad = answered('{"lines": "none", "total": 0}')
    (result,) = await run_all([SchemaVerifier(Bill, name="bill")], bad)
    assert result.name == "bill" and result.status is Status.FAIL
    assert "- $.lines: 'none' is not of type 'array'" in result.report


async def test_keeps_the_verifier_contract() -> None:
    await check_verifier(SchemaVerifier(Bill), passing=GOOD, failing=answered("no idea"))


def test_bad_settings_are_refused() -> None:
    with pytest.raises(UsageError, match="an output type must be"):
        SchemaVerifier(int)
    with pytest.raises(UsageError, match="name= must be a non-empty string"):
        SchemaVerifier(Bill, name="")
