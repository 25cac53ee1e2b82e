"""Docker tests without Docker: one summary line for all of them outside CI, and a failure for each in CI."""

import os
import subprocess
import sys
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[2]
# Docker tests in two folders: those under tests/sandbox and one elsewhere that takes the docker_config fixture.
DOCKER_TESTS = ["tests/sandbox/test_docker.py", "tests/verifier/test_command_sandbox.py"]


async def run_without_docker(*, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if name != "CI"}
    env.update(DOCKER_HOST="unix:///nonexistent/docker.sock", **({"CI": "true"} if ci else {}))
    return await anyio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "docker", *DOCKER_TESTS], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=60))


async def test_without_docker_every_docker_test_skips_under_one_line() -> None:
    run = await run_without_docker(ci=False)
    assert run.returncode == 0, run.stdout + run.stderr
    skipped = [line for line in run.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1, run.stdout
    assert skipped[0].startswith("SKIPPED [17] ") and "needs Docker" in skipped[0], run.stdout


async def test_in_ci_a_missing_docker_fails_every_docker_test() -> None:
    run = await run_without_docker(ci=True)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "17 errors" in run.stdout and "skipped" not in run.stdout, run.stdout
    assert "Docker tests must run in CI" in run.stdout
