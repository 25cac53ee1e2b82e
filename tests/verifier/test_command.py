"""``CommandVerifier``: exit status as a verdict, output tails, timeouts and cancellation that leave no process."""

import shlex
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from loop import Role, State, Text, UsageError
from tests.processes import running, wait_until_dead
from verifier import CommandVerifier, Result, Status, run_all

PY = sys.executable
ANSWERED = State().append(Role.USER, Text("2+2?")).append(Role.ASSISTANT, Text("4"))
# Starts a background sleep in its own process group, records both pids, then sleeps in the foreground.
SLEEPERS = 'sleep 30 & echo "$$ $!" > "$1.tmp" && mv "$1.tmp" "$1"; sleep 30'


def python(code: str) -> list[str]:
    return [PY, "-c", code]


async def read_pids(pidfile: Path) -> list[int]:
    with anyio.fail_after(5):
        while not pidfile.exists():
            await anyio.sleep(0.01)
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(pids) == 2 and all(running(pid) for pid in pids)
    return pids


# -- verdicts ------------------------------------------------------------------------------------------


async def test_exit_status_zero_passes() -> None:
    result = await CommandVerifier("ok", [PY, "-c", "print(1)", "two words"]).verify(ANSWERED)
    assert result == Result("ok", Status.PASS, f"`{shlex.quote(PY)} -c 'print(1)' 'two words'` exited with status 0.")


async def test_a_non_zero_exit_fails_with_stdout_and_stderr_in_a_fenced_block() -> None:
    code = "import sys; print('to stdout', flush=True); print('to stderr', file=sys.stderr, flush=True); sys.exit(3)"
    result = await CommandVerifier("tests", python(code)).verify(ANSWERED)
    assert result.status is Status.FAIL
    assert "exited with status 3." in result.report
    assert result.report.endswith("its output:\n\n```\nto stdout\nto stderr\n```")


async def test_a_failure_that_printed_nothing_says_so() -> None:
    result = await CommandVerifier("quiet", python("raise SystemExit(1)")).verify(ANSWERED)
    assert result.status is Status.FAIL
    assert result.report.endswith("exited with status 1.\n\nIt printed nothing.")


async def test_a_flood_of_output_keeps_only_the_tail_with_a_note() -> None:
    code = "import sys; print('FIRST'); [print(f'line {i:06d}') for i in range(50_000)]; print('LAST'); sys.exit(1)"
    result = await CommandVerifier("flood", python(code)).verify(ANSWERED)
    assert result.status is Status.FAIL
    assert "the last 4,000 characters of its output:" in result.report
    block = result.report.split("```\n", 1)[1]
    assert block.endswith("line 049999\nLAST\n```")
    assert "FIRST" not in block
    assert len(block) <= 4000 + len("\n```")


async def test_multibyte_output_shown_whole_is_not_called_a_tail() -> None:
    code = "import sys; sys.stdout.write('é' * 3000); sys.exit(1)"
    result = await CommandVerifier("accents", python(code)).verify(ANSWERED)
    assert "its output:\n\n```\n" + "é" * 3000 + "\n```" in result.report
    assert "the last" not in result.report


# -- timeouts and cancellation -------------------------------------------------------------------------


async def test_a_command_past_its_timeout_fails_and_its_whole_process_group_is_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    verifier = CommandVerifier("hangs", ["sh", "-c", SLEEPERS, "sh", str(pidfile)], timeout=0.3)
    result = await verifier.verify(ANSWERED)
    assert result.status is Status.FAIL
    assert "did not finish within 0.3 seconds and was killed." in result.report
    await wait_until_dead(*[int(p) for p in pidfile.read_text().split()])


async def test_a_timeout_keeps_what_the_command_printed() -> None:
    code = "import time; print('working on it', flush=True); time.sleep(30)"
    result = await CommandVerifier("slow", python(code), timeout=0.5).verify(ANSWERED)
    assert result.status is Status.FAIL
    assert result.report.endswith("its output:\n\n```\nworking on it\n```")


async def test_cancelling_verify_kills_the_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    verifier = CommandVerifier("cancelled", ["sh", "-c", SLEEPERS, "sh", str(pidfile)], timeout=60)
    async with anyio.create_task_group() as group:
        group.start_soon(verifier.verify, ANSWERED)
        pids = await read_pids(pidfile)
        group.cancel_scope.cancel()
    await wait_until_dead(*pids)


async def test_run_all_turns_a_hanging_command_into_a_fail(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    verifier = CommandVerifier("hangs", ["sh", "-c", SLEEPERS, "sh", str(pidfile)], timeout=60)
    (result,) = await run_all([verifier], ANSWERED, timeout=0.3)
    assert result == Result("hangs", Status.FAIL, "The check did not finish within 0.3 seconds.")
    await wait_until_dead(*[int(p) for p in pidfile.read_text().split()])


# -- broken infrastructure -----------------------------------------------------------------------------


async def test_a_command_that_does_not_exist_is_an_error() -> None:
    result = await CommandVerifier("missing", ["no-such-command-for-this-test", "-q"]).verify(ANSWERED)
    assert result.status is Status.ERROR
    assert result.report.startswith("Command not found: `no-such-command-for-this-test`")


async def test_a_file_that_is_not_executable_is_an_error(tmp_path: Path) -> None:
    script = tmp_path / "check.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    result = await CommandVerifier("noexec", [str(script)]).verify(ANSWERED)
    assert result.status is Status.ERROR
    assert result.report.startswith(f"Cannot run `{script}`")


async def test_a_missing_working_directory_is_an_error(tmp_path: Path) -> None:
    result = await CommandVerifier("nowhere", python("pass"), cwd=tmp_path / "gone").verify(ANSWERED)
    assert result.status is Status.ERROR
    assert "does not exist" in result.report and "gone" in result.report


# -- cwd, env, stdin -----------------------------------------------------------------------------------


async def test_the_command_runs_in_cwd(tmp_path: Path) -> None:
    (tmp_path / "marker.txt").write_text("here")
    code = "import pathlib, sys; sys.exit(0 if pathlib.Path('marker.txt').read_text() == 'here' else 1)"
    assert (await CommandVerifier("cwd", python(code), cwd=tmp_path).verify(ANSWERED)).status is Status.PASS
    assert (await CommandVerifier("cwd", python(code), cwd=str(tmp_path)).verify(ANSWERED)).ok
    assert not (await CommandVerifier("cwd", python(code)).verify(ANSWERED)).ok


async def test_the_command_gets_env() -> None:
    code = "import os, sys; sys.exit(0 if os.environ.get('CHECK_MODE') == 'strict' else 1)"
    assert (await CommandVerifier("env", python(code), env={"CHECK_MODE": "strict"}).verify(ANSWERED)).ok
    assert not (await CommandVerifier("env", python(code), env={"CHECK_MODE": "lax"}).verify(ANSWERED)).ok


ANSWER_IS_FOUR = "import sys; sys.exit(0 if sys.stdin.read() == '4' else 1)"


async def test_feed_answer_writes_the_answer_to_stdin() -> None:
    verifier = CommandVerifier("answer", python(ANSWER_IS_FOUR), feed_answer=True)
    assert (await verifier.verify(ANSWERED)).status is Status.PASS
    wrong = ANSWERED.append(Role.USER, Text("sure?")).append(Role.ASSISTANT, Text("5"))
    assert (await verifier.verify(wrong)).status is Status.FAIL


async def test_without_feed_answer_stdin_is_empty_and_a_reader_does_not_hang() -> None:
    code = "import sys; sys.exit(0 if sys.stdin.read() == '' else 1)"
    assert (await CommandVerifier("stdin", python(code), timeout=10).verify(ANSWERED)).ok
    assert (await CommandVerifier("stdin", python(code), feed_answer=True, timeout=10).verify(State())).ok


async def test_a_long_answer_echoed_back_does_not_deadlock() -> None:
    # The command writes while it reads: stdin must be fed while its output is drained.
    code = "import shutil, sys; shutil.copyfileobj(sys.stdin.buffer, sys.stdout.buffer)"
    state = State().append(Role.ASSISTANT, Text("x" * 2_000_000))
    result = await CommandVerifier("echo", python(code), feed_answer=True, timeout=30).verify(state)
    assert result.status is Status.PASS


async def test_a_command_that_ignores_its_stdin_is_judged_by_its_exit_status() -> None:
    state = State().append(Role.ASSISTANT, Text("x" * 2_000_000))
    result = await CommandVerifier("ignores", python("pass"), feed_answer=True).verify(state)
    assert result.status is Status.PASS


# -- construction --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": ""}, "non-empty name"),
        ({"name": 5}, "non-empty name"),
        ({"argv": "pytest -q"}, "argv must be a non-empty list"),
        ({"argv": []}, "argv must be a non-empty list"),
        ({"argv": ["pytest", 1]}, "argv must be a non-empty list"),
        ({"timeout": 0}, "timeout must be a positive number"),
        ({"timeout": -2}, "timeout must be a positive number"),
        ({"timeout": "60"}, "timeout must be a positive number"),
        ({"timeout": True}, "timeout must be a positive number"),
    ],
)
def test_bad_arguments_are_usage_errors(kwargs: dict[str, Any], message: str) -> None:
    arguments = {"name": "tests", "argv": ["pytest", "-q"], **kwargs}
    with pytest.raises(UsageError, match=message):
        CommandVerifier(arguments.pop("name"), arguments.pop("argv"), **arguments)


def test_settings_are_kept_and_shown() -> None:
    verifier = CommandVerifier("tests", ("pytest", "-q"), cwd="/srv", timeout=5, env={"A": "1"}, feed_answer=True)
    assert (verifier.argv, verifier.cwd, verifier.timeout, verifier.env) == (("pytest", "-q"), Path("/srv"), 5.0,
                                                                            {"A": "1"})
    assert repr(verifier) == "CommandVerifier('tests', ['pytest', '-q'])"
