"""Sandbox tests. Tests marked ``docker`` need a Docker engine and the sandbox image: they FAIL in CI
(``CI=true``) when it is missing and skip elsewhere, saying how to enable them (see ``tests/conftest.py`` and
``docker_env``)."""

from collections.abc import AsyncIterator

import pytest

from sandbox import DockerSandbox, SandboxConfig
from tests.sandbox.docker_env import docker_config

__all__ = ["docker_config"]


@pytest.fixture
async def docker_sandbox(docker_config: SandboxConfig) -> AsyncIterator[DockerSandbox]:
    """A Docker sandbox with one warm container, closed (every container removed) after the test."""
    async with DockerSandbox(docker_config, warm=1) as sandbox:
        yield sandbox
