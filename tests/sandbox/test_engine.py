"""The engine boundary without Docker: every engine failure becomes a ``SandboxError``, the attach stream yields
to the event loop, and the settings every container is created with (users, capabilities, seccomp, tmpfs)."""

import json
import socket
import struct
from collections.abc import Callable
from typing import Any

import anyio
import docker.errors
import pytest
import requests

from sandbox import SandboxConfig, SandboxError
from sandbox import _engine as engine
from tests.sandbox.fake_engine import FakeClient, flood


class FailingAPI:
    """An engine whose every call fails with ``error``."""

    base_url = "http+docker://fake"
    api_version = "1.41"

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def fail(*args: object, **kwargs: object) -> Any:
            raise self.error

        return fail


class FailingClient:
    def __init__(self, error: Exception) -> None:
        self.api = FailingAPI(error)


class Conflict:
    """The response behind a 409: the container is not running, or is already being removed."""

    status_code = 409
    reason = "Conflict"
    url = "http+docker://fake/containers/c1/kill"


ERRORS = [
    requests.exceptions.ReadTimeout("UnixHTTPConnectionPool(host='localhost'): Read timed out."),
    requests.exceptions.ConnectionError("connection refused"),
    docker.errors.APIError("500 Server Error: Internal Server Error"),
    OSError(32, "Broken pipe"),
]
CALLS: dict[str, Callable[[Any], object]] = {
    "check_image": lambda client: engine.check_image(client, "cognitive-loop-sandbox:latest"),
    "start": lambda client: engine.start(client, {"image": "cognitive-loop-sandbox:latest"}),
    "attach": lambda client: engine.attach(client, "c1"),
    "kill": lambda client: engine.kill(client, "c1"),
    "remove": lambda client: engine.remove(client, "c1"),
    "exit_status": lambda client: engine.exit_status(client, "c1", lambda: None),
}


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_every_engine_failure_becomes_a_sandbox_error(call: str, error: Exception) -> None:
    with pytest.raises(SandboxError) as raised:
        CALLS[call](FailingClient(error))
    assert raised.value.__cause__ is error  # translated at the boundary, the engine's error kept as the cause


@pytest.mark.parametrize("error", [docker.errors.NotFound("No such container: c1"),
                                   docker.errors.APIError("409 Conflict", response=Conflict())],  # type: ignore[arg-type]
                         ids=["gone", "not running"])
def test_killing_or_removing_a_container_that_already_ended_is_not_an_error(error: Exception) -> None:
    engine.kill(FailingClient(error), "c1")
    engine.remove(FailingClient(error), "c1")


def test_a_container_the_engine_no_longer_knows_has_no_exit_status() -> None:
    client = FakeClient(flood)
    client.api.containers_forgotten = True
    released: list[bool] = []
    assert engine.exit_status(client, "c1", lambda: released.append(True)) is None
    assert released  # the stream is let go in every case


async def test_receiving_is_a_checkpoint_even_when_data_is_waiting() -> None:
    host, inside = socket.socketpair()
    try:
        inside.sendall(b"\x01\x00\x00\x00" + struct.pack(">I", 5) + b"hello")
        channel = engine.DockerChannel(host)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await channel.receive()  # data is ready, but a cancelled caller must still be stopped here
        assert scope.cancelled_caught
        assert await channel.receive() == b"hello"
        channel.close()
    finally:
        inside.close()


# -- the container settings --------------------------------------------------------------------------------


def settings(config: SandboxConfig | None = None) -> dict[str, Any]:
    return engine.create_kwargs(FakeClient(flood), config or SandboxConfig())


def test_the_supervisor_starts_with_only_the_capabilities_to_start_the_program_as_its_user() -> None:
    kwargs = settings()
    host = kwargs["host_config"]
    # Root, with no capability but SETUID, SETGID and SETPCAP: enough to start the program as 65534 with an
    # empty bounding set, then become 65533 itself, which ends every capability it had.
    assert kwargs["user"] == "0:0"
    assert host["CapDrop"] == ["ALL"] and sorted(host["CapAdd"]) == ["SETGID", "SETPCAP", "SETUID"]
    assert host["ReadonlyRootfs"] is True and host["NetworkMode"] == "none" and not host.get("Privileged")


def test_a_seccomp_profile_shipped_with_the_project_denies_reaching_into_other_processes() -> None:
    options = settings()["host_config"]["SecurityOpt"]
    assert options[0] == "no-new-privileges:true" and options[1].startswith("seccomp=")
    profile = json.loads(options[1][len("seccomp="):])
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    denied = {name for rule in profile["syscalls"] if rule["action"] == "SCMP_ACT_ERRNO" and not rule.get("args")
              for name in rule["names"]}
    assert {"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp"} <= denied
    assert {"unshare", "setns", "keyctl", "bpf", "userfaultfd", "io_uring_setup", "mount"} <= denied
    clone = [rule for rule in profile["syscalls"] if rule["names"] == ["clone"]]
    assert clone and all(rule["args"][0]["op"] == "SCMP_CMP_MASKED_EQ" for rule in clone)  # new namespaces only


def test_dev_shm_is_a_size_capped_tmpfs_like_the_others() -> None:
    tmpfs = settings(SandboxConfig(shm_mb=8, tmp_mb=4))["host_config"]["Tmpfs"]
    assert tmpfs["/dev/shm"] == "rw,noexec,nosuid,nodev,size=8m,mode=1777"
    assert tmpfs["/tmp"] == "rw,noexec,nosuid,nodev,size=4m,mode=1777"
    assert SandboxConfig().shm_mb == 16

