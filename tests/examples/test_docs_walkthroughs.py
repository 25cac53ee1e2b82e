"""The guide's command-line walkthroughs, run word for word: serve + curl + the OpenAI client (http.md and
openai-api.md), and the terminal chat (sessions.md).

The commands are taken from the pages by their content and run through ``bash -c`` as a user would type them
(``tests.examples.shell``). Each child runs in a temporary working directory (the default store is an SQLite
file there, kept out of the repository), with ``PYTHONPATH`` naming the repository (as running from the clone
would) and this interpreter first on ``PATH`` (so ``python`` is the one under test). The only change to the
commands' words is the serve walkthrough's port, described in its test. The other shell blocks of the
documentation are run by test_docs_shell.py.
"""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.examples.docs import PYTHON_BLOCKS, SH_BLOCKS
from tests.examples.docs import block as _block
from tests.examples.shell import child_env, command, free_port, run, start, stop, substituted, wait_for


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
    port = free_port()
    env = child_env(tmp_path)
    (tmp_path / ".curlrc").write_text("max-time = 20\n")
    serve = substituted(command("serve examples.quickstart:make_agent --host 127.0.0.1"), "--port 8000",
                        f"--port {port}")
    assert serve.startswith("SESSION_TOKEN=change-me ") and "--host 127.0.0.1 " in serve
    walkthrough = substituted(_block(SH_BLOCKS, "curl -N localhost:8000/sessions/$ID/events"), "localhost:8000",
                              f"localhost:{port}")
    client = substituted(_block(PYTHON_BLOCKS, "from openai import OpenAI"), "http://127.0.0.1:8000/v1",
                         f"http://127.0.0.1:{port}/v1")

    server_log = tmp_path / "server.log"
    server = await start(serve, cwd=tmp_path, env=env, log=server_log)
    try:
        await wait_for(f"http://127.0.0.1:{port}/healthz", server, server_log)

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
            await stop(script)
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
        await stop(server)
    assert (tmp_path / "sessions.db").exists()  # the default store, in the working directory


async def test_the_chat_walkthrough_answers_two_questions(tmp_path: Path) -> None:
    """``python -m session chat examples.quickstart:make_agent`` with two questions on stdin, then end of input."""
    chat = command("python -m session chat examples.quickstart:make_agent")
    assert chat.split("#")[0].strip() == "python -m session chat examples.quickstart:make_agent"
    done = await run(chat, cwd=tmp_path, env=child_env(tmp_path), stdin=b"What is 2 + 3?\nWhat is 10 divided by 4?\n")
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, out + err
    assert "using examples.quickstart.demo_provider()" in err
    first, second = out.index("2 + 3 = 5"), out.index("10 / 4 = 2.5")
    assert first < second and "→ add(" in out and "→ divide(" in out, out
    assert (tmp_path / "sessions.db").exists()  # the default store, in the working directory
