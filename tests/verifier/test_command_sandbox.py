"""``CommandVerifier(..., sandbox=...)``: tests and linters run inside a sandbox over the files the model wrote."""

import re
import sys
from typing import Any

import attrs
import pytest

from loop import Role, State, Text, UsageError
from sandbox import DockerSandbox, ExecResult, FunctionSandbox, SandboxConfig, SandboxError, UnsafeLocalSandbox
from tests.sandbox.docker_env import docker_config  # noqa: F401  (the fixture)
from tests.sandbox.run_shape import FILES as SHAPE_FILES
from verifier import CommandVerifier, Result, Status, run_all
from verifier.testing import check_verifier

GOOD = "def add(a, b):\n    return a + b\n"
BAD = "def add(a, b):\n    return a - b\n"
TEST = "from solution import add\nassert add(2, 3) == 5, f'add(2, 3) gave {add(2, 3)}'\nprint('1 passed')\n"


def answered(code: str) -> State:
    return State().append(Role.USER, Text("Write add().")).append(Role.ASSISTANT, Text(f"```python\n{code}```"))


def files_from_answer(state: State) -> dict[str, str]:
    """The model's code block as solution.py, next to the test."""
    match = re.search(r"```python\n(.*?)```", state.answer or "", re.S)
    return {"solution.py": match.group(1) if match else "", "test_add.py": TEST}


def checker(sandbox: Any, **kwargs: Any) -> CommandVerifier:
    return CommandVerifier("tests", ["python3", "test_add.py"], sandbox=sandbox, files=files_from_answer, **kwargs)


async def test_the_models_files_pass_or_fail_in_the_sandbox() -> None:
    verifier = checker(UnsafeLocalSandbox())
    assert await verifier.verify(answered(GOOD)) == Result("tests", Status.PASS,
                                                           "`python3 test_add.py` exited with status 0.")
    result = await verifier.verify(answered(BAD))
    assert result.status is Status.FAIL and "exited with status 1." in result.report
    assert "AssertionError: add(2, 3) gave -1" in result.report and result.report.endswith("```")


async def test_it_keeps_the_verifier_contract() -> None:
    await check_verifier(checker(UnsafeLocalSandbox()), passing=answered(GOOD), failing=answered(BAD))


async def test_files_may_be_a_fixed_mapping_and_the_answer_may_be_fed_to_stdin() -> None:
    code = "import sys, json; sys.exit(0 if sys.stdin.read().strip() == json.load(open('want.json')) else 1)"
    verifier = CommandVerifier("answer", ["python3", "-c", code], sandbox=UnsafeLocalSandbox(),
                               files={"want.json": '"4"'}, feed_answer=True)
    four = State().append(Role.ASSISTANT, Text("4"))
    assert (await verifier.verify(four)).ok
    assert not (await verifier.verify(State().append(Role.ASSISTANT, Text("5")))).ok


async def test_a_hanging_command_fails_and_says_it_was_killed() -> None:
    verifier = CommandVerifier("hangs", ["python3", "-c", "print('started', flush=True); import time; time.sleep(60)"],
                               sandbox=UnsafeLocalSandbox(), timeout=0.5)
    result = await verifier.verify(answered(GOOD))
    assert result.status is Status.FAIL
    assert "did not finish within 0.5 seconds and was killed." in result.report and "started" in result.report


async def test_a_missing_command_or_a_broken_sandbox_is_an_error() -> None:
    missing = CommandVerifier("lint", ["no-such-linter", "."], sandbox=UnsafeLocalSandbox())
    result = await missing.verify(answered(GOOD))
    assert result.status is Status.ERROR and "command not found: no-such-linter" in result.report

    def broken(argv: list[str], **_: Any) -> ExecResult:
        raise SandboxError("no Docker engine")

    result = await CommandVerifier("t", ["pytest"], sandbox=FunctionSandbox(broken)).verify(answered(GOOD))
    assert result.status is Status.ERROR and "The sandbox could not run `pytest`: no Docker engine" in result.report


async def test_a_file_path_the_model_made_unsafe_fails_without_running() -> None:
    verifier = CommandVerifier("t", ["python3", "x.py"], sandbox=UnsafeLocalSandbox(),
                               files=lambda state: {"../escape.py": "print(1)"})
    result = await verifier.verify(answered(GOOD))
    assert result.status is Status.FAIL and "was not run" in result.report and "'../escape.py'" in result.report


async def test_run_all_over_sandboxed_verifiers() -> None:
    sandbox = UnsafeLocalSandbox()
    verifiers = [checker(sandbox), CommandVerifier("syntax", ["python3", "-m", "py_compile", "solution.py"],
                                                   sandbox=sandbox, files=files_from_answer)]
    results = await run_all(verifiers, answered(BAD))
    assert [(r.name, r.status) for r in results] == [("syntax", Status.PASS), ("tests", Status.FAIL)]


def shape_checker(sandbox: Any, python: str, *names: str) -> CommandVerifier:
    """A verifier whose command checks, from inside, the run both sandboxes promise (``tests.sandbox.run_shape``)."""
    return CommandVerifier("run shape", [python, "shape.py", *names], sandbox=sandbox, files=SHAPE_FILES)


async def test_the_command_sees_the_run_the_docker_sandbox_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_TEST_SECRET", "hunter2-verifier")
    sandbox = UnsafeLocalSandbox(env={"MODE": "test"})
    # This interpreter: a pyenv shim named `python3` would add variables of its own to the environment.
    assert (await shape_checker(sandbox, sys.executable, "MODE").verify(answered(GOOD))).ok
    result = await shape_checker(sandbox, sys.executable, "MODE", "NOT_GIVEN").verify(answered(GOOD))
    assert result.status is Status.FAIL and "SANDBOX_TEST_SECRET" not in result.report
    # stdout (the one JSON line), then stderr, each whole: the report the Docker sandbox gives too.
    assert re.search(r'```\n\{"cwd": [^\n]*\}\nshape: the environment has [^\n]*\n```$', result.report), result


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"sandbox": UnsafeLocalSandbox(), "cwd": "/srv"}, "cwd does not apply with sandbox="),
    ({"sandbox": UnsafeLocalSandbox(), "env": {"A": "1"}}, "env does not apply with sandbox="),
    ({"sandbox": object()}, "sandbox must be a sandbox.Sandbox"),
    ({"sandbox": UnsafeLocalSandbox(), "files": ["a.py"]}, "files must map relative paths"),
    ({"files": {"a.py": ""}}, "files= needs sandbox="),
])
def test_misuse_is_a_usage_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        CommandVerifier("t", ["pytest"], **kwargs)


def test_repr_names_the_sandbox() -> None:
    assert repr(checker(UnsafeLocalSandbox())) == (
        "CommandVerifier('tests', ['python3', 'test_add.py'], sandbox=UnsafeLocalSandbox(timeout=30))")


@pytest.mark.docker
async def test_the_command_sees_the_run_the_local_sandbox_gives(docker_config: SandboxConfig) -> None:  # noqa: F811
    sandbox = DockerSandbox(attrs.evolve(docker_config, env={"MODE": "test"}))
    assert (await shape_checker(sandbox, "python3", "MODE").verify(answered(GOOD))).ok
    result = await shape_checker(sandbox, "python3", "MODE", "NOT_GIVEN").verify(answered(GOOD))
    assert re.search(r'```\n\{"cwd": [^\n]*\}\nshape: the environment has [^\n]*\n```$', result.report), result


@pytest.mark.docker
async def test_the_models_files_are_checked_in_docker(docker_config: SandboxConfig) -> None:  # noqa: F811
    async with DockerSandbox(docker_config, warm=1) as sandbox:
        verifier = checker(sandbox)
        assert (await verifier.verify(answered(GOOD))).status is Status.PASS
        result = await verifier.verify(answered(BAD))
    assert result.status is Status.FAIL and "AssertionError: add(2, 3) gave -1" in result.report
