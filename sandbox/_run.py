"""One run over a channel to the supervisor: send the job, read frames, answer tool calls, cap the output.

Shared by every sandbox that runs ``_supervisor.py`` (Docker and the unsafe local one); they differ only in
how the channel is opened and how a run is killed.
"""

from __future__ import annotations

import base64
import json
import struct
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import anyio
import anyio.abc
import anyio.lowlevel
import attrs

from loop import ArgumentChecker, LoopError
from sandbox._bridge import Admitted, BridgeRun, ToolBridge
from sandbox._protocol import ExecResult

SUPERVISOR = (Path(__file__).with_name("_supervisor.py")).read_text(encoding="utf-8")
MAX_FRAME = 4 << 20  # the honest supervisor sends at most 64 KiB of output or a 1 MiB call per frame
_HEADER = struct.Struct(">cI")


class Channel(Protocol):
    """A byte stream to and from the supervisor. The run's reader checkpoints before every frame, so a
    channel that hands over data without waiting still lets other tasks and the run's deadline in."""

    async def send(self, data: bytes) -> None: ...

    async def receive(self) -> bytes:
        """The next bytes of the supervisor's output; ``b""`` once it has ended."""
        ...


class ProtocolViolation(LoopError):
    """The frame stream broke its format: the program may have taken over the supervisor."""


@attrs.frozen
class Job:
    """One run as the supervisor receives it: checked arguments plus the sandbox's limits."""

    argv: Sequence[str]
    files: Mapping[str, bytes]
    stdin: bytes | None
    cwd: str
    env: Mapping[str, str]
    timeout: float
    max_output: int
    bridge: ToolBridge | None = None
    count_oom: bool = False  # the run has its own memory cgroup (a container), so OOM kills can be counted
    # (uid, gid) pairs: the program's, and the supervisor's once it has started the program. The supervisor
    # must then start as root; without them (the local sandbox) everything runs as the supervisor's user.
    user: tuple[int, int] | None = None
    supervisor_user: tuple[int, int] | None = None

    def line(self) -> bytes:
        body = {
            "argv": list(self.argv), "cwd": self.cwd, "env": dict(self.env),
            "files": [[p, base64.b64encode(d).decode("ascii")] for p, d in self.files.items()],
            "stdin": base64.b64encode(self.stdin).decode("ascii") if self.stdin is not None else None,
            "stub": self.bridge.stub_source if self.bridge is not None else None,
            "stub_module": self.bridge.module if self.bridge is not None else None,
            "count_oom": self.count_oom,
            "user": list(self.user) if self.user is not None else None,
            "supervisor_user": list(self.supervisor_user) if self.supervisor_user is not None else None,
        }
        return json.dumps(body, ensure_ascii=True).encode("ascii") + b"\n"


class Capped:
    """Keeps the head and the tail of a stream within ``limit`` bytes and remembers how much it was."""

    __slots__ = ("limit", "head", "tail", "total")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.limit * 3 // 4 - len(self.head)  # the start usually says what the program was doing
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            keep = self.limit - self.limit * 3 // 4
            if len(self.tail) > 2 * keep:  # trim in batches, not on every chunk
                del self.tail[: len(self.tail) - keep]

    @property
    def truncated(self) -> bool:
        return self.total > self.limit

    def text(self, stream: str) -> str:
        if not self.truncated:
            return (bytes(self.head) + bytes(self.tail)).decode("utf-8", errors="replace")
        keep = self.limit - self.limit * 3 // 4
        tail = bytes(self.tail[-keep:])
        left_out = self.total - len(self.head) - len(tail)
        note = (f"\n[output truncated: the program wrote {self.total:,} bytes to {stream}; {left_out:,} bytes in "
                f"the middle were left out]\n")
        return bytes(self.head).decode("utf-8", errors="replace") + note + tail.decode("utf-8", errors="replace")


class FrameReader:
    """Splits the supervisor's output into (kind, payload) frames, refusing anything out of format."""

    __slots__ = ("_channel", "_buffer")

    def __init__(self, channel: Channel) -> None:
        self._channel = channel
        self._buffer = bytearray()

    async def next(self) -> tuple[bytes, bytes] | None:
        """The next frame, or ``None`` when the stream has ended cleanly."""
        await anyio.lowlevel.checkpoint()  # one per frame, however fast the channel hands over data
        buffer = self._buffer
        while True:
            if len(buffer) >= 5:
                kind, size = _HEADER.unpack_from(buffer)
                if size > MAX_FRAME or kind not in (b"O", b"E", b"C", b"X"):
                    raise ProtocolViolation(f"a frame of kind {kind!r} and {size:,} bytes")
                if len(buffer) >= 5 + size:
                    payload = bytes(buffer[5:5 + size])
                    del buffer[:5 + size]
                    return kind, payload
            chunk = await self._channel.receive()
            if not chunk:
                if buffer:
                    raise ProtocolViolation(f"the stream ended inside a frame ({len(buffer)} bytes left over)")
                return None
            buffer += chunk


@attrs.frozen
class Outcome:
    """What the frames said, before the sandbox adds what only it knows (kills, OOM from outside)."""

    result: ExecResult
    finished: bool  # an exit report arrived
    violation: str | None = None


async def run_job(channel: Channel, job: Job) -> Outcome:
    """Send ``job`` and follow the run to its end or its timeout. Does not kill anything itself."""
    started = time.perf_counter()
    run = _Follower(channel, job)
    with anyio.move_on_after(job.timeout) as scope:
        await channel.send(job.line())
        await run.follow()
    exited = run.report is not None
    result = _result(job, run, timed_out=scope.cancelled_caught and not exited,
                     duration=time.perf_counter() - started)
    return Outcome(result, finished=exited and run.violation is None, violation=run.violation)


class _Follower:
    """Reads one run's frames: output into capped buffers, tool calls to the bridge (answered concurrently,
    one answer line at a time), until the exit report or a broken frame."""

    def __init__(self, channel: Channel, job: Job) -> None:
        self.channel = channel
        self.job = job
        self.out, self.err = Capped(job.max_output), Capped(job.max_output)
        self.bridge: BridgeRun | None = job.bridge.start() if job.bridge is not None else None
        self.report: _Report | None = None
        self.violation: str | None = None
        self._send_lock = anyio.Lock()

    async def follow(self) -> None:
        async with anyio.create_task_group() as group:
            reader = FrameReader(self.channel)
            try:
                while (frame := await reader.next()) is not None:
                    if await self._take(*frame, group):
                        break
            except ProtocolViolation as exc:
                self.violation = str(exc)
            group.cancel_scope.cancel()  # calls still running belong to a program that has ended

    async def _take(self, kind: bytes, payload: bytes, group: anyio.abc.TaskGroup) -> bool:
        """Handle one frame; whether it was the last (the exit report)."""
        if kind == b"O":
            self.out.add(payload)
        elif kind == b"E":
            self.err.add(payload)
        elif kind == b"C" and self.bridge is not None:
            admitted = self.bridge.admit(payload)
            if self.bridge.flooding:
                cap = self.job.bridge.max_tool_calls if self.job.bridge is not None else 0
                raise ProtocolViolation(f"{self.bridge.calls:,} tool calls, far past the cap of {cap}")
            if isinstance(admitted, bytes):
                await self._answer(admitted)
            else:
                group.start_soon(self._execute, admitted)
        elif kind == b"X":
            self.report = _report(payload)
            return True
        return False

    async def _answer(self, line: bytes) -> None:
        async with self._send_lock:  # answers from concurrent calls must not interleave
            await self.channel.send(line)

    async def _execute(self, call: Admitted) -> None:
        assert self.bridge is not None  # calls are admitted only with a bridge
        await self._answer(await self.bridge.execute(call))


def _result(job: Job, run: _Follower, *, timed_out: bool, duration: float) -> ExecResult:
    """The run as an ``ExecResult``: its exit report (or what a missing one means) and notes on stderr."""
    report = run.report if run.report is not None else _Report(137 if timed_out else 1)
    stderr = run.err.text("stderr")
    error = report.error
    if error is not None:
        stderr += ("" if not stderr or stderr.endswith("\n") else "\n") + f"sandbox: {error}\n"
    if timed_out:
        stderr += f"\n[sandbox: killed: the program ran past its {job.timeout:g} s timeout]\n"
    bridge = run.bridge
    if bridge is not None and bridge.unreadable is not None:
        lines = bridge.unreadable_lines
        stderr += (f"\n[sandbox: the tool bridge could not read {lines:,} request line{'s' if lines > 1 else ''} "
                   f"({'the first: ' if lines > 1 else ''}{bridge.unreadable}) and refused "
                   f"{'them' if lines > 1 else 'it'}]\n")
    if run.violation:
        stderr += f"\n[sandbox: the run was stopped: its output broke the sandbox protocol ({run.violation})]\n"
    oom = report.oom_kills > 0
    if oom:
        stderr += "\n[sandbox: killed: the run reached its memory limit and the out-of-memory killer ended it]\n"
    return ExecResult(
        exit_code=report.exit_code,
        stdout=run.out.text("stdout"),
        stderr=stderr,
        timed_out=timed_out,
        oom_killed=oom,
        truncated=run.out.truncated or run.err.truncated,
        error=error,
        tool_calls=run.bridge.calls if run.bridge is not None else 0,
        duration=duration,
    )


@attrs.frozen
class _Report:
    """The supervisor's exit report: the program's exit code, why it could not start, out-of-memory kills."""

    exit_code: int
    error: str | None = None
    oom_kills: int = 0


def _report(payload: bytes) -> _Report:
    try:
        # Read as the bridge reads requests: in the local sandbox the program can reach the supervisor's stream.
        report = ArgumentChecker.loads(payload)
        code = report["exit_code"]
        kills = report.get("oom_kills", 0)
        if type(code) is not int or type(kills) is not int:
            raise ValueError
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ProtocolViolation("a malformed exit report") from None
    error = report.get("error")
    return _Report(code, error if isinstance(error, str) else None, max(kills, 0))
