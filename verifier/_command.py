"""``CommandVerifier``: a command's exit status as a quality gate."""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Union

import anyio
from anyio.abc import ByteSendStream

from loop import State, UsageError
from loop.checks import positive_number
from sandbox import ExecResult, Sandbox, SandboxError, reap
from verifier._core import Result, Status

TAIL_CHARS = 4000
TAIL_BYTES = TAIL_CHARS * 4  # enough bytes for TAIL_CHARS characters of any UTF-8 text

FileMap = Mapping[str, Union[str, bytes]]
FilesFrom = Union[FileMap, Callable[[State], FileMap]]


class CommandVerifier:
    """Runs ``argv`` and judges by its exit status: 0 is PASS; anything else FAILs with the tail of its output.

    The command runs on this machine as a subprocess, with no isolation, in ``cwd`` (else this process's)
    with ``env`` (else this process's environment); the report shows its stdout and stderr interleaved as
    written. A command still running after ``timeout`` seconds is killed with its whole process group and
    FAILs, saying so. A command that cannot be started (not found, not executable) is an ERROR: the check
    itself is broken. With ``feed_answer=True`` the conversation's answer is written to the command's
    standard input.

    With ``sandbox=`` (a ``sandbox.Sandbox``, e.g. ``DockerSandbox``) the command runs there instead, over
    ``files``: a mapping of relative path -> content, or a function of the state returning one (the files
    the model produced). Then ``cwd`` and ``env`` do not apply: the command sees the run the sandbox gives,
    which for ``DockerSandbox`` and ``UnsafeLocalSandbox`` alike is a fresh working directory holding just
    ``files`` and a minimal environment (PATH, HOME set to that directory, LANG=C.UTF-8, TMPDIR, and the
    sandbox's own ``env``), so the same verifier reports the same on either. The report shows the command's
    stdout, then its stderr. The sandbox failing to run at all is an ERROR, and a file path the model made
    unsafe (absolute, ``..``) is a FAIL.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
        feed_answer: bool = False,
        sandbox: Sandbox | None = None,
        files: FilesFrom | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise UsageError(f"CommandVerifier needs a non-empty name, got {name!r}")
        if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
            raise UsageError(f"argv must be a non-empty list of strings, like ['pytest', '-q'], got {argv!r}")
        positive_number("timeout", timeout, unit="seconds")
        _check_sandboxing(sandbox, files, cwd, env)
        self.sandbox = sandbox
        self.files = files
        self.name = name
        self.argv = tuple(argv)
        self.cwd = Path(cwd) if cwd is not None else None
        self.timeout = float(timeout)
        self.env = dict(env) if env is not None else None
        self.feed_answer = feed_answer

    async def verify(self, state: State) -> Result:
        if self.sandbox is not None:
            return await self._verify_in_sandbox(state, self.sandbox)
        command = shlex.join(self.argv)
        if self.cwd is not None and not self.cwd.is_dir():
            return Result(self.name, Status.ERROR, f"The working directory {str(self.cwd)!r} does not exist.")
        try:
            process = await anyio.open_process(
                list(self.argv),
                stdin=subprocess.PIPE if self.feed_answer else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env=self.env,
                start_new_session=True,
            )
        except FileNotFoundError:
            return Result(self.name, Status.ERROR, f"Command not found: `{self.argv[0]}` (running `{command}`).")
        except OSError as exc:  # not executable, bad interpreter line, ...
            return Result(self.name, Status.ERROR, f"Cannot run `{command}`: {exc}.")
        output = bytearray()
        dropped = False
        try:
            with anyio.move_on_after(self.timeout) as scope:
                async with anyio.create_task_group() as group:
                    if process.stdin is not None:
                        # Fed concurrently with reading: a command that echoes its input would otherwise fill
                        # its output pipe while we are still writing, and both sides would wait forever.
                        group.start_soon(_feed, process.stdin, (state.answer or "").encode())
                    assert process.stdout is not None  # guaranteed: stdout=PIPE above
                    async for chunk in process.stdout:
                        output += chunk
                        if len(output) > 2 * TAIL_BYTES:  # keep memory bounded on floods
                            del output[: len(output) - TAIL_BYTES]
                            dropped = True
                    code = await process.wait()
        finally:
            await reap(process)
        text = output.decode("utf-8", errors="replace")
        tail = text[-TAIL_CHARS:]
        cut = dropped or len(tail) < len(text)
        shown = f"the last {len(tail):,} characters of its output" if cut else "its output"
        block = f"\n\n{shown}:\n\n```\n{tail.rstrip()}\n```" if tail.strip() else "\n\nIt printed nothing."
        if scope.cancelled_caught:
            return Result(self.name, Status.FAIL,
                          f"`{command}` did not finish within {self.timeout:g} seconds and was killed.{block}")
        if code == 0:
            return Result(self.name, Status.PASS, f"`{command}` exited with status 0.")
        return Result(self.name, Status.FAIL, f"`{command}` exited with status {code}.{block}")

    async def _verify_in_sandbox(self, state: State, sandbox: Sandbox) -> Result:
        command = shlex.join(self.argv)
        try:
            files = self.files(state) if callable(self.files) else (self.files or {})
        except Exception as exc:
            return Result(self.name, Status.ERROR, f"Collecting the files for `{command}` raised "
                                                   f"{type(exc).__name__}: {exc}")
        stdin = (state.answer or "") if self.feed_answer else None
        try:
            result = await sandbox.exec(list(self.argv), files=files, stdin=stdin, timeout=self.timeout)
        except UsageError as exc:  # e.g. a file path the model made absolute or climbing out with '..'
            return Result(self.name, Status.FAIL, f"`{command}` was not run: {exc}")
        except SandboxError as exc:
            return Result(self.name, Status.ERROR, f"The sandbox could not run `{command}`: {exc}")
        if result.error is not None:
            return Result(self.name, Status.ERROR, f"Cannot run `{command}` in the sandbox: {result.error}.")
        block = _output_block(result)
        if result.timed_out:
            return Result(self.name, Status.FAIL,
                          f"`{command}` did not finish within {self.timeout:g} seconds and was killed.{block}")
        if result.exit_code == 0:
            return Result(self.name, Status.PASS, f"`{command}` exited with status 0.")
        killed = " (out of memory)" if result.oom_killed else ""
        return Result(self.name, Status.FAIL, f"`{command}` exited with status {result.exit_code}{killed}.{block}")

    def __repr__(self) -> str:
        where = f", sandbox={self.sandbox!r}" if self.sandbox is not None else ""
        return f"CommandVerifier({self.name!r}, {list(self.argv)!r}{where})"


def _check_sandboxing(sandbox: object, files: object, cwd: object, env: object) -> None:
    if sandbox is None:
        if files is not None:
            raise UsageError("files= needs sandbox=: without a sandbox the command runs in cwd on this machine")
        return
    if not callable(getattr(sandbox, "exec", None)):
        raise UsageError(f"sandbox must be a sandbox.Sandbox (something with exec(argv, ...)), got {sandbox!r}")
    if cwd is not None:
        raise UsageError("cwd does not apply with sandbox=: the command runs in the sandbox's own working "
                         "directory, which holds `files`")
    if env is not None:
        raise UsageError("env does not apply with sandbox=: set SandboxConfig(env=...), or run "
                         "['env', 'NAME=value', ...]")
    if files is not None and not (callable(files) or isinstance(files, Mapping)):
        raise UsageError(f"files must map relative paths to contents, or be a function of the state returning "
                         f"such a mapping; got {files!r}")


def _output_block(result: ExecResult) -> str:
    """The tail of the command's output (stdout, then stderr) as a fenced block, like the local verifier."""
    text = result.stdout + ("\n" if result.stdout and not result.stdout.endswith("\n") else "") + result.stderr
    tail = text[-TAIL_CHARS:]
    shown = f"the last {len(tail):,} characters of its output" if len(tail) < len(text) else "its output"
    return f"\n\n{shown}:\n\n```\n{tail.rstrip()}\n```" if tail.strip() else "\n\nIt printed nothing."


async def _feed(stdin: ByteSendStream, data: bytes) -> None:
    """Write ``data`` to the command's standard input and close it; a command may stop reading early."""
    try:
        async with stdin:
            await stdin.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError, ConnectionResetError):
        pass
