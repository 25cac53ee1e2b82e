"""Docker for the tests: required in CI (a missing engine FAILS there), optional elsewhere (the test skips).

Test modules outside tests/sandbox use it by importing the fixture:
``from tests.sandbox.docker_env import docker_config  # noqa: F401`` and marking their tests ``docker``.
"""

from __future__ import annotations

import functools
import os

import pytest

from sandbox import SandboxConfig, SandboxError
from sandbox._engine import check_image, connect

def in_ci() -> bool:
    """Whether this is a CI run (``CI=true``), where Docker tests must run rather than skip."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@functools.cache
def _problem(image: str) -> str | None:
    """Why Docker cannot run the sandbox here, or ``None`` when it can. Asked once per test session."""
    try:
        client = connect()
        check_image(client, image)
    except SandboxError as exc:
        return str(exc)
    return None


def require_docker(config: SandboxConfig | None = None) -> SandboxConfig:
    """The sandbox settings to test with; fails the test in CI and skips it elsewhere when Docker is missing."""
    config = config or SandboxConfig()
    problem = _problem(config.image)
    if problem is not None:
        if in_ci():
            pytest.fail(f"Docker tests must run in CI, but Docker is not usable: {problem}", pytrace=False)
        pytest.skip(f"needs Docker, which is not usable here: {problem}")
    return config


@pytest.fixture(scope="session")
def docker_config() -> SandboxConfig:
    """Settings for a working Docker sandbox (the session's one built image); see ``require_docker``."""
    return require_docker()


def our_containers() -> list[dict]:
    """Sandbox containers this test process started that still exist (running or not)."""
    import socket

    from sandbox._engine import LABEL

    owner = f"{socket.gethostname()}:{os.getpid()}"
    return connect().api.containers(all=True, filters={"label": f"{LABEL}.owner={owner}"})


async def wait_until_no_containers(timeout: float = 20.0) -> None:
    """Wait until every container this process started is gone (removal can trail a run by a moment)."""
    import anyio

    with anyio.fail_after(timeout):
        while await anyio.to_thread.run_sync(our_containers):
            await anyio.sleep(0.05)
