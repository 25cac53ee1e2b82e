"""``DockerSandbox``'s side of a run against a stand-in engine (no Docker): the timeout under an output flood,
engine failures, and the exit status taken from the engine rather than from the run's own report."""

import time

import pytest
import requests

from sandbox import DockerSandbox, SandboxConfig, SandboxError
from tests.sandbox.fake_engine import FakeClient, flood, reporting

FLOOD = ["python3", "-c", "import os\nb = b'y' * 65536\nwhile True: os.write(1, b)"]


@pytest.mark.parametrize("warm", [0, 1], ids=["cold", "warm"])
async def test_a_flood_ends_at_the_timeout_with_the_stream_closed_before_the_kill(warm: int) -> None:
    client = FakeClient(flood)
    async with DockerSandbox(SandboxConfig(max_output_bytes=10_000), warm=warm, client=client) as sandbox:
        if warm:
            await sandbox.wait_warm()
        started = time.perf_counter()
        result = await sandbox.exec(FLOOD, timeout=0.5)
        elapsed = time.perf_counter() - started
    assert result.timed_out and result.exit_code == 137 and result.truncated
    assert elapsed < 0.5 + 1.0, elapsed
    # An engine asked to kill while the attach stream is open and unread waits for it (60 s, then ReadTimeout).
    assert "kill" in client.api.calls and "kill with the stream open" not in client.api.calls


async def test_an_engine_failure_during_a_run_is_a_sandbox_error_and_the_container_is_still_removed() -> None:
    client = FakeClient(flood)

    def broken_kill(cid: str) -> None:
        raise requests.exceptions.ConnectionError("the engine went away")

    client.api.kill = broken_kill  # type: ignore[method-assign]
    with pytest.raises(SandboxError, match="cannot kill sandbox container") as raised:
        await DockerSandbox(client=client).exec(FLOOD, timeout=0.3)
    assert isinstance(raised.value.__cause__, requests.exceptions.ConnectionError)
    assert client.api.calls[-1] == "remove"


async def test_the_exit_status_is_the_engines_not_the_one_the_run_reported() -> None:
    client = FakeClient(reporting(frame_code=0, engine_code=9))
    result = await DockerSandbox(client=client).exec(["python3", "main.py"], timeout=5)
    assert result.exit_code == 9 and not result.ok
    assert "the exit report said 0" in result.stderr and "the engine says 9" in result.stderr
    assert "wait" in client.api.calls


async def test_an_exit_status_the_engine_cannot_confirm_is_not_a_success() -> None:
    client = FakeClient(reporting(frame_code=0, engine_code=0))
    client.api.containers_forgotten = True
    result = await DockerSandbox(client=client).exec(["python3", "main.py"], timeout=5)
    assert result.exit_code != 0 and not result.ok
    assert "could not confirm" in result.stderr


async def test_an_honest_run_keeps_its_status() -> None:
    client = FakeClient(reporting(frame_code=3, engine_code=3))
    result = await DockerSandbox(client=client).exec(["python3", "main.py"], timeout=5)
    assert result.exit_code == 3 and result.stdout == "output\n" and "engine" not in result.stderr
