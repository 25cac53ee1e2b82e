"""``check_verifier``: the shipped verifiers pass it, and broken verifiers are caught, each for its own fault."""

import sys
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import verifier
from loop import LoopError, Role, State, Text, UsageError
from verifier import CommandVerifier, FunctionVerifier, Result, Status, failed, passed
from verifier.testing import ConformanceError, check_verifier

GOOD = State().append(Role.USER, Text("2+2?")).append(Role.ASSISTANT, Text("4"))
BAD = State().append(Role.USER, Text("2+2?")).append(Role.ASSISTANT, Text("5"))
QUICK = 0.2  # bounds the waits of a check that is expected to fail


def judge(name: str, state: State) -> Result:
    if state.answer == "4":
        return Result(name, Status.PASS)
    return Result(name, Status.FAIL, f"expected 4, got {state.answer}")


def is_four(state: State) -> bool:
    return state.answer == "4"


async def explains(state: State) -> Result:
    await anyio.lowlevel.checkpoint()
    return passed() if state.answer == "4" else failed(f"{state.answer} is not 2+2")


@pytest.mark.parametrize(
    "subject",
    [
        FunctionVerifier(is_four),
        FunctionVerifier(explains),
        CommandVerifier("stdin", [sys.executable, "-c", "import sys; sys.exit(sys.stdin.read() != '4')"],
                        feed_answer=True),
    ],
    ids=["function-bool", "function-async", "command"],
)
async def test_the_shipped_verifiers_conform(subject: Any) -> None:
    assert await check_verifier(subject, passing=GOOD, failing=BAD) is None


def test_it_lives_in_verifier_testing_only() -> None:
    assert not hasattr(verifier, "check_verifier")
    assert issubclass(ConformanceError, LoopError)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"passing": "4"}, "loop.State"), ({"failing": None}, "loop.State"), ({"timeout": 0}, "timeout")],
)
async def test_its_own_arguments_are_checked(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        await check_verifier(FunctionVerifier(is_four), **{"passing": GOOD, "failing": BAD, **kwargs})


# -- broken verifiers ----------------------------------------------------------------------------------


class Honest:
    """Correct; the broken verifiers below each change one thing."""

    name = "honest"

    async def verify(self, state: State) -> Any:
        await anyio.lowlevel.checkpoint()
        return judge(self.name, state)


class Nameless(Honest):
    name = ""


class NumberNamed(Honest):
    name = 7  # type: ignore[assignment]


class NoVerify:
    name = "no-verify"


class SyncVerify(Honest):
    def verify(self, state: State) -> Any:  # type: ignore[override]
        return judge(self.name, state)


class WrongName(Honest):
    async def verify(self, state: State) -> Any:
        return judge("someone-else", state)


class ReturnsBool(Honest):
    async def verify(self, state: State) -> Any:
        return state.answer == "4"


class AlwaysPasses(Honest):
    async def verify(self, state: State) -> Any:
        return Result(self.name, Status.PASS)


class SaysNothing(Honest):
    async def verify(self, state: State) -> Any:
        return Result(self.name, judge(self.name, state).status)


class Raises(Honest):
    async def verify(self, state: State) -> Any:
        raise OSError("the checker's database is down")


class Hangs(Honest):
    async def verify(self, state: State) -> Any:
        await anyio.sleep_forever()


class SharesState(Honest):
    """Wrong: keeps the state being checked on ``self``, so concurrent calls judge each other's states."""

    async def verify(self, state: State) -> Any:
        self.state = state
        await anyio.lowlevel.checkpoint()
        return judge(self.name, self.state)


class ConvertsCancellation(Honest):
    async def verify(self, state: State) -> Any:
        try:
            await anyio.lowlevel.checkpoint()
        except anyio.get_cancelled_exc_class():
            raise RuntimeError("interrupted") from None
        return judge(self.name, state)


class SlowToStop(Honest):
    """Wrong: shields a long clean-up from the cancellation."""

    async def verify(self, state: State) -> Any:
        try:
            await anyio.lowlevel.checkpoint()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await anyio.sleep(QUICK * 3)
            raise
        return judge(self.name, state)


class BreaksAfterCancel(Honest):
    """Wrong: a cancelled call leaves it broken."""

    cancelled = False

    async def verify(self, state: State) -> Any:
        if self.cancelled:
            return Result(self.name, Status.ERROR, "still cleaning up")
        try:
            await anyio.lowlevel.checkpoint()
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise
        return judge(self.name, state)


BROKEN = [
    (Nameless, "name must be a non-empty str, got ''"),
    (NumberNamed, "name must be a non-empty str, got 7"),
    (NoVerify, "no-verify: it has no verify\\(state\\) method"),
    (SyncVerify, "honest: verify\\(\\) must be async; verify\\(passing state\\) returned Result"),
    (WrongName, "returned a Result named 'someone-else'; it must carry the verifier's name 'honest'"),
    (ReturnsBool, "verify\\(passing state\\) returned True, not a verifier.Result"),
    (AlwaysPasses, "honest: verify\\(failing state\\) gave PASS, expected FAIL"),
    (SaysNothing, "verify\\(failing state\\) gave FAIL with an empty report"),
    (Raises, "verify\\(passing state\\) raised OSError\\(\"the checker's database is down\"\\)"),
    (Hangs, "verify\\(passing state\\) did not return within 0.2 seconds"),
    (SharesState, "verify\\(passing state\\), call \\d of 4 running at once gave FAIL, expected PASS"),
    (ConvertsCancellation, "cancelled at its first await raised RuntimeError\\('interrupted'\\) instead of "
                           "letting the cancellation through"),
    (SlowToStop, "verify\\(passing state\\) cancelled at its first await did not stop within 0.2 seconds"),
    (BreaksAfterCancel, "verify\\(passing state\\) after cancelled calls gave ERROR, expected PASS"),
]


@pytest.mark.parametrize(("broken", "message"), BROKEN, ids=[broken.__name__ for broken, _ in BROKEN])
async def test_a_broken_verifier_is_caught(broken: type, message: str) -> None:
    with anyio.fail_after(10):
        with pytest.raises(ConformanceError, match=message):
            await check_verifier(broken(), passing=GOOD, failing=BAD, timeout=QUICK)


async def test_a_command_verifier_that_cannot_run_is_caught() -> None:
    missing = CommandVerifier("missing", ["no-such-command-for-this-test"])
    with pytest.raises(ConformanceError, match="missing: verify\\(passing state\\) gave ERROR, expected PASS; its report: 'Command"):
        await check_verifier(missing, passing=GOOD, failing=BAD)
