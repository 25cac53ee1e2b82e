"""``UnsafeLocalSandbox``: the contract, a clean environment, temporary directories, and no leftover processes.

It isolates nothing; these tests check what it does promise.
"""

import sys
from pathlib import Path

import anyio
import pytest

from loop import UsageError
from sandbox import UnsafeLocalSandbox
from sandbox.testing import check_sandbox
from tests.processes import wait_until_dead
from tests.sandbox.run_shape import check_run_shape


async def test_it_keeps_the_sandbox_contract() -> None:
    await check_sandbox(UnsafeLocalSandbox)


async def test_the_program_does_not_see_this_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_TEST_SECRET", "hunter2-local")
    sandbox = UnsafeLocalSandbox(env={"MODE": "test"})
    # This interpreter, not `python3` from PATH: where that is a pyenv shim, the shim (a shell script) adds
    # PYENV_*, PWD and SHLVL to the environment it is given before it starts Python.
    result = await sandbox.exec([sys.executable, "-c", "import os; print(sorted(os.environ))"])
    names = eval(result.stdout)  # a printed list of names
    assert "SANDBOX_TEST_SECRET" not in names and "MODE" in names
    assert set(names) <= {"PATH", "HOME", "LANG", "TMPDIR", "PYTHONDONTWRITEBYTECODE", "MODE", "LC_CTYPE"}


async def test_a_command_sees_the_run_the_docker_sandbox_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_TEST_SECRET", "hunter2-local")
    run = await check_run_shape(UnsafeLocalSandbox(env={"MODE": "test"}), sys.executable, ["MODE"])
    assert run["env"] == ["HOME", "LANG", "MODE", "PATH", "PYTHONDONTWRITEBYTECODE", "TMPDIR"]
    assert Path(run["cwd"]).name == "work" and Path(run["tmpdir"]).parent == Path(run["cwd"]).parent
    assert run["cwd"] != str(Path.cwd()) and run["stdin"] == ""


async def test_the_working_directory_is_fresh_and_removed_afterwards() -> None:
    sandbox = UnsafeLocalSandbox()
    result = await sandbox.exec(["python3", "-c", "import os; print(os.getcwd()); print(os.listdir('.'))"],
                                files={"a.txt": "x"})
    workdir, listing = result.stdout.splitlines()
    assert listing == "['a.txt']"
    assert not Path(workdir).exists() and not Path(workdir).parent.exists()


async def test_a_timeout_kills_what_the_program_started_too(tmp_path: Path) -> None:
    code = ("import subprocess, sys, time\n"
            f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            f"open({str(tmp_path / 'pid')!r}, 'w').write(str(child.pid))\n"
            "time.sleep(60)\n")
    result = await UnsafeLocalSandbox().exec(["python3", "-c", code], timeout=1)
    assert result.timed_out and result.exit_code == 137
    await wait_until_dead(int((tmp_path / "pid").read_text()))


async def test_cancelling_a_run_kills_its_processes(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    code = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    async with anyio.create_task_group() as group:
        group.start_soon(UnsafeLocalSandbox().exec, ["python3", "-c", code])
        with anyio.fail_after(10):
            while not pidfile.exists() or not pidfile.read_text():
                await anyio.sleep(0.02)
        group.cancel_scope.cancel()
    await wait_until_dead(int(pidfile.read_text()))


async def test_a_missing_command_is_reported_not_raised() -> None:
    result = await UnsafeLocalSandbox().exec(["no-such-command-here", "--flag"])
    assert result.exit_code == 127 and result.error == "command not found: no-such-command-here"
    assert "sandbox: command not found" in result.stderr


async def test_output_past_the_cap_is_cut_with_a_note() -> None:
    sandbox = UnsafeLocalSandbox(max_output_bytes=4096)
    result = await sandbox.exec(["python3", "-c", "print('A' * 10_000 + 'END')"])
    assert result.truncated and result.stdout.startswith("AAA") and result.stdout.endswith("END\n")
    assert "[output truncated: the program wrote 10,004 bytes to stdout" in result.stdout


@pytest.mark.parametrize(("kwargs", "message"), [({"timeout": 0}, "timeout"), ({"max_output_bytes": 1}, "max_output"),
                                                 ({"env": {"A": 1}}, "env must map")])
def test_bad_settings_are_usage_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        UnsafeLocalSandbox(**kwargs)


async def test_a_bridge_must_be_a_tool_bridge() -> None:
    with pytest.raises(UsageError, match="tools must be a sandbox.ToolBridge"):
        await UnsafeLocalSandbox().exec(["true"], tools=[print])  # type: ignore[arg-type]

