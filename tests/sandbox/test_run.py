"""One run over a channel: frames, output caps, and a supervisor stream that breaks the protocol."""

import json
import struct
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from sandbox._run import SUPERVISOR, Capped, FrameReader, Job, ProtocolViolation, run_job
from tests.loop_gaps import loop_gaps
from tests.processes import running


def frame(kind: bytes, payload: bytes) -> bytes:
    return kind + struct.pack(">I", len(payload)) + payload


class FakeChannel:
    """Plays back bytes in the chunks given and records what the host sent."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)
        self.sent: list[bytes] = []

    async def send(self, data: bytes) -> None:
        self.sent.append(data)

    async def receive(self) -> bytes:
        if not self.chunks:
            await anyio.sleep_forever()
        return self.chunks.pop(0)


def job(timeout: float = 5.0, max_output: int = 1024) -> Job:
    return Job(["python3", "main.py"], {"main.py": b"print(1)"}, None, "/work", {}, timeout, max_output)


def test_capped_output_keeps_head_and_tail_and_says_what_was_cut() -> None:
    cap = Capped(1000)
    cap.add(b"START" + b"a" * 2000)
    for _ in range(100):
        cap.add(b"b" * 1000)
    cap.add(b"THE END")
    text = cap.text("stdout")
    assert cap.truncated and cap.total == 2005 + 100_000 + 7
    assert text.startswith("START") and text.endswith("THE END")
    assert "[output truncated: the program wrote 102,012 bytes to stdout; 101,012 bytes in the middle were left " \
           "out]" in text
    assert len(text.encode()) < 1000 + 200


def test_output_within_the_cap_is_whole() -> None:
    cap = Capped(1000)
    for chunk in (b"x" * 700, b"y" * 300):
        cap.add(chunk)
    assert not cap.truncated and cap.text("stdout") == "x" * 700 + "y" * 300


async def test_frames_split_across_chunks_are_reassembled() -> None:
    data = frame(b"O", b"hello") + frame(b"E", b"") + frame(b"X", b"{}")
    reader = FrameReader(FakeChannel(*[data[i:i + 3] for i in range(0, len(data), 3)], b""))
    assert [await reader.next() for _ in range(4)] == [(b"O", b"hello"), (b"E", b""), (b"X", b"{}"), None]


@pytest.mark.parametrize("data", [frame(b"Z", b"x"), b"O" + struct.pack(">I", 1 << 30), frame(b"O", b"abc")[:-1]])
async def test_out_of_format_streams_are_protocol_violations(data: bytes) -> None:
    reader = FrameReader(FakeChannel(data, b""))
    with pytest.raises(ProtocolViolation):
        await reader.next()


async def test_a_run_sends_the_job_and_reads_the_exit_report() -> None:
    channel = FakeChannel(frame(b"O", b"out\n"), frame(b"E", b"err\n"),
                          frame(b"X", json.dumps({"exit_code": 4, "error": None, "oom_kills": 0}).encode()))
    outcome = await run_job(channel, job())
    assert outcome.finished and outcome.result.exit_code == 4
    assert (outcome.result.stdout, outcome.result.stderr) == ("out\n", "err\n")
    sent = json.loads(channel.sent[0])
    assert sent["argv"] == ["python3", "main.py"] and sent["files"] == [["main.py", "cHJpbnQoMSk="]]
    assert sent["stub"] is None


async def test_a_forged_exit_report_or_garbage_stops_the_run_as_a_violation() -> None:
    outcome = await run_job(FakeChannel(frame(b"O", b"partial"), frame(b"X", b"not json")), job())
    assert not outcome.finished and outcome.violation == "a malformed exit report"
    assert "broke the sandbox protocol" in outcome.result.stderr and not outcome.result.ok
    outcome = await run_job(FakeChannel(b"\x00garbage" * 3), job())
    assert outcome.violation is not None and not outcome.result.ok


async def test_a_silent_run_times_out() -> None:
    outcome = await run_job(FakeChannel(), job(timeout=0.2))
    assert outcome.result.timed_out and outcome.result.exit_code == 137
    assert "ran past its 0.2 s timeout" in outcome.result.stderr


class FloodChannel:
    """Always has 64 KiB of output ready, for ``seconds``, and hands it over without waiting for anything."""

    def __init__(self, seconds: float) -> None:
        self.until = time.perf_counter() + seconds

    async def send(self, data: bytes) -> None:
        pass

    async def receive(self) -> bytes:
        return frame(b"E", b"y" * 65536) if time.perf_counter() < self.until else b""


async def test_a_flood_that_never_makes_the_channel_wait_still_times_out_without_stalling_the_loop() -> None:
    async with loop_gaps() as gaps:
        started = time.perf_counter()
        outcome = await run_job(FloodChannel(seconds=3), job(timeout=0.3))
        elapsed = time.perf_counter() - started
    # Without a checkpoint per frame the run holds the loop for the whole 3 s flood and overruns its deadline.
    # (The bounds leave room for a busy machine; the Docker flood tests hold the loop to 50 ms.)
    assert outcome.result.timed_out and outcome.result.truncated and elapsed < 0.3 + 0.5, elapsed
    assert gaps and max(gaps) < 0.25, max(gaps)


async def test_tool_call_frames_without_a_bridge_are_ignored() -> None:
    channel = FakeChannel(frame(b"C", b'{"id": 1, "tool": "add", "args": "{}"}'),
                          frame(b"X", json.dumps({"exit_code": 0}).encode()))
    outcome = await run_job(channel, job())
    assert outcome.finished and len(channel.sent) == 1  # only the job: nothing answered the call


def test_the_supervisor_ends_itself_when_no_job_comes_within_its_idle_time() -> None:
    done = subprocess.run([sys.executable, "-I", "-c", SUPERVISOR], stdin=subprocess.PIPE, capture_output=True,
                          env={"SANDBOX_IDLE_TTL": "0.2"}, timeout=30)
    assert done.returncode == 0 and done.stdout == b""


def test_when_the_host_goes_away_the_supervisor_ends_the_program(tmp_path: Path) -> None:
    code = "import os, time; open('pid', 'w').write(str(os.getpid())); time.sleep(60)"
    job_line = json.dumps({"argv": [sys.executable, "-c", code], "cwd": str(tmp_path), "env": {}, "files": [],
                           "stdin": None, "stub": None}) + "\n"
    with subprocess.Popen([sys.executable, "-I", "-c", SUPERVISOR], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          start_new_session=True) as process:
        assert process.stdin is not None
        process.stdin.write(job_line.encode())
        process.stdin.flush()
        deadline = time.monotonic() + 30
        while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text():
            assert time.monotonic() < deadline, "the program never started"
            time.sleep(0.01)
        process.stdin.close()  # end of input: the host is gone
        assert process.wait(timeout=30) != 0
    pid = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 10
    while running(pid):  # killed with the supervisor's process group (a zombie runs nothing)
        assert time.monotonic() < deadline, "the program outlived its supervisor"
        time.sleep(0.01)
