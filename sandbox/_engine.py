"""The Docker calls a sandbox makes: hardened container settings, start, attach, kill, remove, exit status.

Every function here blocks; callers run them in worker threads (``anyio.to_thread``). Whatever the engine
raises (the docker package's errors, requests' timeouts and connection errors, socket errors) is translated
into ``SandboxError`` at this boundary, in ``_translated``, with the engine's error as its cause.
"""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import ssl
import struct
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import anyio.lowlevel

from loop import tracing
from sandbox import _seccomp
from sandbox._config import SandboxConfig, user_ids
from sandbox._protocol import SandboxError
from sandbox._run import SUPERVISOR

LABEL = "org.cognitive-loop.sandbox"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOW_TO_ENABLE = ("install Docker (apt-get install docker.io), start it (dockerd &), and build the sandbox image "
                 "with `python -m sandbox build-image`")
_log = tracing.logger("sandbox.docker")


_clients: dict[str | None, Any] = {}
_clients_lock = threading.Lock()


def connect() -> Any:
    """The Docker client for the engine named by the environment (DOCKER_HOST, or the local socket).

    One client per engine is shared by every sandbox in the process: it is a pool of connections.
    """
    where = os.environ.get("DOCKER_HOST")
    with _clients_lock:
        client = _clients.get(where)
        if client is not None:
            return client
        try:
            import docker
        except ImportError as exc:
            raise SandboxError(f"the docker package is not installed (pip install docker); {HOW_TO_ENABLE}") from exc
        address = where or "unix:///var/run/docker.sock"
        if address.startswith("unix://") and not os.path.exists(address[len("unix://"):]):
            raise SandboxError(f"no Docker engine is listening at {address}; {HOW_TO_ENABLE}")
        failure: BaseException | None = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            try:
                client = docker.from_env(timeout=60)
                client.ping()
            except Exception as exc:
                failure = _detached(exc)
                if client is not None:
                    client.close()
                client = None
            if failure is not None:
                # A client that failed half-way leaves its socket to the garbage collector (the tracebacks
                # held it until now): collect it here, quietly, not as a warning in some unrelated place.
                gc.collect()
        if failure is not None:
            raise SandboxError(f"cannot reach the Docker engine ({failure}); {HOW_TO_ENABLE}") from failure
        _clients[where] = client
        return client


def _detached(exc: BaseException) -> BaseException:
    """``exc`` with the tracebacks along its chain dropped, so the frames (and sockets) they hold are freed."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        current.__traceback__ = None
        current = current.__cause__ or current.__context__
    return exc


def _engine_errors() -> tuple[type[BaseException], ...]:
    """What a call to the engine can raise besides a bug: the docker package's, requests' and socket errors."""
    import docker.errors
    import requests.exceptions
    import urllib3.exceptions

    return (docker.errors.DockerException, requests.exceptions.RequestException, urllib3.exceptions.HTTPError,
            OSError)


@contextlib.contextmanager
def _translated(what: str) -> Iterator[None]:
    """The one boundary where engine failures become ``SandboxError``: ``<what>: <the engine's error>``."""
    try:
        yield
    except SandboxError:
        raise
    except _engine_errors() as exc:
        raise SandboxError(f"{what}: {exc}") from exc


def _gone(error: SandboxError) -> bool:
    """Whether the engine said the container is gone (404), or not running or already being removed (409)."""
    import docker.errors

    cause = error.__cause__
    return isinstance(cause, docker.errors.NotFound) or getattr(cause, "status_code", None) in (404, 409)


def check_image(client: Any, image: str) -> None:
    try:
        with _translated(f"cannot inspect the image {image!r}"):
            client.api.inspect_image(image)
    except SandboxError as exc:
        if not _gone(exc):
            raise
        raise SandboxError(
            f"the sandbox image {image!r} is not present; build it with `python -m sandbox build-image` (no "
            f"registry needed), or `docker pull` a Python image and pass SandboxConfig(image=...)") from exc.__cause__


def create_kwargs(client: Any, config: SandboxConfig) -> dict[str, Any]:
    """The container: no network, read-only root, no capabilities, no new privileges, limits everywhere.

    The supervisor starts as root holding SETUID, SETGID and SETPCAP only: it starts the program as
    ``config.user`` with an empty capability bounding set, then becomes ``SUPERVISOR_USER`` itself, which ends
    every capability it had. The program, running as another user, cannot reach it (see ``_supervisor.py``).
    """
    from docker.types import LogConfig, Ulimit

    # The working directory belongs to the program's user, whatever the image has at that path.
    uid, gid = user_ids(config.user)
    with _translated("cannot prepare the container settings"):
        host_config = client.api.create_host_config(
            network_mode="none",
            read_only=True,
            privileged=False,
            cap_drop=["ALL"],
            cap_add=["SETUID", "SETGID", "SETPCAP"],
            security_opt=["no-new-privileges:true", _seccomp.security_option()],
            tmpfs={
                config.workdir: f"rw,exec,nosuid,nodev,size={config.workdir_mb}m,mode=0700,uid={uid},gid={gid}",
                "/tmp": f"rw,noexec,nosuid,nodev,size={config.tmp_mb}m,mode=1777",
                # Docker's own /dev/shm would be 64 MB and unlisted; this one is sized like the others.
                "/dev/shm": f"rw,noexec,nosuid,nodev,size={config.shm_mb}m,mode=1777",
            },
            mem_limit=config.memory_bytes,
            memswap_limit=config.memory_bytes,  # equal to the memory limit: no swap
            nano_cpus=int(config.cpus * 1e9),
            pids_limit=config.pids,
            ulimits=[Ulimit(name="core", soft=0, hard=0)],
            # Removed by the engine as soon as it stops, whatever happens to this process.
            auto_remove=True,
            # Nothing the program prints is written to the engine's disk.
            log_config=LogConfig(type=LogConfig.types.NONE),
        )
    return {
        "image": config.image,
        "command": ["python3", "-I", "-c", SUPERVISOR],
        "user": "0:0",  # the supervisor's start; see above
        "detach": False,  # with stdin_open: the engine closes stdin when our attachment ends
        "stdin_open": True,
        "tty": False,
        "environment": {"PATH": PATH, "HOME": "/", "LANG": "C.UTF-8", "SANDBOX_IDLE_TTL": f"{config.idle_ttl:g}"},
        # Not the program's directory (mode 0700, not the supervisor's): the program starts there all the same.
        "working_dir": "/",
        "hostname": "sandbox",
        "network_disabled": True,
        "labels": {LABEL: "1", f"{LABEL}.owner": f"{socket.gethostname()}:{os.getpid()}"},
        "host_config": host_config,
    }


def start(client: Any, kwargs: dict[str, Any]) -> str:
    """Create and start a container; its supervisor then waits for its one job. Returns the container id."""
    name = f"sandbox-{uuid.uuid4().hex[:12]}"
    with _translated(f"cannot create a sandbox container from {kwargs['image']!r}"):
        cid: str = client.api.create_container(name=name, **kwargs)["Id"]
    try:
        with _translated(f"cannot start a sandbox container from {kwargs['image']!r}"):
            client.api.start(cid)
    except SandboxError:
        with contextlib.suppress(SandboxError):
            remove(client, cid)
        raise
    return cid


def attach(client: Any, cid: str) -> Any:
    """The raw stream to the container's stdin, stdout and stderr."""
    with _translated(f"cannot attach to sandbox container {cid[:12]}"):
        return client.api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})


def kill(client: Any, cid: str) -> None:
    """SIGKILL the supervisor (PID 1): the kernel then kills everything else in the container.

    Close the run's attach stream first: while it is open and unread, the engine's kill waits for it to drain.
    """
    try:
        with _translated(f"cannot kill sandbox container {cid[:12]}"):
            client.api.kill(cid)
    except SandboxError as exc:
        if not _gone(exc):
            raise


def remove(client: Any, cid: str) -> None:
    """Remove the container, killing it if it still runs; one already gone or being removed is fine."""
    try:
        with _translated(f"cannot remove sandbox container {cid[:12]}"):
            client.api.remove_container(cid, force=True)
    except SandboxError as exc:
        if not _gone(exc):
            raise


def exit_status(client: Any, cid: str, release: Callable[[], None]) -> int | None:
    """The status the container exits with, as the engine saw it; ``None`` if the engine no longer knows it.

    The supervisor exits with the program's status once the host lets go of its stream. So: ask the engine to
    wait for the exit, and once it has taken the request (the answer's headers arrive once the waiter is set),
    ``release`` the stream; the status follows. ``release`` is called in every case.
    """
    api = client.api
    what = f"cannot read the exit status of sandbox container {cid[:12]}"
    try:
        with _translated(what):
            response = api.post(f"{api.base_url}/v{api.api_version}/containers/{cid}/wait",
                                params={"condition": "not-running"}, stream=True, timeout=(10, 60))
    finally:
        release()  # the engine now waits for the exit (or failed): let the supervisor exit either way
    with _translated(what):
        try:
            if response.status_code == 404:
                return None
            response.raise_for_status()
            status = response.json().get("StatusCode")
        finally:
            response.close()
    return status if type(status) is int else None


def post_mortem(client: Any, cid: str) -> dict[str, Any]:
    """The container's final state (exit code, OOM flag) if the engine still has it; ``{}`` otherwise."""
    try:
        with _translated(f"cannot inspect sandbox container {cid[:12]}"):
            client.api.wait(cid, timeout=5)
            return dict(client.api.inspect_container(cid).get("State", {}))
    except SandboxError:
        return {}


class DockerChannel:
    """The attach stream as a ``Channel``: raw bytes to stdin; stdout and stderr split out of Docker's frames.

    The socket is used non-blocking with ``anyio.wait_readable``, so no thread sits on it. Every ``receive``
    is a checkpoint, also when data is already waiting: a program flooding its output must neither starve the
    event loop nor outrun the run's deadline. Reads are at most 256 KiB.
    """

    __slots__ = ("_io", "_sock", "_buffer", "diagnostics")

    def __init__(self, sock_io: Any) -> None:
        self._io = sock_io  # keeps the HTTP response (and so the socket) alive
        self._sock: socket.socket = getattr(sock_io, "_sock", sock_io)
        self._sock.setblocking(False)
        self._buffer = bytearray()
        self.diagnostics = bytearray()  # what the supervisor itself wrote to stderr

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[self._sock.send(view):]
            except (BlockingIOError, ssl.SSLWantWriteError):
                await anyio.wait_writable(self._sock)
            except OSError:
                return  # the container has gone; what it said so far is all there is

    async def _recv(self) -> bytes:
        await anyio.lowlevel.checkpoint()
        while True:
            try:
                return self._sock.recv(262144)
            except (BlockingIOError, ssl.SSLWantReadError):
                await anyio.wait_readable(self._sock)
            except OSError:
                return b""

    async def receive(self) -> bytes:
        await anyio.lowlevel.checkpoint()
        buffer = self._buffer
        while True:
            while len(buffer) >= 8:
                stream, size = buffer[0], struct.unpack_from(">I", buffer, 4)[0]
                if len(buffer) < 8 + size:
                    break
                payload = bytes(buffer[8:8 + size])
                del buffer[:8 + size]
                if stream == 1:
                    if payload:  # an empty payload would read as the end of the stream
                        return payload
                    continue
                if len(self.diagnostics) < 65536:
                    self.diagnostics += payload[:65536]
            chunk = await self._recv()
            if not chunk:
                return b""
            buffer += chunk

    def close(self) -> None:
        for action in (lambda: self._sock.shutdown(socket.SHUT_RDWR), self._sock.close, self._io.close,
                       lambda: self._io._response.close()):
            try:
                action()
            except Exception:
                pass
