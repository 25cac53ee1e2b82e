"""The command line, run as a user runs it: in a subprocess, with real signals."""

import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path

import anyio
import pytest

from loop import Role
from session import SQLiteStore
from tests.provider.wire.server import WireServer

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
for _name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
    ENV.pop(_name, None)

@pytest.fixture
def anyio_backend() -> str:
    """HTTP clients against servers: on asyncio, as the HTTP suites."""
    return "asyncio"



def chat(*args: str, stdin: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "session", "chat", *args], input=stdin, cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_chat_streams_answers_and_ends_at_end_of_input(backend: str) -> None:
    done = await anyio.to_thread.run_sync(lambda: chat("tests.session.agents:make_agent", "--store", "memory://",
                                                       "--backend", backend, stdin="hello there\nwait 0.01\n"))
    assert done.returncode == 0, done.stderr
    assert "HELLO THERE" in done.stdout
    assert "→ wait({\"seconds\": 0.01})" in done.stdout and "← wait: waited 0.01 s" in done.stdout
    assert "done: waited 0.01 s" in done.stdout
    assert "using tests.session.agents.demo_provider() (offline demo model, provider.Function)" in done.stderr


async def test_the_default_store_is_a_sqlite_file_in_the_working_directory(tmp_path: Path) -> None:
    env_path = f"{ROOT}"
    done = await anyio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-m", "session", "chat", "tests.session.agents:make_agent", "--session", "mine"],
        input="remember me\n", cwd=tmp_path, env={**ENV, "PYTHONPATH": env_path}, capture_output=True, text=True,
        timeout=60))
    assert done.returncode == 0, done.stderr
    with closing(sqlite3.connect(tmp_path / "sessions.db")) as conn:  # `with connect()` alone leaves it open
        assert conn.execute("SELECT id, length FROM sessions").fetchall() == [("mine", 2)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nocolon"], "expected MODULE:FACTORY"),
        (["no_such_module_xyz:make"], "cannot import 'no_such_module_xyz'"),
        (["tests.session.agents:missing"], "no callable 'missing'"),
        (["tests.session.agents:make_agent", "--provider", "bogus:model"], "unknown provider kind 'bogus'"),
        (["tests.session.agents:make_agent", "--provider", "openai:gpt-4o-mini"], "OPENAI_API_KEY"),
        (["tests.session.agents:make_agent", "--store", "redis://x"], "unknown store URL"),
        (["loop:State"], "defines no demo_provider()"),
        (["tests.session.agents:not_a_pattern"],
         "tests.session.agents:not_a_pattern returned 'not a pattern', which is not a pattern (it has no run(state)"),
        (["tests.session.agents:no_executor"], "tests.session.agents:no_executor cannot be called with a step: "),
        (["tests.session.agents:make_agent", "--backend", "curio"], "argument --backend: invalid choice: 'curio'"),
        (["tests.session.agents:make_agent", "--store", "sqlite:////nonexistent/dir/x.db"],
         "the folder '/nonexistent/dir' for 'sqlite:////nonexistent/dir/x.db' does not exist; create it first"),
    ],
)
async def test_bad_arguments_exit_with_a_clear_message(args: list[str], message: str) -> None:
    store = [] if "--store" in args else ["--store", "memory://"]
    done = await anyio.to_thread.run_sync(lambda: chat(*args, *store, stdin=""))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr and "Traceback" not in done.stderr


async def test_the_help_says_where_a_sqlite_path_is() -> None:
    done = await anyio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-m", "session", "chat", "--help"], cwd=ROOT, env=ENV, capture_output=True, text=True,
        timeout=60))
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "relative to the working directory" in text and "sqlite:////abs/path.db" in text
    assert "the folder must exist" in text


async def test_chat_says_whether_the_session_is_new_or_resumed(tmp_path: Path) -> None:
    args = ["tests.session.agents:make_agent", "--store", f"sqlite:///{tmp_path}/chats.db", "--session", "typo"]
    first = await anyio.to_thread.run_sync(lambda: chat(*args, stdin="hello\n"))
    assert first.returncode == 0, first.stderr
    assert "session 'typo' is new: nothing is stored under that id" in first.stderr
    again = await anyio.to_thread.run_sync(lambda: chat(*args, stdin=""))
    assert again.returncode == 0, again.stderr
    assert "resuming session 'typo': 2 turns stored" in again.stderr and "is new" not in again.stderr


async def test_provider_spec_points_chat_at_a_real_endpoint() -> None:
    server = WireServer()
    server.start()
    try:
        server.reply(b'data: {"choices": [{"index": 0, "delta": {"content": "from the endpoint"}}]}\n\n'
                     b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n')
        done = await anyio.to_thread.run_sync(lambda: chat(
            "tests.session.agents:make_agent", "--store", "memory://",
            "--provider", f"openai-compatible:local@{server.url}/v1", stdin="hi\n"))
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert "from the endpoint" in done.stdout
    assert server.requests[0].json()["messages"] == [{"role": "user", "content": "hi"}]


async def read_until(stream, marker: str) -> str:
    seen = ""
    with anyio.fail_after(30):
        while marker not in seen:
            chunk = await anyio.to_thread.run_sync(lambda: os.read(stream.fileno(), 4096).decode())
            if not chunk:
                raise AssertionError(f"output ended before {marker!r}: {seen!r}")
            seen += chunk
    return seen


async def test_ctrl_c_interrupts_the_turn_and_one_at_the_prompt_exits_as_the_banner_says() -> None:
    child = subprocess.Popen([sys.executable, "-m", "session", "chat", "tests.session.agents:make_agent",
                              "--store", "memory://"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, cwd=ROOT, env=ENV)
    try:
        banner = await read_until(child.stdout, "you> ")
        assert "Ctrl-C interrupts a turn; at the prompt, Ctrl-C or Ctrl-D quits" in banner
        child.stdin.write(b"wait 60\n")
        child.stdin.flush()
        await read_until(child.stdout, "→ wait(")
        child.send_signal(signal.SIGINT)
        out = await read_until(child.stdout, "you> ")
        assert "[interrupted]" in out and "cancelled" in out
        child.stdin.write(b"still here?\n")
        child.stdin.flush()
        assert "STILL HERE?" in await read_until(child.stdout, "you> ")
        child.send_signal(signal.SIGINT)
        code = await anyio.to_thread.run_sync(lambda: child.wait(timeout=30))
        assert code == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for stream in (child.stdin, child.stdout, child.stderr):
            stream.close()


@pytest.mark.slow
async def test_a_session_killed_mid_turn_loses_no_stored_turn_and_resumes(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path}/chat.db"
    args = [sys.executable, "-m", "session", "chat", "tests.session.agents:make_agent", "--store", store_url,
            "--session", "durable"]
    child = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             cwd=ROOT, env=ENV)
    try:
        await read_until(child.stdout, "you> ")
        child.stdin.write(b"first\nwait 60\n")
        child.stdin.flush()
        await read_until(child.stdout, "→ wait(")
        child.send_signal(signal.SIGKILL)
        await anyio.to_thread.run_sync(child.wait)
    finally:
        for stream in (child.stdin, child.stdout):
            stream.close()
    store = SQLiteStore(tmp_path / "chat.db")
    state = await store.load("durable")
    await store.aclose()
    assert state is not None
    # Every turn completed before the kill is there, including the model's call to the tool that never ended.
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT, Role.USER, Role.ASSISTANT]
    assert state.pending_calls and state.pending_calls[0].name == "wait"

    done = await anyio.to_thread.run_sync(lambda: subprocess.run(
        args, input="back again\n", cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60))
    assert done.returncode == 0, done.stderr
    assert "BACK AGAIN" in done.stdout
    store = SQLiteStore(tmp_path / "chat.db")
    resumed = await store.load("durable")
    await store.aclose()
    assert resumed is not None and not resumed.pending_calls
    (result,) = resumed[4].tool_results
    assert result.is_error and "interrupted" in result.content
    assert [t.text for t in resumed if t.role is Role.USER] == ["first", "wait 60", "back again"]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_serve_answers_sessions_and_the_openai_api_then_stops_on_ctrl_c(backend: str) -> None:
    import httpx
    import openai

    child = subprocess.Popen([sys.executable, "-m", "session", "serve", "tests.session.agents:make_agent",
                              "--port", "0", "--store", "memory://", "--backend", backend],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, env=ENV)
    try:
        said = await read_until(child.stderr, "OpenAPI at /openapi.json")
        found = re.search(r"serving on (http://127\.0\.0\.1:\d+):", said)
        assert found, said
        base = found.group(1)
        async with httpx.AsyncClient(base_url=base) as http:
            created = await http.post("/sessions")
            assert created.status_code == 201
            ai = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="unused", http_client=http)
            answer = await ai.chat.completions.create(model="agent", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content == "HI"
        child.send_signal(signal.SIGINT)
        code = await anyio.to_thread.run_sync(lambda: child.wait(timeout=30))
        assert code in (0, 130)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stderr.close()


@pytest.mark.parametrize("command", [["serve"], ["mcp", "--http"]])
async def test_serve_refuses_a_public_host_without_a_token_in_the_command_lines_words(command: list[str]) -> None:
    done = await anyio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-m", "session", *command[:1], "tests.session.agents:make_agent", *command[1:], "--host",
         "0.0.0.0", "--store", "memory://"], cwd=ROOT, env={k: v for k, v in ENV.items() if k != "SESSION_TOKEN"},
        capture_output=True, text=True, timeout=60))
    assert done.returncode == 2
    assert "without a token" in done.stderr and "Traceback" not in done.stderr
    assert "--token" in done.stderr and "SESSION_TOKEN" in done.stderr and "token=" not in done.stderr


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
async def test_mcp_serves_the_agent_as_a_tool_over_stdio(backend: str) -> None:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env={**ENV},
                                   args=["-m", "session", "mcp", "tests.session.agents:make_agent",
                                         "--store", "memory://", "--tool", "shout", "--backend", backend])
    with anyio.fail_after(60):
        async with Client(params) as client:
            tools = await client.list_tools()
            assert [t.name for t in tools.tools] == ["shout"]
            result = await client.call_tool("shout", {"message": "quiet please"})
    assert not result.is_error
    assert "QUIET PLEASE" in result.content[0].text


@asynccontextmanager
async def serving(*args: str, command: str = "serve", env: dict[str, str] | None = None,
                  ready: str = "OpenAPI at /openapi.json") -> AsyncIterator[tuple[str, str]]:
    """``python -m session COMMAND tests.session.agents:make_agent --port 0 ARGS`` until the test is done: its
    URL, and what it said on stderr until it was ready."""
    env = {k: v for k, v in ENV.items() if k != "SESSION_TOKEN"} if env is None else env
    child = subprocess.Popen([sys.executable, "-m", "session", command, "tests.session.agents:make_agent",
                              "--port", "0", "--store", "memory://", *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, cwd=ROOT, env=env)
    try:
        said = await read_until(child.stderr, ready)
        found = re.search(r"(http://127\.0\.0\.1:\d+)", said)
        assert found, said
        yield found.group(1), said
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stderr.close()


async def _exchange(base: str, request: bytes, *, wait: float) -> bytes:
    """What the server at ``base`` answers ``request`` (sent raw, maybe incomplete) within ``wait`` seconds."""
    host, port = base.removeprefix("http://").split(":")
    async with await anyio.connect_tcp(host, int(port)) as stream:
        await stream.send(request)
        answer = b""
        with anyio.move_on_after(wait):
            async for chunk in stream:
                answer += chunk
    return answer


async def test_serve_takes_its_limits_from_the_command_line() -> None:
    import httpx

    async with serving("--max-body-bytes", "200", "--rate-limit", "1:1") as (base, _):
        async with httpx.AsyncClient(base_url=base) as http:
            too_large = await http.post("/sessions", content=b"{}" + b" " * 200)
            limited = await http.post("/sessions")
    assert too_large.status_code == 413 and "larger than 200 bytes" in too_large.json()["error"]["message"]
    assert limited.status_code == 429 and limited.headers["retry-after"] == "1"

    async with serving("--max-sessions-per-token", "1", "--header-timeout", "0.5", "--body-timeout", "0.5",
                       "--rate-limit", "off") as (base, _):
        async with httpx.AsyncClient(base_url=base) as http:
            unlimited = {(await http.post("/healthz")).status_code for _ in range(150)}  # a default burst is 100
            sessions = [(await http.post("/sessions")) for _ in range(2)]
        slow_headers = await _exchange(base, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n", wait=5)
        slow_body = await _exchange(base, b"POST /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\n{}",
                                    wait=5)
    assert unlimited == {405}
    assert [r.status_code for r in sessions] == [201, 429] and sessions[1].json()["error"]["type"] == "session_quota"
    assert slow_headers.startswith(b"HTTP/1.1 408 ") and slow_body.startswith(b"HTTP/1.1 408 ")


@pytest.mark.parametrize(("args", "message"), [
    (["--max-body-bytes", "0"], "argument --max-body-bytes: expected a positive whole number, got '0'"),
    (["--max-body-bytes", "4MB"], "argument --max-body-bytes: expected a positive whole number, got '4MB'"),
    (["--rate-limit", "fast"], "argument --rate-limit: expected RATE[:BURST]"),
    (["--rate-limit", "20:0"], "argument --rate-limit: expected RATE[:BURST]"),
    (["--rate-limit", "-1"], "argument --rate-limit: expected RATE[:BURST]"),
    (["--max-sessions-per-token", "none"], "argument --max-sessions-per-token: expected a positive whole number"),
    (["--header-timeout", "0"], "argument --header-timeout: expected a positive number of seconds, got '0'"),
    (["--body-timeout", "nan"], "argument --body-timeout: expected a positive number of seconds, got 'nan'"),
    (["--token", ""], "argument --token: the token is empty"),
    (["--token", " "], "argument --token: the token is empty"),
])
async def test_bad_server_settings_are_refused_naming_the_flag(args: list[str], message: str) -> None:
    done = await anyio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-m", "session", "serve", "tests.session.agents:make_agent", *args], cwd=ROOT, env=ENV,
        capture_output=True, text=True, timeout=60))
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_the_flags_default_to_what_the_conduits_default_to_and_say_so() -> None:
    import inspect

    from session._cli import parser
    from session.http import HTTPConduit
    from session.mcp import MCPConduit

    limits = {"serve": ("max_body_bytes", "rate_limit", "max_sessions_per_token", "header_timeout", "body_timeout",
                        "max_conversation_bytes"),
              "mcp": ("max_body_bytes", "header_timeout")}
    for command, conduit in (("serve", HTTPConduit), ("mcp", MCPConduit)):
        args = vars(parser().parse_args([command, "m:f"]))
        defaults = inspect.signature(conduit).parameters
        assert {name: args[name] for name in limits[command]} == {name: defaults[name].default
                                                                 for name in limits[command]}
        assert args["shutdown_grace"] == defaults["shutdown_timeout"].default
    text = " ".join(subprocess.run([sys.executable, "-m", "session", "serve", "--help"], cwd=ROOT, env=ENV,
                                   capture_output=True, text=True, timeout=60, check=True).stdout.split())
    for said in ("413 (default: 4194304, 4 MiB)", "off: no limit (default: 20:100)", "(BURST, default 100)",
                 "limit (default: 100)", "is closed (default: 10)", "slower gets 408 (default: 30)",
                 "413; off: no limit (default: 67108864, 64 MiB)"):
        assert said in text, said


async def test_an_empty_session_token_serves_this_machine_only_without_one() -> None:
    import httpx

    async with serving(env={**ENV, "SESSION_TOKEN": ""}) as (base, said):
        async with httpx.AsyncClient(base_url=base) as http:
            created = await http.post("/sessions")
    assert "SESSION_TOKEN is empty: serving without a token, this machine only" in said
    assert "(no token: this machine only)" in said
    assert created.status_code == 201


async def test_an_empty_session_token_serves_mcp_over_http_without_one() -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with serving("--http", command="mcp", env={**ENV, "SESSION_TOKEN": "  "},
                       ready="serving the agent as MCP tool") as (base, said):
        async with httpx2.AsyncClient() as http:
            async with Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
                tools = await client.list_tools()
    assert "SESSION_TOKEN is empty: serving without a token, this machine only" in said
    assert [t.name for t in tools.tools] == ["ask"]


async def test_an_explicit_empty_token_is_refused_for_mcp_too() -> None:
    done = await anyio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-m", "session", "mcp", "tests.session.agents:make_agent", "--http", "--token", ""],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60))
    assert done.returncode == 2 and "argument --token: the token is empty" in done.stderr


def test_version_names_the_installed_package() -> None:
    import importlib.metadata

    done = subprocess.run([sys.executable, "-m", "session", "--version"], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"python -m session (cognitive-loop {importlib.metadata.version('cognitive-loop')})"


async def test_serve_reads_its_token_from_a_file_and_warns_when_given_on_the_command_line(tmp_path: Path) -> None:
    import httpx

    (tmp_path / "token").write_text("from-a-file\n")
    async with serving("--token-file", str(tmp_path / "token")) as (base, said):
        async with httpx.AsyncClient(base_url=base) as http:
            refused = await http.post("/sessions")
            allowed = await http.post("/sessions", headers={"authorization": "Bearer from-a-file"})
    assert refused.status_code == 401 and allowed.status_code == 201
    assert "process list" not in said
    async with serving("--token", "on-the-line") as (_, said):
        pass
    assert "--token shows the token to every user of this machine in the process list" in said
    done = await anyio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-m", "session", "serve", "tests.session.agents:make_agent", "--store", "memory://",
         "--token-file", str(tmp_path / "missing")], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60))
    assert done.returncode == 2 and "cannot read the token file" in done.stderr


async def test_serve_allows_the_origins_and_hosts_it_is_told() -> None:
    import httpx

    front = "https://chat.example.com"
    async with serving("--cors-origin", front, "--allowed-host", "127.0.0.1") as (base, _):
        async with httpx.AsyncClient(base_url=base) as http:
            preflight = await http.options("/sessions", headers={"origin": front,
                                                                  "access-control-request-method": "POST"})
            evil = await http.post("/sessions", headers={"origin": "http://evil.example"})
            renamed = await http.get("/healthz", headers={"host": "localhost"})
    assert preflight.status_code == 204 and preflight.headers["access-control-allow-origin"] == front
    assert evil.status_code == 403 and renamed.status_code == 421
