"""``run_all`` and ``build_report``: verifiers run concurrently, failures become results, reports read well."""

from typing import Any

import anyio
import attrs
import pytest

import verifier
from loop import Role, State, Text, UsageError
from verifier import FunctionVerifier, Result, Status, build_report, failed, passed, run_all

STATE = State().append(Role.USER, Text("q")).append(Role.ASSISTANT, Text("42"))


@attrs.define
class Fixed:
    """A verifier that returns whatever it is told to, after an optional wait."""

    name: str
    value: Any = None
    wait: float = 0.0

    async def verify(self, state: State) -> Any:
        if self.wait:
            await anyio.sleep(self.wait)
        return Result(self.name, Status.PASS) if self.value is None else self.value


class Raises:
    name = "raises"

    async def verify(self, state: State) -> Result:
        raise ValueError("the checker has a bug")


def test_the_core_names_are_exported() -> None:
    expected = {"Check", "CommandVerifier", "FunctionVerifier", "Result", "Status", "Verifier", "build_report",
                "failed", "passed", "run_all"}
    assert expected <= set(verifier.__all__)
    assert all(hasattr(verifier, name) for name in verifier.__all__)


def test_passed_and_failed_leave_the_name_to_the_verifier() -> None:
    assert passed() == Result("", Status.PASS, "")
    assert passed("fine").report == "fine"
    assert failed("wrong sum") == Result("", Status.FAIL, "wrong sum")
    assert passed().ok and not failed("x").ok and not Result("n", Status.ERROR).ok


def test_a_result_is_a_frozen_value() -> None:
    result = Result("n", Status.FAIL, "r")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        result.status = Status.PASS  # type: ignore[misc]


# -- run_all -------------------------------------------------------------------------------------------


async def test_verifiers_run_concurrently() -> None:
    # Each waits for the other to have started: run one after the other, they would wait forever.
    started = {"left": anyio.Event(), "right": anyio.Event()}

    def waits_for(other: str) -> Any:
        async def check(state: State) -> bool:
            started["left" if other == "right" else "right"].set()
            await started[other].wait()
            return True
        return check

    verifiers = [FunctionVerifier(waits_for("right"), name="left"), FunctionVerifier(waits_for("left"), name="right")]
    with anyio.fail_after(5):
        results = await run_all(verifiers, STATE)
    assert [(r.name, r.status) for r in results] == [("left", Status.PASS), ("right", Status.PASS)]


async def test_results_are_sorted_by_name_whatever_the_finishing_order() -> None:
    verifiers = [Fixed("zeta"), Fixed("alpha", wait=0.02), Fixed("mid")]
    assert [r.name for r in await run_all(verifiers, STATE)] == ["alpha", "mid", "zeta"]


async def test_an_exception_becomes_an_error_naming_it() -> None:
    (result,) = await run_all([Raises()], STATE)
    assert result == Result("raises", Status.ERROR, "The verifier raised ValueError: the checker has a bug")


async def test_one_failure_does_not_stop_the_others() -> None:
    results = await run_all([Raises(), Fixed("ok"), Fixed("bad", failed("no"))], STATE)
    assert [(r.name, r.status) for r in results] == [("bad", Status.FAIL), ("ok", Status.PASS),
                                                    ("raises", Status.ERROR)]


async def test_every_result_carries_its_verifiers_name() -> None:
    results = await run_all([Fixed("bare", failed("no")), Fixed("renamed", Result("other", Status.PASS))], STATE)
    assert results == [Result("bare", Status.FAIL, "no"), Result("renamed", Status.PASS)]


@pytest.mark.parametrize("value", ["yes", True, Status.PASS, None.__class__])
async def test_a_value_that_is_not_a_result_becomes_an_error(value: Any) -> None:
    (result,) = await run_all([Fixed("odd", value)], STATE)
    assert result.status is Status.ERROR
    assert result.report == f"verify() returned {value!r}, not a verifier.Result"


async def test_a_verifier_past_the_timeout_fails_saying_it_did_not_finish() -> None:
    results = await run_all([Fixed("slow", wait=60), Fixed("quick")], STATE, timeout=0.05)
    assert results == [Result("quick", Status.PASS),
                       Result("slow", Status.FAIL, "The check did not finish within 0.05 seconds.")]


async def test_cancelling_run_all_is_not_turned_into_a_result() -> None:
    with anyio.CancelScope() as scope:
        scope.cancel()
        await run_all([Fixed("slow", wait=60), Fixed("slower", wait=60)], STATE)
        pytest.fail("run_all returned although it was cancelled")  # pragma: no cover
    assert scope.cancelled_caught


async def test_no_verifiers_is_no_results() -> None:
    assert await run_all([], STATE) == []
    assert await run_all(iter([Fixed("one")]), STATE) == [Result("one", Status.PASS)]


@pytest.mark.parametrize(
    "verifiers",
    [[object()], [Fixed("ok"), lambda state: True], [attrs.evolve(Fixed("x"), name=5)],
     attrs.evolve(Fixed("x"), name=5), None, "verifier"],
)
async def test_run_all_refuses_what_is_not_a_list_of_verifiers(verifiers: Any) -> None:
    with pytest.raises(UsageError):
        await run_all(verifiers, STATE)


async def test_one_verifier_needs_no_list() -> None:
    assert await run_all(Fixed("single"), STATE) == [Result("single", Status.PASS)]


@pytest.mark.parametrize("verifiers", [None, "verifier", 42])
async def test_what_is_neither_a_verifier_nor_a_list_is_refused_saying_what_is_taken(verifiers: Any) -> None:
    with pytest.raises(UsageError, match="run_all takes a Verifier or a list of verifiers"):
        await run_all(verifiers, STATE)


@pytest.mark.parametrize("timeout", [0, -1, "1", float("nan")])
async def test_run_all_refuses_a_bad_timeout(timeout: Any) -> None:
    with pytest.raises(UsageError, match="timeout"):
        await run_all([Fixed("ok")], STATE, timeout=timeout)


async def test_run_all_refuses_a_state_that_is_not_a_state() -> None:
    with pytest.raises(UsageError, match="loop.State"):
        await run_all([Fixed("ok")], "the answer")  # type: ignore[arg-type]


# -- build_report --------------------------------------------------------------------------------------


def test_a_report_of_passes() -> None:
    report = build_report([Result("lint", Status.PASS, "clean"), Result("tests", Status.PASS)])
    assert report == "# Verification: all 2 checks passed\n\n## lint: PASS\n\nclean\n\n## tests: PASS\n"


def test_a_report_counts_what_did_not_pass_and_keeps_every_section() -> None:
    results = [
        Result("grounded", Status.FAIL, "\nThe answer says 160; the tools said 100.\n\n"),
        Result("lint", Status.PASS),
        Result("tests", Status.ERROR, "pytest is not installed"),
    ]
    assert build_report(results) == (
        "# Verification: 2 of 3 checks did not pass\n\n"
        "## grounded: FAIL\n\nThe answer says 160; the tools said 100.\n\n"
        "## lint: PASS\n\n"
        "## tests: ERROR\n\npytest is not installed\n"
    )


def test_an_empty_or_blank_report_adds_no_body() -> None:
    assert build_report([Result("a", Status.FAIL, "  \n ")]) == (
        "# Verification: 1 of 1 checks did not pass\n\n## a: FAIL\n"
    )


def test_a_report_of_nothing() -> None:
    assert build_report([]) == "# Verification: all 0 checks passed\n"
    assert build_report(iter([Result("x", Status.PASS)])).startswith("# Verification: all 1 checks passed")


@pytest.mark.parametrize("others", [0, 1])
async def test_run_all_lets_a_budget_that_ran_out_through_rather_than_calling_the_check_broken(others: int) -> None:
    from loop.errors import BudgetExhausted

    def out_of_budget(state: State) -> bool:
        raise BudgetExhausted("budget 'b' ran out: max_turns=1 reached")

    verifiers = [FunctionVerifier(out_of_budget, name="judge")] + [FunctionVerifier(lambda s: True, name="ok")] * others
    with pytest.raises((BudgetExhausted, BaseExceptionGroup)) as caught:
        await run_all(verifiers, State().append(Role.USER, Text("q")))
    leaves = caught.value.exceptions if isinstance(caught.value, BaseExceptionGroup) else (caught.value,)
    assert any(isinstance(e, BudgetExhausted) for e in leaves)
