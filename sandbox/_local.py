"""``UnsafeLocalSandbox``: plain subprocesses on this machine, for machines without Docker. NO isolation."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence

import anyio
from anyio.abc import Process

from loop import UsageError, tracing
from sandbox._bridge import ToolBridge
from sandbox._protocol import ExecResult, Files, SandboxError, check_argv, check_files, check_stdin, check_timeout
from sandbox._run import SUPERVISOR, Job, run_job

_log = tracing.logger("sandbox.local")


class _ProcessChannel:
    __slots__ = ("_process",)

    def __init__(self, process: Process) -> None:
        self._process = process

    async def send(self, data: bytes) -> None:
        assert self._process.stdin is not None  # opened with stdin=PIPE
        await self._process.stdin.send(data)

    async def receive(self) -> bytes:
        assert self._process.stdout is not None  # opened with stdout=PIPE
        try:
            return await self._process.stdout.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return b""


class UnsafeLocalSandbox:
    """Runs commands as ordinary subprocesses of this machine. It offers NO isolation.

    The command can read and write anything your user can, reach the network, and outlive its timeout by
    leaving its process group. Use it only where Docker is not available and the code is your own, or in
    tests; it is never chosen for you.

    What it does give is the run a ``DockerSandbox`` gives, as far as the command can tell: its working
    directory is a fresh one (mode 0700, removed afterwards) holding ``files`` and nothing else; its
    environment is only PATH, HOME (the working directory), LANG=C.UTF-8, TMPDIR (a fresh directory of its
    own), PYTHONDONTWRITEBYTECODE=1 and ``env``, never this process's own variables and secrets; its standard
    input is ``stdin`` or else empty; its stdout and stderr come back apart. The same timeout, output caps and
    tool bridge apply. What differs is where: the directories are under this machine's temporary directory
    rather than at ``/work`` and ``/tmp``, PATH is this process's (so commands are this machine's), and the
    command runs as your user.
    """

    bridges_tools = True  # the ToolSandbox ability: exec takes tools=

    def __init__(
        self,
        *,
        timeout: float = 30.0,
        max_output_bytes: int = 1_000_000,
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        check_timeout(timeout)
        if timeout is None:
            raise UsageError("UnsafeLocalSandbox needs a default timeout in seconds")
        if not (isinstance(max_output_bytes, int) and max_output_bytes >= 1024):
            raise UsageError(f"max_output_bytes must be an integer >= 1024, got {max_output_bytes!r}")
        env = dict(env or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise UsageError("env must map str names to str values")
        self.timeout = float(timeout)
        self.max_output_bytes = max_output_bytes
        self.env = env
        self.python = python

    async def exec(
        self,
        argv: Sequence[str],
        *,
        files: Files | None = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
        tools: ToolBridge | None = None,
    ) -> ExecResult:
        """Run ``argv`` in a new temporary directory holding ``files``; see ``sandbox.Sandbox``."""
        argv = check_argv(argv)
        checked = check_files(files)
        data = check_stdin(stdin)
        check_timeout(timeout)
        if tools is not None and not isinstance(tools, ToolBridge):
            raise UsageError(f"tools must be a sandbox.ToolBridge, got {tools!r}")
        with tracing.span("sandbox exec", {"sandbox.kind": "unsafe-local", "sandbox.argv0": argv[0]}):
            return await self._run(argv, checked, data, timeout or self.timeout, tools)

    async def _run(self, argv: list[str], files: dict[str, bytes], stdin: bytes | None, timeout: float,
                   tools: ToolBridge | None) -> ExecResult:
        root = await anyio.to_thread.run_sync(tempfile.mkdtemp, None, "sandbox-local-")
        work = os.path.join(root, "work")
        try:
            os.mkdir(work, 0o700)  # as private as the container's working directory
            os.mkdir(os.path.join(root, "tmp"))
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": work, "LANG": "C.UTF-8",
                   "TMPDIR": os.path.join(root, "tmp"), "PYTHONDONTWRITEBYTECODE": "1", **self.env}
            job = Job(argv, files, stdin, work, env, timeout, self.max_output_bytes, tools)
            with open(os.path.join(root, "supervisor.err"), "wb") as errors:
                try:
                    process = await anyio.open_process(
                        [self.python, "-I", "-c", SUPERVISOR], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                        stderr=errors, cwd=root, env=env, start_new_session=True)
                except OSError as exc:
                    raise SandboxError(f"cannot start {self.python}: {exc}") from exc
                try:
                    outcome = await run_job(_ProcessChannel(process), job)
                finally:
                    await reap(process)
            if not outcome.finished and not outcome.result.timed_out:
                _log.warning("local supervisor ended without a report", argv0=argv[0])
            return outcome.result
        finally:
            await anyio.to_thread.run_sync(shutil.rmtree, root, True)

    def __repr__(self) -> str:
        return f"UnsafeLocalSandbox(timeout={self.timeout:g})"


async def reap(process: Process) -> None:
    """Kill the whole process group of ``process`` (started with ``start_new_session=True``: it and everything it
    started, even once it exited itself) and wait for it, even if cancelled. For every child process the project
    runs: the local sandbox's supervisor, ``verifier.CommandVerifier``'s command."""
    with anyio.CancelScope(shield=True):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            if process.returncode is None:
                process.kill()
        await process.wait()
        await process.aclose()
