"""``ToolBridge``: stubs, and every request checked on the host — ids, the call cap, schemas, paths, errors.

The end-to-end tests run programs in ``UnsafeLocalSandbox``, which uses the same supervisor and channel as
``DockerSandbox``; the Docker versions of the attacks are in test_security.py.
"""

import json
from typing import Any

import anyio
import pytest

from loop import Tool, ToolSpec, UsageError, tool
from sandbox import ToolBridge, UnsafeLocalSandbox
from sandbox._bridge import Admitted
from tests.sandbox.attacks import FLOOD, FORGE_IDS

calls: list[tuple[str, Any]] = []


@tool
async def add(a: float, b: float) -> float:
    """Add two numbers."""
    calls.append(("add", (a, b)))
    return a + b


@tool
def read_note(path: str, max_chars: int = 100) -> str:
    """Read a note from the notes folder."""
    calls.append(("read_note", path))
    return f"contents of {path}"[:max_chars]


@tool
def copy_files(source_files: list[str], target_dir: str = "out") -> int:
    """Copy files."""
    calls.append(("copy_files", source_files))
    return len(source_files)


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"exploded: {reason}")


@tool(timeout=0.2)
async def slow() -> str:
    """Takes far too long."""
    await anyio.sleep(30)
    return "never"


@tool
def blob(size: int) -> str:
    """Returns a large string."""
    return "x" * size


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    calls.clear()


def request(rid: Any, name: str, args: Any) -> bytes:
    return json.dumps({"id": rid, "tool": name, "args": json.dumps(args)}).encode()


def refusal(answer: bytes) -> tuple[Any, str, str]:
    data = json.loads(answer)
    assert data["ok"] is False
    return data["id"], data["error"]["type"], data["error"]["message"]


# -- stubs and listing ---------------------------------------------------------------------------------


def test_listing_shows_signatures_and_descriptions() -> None:
    bridge = ToolBridge([add, read_note, copy_files])
    assert bridge.listing.splitlines() == [
        "- tools.add(a: float, b: float): Add two numbers.",
        "- tools.read_note(path: str, max_chars: int = None): Read a note from the notes folder.",
        "- tools.copy_files(source_files: list[str], target_dir: str = None): Copy files.",
    ]


def test_stub_source_is_python_with_one_function_per_tool() -> None:
    source = ToolBridge([add, read_note], module="helpers").stub_source
    namespace: dict[str, Any] = {}
    exec(compile(source, "helpers.py", "exec"), namespace)
    assert namespace["__all__"] == ["add", "read_note", "final", "ToolError", "ToolCallRefused", "ToolCallLimit"]
    assert namespace["add"].__doc__ == "Add two numbers."
    assert issubclass(namespace["ToolCallLimit"], namespace["ToolCallRefused"])
    ok, error = namespace["_call"]("add", {"a": 1, "b": 2})  # no bridge outside a sandbox run
    assert not ok and "no tool bridge in this run" in str(error)


def search(query: str) -> str:
    """Search."""
    return query


def test_tool_names_become_python_names_and_clashes_are_refused() -> None:
    dotted = tool(search, name="web.search")
    assert ToolBridge([dotted]).listing == "- tools.web_search(query: str): Search."
    with pytest.raises(UsageError, match="would both be called web_search"):
        ToolBridge([dotted, tool(search, name="web-search")])
    with pytest.raises(UsageError, match="cannot be bridged under the name 'final'"):
        ToolBridge([tool(search, name="final")])
    assert "def class_(query):" in ToolBridge([tool(search, name="class")]).stub_source


def test_parameters_that_are_not_python_names_become_keyword_arguments() -> None:
    class Raw:
        spec = ToolSpec("route", "Plan a route.", {"type": "object", "properties": {
            "from": {"type": "string"}, "to": {"type": "string"}}, "required": ["from", "to"]})

        async def call(self, arguments: Any) -> Any:
            return f"{arguments['from']}->{arguments['to']}"

    bridge = ToolBridge([Raw()])
    assert "tools.route(**arguments)" in bridge.listing
    assert "def route(**arguments):" in bridge.stub_source


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_tool_calls": -1}, "max_tool_calls"), ({"module": "not a name"}, "module"),
    ({"tool_timeout": 0}, "tool_timeout"), ({"max_result_bytes": 10}, "max_result_bytes"),
])
def test_bad_settings_are_usage_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        ToolBridge([add], **kwargs)
    with pytest.raises(UsageError, match="is not a Tool"):
        ToolBridge([lambda a, b: a + b])  # type: ignore[list-item]


# -- admitting requests --------------------------------------------------------------------------------


def test_ids_must_count_up_from_one_so_replayed_and_forged_ids_are_refused() -> None:
    run = ToolBridge([add]).start()
    assert isinstance(run.admit(request(1, "add", {"a": 1, "b": 2})), Admitted)
    assert refusal(run.admit(request(1, "add", {"a": 1, "b": 2})))[:2] == (1, "ToolCallRefused")  # replayed
    rid, kind, message = refusal(run.admit(request(7, "add", {"a": 1, "b": 2})))  # forged: skips ahead
    assert (rid, kind) == (7, "ToolCallRefused") and "expected 2" in message
    assert refusal(run.admit(request("2", "add", {"a": 1, "b": 2})))[0] is None  # not an integer
    assert refusal(run.admit(request(True, "add", {"a": 1, "b": 2})))[0] is None  # JSON true is not 1
    assert isinstance(run.admit(request(2, "add", {"a": 1, "b": 2})), Admitted)  # the real next id still works
    assert run.calls == 6  # every request counts, refused ones too


def test_malformed_requests_are_refused() -> None:
    run = ToolBridge([add]).start()
    assert "not JSON" in refusal(run.admit(b"{nope"))[2]
    assert "not a JSON object" in refusal(run.admit(b"[1, 2]"))[2]
    assert "'args' must be JSON text" in refusal(run.admit(b'{"id": 1, "tool": "add", "args": {"a": 1}}'))[2]
    assert "unknown tool 'rm'; the tools are: add" in refusal(run.admit(request(2, "rm", {})))[2]
    message = refusal(run.admit(request(3, "add", {"a": "one", "b": 2})))[2]
    assert message.startswith("add: the arguments do not match the tool's schema")


def test_past_max_tool_calls_every_call_is_refused_with_a_limit_error() -> None:
    run = ToolBridge([add], max_tool_calls=2).start()
    assert isinstance(run.admit(request(1, "add", {"a": 1, "b": 1})), Admitted)
    assert isinstance(run.admit(request(2, "add", {"a": 1, "b": 1})), Admitted)
    rid, kind, message = refusal(run.admit(request(3, "add", {"a": 1, "b": 1})))
    assert (rid, kind) == (3, "ToolCallLimit") and "at most 2 tool calls" in message
    assert ToolBridge([add], max_tool_calls=2).start().calls == 0  # each run starts afresh


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "notes/../../x", "~root/x", "C:\\x",
                                  "..\\..\\x"])
def test_path_like_arguments_that_climb_out_are_refused(path: str) -> None:
    run = ToolBridge([read_note, copy_files]).start()
    rid, kind, message = refusal(run.admit(request(1, "read_note", {"path": path})))
    assert kind == "ToolCallRefused" and "argument 'path'" in message
    rid, kind, message = refusal(run.admit(request(2, "copy_files", {"source_files": ["ok.txt", path]})))
    assert kind == "ToolCallRefused" and "argument 'source_files'" in message
    assert isinstance(run.admit(request(3, "read_note", {"path": "notes/today.txt"})), Admitted)


# -- running admitted calls ----------------------------------------------------------------------------


async def test_results_and_failures_become_answer_lines() -> None:
    run = ToolBridge([add, explode, slow, blob], max_result_bytes=2000).start()

    async def call(rid: int, name: str, args: dict[str, Any]) -> bytes:
        admitted = run.admit(request(rid, name, args))
        assert isinstance(admitted, Admitted)
        return await run.execute(admitted)

    assert json.loads(await call(1, "add", {"a": 1, "b": 2.5})) == {"id": 1, "ok": True, "value": 3.5}
    assert refusal(await call(2, "explode", {"reason": "test"}))[1:] == (
        "ToolError", "explode raised RuntimeError: exploded: test")
    assert refusal(await call(3, "slow", {}))[2] == "slow did not finish within 0.2 seconds"
    assert "more than the bridge's max_result_bytes=2,000" in refusal(await call(4, "blob", {"size": 5000}))[2]


# -- end to end, through the supervisor and its pipes --------------------------------------------------

LOCAL = UnsafeLocalSandbox(timeout=30)


async def run_program(code: str, bridge: ToolBridge) -> Any:
    return await LOCAL.exec(["python3", "main.py"], files={"main.py": code}, tools=bridge)


async def test_a_program_calls_tools_as_plain_functions_and_its_prints_do_not_corrupt_the_channel() -> None:
    code = """
import json
from tools import add, read_note
for i in range(20):
    print(json.dumps({"id": i, "ok": True, "value": "a print that looks like an answer"}))
    print("{", flush=True)
print("sum", add(1, 2), add(a=0.5, b=0.25))
print(read_note("notes/a.txt", max_chars=8))
"""
    result = await run_program(code, ToolBridge([add, read_note]))
    assert result.ok, result.stderr
    assert result.stdout.splitlines()[-2:] == ["sum 3 0.75", "contents"]
    assert result.tool_calls == 3 and [c[0] for c in calls] == ["add", "add", "read_note"]


async def test_calls_from_many_threads_each_get_their_own_answer() -> None:
    code = """
import threading
from tools import add
results = {}
def work(n):
    results[n] = [add(a=n, b=k) for k in range(10)]
threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
for t in threads: t.start()
for t in threads: t.join()
assert all(results[n] == [n + k for k in range(10)] for n in range(8)), results
print("FINAL: ok")
"""
    result = await run_program(code, ToolBridge([add], max_tool_calls=80))
    assert result.ok and result.stdout.strip() == "FINAL: ok", result.stderr
    assert result.tool_calls == 80


async def test_host_tool_errors_and_refusals_arrive_as_exceptions_in_the_program() -> None:
    code = """
from tools import explode, read_note, add, ToolError, ToolCallRefused
for call in (lambda: explode(reason="boom"), lambda: read_note(path="../../etc/passwd"),
             lambda: add(a="x", b=1)):
    try:
        call()
    except ToolCallRefused as exc:
        print("refused:", exc)
    except ToolError as exc:
        print("failed:", exc)
"""
    result = await run_program(code, ToolBridge([explode, read_note, add]))
    lines = result.stdout.splitlines()
    assert lines[0] == "failed: explode raised RuntimeError: exploded: boom"
    assert lines[1].startswith("refused: read_note: argument 'path' = '../../etc/passwd' is refused")
    assert lines[2].startswith("refused: add: the arguments do not match the tool's schema")
    assert calls == []  # neither the refused calls nor the bad one ran a tool


async def test_each_run_gets_a_fresh_budget() -> None:
    code = """
from tools import add, ToolCallLimit
done = 0
try:
    while True:
        add(a=1, b=1)
        done += 1
except ToolCallLimit as exc:
    print(done, exc)
"""
    bridge = ToolBridge([add], max_tool_calls=5)
    for _ in range(2):
        result = await run_program(code, bridge)
        assert result.stdout.startswith("5 this run may make at most 5 tool calls; the tool did not run")
        assert result.tool_calls == 6
    assert len(calls) == 10


async def test_without_a_bridge_there_is_no_tools_module() -> None:
    result = await LOCAL.exec(["python3", "-c", "import tools"])
    assert result.exit_code == 1 and "ModuleNotFoundError" in result.stderr


def test_tool_protocol_objects_can_be_bridged() -> None:
    assert isinstance(add, Tool)


async def test_a_program_speaking_the_protocol_by_hand_cannot_replay_or_forge_ids() -> None:
    result = await run_program(FORGE_IDS, ToolBridge([add, read_note]))
    answers = json.loads(result.stdout)
    assert answers[0] == {"id": 1, "ok": True, "value": 3}
    assert [(a["id"], a["ok"], a["error"]["type"]) for a in answers[1:6]] == [
        (1, False, "ToolCallRefused"), (5, False, "ToolCallRefused"), (None, False, "ToolCallRefused"),
        (2, False, "ToolCallRefused"), (3, False, "ToolCallRefused")]
    assert "was already used" not in answers[1]["error"]["message"]  # one wording for replayed and forged
    assert "a replayed or forged id is refused" in answers[1]["error"]["message"]
    assert "is refused: paths must stay relative" in answers[4]["error"]["message"]
    assert "unknown tool '../../bin/sh'" in answers[5]["error"]["message"]
    assert answers[6] == {"id": 4, "ok": True, "value": 3}
    assert calls == [("add", (1, 2)), ("add", (1, 2))]  # only the two genuine calls ran a tool
    assert result.tool_calls == 7


async def test_a_flood_of_calls_past_the_cap_runs_the_tool_only_up_to_the_cap() -> None:
    result = await run_program(FLOOD, ToolBridge([add], max_tool_calls=25))
    assert result.ok and result.stdout.split() == ["25", "475"]
    assert len(calls) == 25 and result.tool_calls == 500


async def test_a_program_that_keeps_calling_far_past_the_cap_is_stopped() -> None:
    code = "from tools import add, ToolCallLimit\nwhile True:\n    try:\n        add(a=1, b=1)\n" \
           "    except ToolCallLimit:\n        pass\n"
    result = await run_program(code, ToolBridge([add], max_tool_calls=3))
    assert not result.ok and not result.timed_out and len(calls) == 3
    assert "1,001 tool calls, far past the cap of 3" in result.stderr
