"""``SandboxConfig``: safe defaults; unsafe, unknown or impossible settings refused with a clear ``UsageError``."""

from typing import Any

import attrs
import pytest

from loop import UsageError
from sandbox import DockerSandbox, SandboxConfig


def test_defaults_are_safe() -> None:
    config = SandboxConfig()
    assert config.network == "none" and config.read_only is True and config.privileged is False
    assert config.cap_add == () and config.user == "65534:65534"
    assert (config.memory_mb, config.pids, config.cpus) == (256, 64, 1.0)
    assert config.memory_bytes == 256 * 1024 * 1024
    assert (config.workdir_mb, config.tmp_mb, config.shm_mb) == (64, 64, 16)  # every tmpfs is size-capped
    assert dict(config.env) == {}


def test_settings_are_frozen_and_change_by_evolve() -> None:
    config = SandboxConfig(memory_mb=512, env={"MODE": "strict"})
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        config.memory_mb = 1024  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.env["MODE"] = "lax"  # type: ignore[index]
    bigger = attrs.evolve(config, pids=128)
    assert (bigger.pids, bigger.memory_mb, dict(bigger.env)) == (128, 512, {"MODE": "strict"})
    with pytest.raises(UsageError, match="user"):
        attrs.evolve(config, user="0")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"network": "bridge"}, r"network='bridge'\) is refused"),
        ({"network": "host"}, r"network='host'\) is refused"),
        ({"read_only": False}, r"read_only=False\) is refused"),
        ({"privileged": True}, r"privileged=True\) is refused"),
        ({"cap_add": ["SYS_ADMIN"]}, r"cap_add=\['SYS_ADMIN'\]\) is refused"),
        ({"user": "0"}, "never runs as root"),
        ({"user": "0:0"}, "never runs as root"),
        ({"user": "1000:0"}, "never runs as root"),
        ({"user": "root"}, "numeric 'uid:gid'"),
        ({"user": ""}, "numeric 'uid:gid'"),
        ({"user": "65533:65534"}, "the supervisor's"),
        ({"user": "65534:65533"}, "the supervisor's"),
        ({"user": "65533"}, "the supervisor's"),
        ({"memory_mb": 16}, r"memory_mb must be an integer >= 32"),
        ({"memory_mb": "1g"}, r"memory_mb must be an integer"),
        ({"pids": 2}, r"pids must be an integer between 8 and 4096"),
        ({"pids": 100_000}, r"pids must be an integer between 8 and 4096"),
        ({"cpus": 0}, r"cpus must be a positive number"),
        ({"timeout": -1}, r"timeout must be a positive number"),
        ({"max_output_bytes": 10}, r"max_output_bytes must be an integer >= 1024"),
        ({"workdir": "work"}, "workdir must be an absolute directory"),
        ({"workdir": "/"}, "workdir must be an absolute directory"),
        ({"workdir": "/tmp"}, "workdir must be an absolute directory"),
        ({"workdir": "/work/../etc"}, "workdir must be an absolute directory"),
        ({"workdir_mb": 2000}, "tmpfs lives in memory"),
        ({"shm_mb": 0}, r"shm_mb must be a positive integer"),
        ({"shm_mb": 1000}, "tmpfs lives in memory"),
        ({"env": {"SANDBOX_BRIDGE_FDS": "3,4"}}, "sets it itself"),
        ({"env": {"BAD NAME": "x"}}, "env takes str names and values"),
        ({"image": ""}, "image must name a Docker image"),
    ],
)
def test_unsafe_or_impossible_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        SandboxConfig(**settings)


def test_unknown_settings_are_refused_with_the_known_ones_listed() -> None:
    with pytest.raises(UsageError, match=r"unknown SandboxConfig setting \['memory'\]; the settings are \["):
        SandboxConfig(memory="1g")
    with pytest.raises(UsageError, match=r"settings \['mounts', 'volumes'\]"):
        SandboxConfig(volumes={"/": "/host"}, mounts=[])


def test_docker_sandbox_settings_are_checked_when_made() -> None:
    with pytest.raises(UsageError, match="warm must be an integer"):
        DockerSandbox(warm=-1)
    with pytest.raises(UsageError, match="config must be a sandbox.SandboxConfig"):
        DockerSandbox({"memory_mb": 64})  # type: ignore[arg-type]
