"""The README's command-line walkthroughs, run word for word: serve + curl + the OpenAI client, and the terminal chat.

The commands are taken from README.md by their content and run through ``bash -c`` as a user would type them.
Each child runs in a temporary working directory (the default store is an SQLite file there, kept out of the
repository), with ``PYTHONPATH`` naming the repository (as running from the clone would) and this interpreter
first on ``PATH`` (so ``python`` is the one under test). The only change to the commands' words is the serve
walkthrough's port, described in its test.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.abc
import httpx
import pytest

from tests.examples import ROOT

README = (ROOT / "README.md").read_text()
SH_BLOCKS = re.findall(r"```sh\n(.*?)```", README, flags=re.S)
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)


def _block(blocks: list[str], marker: str) -> str:
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, f"expected one README block containing {marker!r}, found {len(found)}"
    return found[0]


def _commands(block: str) -> list[str]:
    """The block's commands, one per entry, with backslash-continued lines joined."""
    return [c for c in re.sub(r"\\\n", " ", block).splitlines() if c.strip()]


def _with_port(text: str, old: str, new: str) -> str:
    assert old in text, f"the README command no longer contains {old!r}: {text}"
    return text.replace(old, new)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(home: Path) -> dict[str, str]:
    """This environment without model settings, running this interpreter, with the repository importable."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "ANTHROPIC_", "SESSION_", "PYTHONPATH", "CURL_HOME"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = str(ROOT)
    env["CURL_HOME"] = str(home)  # the .curlrc written by the test, never the user's
    return env


def _signal_group(process: anyio.abc.Process, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)  # the group the child leads: bash and what it started
    except ProcessLookupError:
        pass


async def _stop(process: anyio.abc.Process) -> None:
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


async def _run(command: str, *, cwd: Path, env: dict[str, str], stdin: bytes = b"") -> subprocess.CompletedProcess:
    with anyio.fail_after(30):  # run_process kills the child when the wait is cancelled
        return await anyio.run_process(["bash", "-c", command], input=stdin, cwd=cwd, env=env, check=False)


@pytest.mark.skipif(shutil.which("curl") is None, reason="the README's walkthrough uses curl, which is not installed")
async def test_the_serve_walkthrough_answers_curl_and_the_openai_client(tmp_path: Path) -> None:
    """``SESSION_TOKEN=change-me python -m session serve ...``, the three curl commands, then the OpenAI client.

    One substitution: port 8000 becomes a free loopback port (``--port 8000``, ``localhost:8000`` and the client's
    ``http://127.0.0.1:8000/v1``), so the test does not depend on port 8000 being free; hosts stay as written.
    The block runs as one script, as pasted into a shell: its first command sets ``$ID`` from the new session's
    JSON, the second posts the question (its JSON reply on a line of its own), the third follows the event stream,
    read until its ``message_finished`` event; then the script is stopped. Curl reads a ``.curlrc`` of the test's
    bounding each request (``max-time``) without changing the commands.
    """
    port = _free_port()
    env = _env(tmp_path)
    (tmp_path / ".curlrc").write_text("max-time = 20\n")
    serve = _with_port(_block(SH_BLOCKS, "python -m session serve examples.quickstart:make_agent").strip(),
                       "--port 8000", f"--port {port}")
    assert serve.startswith("SESSION_TOKEN=change-me ") and "--host 127.0.0.1 " in serve
    walkthrough = _with_port(_block(SH_BLOCKS, "curl -N localhost:8000/sessions/$ID/events"), "localhost:8000",
                             f"localhost:{port}")
    client = _with_port(_block(PYTHON_BLOCKS, "from openai import OpenAI"), "http://127.0.0.1:8000/v1",
                        f"http://127.0.0.1:{port}/v1")

    server_log = tmp_path / "server.log"
    with server_log.open("wb") as log:
        server = await anyio.open_process(["bash", "-c", serve], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with anyio.fail_after(30):
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
                while True:
                    assert server.returncode is None, f"the server exited:\n{server_log.read_text()}"
                    try:
                        if (await http.get("/healthz")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    await anyio.sleep(0.1)

        output = ""
        script = await anyio.open_process(["bash", "-c", walkthrough], cwd=tmp_path, env=env,
                                          stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        try:
            with anyio.fail_after(30):
                assert script.stdout is not None
                while not re.search(r"event: message_finished\ndata: .*\n\n", output):
                    chunk = await script.stdout.receive()
                    output += chunk.decode()
        except (TimeoutError, anyio.EndOfStream):
            raise AssertionError(f"the walkthrough printed:\n{output}") from None
        finally:
            await _stop(script)
        queued_line, events = output.split("\n", 1)
        queued = json.loads(queued_line)
        assert set(queued) == {"message_id", "position"}, queued
        kinds = re.findall(r"^event: (\w+)$", events, flags=re.M)
        assert "text_delta" in kinds and "tool_started" in kinds and kinds[-1] == "message_finished", events
        finished = json.loads(re.findall(r"^data: (.*)$", events, flags=re.M)[-1])
        assert finished["ok"] is True and finished["answer"] == "2 + 3 = 5", finished

        with anyio.fail_after(30):
            done = await anyio.run_process([sys.executable, "-c", client + "print(reply.choices[0].message.content)"],
                                           cwd=tmp_path, env=env, check=False)
        assert done.returncode == 0, done.stderr.decode()
        assert done.stdout.decode().strip() == "2 + 3 = 5"
    finally:
        await _stop(server)
    assert (tmp_path / "sessions.db").exists()  # the default store, in the working directory


async def test_the_chat_walkthrough_answers_two_questions(tmp_path: Path) -> None:
    """``python -m session chat examples.quickstart:make_agent`` with two questions on stdin, then end of input."""
    chat = _commands(_block(SH_BLOCKS, "python -m session chat examples.quickstart:make_agent"))[0]
    assert chat.split("#")[0].strip() == "python -m session chat examples.quickstart:make_agent"
    done = await _run(chat, cwd=tmp_path, env=_env(tmp_path), stdin=b"What is 2 + 3?\nWhat is 10 divided by 4?\n")
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, out + err
    assert "using examples.quickstart.demo_provider()" in err
    first, second = out.index("2 + 3 = 5"), out.index("10 / 4 = 2.5")
    assert first < second and "→ add(" in out and "→ divide(" in out, out
    assert (tmp_path / "sessions.db").exists()  # the default store, in the working directory
