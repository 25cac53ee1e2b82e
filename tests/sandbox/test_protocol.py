"""The ``Sandbox`` contract's values and shared checks: ``ExecResult``, ``FunctionSandbox``, argument checks."""

from typing import Any

import pytest

from loop import UsageError
from sandbox import ExecResult, FunctionSandbox, Sandbox, ToolSandbox, UnsafeLocalSandbox, accepts_tools
from sandbox._protocol import check_files, check_relative_path


def test_exec_result_ok_needs_status_zero_in_time_and_a_start() -> None:
    assert ExecResult(0).ok
    assert not ExecResult(1).ok
    assert not ExecResult(0, timed_out=True).ok
    assert not ExecResult(0, error="command not found: x").ok


async def test_function_sandbox_adapts_sync_and_async_functions() -> None:
    seen: list[dict[str, Any]] = []

    def sync(argv: list[str], **kwargs: Any) -> ExecResult:
        seen.append({"argv": argv, **kwargs})
        return ExecResult(0, stdout="sync")

    async def async_(argv: list[str], **kwargs: Any) -> ExecResult:
        return ExecResult(2, stdout="async")

    result = await FunctionSandbox(sync).exec(("python3", "x.py"), files={"x.py": "print(1)"}, stdin="in",
                                              timeout=3)
    assert result.stdout == "sync"
    assert seen == [{"argv": ["python3", "x.py"], "files": {"x.py": b"print(1)"}, "stdin": "in", "timeout": 3}]
    assert (await FunctionSandbox(async_).exec(["true"])).exit_code == 2
    assert isinstance(FunctionSandbox(sync), Sandbox)


async def test_function_sandbox_checks_arguments_and_results() -> None:
    sandbox = FunctionSandbox(lambda argv, **_: "not a result")
    with pytest.raises(UsageError, match="not an ExecResult"):
        await sandbox.exec(["true"])
    with pytest.raises(UsageError, match="argv must be a non-empty list"):
        await sandbox.exec("python3 -c pass")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="needs a function"):
        FunctionSandbox("nope")  # type: ignore[arg-type]


@pytest.mark.parametrize("path", ["../x", "a/../../x", "/etc/passwd", "\\windows", "~/.ssh/id", "C:/x", "a/\x00",
                                  ".", "", "//"])
def test_file_paths_that_leave_the_working_directory_are_refused(path: str) -> None:
    with pytest.raises(UsageError):
        check_relative_path(path)


def test_file_paths_are_normalised_and_contents_become_bytes() -> None:
    files = check_files({"./src//main.py": "print('é')", "data.bin": b"\x00\x01", "view": memoryview(b"ab")})
    assert files == {"src/main.py": "print('é')".encode(), "data.bin": b"\x00\x01", "view": b"ab"}
    with pytest.raises(UsageError, match="twice"):
        check_files({"a.txt": "1", "./a.txt": "2"})
    with pytest.raises(UsageError, match="must be str or bytes"):
        check_files({"a.txt": 3})  # type: ignore[dict-item]


def test_accepts_tools_tells_sandboxes_that_bridge_tools_apart() -> None:
    assert accepts_tools(UnsafeLocalSandbox()) and isinstance(UnsafeLocalSandbox(), ToolSandbox)
    assert not accepts_tools(FunctionSandbox(lambda argv, **_: ExecResult(0)))
    assert not accepts_tools(object())

    class Mine:  # a sandbox of one's own says it has the ability; an exec taking tools= is not enough
        bridges_tools = True

        async def exec(self, argv: object, *, files: object = None, stdin: object = None, timeout: object = None,
                       tools: object = None) -> ExecResult:
            return ExecResult(0)

    class Silent(Mine):
        bridges_tools = False

    assert accepts_tools(Mine()) and not accepts_tools(Silent())
