"""``FunctionVerifier``: a sync or async function as a verifier, whatever verdict form it returns."""

import functools
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from loop import Role, State, Text, UsageError
from verifier import FunctionVerifier, Result, Status, Verifier, failed, passed, run_all

STATE = State().append(Role.USER, Text("2+2?")).append(Role.ASSISTANT, Text("4"))


def is_four(state: State) -> bool:
    return state.answer == "4"


async def is_four_async(state: State) -> bool:
    await anyio.lowlevel.checkpoint()
    return state.answer == "4"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (Result("x", Status.PASS, "fine"), Result("check", Status.PASS, "fine")),
        (passed(), Result("check", Status.PASS)),
        (passed("all good"), Result("check", Status.PASS, "all good")),
        (failed("the answer is 5"), Result("check", Status.FAIL, "the answer is 5")),
        (Status.PASS, Result("check", Status.PASS)),
        (True, Result("check", Status.PASS)),
        (False, Result("check", Status.FAIL, "The check `check` reported FAIL.")),
        (Status.FAIL, Result("check", Status.FAIL, "The check `check` reported FAIL.")),
        (Status.ERROR, Result("check", Status.ERROR, "The check `check` reported ERROR.")),
        (failed(""), Result("check", Status.FAIL, "The check `check` reported FAIL.")),
    ],
)
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
async def test_every_verdict_form_becomes_a_result_named_after_the_verifier(
    value: Any, expected: Result, asynchronous: bool
) -> None:
    async def async_check(state: State) -> Any:
        return value

    check = async_check if asynchronous else (lambda state: value)
    assert await FunctionVerifier(check, name="check").verify(STATE) == expected


@pytest.mark.parametrize("value", [None, 1, "pass", [True]])
async def test_anything_else_is_an_error_saying_what_came_back(value: Any) -> None:
    result = await FunctionVerifier(lambda state: value, name="odd").verify(STATE)
    assert result.status is Status.ERROR
    assert result.name == "odd"
    assert f"returned {value!r}; expected a Result, Status or bool" in result.report


async def test_the_function_sees_the_state() -> None:
    seen = []
    verifier = FunctionVerifier(lambda state: seen.append(state) or True, name="spy")
    await verifier.verify(STATE)
    assert seen == [STATE]


async def test_sync_and_async_functions_judge_the_same() -> None:
    wrong = STATE.append(Role.USER, Text("and 3+3?")).append(Role.ASSISTANT, Text("7"))
    for fn in (is_four, is_four_async):
        verifier = FunctionVerifier(fn)
        assert (await verifier.verify(STATE)).status is Status.PASS
        assert (await verifier.verify(wrong)).status is Status.FAIL


async def test_an_exception_propagates_and_run_all_makes_it_an_error() -> None:
    def broken(state: State) -> bool:
        raise KeyError("answer")

    verifier = FunctionVerifier(broken)
    with pytest.raises(KeyError):
        await verifier.verify(STATE)
    (result,) = await run_all([verifier], STATE)
    assert (result.name, result.status) == ("broken", Status.ERROR)
    assert "KeyError" in result.report


def test_the_name_comes_from_the_function_or_from_name() -> None:
    assert FunctionVerifier(is_four).name == "is_four"
    assert FunctionVerifier(is_four, name="four").name == "four"
    assert FunctionVerifier(lambda state: True, name="inline").name == "inline"
    assert repr(FunctionVerifier(is_four)) == "FunctionVerifier(name='is_four')"


def test_it_satisfies_the_verifier_protocol() -> None:
    assert isinstance(FunctionVerifier(is_four), Verifier)


@pytest.mark.parametrize(
    "fn", [lambda state: True, functools.partial(is_four)], ids=["lambda", "partial"]
)
def test_a_function_without_a_name_needs_name(fn: Any) -> None:
    with pytest.raises(UsageError, match="needs a name="):
        FunctionVerifier(fn)


@pytest.mark.parametrize("name", [5, b"bytes", ["n"]])
def test_name_must_be_a_string(name: Any) -> None:
    with pytest.raises(UsageError, match="name= must be a string"):
        FunctionVerifier(is_four, name=name)


@pytest.mark.parametrize("fn", [None, "is_four", 3])
def test_fn_must_be_callable(fn: Any) -> None:
    with pytest.raises(UsageError, match="function taking a State"):
        FunctionVerifier(fn, name="x")
