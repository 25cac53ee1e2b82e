"""A stand-in for the Docker engine, to test ``DockerSandbox``'s side of a run without Docker.

Each container's "supervisor" is a Python function running in a thread at the far end of a socket pair that
plays the attach stream: it reads the job line and writes supervisor frames wrapped in Docker's stream frames.
The engine's calls behave as the real engine's do where it matters here:

- ``kill`` while the attach stream is still open and unread blocks, then fails with requests' ``ReadTimeout``
  (the real engine waits for the stream to drain, up to the client's 60 s timeout);
- the exit status (``wait``) is the status the container exited with, whatever its frames said.
"""

from __future__ import annotations

import itertools
import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import docker.types
import requests

Program = Callable[["FakeContainer"], None]


class FakeContainer:
    """One container: the far end of its attach stream, and how it ended."""

    def __init__(self, cid: str, program: Program) -> None:
        self.cid = cid
        self.program = program
        self.exit_code: int | None = None
        self.exited = threading.Event()
        self.hung_up = threading.Event()  # the host closed its end of the attach stream

    def attach(self) -> socket.socket:
        """The host's end of the attach stream; the program starts on the other end."""
        self.host, self.inside = socket.socketpair()
        threading.Thread(target=self._run, daemon=True).start()
        return self.host

    def _run(self) -> None:
        try:
            self.program(self)
        except OSError:
            self.hung_up.set()
        finally:
            self.inside.close()

    def read_job(self) -> dict[str, Any]:
        line = b""
        while not line.endswith(b"\n"):
            chunk = self.inside.recv(65536)
            if not chunk:
                raise OSError("the host hung up before sending a job")
            line += chunk
        job: dict[str, Any] = json.loads(line)
        return job

    def send(self, kind: bytes, payload: bytes) -> None:
        """One supervisor frame, inside one Docker stdout frame."""
        data = kind + struct.pack(">I", len(payload)) + payload
        self.inside.sendall(b"\x01\x00\x00\x00" + struct.pack(">I", len(data)) + data)

    def wait_for_hang_up(self) -> None:
        while self.inside.recv(65536):
            pass
        self.hung_up.set()

    def exit(self, code: int) -> None:
        if self.exit_code is None:
            self.exit_code = code
        self.exited.set()


def flood(container: FakeContainer) -> None:
    """A program writing to stdout without end: frames go out until the host hangs up."""
    container.read_job()
    block = b"y" * 65536
    while True:
        container.send(b"O", block)


def reporting(frame_code: int, engine_code: int) -> Program:
    """A run whose exit report says ``frame_code`` while the container really exits with ``engine_code``."""

    def program(container: FakeContainer) -> None:
        container.read_job()
        container.send(b"O", b"output\n")
        container.send(b"X", json.dumps({"exit_code": frame_code, "error": None, "oom_kills": 0}).encode())
        container.wait_for_hang_up()  # the supervisor exits once the host has its report
        container.exit(engine_code)

    return program


class _WaitResponse:
    """The engine's answer to ``POST /containers/{id}/wait``: headers at once, the status at the exit."""

    def __init__(self, container: FakeContainer | None) -> None:
        self.container = container
        self.status_code = 200 if container is not None else 404

    def raise_for_status(self) -> None:
        if self.status_code >= 400:
            raise requests.exceptions.HTTPError(f"{self.status_code} Client Error: Not Found")

    def json(self) -> dict[str, Any]:
        assert self.container is not None
        if not self.container.exited.wait(10):
            raise requests.exceptions.ReadTimeout("the container did not exit")
        return {"Error": None, "StatusCode": self.container.exit_code}

    def close(self) -> None:
        pass


class FakeAPI:
    """The low-level client calls the sandbox makes, over ``FakeContainer`` objects."""

    base_url = "http+docker://fake"
    api_version = "1.41"

    def __init__(self, program: Program, *, kill_blocks: float = 3.0) -> None:
        self.program = program
        self.kill_blocks = kill_blocks
        self.containers: dict[str, FakeContainer] = {}
        self.calls: list[str] = []
        self.containers_forgotten = False  # the engine lost every container's record (the wait finds none)
        self._ids = itertools.count(1)

    def inspect_image(self, image: str) -> dict[str, Any]:
        return {"Id": image}

    def create_host_config(self, **settings: Any) -> dict[str, Any]:
        return docker.types.HostConfig(version=self.api_version, **settings)

    def create_container(self, name: str, **settings: Any) -> dict[str, str]:
        cid = f"{next(self._ids):064x}"
        self.containers[cid] = FakeContainer(cid, self.program)
        return {"Id": cid}

    def start(self, cid: str) -> None:
        self.calls.append("start")

    def attach_socket(self, cid: str, params: dict[str, Any]) -> socket.socket:
        return self.containers[cid].attach()

    def kill(self, cid: str) -> None:
        container = self.containers[cid]
        self.calls.append("kill with the stream open" if container.host.fileno() != -1 else "kill")
        deadline = time.monotonic() + self.kill_blocks
        while container.host.fileno() != -1:  # the host's end of the attach stream is still open
            if time.monotonic() > deadline:
                raise requests.exceptions.ReadTimeout("UnixHTTPConnectionPool(host='localhost'): Read timed out.")
            time.sleep(0.01)
        container.exit(137)

    def remove_container(self, cid: str, force: bool = False) -> None:
        self.calls.append("remove")
        self.containers[cid].exit(137)

    def wait(self, cid: str, timeout: float | None = None) -> dict[str, Any]:
        container = self.containers[cid]
        container.exited.wait(timeout)
        return {"StatusCode": container.exit_code}

    def inspect_container(self, cid: str) -> dict[str, Any]:
        return {"State": {"ExitCode": self.containers[cid].exit_code, "OOMKilled": False}}

    def post(self, url: str, **kwargs: Any) -> _WaitResponse:
        assert url.endswith("/wait") and kwargs.get("stream") is True, (url, kwargs)
        cid = url.rsplit("/", 2)[-2]
        self.calls.append("wait")
        return _WaitResponse(None if self.containers_forgotten else self.containers.get(cid))


class FakeClient:
    def __init__(self, program: Program, **settings: Any) -> None:
        self.api = FakeAPI(program, **settings)
