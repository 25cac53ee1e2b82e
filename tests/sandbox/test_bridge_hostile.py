"""A sandboxed program writing hostile bytes to the tool bridge gets a refusal, and ``exec`` returns its result.

Lines nested too deeply for the parser, invalid UTF-8, lone surrogates, numbers JSON cannot carry: each is refused
(counting against ``max_tool_calls``) and the run goes on, in ``UnsafeLocalSandbox`` and, marked ``docker``, in
``DockerSandbox``. Neither the host reading a forged exit report nor the stub reading a broken answer raises.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from cognitive import CodeAction
from loop import Role, State, Step, Text, tool
from provider import Scripted
from sandbox import DockerSandbox, ExecResult, ToolBridge, UnsafeLocalSandbox
from sandbox._bridge import BridgeRun

DEEP = 50_000
LOCAL = UnsafeLocalSandbox(timeout=20)
calls: list[Any] = []


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    calls.append((a, b))
    return a + b


@tool
def echo(text: str) -> str:
    """Give the text back."""
    calls.append(text)
    return text


@tool
def tower(levels: int) -> list[Any]:
    """A list nested ``levels`` deep."""
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    calls.clear()


def envelope(rid: Any, name: str, args: str) -> bytes:
    return json.dumps({"id": rid, "tool": name, "args": args}).encode("ascii")


@attrs.frozen
class Case:
    line: bytes
    answer_id: int | None  # the id the refusal carries: None when the line's own id could not be read
    words: str  # in the refusal's message
    next_id: int  # the id the program's following, good call must use

    @property
    def unreadable(self) -> bool:
        return self.answer_id is None


CASES = {
    "a line of 50,000 '['": Case(b"[" * DEEP, None, "malformed request: nested more than 64 levels deep", 1),
    "a line of 50,000 '{'": Case(b"{" * DEEP, None, "malformed request: nested more than 64 levels deep", 1),
    "deep args text": Case(envelope(1, "add", "[" * DEEP), 1, "add: the arguments are not valid JSON "
                                                              "(nested more than 64 levels deep)", 2),
    "deep args value": Case(envelope(1, "add", '{"a": ' + "[" * DEEP + "1" + "]" * DEEP + ', "b": 1}'), 1,
                            "nested more than 64 levels deep", 2),
    "invalid UTF-8": Case(b'{"id": 1, "tool": "echo", "args": "{\\"text\\": \\"\xff\xfe\\"}"}', None,
                          "malformed request: not UTF-8", 1),
    "a lone surrogate in UTF-8": Case(b'{"id": 1, "tool": "echo", "args": "{\\"text\\": \\"\xed\xa0\x80\\"}"}',
                                      None, "malformed request: not UTF-8", 1),
    "a lone surrogate in args": Case(envelope(1, "echo", '{"text": "\\ud800"}'), 1, "a lone UTF-16 surrogate", 2),
    "a lone surrogate in the line": Case(envelope(1, "echo", '{"text": "\ud800"}'), None,
                                         "malformed request: a lone UTF-16 surrogate", 1),
    "1e999999 in args": Case(envelope(1, "add", '{"a": 1e999999, "b": 1}'), 1,
                             "the number 1e999999 is too large for JSON", 2),
    "1e999999 as the id": Case(b'{"id": 1e999999, "tool": "add", "args": "{}"}', None,
                               "malformed request: the number 1e999999 is too large for JSON", 1),
    "a 100,000-digit integer in args": Case(envelope(1, "add", '{"a": 1' + "0" * 99_999 + ', "b": 1}'), 1,
                                            "an integer of 100,000 digits", 2),
    "a 100,000-digit integer as the id": Case(b'{"id": 1' + b"0" * 99_999 + b', "tool": "add", "args": "{}"}',
                                              None, "malformed request: an integer of 100,000 digits", 1),
}

# Sends the hostile line (from line.bin) by hand, then a good call with the next id; prints both answers.
BY_HAND = r"""
import json, os
r, w = (int(n) for n in os.environ["SANDBOX_BRIDGE_FDS"].split(","))
answers = os.fdopen(r, "rb")
def send(line):
    data = memoryview(line + b"\n")
    while data:
        data = data[os.write(w, data):]
    return json.loads(answers.readline())
first = send(open("line.bin", "rb").read())
good = send(json.dumps({"id": int(open("next_id").read()), "tool": "add", "args": '{"a": 1, "b": 2}'}).encode())
print(json.dumps([first, good]))
"""


async def run_case(exec_: Callable[..., Any], case: Case, *, max_tool_calls: int = 50) -> tuple[ExecResult, Any]:
    bridge = ToolBridge([add, echo], max_tool_calls=max_tool_calls)
    result = await exec_(["python3", "main.py"], files={"main.py": BY_HAND, "line.bin": case.line,
                                                      "next_id": str(case.next_id)}, tools=bridge)
    assert isinstance(result, ExecResult)
    return result, json.loads(result.stdout) if result.ok else None


def check_refused(result: ExecResult, answers: Any, case: Case) -> None:
    assert result.ok, result.stderr
    first, good = answers
    assert (first["id"], first["ok"], first["error"]["type"]) == (case.answer_id, False, "ToolCallRefused")
    assert case.words in first["error"]["message"]
    assert good == {"id": case.next_id, "ok": True, "value": 3}
    assert calls == [(1, 2)] and result.tool_calls == 2  # the hostile line ran nothing, and it counted
    if case.unreadable:
        assert "[sandbox: the tool bridge could not read 1 request line (" in result.stderr
    else:
        assert "could not read" not in result.stderr


# -- the host's checks, one line at a time --------------------------------------------------------------


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_admit_refuses_each_hostile_line_and_counts_it(case: Case) -> None:
    run = ToolBridge([add, echo]).start()
    answer = run.admit(case.line)
    assert isinstance(answer, bytes)
    data = json.loads(answer)
    assert (data["id"], data["ok"], data["error"]["type"]) == (case.answer_id, False, "ToolCallRefused")
    assert case.words in data["error"]["message"] and run.calls == 1
    assert (run.unreadable is not None) == case.unreadable


def test_only_the_first_unreadable_line_is_described_and_every_one_counted() -> None:
    run: BridgeRun = ToolBridge([add]).start()
    for line in (b"[" * DEEP, b"\xff", b"{nope"):
        run.admit(line)
    assert run.unreadable is not None and run.unreadable.startswith("nested more than 64 levels deep")
    assert run.unreadable_lines == 3 and run.calls == 3


# -- whole runs ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
async def test_a_hostile_line_is_refused_and_the_local_run_goes_on(case: Case) -> None:
    result, answers = await run_case(LOCAL.exec, case)
    check_refused(result, answers, case)


@pytest.mark.docker
@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
async def test_a_hostile_line_is_refused_and_the_docker_run_goes_on(docker_sandbox: DockerSandbox,
                                                                   case: Case) -> None:
    result, answers = await run_case(docker_sandbox.exec, case)
    check_refused(result, answers, case)


@pytest.mark.parametrize("name", ["a line of 50,000 '['", "deep args text"])
async def test_a_refused_hostile_line_counts_against_max_tool_calls(name: str) -> None:
    result, answers = await run_case(LOCAL.exec, CASES[name], max_tool_calls=1)
    assert result.ok and answers[1]["error"]["type"] == "ToolCallLimit" and calls == []


async def test_the_stub_refuses_arguments_the_bridge_could_not_read_and_the_run_goes_on() -> None:
    code = r"""
import sys
from tools import add, echo, ToolCallRefused
deep = []
for _ in range(5000):
    deep = [deep]
for args in ({"a": deep, "b": 1}, {"a": float("inf"), "b": 1}):
    try:
        add(**args)
    except ToolCallRefused as exc:
        print("refused:", exc)
try:
    echo(text="x" * 2_000_000)
except ToolCallRefused as exc:
    print("refused:", exc)
print(add(a=1, b=2))
"""
    result = await LOCAL.exec(["python3", "main.py"], files={"main.py": code}, tools=ToolBridge([add, echo]))
    assert result.ok, result.stderr
    lines = result.stdout.splitlines()
    # Refused by the stub where Python's JSON encoder itself gives up on the depth, else by the bridge (Python
    # 3.13's encoder goes deeper): either way the call is refused and the run goes on.
    assert lines[0].startswith(("refused: add: the arguments cannot be sent as JSON",
                                "refused: add: the arguments are not valid JSON (nested more than 64 levels deep)"))
    assert lines[1].startswith("refused: add: the arguments cannot be sent as JSON")
    assert lines[2].startswith("refused: echo: the request is 2,000,0")
    assert lines[3] == "3" and calls == [(1, 2)]


async def test_a_tool_value_too_deep_to_send_back_is_a_tool_error() -> None:
    code = "from tools import tower, ToolError\ntry:\n    tower(levels=100_000)\nexcept ToolError as exc:\n" \
           "    print(exc)\nprint(len(tower(levels=3)))\n"
    result = await LOCAL.exec(["python3", "main.py"], files={"main.py": code}, tools=ToolBridge([tower]))
    assert result.ok, result.stderr
    assert result.stdout.splitlines() == ["tower returned a value that cannot be sent back: nested too deeply", "1"]


# -- a forged exit report (only the local sandbox lets the program reach the supervisor's stream) ----------------


@pytest.mark.parametrize("report", [b"[" * DEEP, b'{"exit_code": 0, "error": "\\ud800"}',
                                    b'{"exit_code": 1' + b"0" * 99_999 + b"}", b'{"exit_code": 1e999999}'])
async def test_a_forged_exit_report_stops_the_run_with_a_result(report: bytes) -> None:
    code = f"""
import os, struct, time
report = {report!r}
fd = os.open("/proc/%d/fd/1" % os.getppid(), os.O_WRONLY)
data = memoryview(b"X" + struct.pack(">I", len(report)) + report)
while data:
    data = data[os.write(fd, data):]
time.sleep(30)
"""
    result = await LOCAL.exec(["python3", "main.py"], files={"main.py": code})
    assert isinstance(result, ExecResult) and not result.ok and not result.timed_out
    assert "its output broke the sandbox protocol (a malformed exit report)" in result.stderr


# -- the stub reading the host's answers --------------------------------------------------------------------------


def stub_channel(answer: bytes) -> Any:
    """A call through the stub's channel that the "host" answers with ``answer``: (ok, value, second call)."""
    namespace: dict[str, Any] = {}
    exec(compile(ToolBridge([add]).stub_source, "tools", "exec"), namespace)
    answer_read, answer_write = os.pipe()
    call_read, call_write = os.pipe()
    channel = namespace["_Channel"](f"{answer_read},{call_write}")  # it reads answer_read from now on
    try:
        writer = threading.Thread(target=os.write, args=(answer_write, answer))  # more than a pipe holds
        writer.start()
        first = channel.call("add", {"a": 1, "b": 2})
        writer.join()
        os.close(answer_write)  # the host hangs up
        answer_write = -1
        return first, channel.call("add", {"a": 1, "b": 2}), namespace["ToolError"]
    finally:
        channel._read.close()
        for fd in (answer_write, call_read, call_write):
            if fd >= 0:
                os.close(fd)


@pytest.mark.parametrize("answer", [b"[" * DEEP + b"\n", b"\xff\n", b"[1]\n", b'{"id": [1]}\n', b"{nope\n",
                                    b'{"id": 1' + b"0" * 99_999 + b"}\n"])
def test_the_stub_turns_an_answer_it_cannot_read_into_a_tool_error(answer: bytes) -> None:
    (ok, error), (again_ok, again), tool_error = stub_channel(answer)
    assert not ok and type(error) is tool_error
    assert str(error).startswith("the tool bridge sent an answer this program could not read (")
    assert not again_ok and str(again) == str(error)  # the channel stays broken: answers can no longer be matched


def test_the_stub_takes_a_malformed_error_as_a_plain_tool_error() -> None:
    (ok, error), _, tool_error = stub_channel(b'{"id": 1, "ok": false, "error": "a string"}\n')
    assert not ok and type(error) is tool_error and str(error) == "the tool call failed"


# -- CodeAction: the hostile program fails like any failing program, and the next one answers ---------------------


HOSTILE = r"""
import os
import threading
r, w = (int(n) for n in os.environ["SANDBOX_BRIDGE_FDS"].split(","))
line = b"[" * 50000 + b"\n"
while line:
    line = line[os.write(w, line):]
print(os.fdopen(r, "rb").readline().decode())
"""
GOOD = "from tools import add, final\nfinal(int(add(a=1, b=2)))"


def reply(code: str) -> str:
    return f"```python\n{code}\n```"


async def check_code_action(sandbox: Any) -> None:
    question = State().append(Role.USER, Text("What is 1 + 2?"))
    state = await CodeAction(Step(Scripted([reply(HOSTILE), reply(GOOD)])), sandbox, tools=[add]).run(question)
    assert state.answer == "3" and not state.degraded
    assert state.outcome.data["CodeAction"] == {"attempts": 2, "tool_calls": 2}
    feedback = next(t for t in state if t.meta.get("kind") == "code_action_error").text
    assert "malformed request: nested more than 64 levels deep" in feedback


async def test_code_action_goes_on_past_a_hostile_program() -> None:
    await check_code_action(LOCAL)


@pytest.mark.docker
async def test_code_action_goes_on_past_a_hostile_program_in_docker(docker_sandbox: DockerSandbox) -> None:
    await check_code_action(docker_sandbox)

