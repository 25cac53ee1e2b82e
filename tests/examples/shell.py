"""Running the documentation's shell commands as a user pastes them: found by content, run through ``bash -c`` in
a temporary working directory, with this interpreter first on ``PATH``, the repository on ``PYTHONPATH`` and no
model named in the environment; servers in a process group of their own, stopped with Ctrl-C.

The only changes a test makes to a command's words go through ``substituted``, which fails when the text to
replace is no longer there, so a page that changes is noticed rather than run half-changed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx

from tests.examples import ROOT
from tests.examples.docs import blocks


def commands(block: str) -> list[str]:
    """The block's commands, one per entry: a line continued by a backslash or ending in a pipe is joined to the
    next, as the shell reads it."""
    joined = re.sub(r"\\\n[ \t]*|(?<=\|)[ \t]*\n[ \t]*", " ", block)
    return [c.strip() for c in joined.splitlines() if c.strip()]


def sh_commands() -> dict[str, list[str]]:
    """Every distinct command of every ``sh`` block, with the pages showing it (one command on two pages is one
    command to run)."""
    found: dict[str, list[str]] = {}
    for page, block in blocks("sh"):
        for line in commands(block):
            found.setdefault(line, []).append(page)
    return found


def bare(line: str) -> str:
    """A command without its trailing ``# comment``."""
    return re.sub(r"\s+#\s.*$", "", line)


def names(marker: str, line: str, every: Collection[str]) -> bool:
    """Whether ``marker`` names the command ``line``: a marker equal to a command (comment aside) names that one,
    since it is also a part of longer ones; any other marker names each command containing it."""
    if any(marker == bare(other) for other in every):
        return marker == bare(line)
    return marker in line


def command(marker: str) -> str:
    """The one documented command ``marker`` names (the same command on several pages counts once)."""
    every = list(sh_commands())
    found = [c for c in every if names(marker, c, every)]
    assert len(found) == 1, f"expected one documented command named by {marker!r}, found {found}"
    return found[0]


def substituted(text: str, old: str, new: str) -> str:
    """``text`` with ``old`` replaced by ``new``; fails, naming both, when the page no longer says ``old``."""
    assert old in text, f"the documented command no longer contains {old!r}: {text}"
    return text.replace(old, new)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env(home: Path) -> dict[str, str]:
    """This environment without model settings, running this interpreter, with the repository importable."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "ANTHROPIC_", "SESSION_", "PYTHONPATH", "CURL_HOME"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = str(ROOT)
    env["CURL_HOME"] = str(home)  # the .curlrc a test writes, never the user's
    return env


def _signal_group(process: anyio.abc.Process, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)  # the group the child leads: bash and what it started
    except ProcessLookupError:
        pass


async def stop(process: anyio.abc.Process) -> None:
    """Ctrl-C for the child's process group, then a kill if it has not ended within 20 s."""
    with anyio.CancelScope(shield=True):
        if process.returncode is None:
            _signal_group(process, signal.SIGINT)
            with anyio.move_on_after(20):
                await process.wait()
        if process.returncode is None:
            _signal_group(process, signal.SIGKILL)
            await process.wait()
        await process.aclose()


async def run(line: str, *, cwd: Path, env: dict[str, str], stdin: bytes = b"",
              timeout: float = 30) -> subprocess.CompletedProcess[bytes]:
    """``bash -c line`` to its end, killed when it outlasts ``timeout``."""
    with anyio.fail_after(timeout):  # run_process kills the child when the wait is cancelled
        return await anyio.run_process(["bash", "-c", line], input=stdin, cwd=cwd, env=env, check=False)


async def start(line: str, *, cwd: Path, env: dict[str, str], log: Path) -> anyio.abc.Process:
    """``bash -c line`` left running in a process group of its own (for ``stop``), its output going to ``log``."""
    with log.open("wb") as out:
        return await anyio.open_process(["bash", "-c", line], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


async def wait_for(url: str, process: anyio.abc.Process, log: Path, *, timeout: float = 30) -> None:
    """Poll ``url`` until it answers 200; fails with the server's output when it exits or takes too long."""
    with anyio.fail_after(timeout):
        async with httpx.AsyncClient(timeout=5) as http:
            while True:
                assert process.returncode is None, f"the server exited:\n{log.read_text()}"
                try:
                    if (await http.get(url)).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await anyio.sleep(0.1)


async def wait_for_line(text: str, process: anyio.abc.Process, log: Path, *, timeout: float = 30) -> None:
    """Wait until the server has written ``text`` to ``log``; fails with its output when it exits or takes too
    long."""
    with anyio.fail_after(timeout):
        while text not in log.read_text(errors="replace"):
            assert process.returncode is None, f"the server exited:\n{log.read_text()}"
            await anyio.sleep(0.1)


def chat_stream(*deltas: dict[str, Any], finish: str) -> bytes:
    """A Chat Completions stream, as OpenAI sends it, carrying ``deltas`` then ``finish`` and usage."""
    def chunk(choices: list[dict[str, Any]], **more: Any) -> bytes:
        body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o-mini",
                "choices": choices, **more}
        return f"data: {json.dumps(body)}\n\n".encode()

    events = [chunk([{"index": 0, "delta": d, "finish_reason": None}]) for d in deltas]
    events.append(chunk([{"index": 0, "delta": {}, "finish_reason": finish}]))
    events.append(chunk([], usage={"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}))
    return b"".join(events) + b"data: [DONE]\n\n"


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A delta calling ``name`` with ``arguments``."""
    return {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                            "function": {"name": name, "arguments": json.dumps(arguments)}}]}
