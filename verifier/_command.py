"""``CommandVerifier``: a command's exit status as a quality gate."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
from anyio.abc import ByteSendStream, Process

from loop import State, UsageError
from verifier._core import Result, Status

TAIL_CHARS = 4000
TAIL_BYTES = TAIL_CHARS * 4  # enough bytes for TAIL_CHARS characters of any UTF-8 text


class CommandVerifier:
    """Runs ``argv`` and judges by its exit status: 0 is PASS; anything else FAILs with the tail of its output.

    The command runs on this machine as a subprocess, with no isolation. A command still running after
    ``timeout`` seconds is killed with its whole process group and FAILs, saying so. A command that cannot be
    started (not found, not executable) is an ERROR: the check itself is broken. With ``feed_answer=True`` the
    conversation's answer is written to the command's standard input.
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
    ) -> None:
        if not isinstance(name, str) or not name:
            raise UsageError(f"CommandVerifier needs a non-empty name, got {name!r}")
        if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
            raise UsageError(f"argv must be a non-empty list of strings, like ['pytest', '-q'], got {argv!r}")
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise UsageError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.name = name
        self.argv = tuple(argv)
        self.cwd = Path(cwd) if cwd is not None else None
        self.timeout = float(timeout)
        self.env = dict(env) if env is not None else None
        self.feed_answer = feed_answer

    async def verify(self, state: State) -> Result:
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
            await _reap(process)
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

    def __repr__(self) -> str:
        return f"CommandVerifier({self.name!r}, {list(self.argv)!r})"


async def _feed(stdin: ByteSendStream, data: bytes) -> None:
    """Write ``data`` to the command's standard input and close it; a command may stop reading early."""
    try:
        async with stdin:
            await stdin.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError, ConnectionResetError):
        pass


async def _reap(process: Process) -> None:
    """Kill the command's whole process group if it is still running, and wait for it, even if cancelled."""
    with anyio.CancelScope(shield=True):
        if process.returncode is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                process.kill()
        else:
            try:  # the leader exited; children it left in its group must not outlive the check
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        await process.wait()
        await process.aclose()
