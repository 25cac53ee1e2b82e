"""``DockerSandbox``: each run in a fresh, locked-down container that is destroyed afterwards."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from typing import Any

import anyio
import attrs

from loop import UsageError, tracing
from sandbox import _engine as engine
from sandbox._bridge import ToolBridge
from sandbox._config import SUPERVISOR_USER, SandboxConfig, user_ids
from sandbox._pool import WarmPool
from sandbox._protocol import (ExecResult, Files, SandboxError, check_argv, check_files, check_stdin,
                               check_timeout)
from sandbox._run import Job, run_job

_log = tracing.logger("sandbox.docker")


class DockerSandbox:
    """Runs each command in a fresh Docker container that serves that one run and is then destroyed.

    Every container has no network (``network_mode="none"``), a read-only root filesystem, size-capped tmpfs
    mounts for the working directory, ``/tmp`` and ``/dev/shm``, every capability dropped,
    ``no-new-privileges``, the project's seccomp profile, and pids, memory (no swap) and CPU limits; see
    ``SandboxConfig``. The program runs as a non-root user with no capabilities; the supervisor that starts it
    and reports on it runs as another one, out of the program's reach, and the exit status is the one the
    engine saw. Past its timeout the container is killed, which ends every process in it, however much the
    program writes. Output is capped with a note saying so. The container is removed when the run ends, also
    when the call is cancelled; the engine removes it too once it stops, so even a crash of this process
    leaves nothing behind for longer than ``idle_ttl``.

    The command starts in ``config.workdir`` (``/work``: mode 0700, holding ``files`` and nothing else), with
    an environment of only PATH, HOME (the working directory), LANG=C.UTF-8, TMPDIR=/tmp,
    PYTHONDONTWRITEBYTECODE=1 and ``config.env``; its standard input is ``stdin`` or else empty; its stdout
    and stderr come back apart. ``UnsafeLocalSandbox`` gives a command the same, without the isolation.

    ``warm=N`` keeps N started, idle containers so a run does not wait for one to be created and started;
    a used container is destroyed and replaced in the background, never reused. The pool lives in the
    sandbox's ``async with`` block::

        async with DockerSandbox(SandboxConfig(memory_mb=512), warm=2) as sandbox:
            result = await sandbox.exec(["python3", "main.py"], files={"main.py": code})

    Without ``warm``, ``async with`` is optional. ``exec`` also takes ``tools=ToolBridge(...)`` to let the
    program call host tools. Docker's blocking calls run in worker threads; the run's stream is read without
    one, yielding to the event loop at every frame. Any failure of the engine is a ``SandboxError``.
    """

    bridges_tools = True  # the ToolSandbox ability: exec takes tools=

    def __init__(self, config: SandboxConfig | None = None, *, warm: int = 0, client: Any = None) -> None:
        if config is not None and not isinstance(config, SandboxConfig):
            raise UsageError(f"config must be a sandbox.SandboxConfig, got {config!r}")
        if not (isinstance(warm, int) and not isinstance(warm, bool) and 0 <= warm <= 64):
            raise UsageError(f"warm must be an integer from 0 to 64 (idle containers kept ready), got {warm!r}")
        self.config = config or SandboxConfig()
        self.warm = warm
        self._client = client
        self._kwargs: dict[str, Any] | None = None
        self._ready_lock = anyio.Lock()
        self._pool: WarmPool | None = None
        self._stack: contextlib.AsyncExitStack | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------

    async def __aenter__(self) -> DockerSandbox:
        if self._stack is not None:
            raise UsageError("this DockerSandbox is already open; one `async with` at a time")
        kwargs = await self._ready()
        stack = contextlib.AsyncExitStack()
        if self.warm:
            try:
                group = await stack.enter_async_context(anyio.create_task_group())
                pool = WarmPool(functools.partial(engine.start, self._client, kwargs),
                                functools.partial(engine.remove, self._client),
                                size=self.warm, max_age=self.config.idle_ttl * 0.8)
                await pool.run(group)
                stack.push_async_callback(pool.close)  # runs first on exit, then the group waits for removals
            except BaseException:
                await stack.aclose()
                raise
            self._pool = pool
        self._stack = stack
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        # Runs still finishing elsewhere now remove their own containers instead of handing them to the pool.
        stack, self._stack, self._pool = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    async def wait_warm(self) -> None:
        """Wait until the warm pool holds ``warm`` idle containers (useful before timing or a burst of runs)."""
        if self._pool is None:
            raise UsageError("wait_warm needs DockerSandbox(warm=N) inside its `async with` block")
        await self._pool.wait_full()

    async def _ready(self) -> dict[str, Any]:
        """Connect to the engine and check the image, once; the settings each container is created with."""
        if self._kwargs is not None:
            return self._kwargs
        async with self._ready_lock:
            if self._kwargs is None:
                self._kwargs = await anyio.to_thread.run_sync(self._prepare)
            return self._kwargs

    def _prepare(self) -> dict[str, Any]:
        if self._client is None:
            self._client = engine.connect()
        engine.check_image(self._client, self.config.image)
        return engine.create_kwargs(self._client, self.config)

    # -- runs --------------------------------------------------------------------------------------------

    async def exec(
        self,
        argv: Sequence[str],
        *,
        files: Files | None = None,
        stdin: str | bytes | None = None,
        timeout: float | None = None,
        tools: ToolBridge | None = None,
    ) -> ExecResult:
        """Run ``argv`` in a fresh container holding ``files`` in its working directory; see ``sandbox.Sandbox``.

        With ``tools``, the program can ``from tools import ...`` and call them (see ``ToolBridge``).
        """
        argv = check_argv(argv)
        checked = check_files(files)
        data = check_stdin(stdin)
        check_timeout(timeout)
        if tools is not None and not isinstance(tools, ToolBridge):
            raise UsageError(f"tools must be a sandbox.ToolBridge, got {tools!r}")
        if self.warm and self._pool is None:
            raise UsageError("DockerSandbox(warm=N) keeps containers running in the background: use it as "
                             "`async with DockerSandbox(..., warm=N) as sandbox:`")
        await self._ready()
        config = self.config
        env = {"PATH": engine.PATH, "HOME": config.workdir, "LANG": "C.UTF-8", "TMPDIR": "/tmp",
               "PYTHONDONTWRITEBYTECODE": "1", **config.env}
        job = Job(argv, checked, data, config.workdir, env, float(timeout or config.timeout),
                  config.max_output_bytes, tools, count_oom=True, user=user_ids(config.user),
                  supervisor_user=SUPERVISOR_USER)
        with tracing.span("sandbox exec", {"sandbox.kind": "docker", "sandbox.image": config.image,
                                           "sandbox.argv0": argv[0]}) as span:
            result = await self._run(job, span)
            span.set_attribute("sandbox.exit_code", result.exit_code)
            span.set_attribute("sandbox.timed_out", result.timed_out)
            return result

    async def _run(self, job: Job, span: Any) -> ExecResult:
        client = self._client
        cid, sock, warm = await self._acquire()
        span.set_attribute("sandbox.warm", warm)
        channel = None
        try:
            channel = engine.DockerChannel(sock)
            outcome = await run_job(channel, job)
            result = outcome.result
            if outcome.finished:
                # The supervisor exits with the program's status once the stream is let go; the engine saw it.
                status = await anyio.to_thread.run_sync(engine.exit_status, client, cid, channel.close)
                return _confirmed(result, status)
            # Closed before the kill: while the stream is open and unread, the engine's kill waits for it.
            channel.close()
            if result.timed_out or outcome.violation:
                await anyio.to_thread.run_sync(engine.kill, client, cid)
                return result
            state = await anyio.to_thread.run_sync(engine.post_mortem, client, cid)
            return _explain(result, state, bytes(channel.diagnostics))
        finally:
            if channel is not None:
                channel.close()
            await self._dispose(cid)

    async def _acquire(self) -> tuple[str, Any, bool]:
        """A started container, attached: a warm one when the pool has one, else a new one."""
        client, pool = self._client, self._pool
        while pool is not None and (cid := pool.take()) is not None:
            try:
                sock = await anyio.to_thread.run_sync(engine.attach, client, cid)
            except BaseException as exc:
                pool.discard(cid)  # taken, so ours to remove, whatever happened
                if not isinstance(exc, Exception):
                    raise  # cancelled
                _log.warning("a warm container could not be attached", container=cid[:12], error=str(exc))
                continue  # it died while idle: try the next
            return cid, sock, True
        kwargs = await self._ready()
        # Shielded: if the call is cancelled mid-start, the container still gets an owner who removes it.
        with anyio.CancelScope(shield=True):
            new = await anyio.to_thread.run_sync(engine.start, client, kwargs)
        try:
            return new, await anyio.to_thread.run_sync(engine.attach, client, new), False
        except BaseException:
            await self._dispose(new)
            raise

    async def _dispose(self, cid: str) -> None:
        if self._pool is not None:
            self._pool.discard(cid)  # in the background: the result need not wait for the removal
            return
        with anyio.CancelScope(shield=True):
            try:
                await anyio.to_thread.run_sync(engine.remove, self._client, cid)
            except SandboxError as exc:
                # The run is over and was killed if need be; the engine removes the container once it stops.
                _log.warning("could not remove a sandbox container", container=cid[:12], error=str(exc))

    def __repr__(self) -> str:
        return f"DockerSandbox(image={self.config.image!r}, warm={self.warm})"


def _confirmed(result: ExecResult, status: int | None) -> ExecResult:
    """The result with the exit status the engine saw, which the program cannot forge, in place of the report's."""
    if status is None:
        return attrs.evolve(result, exit_code=result.exit_code or 1, stderr=result.stderr + (
            "\n[sandbox: the engine could not confirm the exit status: the container was gone]\n"))
    if status == result.exit_code:
        return result
    return attrs.evolve(result, exit_code=status, stderr=result.stderr + (
        f"\n[sandbox: the exit report said {result.exit_code}, the engine says {status}; the engine's is kept]\n"))


def _explain(result: ExecResult, state: dict[str, Any], diagnostics: bytes) -> ExecResult:
    """Fill in what the engine knows when the supervisor ended without its report (killed, out of memory)."""
    if state.get("OOMKilled"):
        return attrs.evolve(result, exit_code=137, oom_killed=True, stderr=result.stderr + (
            "\n[sandbox: killed: the run reached its memory limit and the out-of-memory killer ended it]\n"))
    code = state.get("ExitCode")
    said = diagnostics.decode("utf-8", errors="replace").strip()[-2000:]
    note = "\n[sandbox: the run ended without an exit report" + (f" (container exit code {code})" if code else "")
    note += f"; the sandbox said: {said}]\n" if said else "]\n"
    return attrs.evolve(result, exit_code=code if isinstance(code, int) and code else result.exit_code,
                        stderr=result.stderr + note)
