"""``SandboxConfig``: the settings of a Docker sandbox, safe by default; unsafe or unknown ones are refused."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from loop import UsageError
from loop.checks import int_at_least, positive_int, positive_number

DEFAULT_IMAGE = "cognitive-loop-sandbox:latest"
MIN_MEMORY_MB = 32  # below this the Python supervisor and interpreter cannot start reliably
MAX_PIDS = 4096
# The supervisor's own user once it has started the program: never the program's, so the program cannot reach it.
SUPERVISOR_USER = (65533, 65533)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Names the sandbox sets itself; letting a config replace them would break the run or the bridge.
_RESERVED_ENV = {"SANDBOX_BRIDGE_FDS", "SANDBOX_IDLE_TTL"}


def _frozen_env(value: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(value or {}))


@attrs.frozen(init=False)
class SandboxConfig:
    """How a ``DockerSandbox`` starts its containers. Every field has a safe default.

    - ``image``: a local image with ``python3`` on its PATH (build one with ``python -m sandbox build-image``;
      any Python image such as ``python:3.12-slim`` works if your Docker can pull it).
    - ``memory_mb`` (RAM, no swap: the swap limit equals it), ``cpus``, ``pids``: resource limits.
    - ``timeout``: default wall-clock seconds for one ``exec``; past it the whole container is killed.
    - ``workdir``, ``workdir_mb``, ``tmp_mb``, ``shm_mb``: the program's tmpfs working directory, ``/tmp`` and
      ``/dev/shm`` (POSIX shared memory and semaphores, as ``multiprocessing`` uses), with size caps.
    - ``max_output_bytes``: how much of stdout and of stderr is kept (each); the rest is cut with a note.
    - ``user``: ``uid:gid`` the program runs as; never root, and never the supervisor's (65533), which runs
      apart from the program so the program cannot reach it.
    - ``env``: the only environment variables the program sees besides PATH, HOME and LANG. The host's own
      environment is never passed in.
    - ``idle_ttl``: seconds a warm container waits for its run before ending itself (so a crashed host leaves
      nothing running for long).

    ``network``, ``read_only``, ``privileged`` and ``cap_add`` exist only so that asking for an unsafe value
    fails loudly: the network is always ``"none"``, the root filesystem read-only, no privileges are granted
    and every capability is dropped. An unknown setting is a ``UsageError`` too.
    """

    image: str = DEFAULT_IMAGE
    memory_mb: int = 256
    cpus: float = 1.0
    pids: int = 64
    timeout: float = 30.0
    workdir: str = "/work"
    workdir_mb: int = 64
    tmp_mb: int = 64
    shm_mb: int = 16
    max_output_bytes: int = 1_000_000
    user: str = "65534:65534"
    env: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_env, hash=False)
    idle_ttl: float = 600.0
    network: str = "none"
    read_only: bool = True
    privileged: bool = False
    cap_add: tuple[str, ...] = attrs.field(default=(), converter=tuple)

    def __init__(self, **settings: Any) -> None:
        known = attrs.fields_dict(type(self))
        unknown = sorted(set(settings) - set(known))
        if unknown:
            raise UsageError(f"unknown SandboxConfig setting{'s' if len(unknown) > 1 else ''} {unknown}; "
                             f"the settings are {sorted(known)}")
        self.__attrs_init__(**settings)

    def __attrs_post_init__(self) -> None:
        _check(self)

    @property
    def memory_bytes(self) -> int:
        return self.memory_mb * 1024 * 1024


def _check_pids(pids: object) -> None:
    if not (isinstance(pids, int) and not isinstance(pids, bool) and 8 <= pids <= MAX_PIDS):
        raise UsageError(f"SandboxConfig.pids must be an integer between 8 and {MAX_PIDS}, got {pids!r}")


def _check(config: SandboxConfig) -> None:
    """Refuse settings that would weaken isolation or cannot work, saying which and why."""
    if config.network != "none":
        raise UsageError(f"SandboxConfig(network={config.network!r}) is refused: sandboxed code never gets a "
                         "network; its only way out is the tool bridge (give the program tools instead)")
    if config.read_only is not True:
        raise UsageError("SandboxConfig(read_only=False) is refused: the root filesystem is always read-only; "
                         f"the program writes to its tmpfs working directory {config.workdir} and /tmp")
    if config.privileged is not False:
        raise UsageError("SandboxConfig(privileged=True) is refused: a privileged container is not a sandbox")
    if config.cap_add:
        raise UsageError(f"SandboxConfig(cap_add={list(config.cap_add)}) is refused: every capability is "
                         "dropped and none can be added back")
    if not isinstance(config.image, str) or not config.image.strip():
        raise UsageError(f"SandboxConfig.image must name a Docker image, got {config.image!r}")
    _check_user(config.user)
    int_at_least("SandboxConfig.memory_mb", config.memory_mb, MIN_MEMORY_MB)
    _check_pids(config.pids)
    positive_int("SandboxConfig.workdir_mb", config.workdir_mb)
    positive_int("SandboxConfig.tmp_mb", config.tmp_mb)
    positive_int("SandboxConfig.shm_mb", config.shm_mb)
    int_at_least("SandboxConfig.max_output_bytes", config.max_output_bytes, 1024)
    positive_number("SandboxConfig.cpus", config.cpus)
    positive_number("SandboxConfig.timeout", config.timeout, unit="seconds")
    positive_number("SandboxConfig.idle_ttl", config.idle_ttl, unit="seconds")
    tmpfs = config.workdir_mb + config.tmp_mb + config.shm_mb
    if tmpfs > config.memory_mb * 4:
        raise UsageError(f"SandboxConfig: workdir_mb + tmp_mb + shm_mb ({tmpfs}) is far above memory_mb "
                         f"({config.memory_mb}); tmpfs lives in memory, so raise memory_mb first")
    workdir = config.workdir
    if (not isinstance(workdir, str) or not workdir.startswith("/") or workdir.rstrip("/") in ("", "/tmp")
            or ".." in workdir.split("/") or "," in workdir or ":" in workdir):
        raise UsageError(f"SandboxConfig.workdir must be an absolute directory other than / and /tmp, with no "
                         f"'..', ',' or ':', got {workdir!r}")
    for key, value in config.env.items():
        if not (isinstance(key, str) and _ENV_NAME.fullmatch(key) and isinstance(value, str)):
            raise UsageError(f"SandboxConfig.env takes str names and values, got {key!r}={value!r}")
        if key in _RESERVED_ENV:
            raise UsageError(f"SandboxConfig.env cannot set {key}: the sandbox sets it itself")


def _check_user(user: object) -> None:
    if not isinstance(user, str) or not re.fullmatch(r"\d+(:\d+)?", user):
        raise UsageError(f"SandboxConfig.user must be a numeric 'uid:gid' (names could resolve to root inside "
                         f"the image), got {user!r}")
    uid, _, gid = user.partition(":")
    if int(uid) == 0 or (gid and int(gid) == 0):
        raise UsageError(f"SandboxConfig(user={user!r}) is refused: the program never runs as root (uid or "
                         "gid 0); the default is 65534:65534 (nobody)")
    if int(uid) in SUPERVISOR_USER or int(gid or uid) in SUPERVISOR_USER:
        raise UsageError(f"SandboxConfig(user={user!r}) is refused: {SUPERVISOR_USER[0]} is the supervisor's user "
                         "and group, kept apart from the program's so the program cannot reach the supervisor")


def user_ids(user: str) -> tuple[int, int]:
    """``(uid, gid)`` of a checked ``uid[:gid]`` (the gid is the uid when left out)."""
    uid, _, gid = user.partition(":")
    return int(uid), int(gid or uid)
