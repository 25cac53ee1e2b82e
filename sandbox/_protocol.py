"""The ``Sandbox`` contract: ``exec`` a command, get an ``ExecResult``; plus checks every implementation shares."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, Union, runtime_checkable

import attrs

from loop import LoopError, UsageError
from loop.checks import positive_number

if TYPE_CHECKING:
    from sandbox._bridge import ToolBridge

Files = Mapping[str, Union[str, bytes]]


class SandboxError(LoopError):
    """Raised when the sandbox itself cannot run: no Docker engine, no image, a container that would not start.

    A program that fails, hangs or floods is not a ``SandboxError``: that is an ``ExecResult`` saying so.
    """


@attrs.frozen
class ExecResult:
    """What one run in a sandbox did.

    ``exit_code`` is the program's status; 128 + N when signal N ended it (137: killed, by the timeout or the
    out-of-memory killer). ``stdout`` and ``stderr`` are decoded as UTF-8; when longer than the sandbox keeps,
    ``truncated`` is set and the text says where and how much was cut. ``error`` says why the command could not
    start at all (exit code 127: not found, 126: not executable). ``tool_calls`` counts the calls the program
    made to bridged tools (refused ones included).
    """

    exit_code: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    oom_killed: bool = False
    truncated: bool = False
    error: str | None = None
    tool_calls: int = 0
    duration: float = 0.0

    @property
    def ok(self) -> bool:
        """The program ran and exited with status 0 within its time."""
        return self.exit_code == 0 and not self.timed_out and self.error is None


@runtime_checkable
class Sandbox(Protocol):
    """Runs a command where it can do no harm.

    ``exec`` runs ``argv`` (a list of strings, no shell) in a fresh, isolated working directory holding
    ``files`` (relative path -> text or bytes), feeding ``stdin`` to it, and returns its ``ExecResult``. Nothing
    from one call is visible to the next. After ``timeout`` seconds (the sandbox's default when ``None``) the
    command and everything it started are killed and the result says ``timed_out``.

    It raises ``UsageError`` for bad arguments (including a file path that is absolute or climbs out with
    ``..``) and ``SandboxError`` when the sandbox cannot run at all. If the call is cancelled, everything it
    started is stopped and removed before the cancellation goes on. Calls may run concurrently.

    Sandboxes that can bridge host tools (``DockerSandbox``, ``UnsafeLocalSandbox``) also take
    ``tools=ToolBridge(...)``: the ``ToolSandbox`` ability.
    """

    async def exec(
        self,
        argv: Sequence[str],
        *,
        files: Files | None = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
    ) -> ExecResult: ...


@runtime_checkable
class ToolSandbox(Sandbox, Protocol):
    """The optional ability to bridge host tools into the program: ``exec`` also takes ``tools=ToolBridge``.

    A sandbox says it has it with a class attribute ``bridges_tools = True`` (``DockerSandbox`` and
    ``UnsafeLocalSandbox`` do); ``isinstance(sandbox, ToolSandbox)`` and ``accepts_tools`` check for it.
    """

    bridges_tools: bool

    async def exec(
        self,
        argv: Sequence[str],
        *,
        files: Files | None = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
        tools: ToolBridge | None = None,
    ) -> ExecResult: ...


def accepts_tools(sandbox: object) -> TypeGuard[ToolSandbox]:
    """Whether ``sandbox`` has the ``ToolSandbox`` ability: its ``exec`` takes ``tools=``."""
    return isinstance(sandbox, ToolSandbox) and sandbox.bridges_tools is True


ExecFunction = Callable[..., Union[ExecResult, Awaitable[ExecResult]]]


class FunctionSandbox:
    """A ``Sandbox`` made from a function ``fn(argv, *, files, stdin, timeout) -> ExecResult`` (sync or async).

    For tests and for wiring in a sandbox that lives elsewhere. It isolates nothing by itself. Arguments are
    checked as every sandbox checks them before ``fn`` sees them.
    """

    def __init__(self, fn: ExecFunction) -> None:
        if not callable(fn):
            raise UsageError(f"FunctionSandbox needs a function, got {fn!r}")
        self._fn = fn

    async def exec(
        self,
        argv: Sequence[str],
        *,
        files: Files | None = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        argv = check_argv(argv)
        normalized = check_files(files)
        check_timeout(timeout)
        result: Any = self._fn(argv, files=normalized, stdin=stdin, timeout=timeout)
        if inspect.isawaitable(result):
            result = await result
        if not isinstance(result, ExecResult):
            raise UsageError(f"the FunctionSandbox function returned {result!r}, not an ExecResult")
        return result

    def __repr__(self) -> str:
        return f"FunctionSandbox({self._fn!r})"


# -- argument checks shared by every sandbox ----------------------------------------------------------------


def check_argv(argv: Sequence[str]) -> list[str]:
    if isinstance(argv, (str, bytes)) or not argv or not all(isinstance(a, str) for a in argv):
        raise UsageError(f"argv must be a non-empty list of strings, like ['python3', 'main.py'], got {argv!r}")
    if any("\x00" in a for a in argv):
        raise UsageError("argv must not contain NUL characters")
    return list(argv)


def check_timeout(timeout: float | None) -> None:
    positive_number("timeout", timeout, unit="seconds", optional=True)


def check_relative_path(path: object, what: str = "file path") -> str:
    """``path`` as a clean relative POSIX path, or ``UsageError`` when it is absolute or climbs out."""
    if not isinstance(path, str) or not path.strip():
        raise UsageError(f"a {what} must be a non-empty string, got {path!r}")
    parts = path.replace("\\", "/").split("/")
    if (path.startswith(("/", "\\", "~")) or "\x00" in path or ".." in parts
            or (len(parts[0]) == 2 and parts[0][1] == ":")):
        raise UsageError(f"{what} {path!r} is refused: it must be relative to the working directory, with no "
                         "'..', no leading '/' or '~' and no drive letter")
    clean = "/".join(p for p in parts if p not in ("", "."))
    if not clean:
        raise UsageError(f"{what} {path!r} names the working directory itself, not a file")
    return clean


def check_files(files: Files | None) -> dict[str, bytes]:
    """``files`` with checked relative paths and contents as bytes (text is encoded as UTF-8)."""
    if files is None:
        return {}
    if not isinstance(files, Mapping):
        raise UsageError(f"files must be a mapping of relative path -> str or bytes, got {files!r}")
    out: dict[str, bytes] = {}
    for path, content in files.items():
        clean = check_relative_path(path)
        if isinstance(content, str):
            content = content.encode("utf-8")
        elif not isinstance(content, (bytes, bytearray, memoryview)):
            raise UsageError(f"files[{path!r}] must be str or bytes, got {type(content).__name__}")
        if clean in out:
            raise UsageError(f"files name {clean!r} twice")
        out[clean] = bytes(content)
    return out


def check_stdin(stdin: str | bytes | None) -> bytes | None:
    if stdin is None:
        return None
    if isinstance(stdin, str):
        return stdin.encode("utf-8")
    if isinstance(stdin, (bytes, bytearray, memoryview)):
        return bytes(stdin)
    raise UsageError(f"stdin must be str, bytes or None, got {type(stdin).__name__}")
