"""``CodeAction``: one program per reply, run in a sandbox; its FINAL line answers; failures are repaired or degrade.

The pattern's logic runs against a fake sandbox; real programs run in ``UnsafeLocalSandbox`` (same supervisor
and tool bridge as Docker) and, marked ``docker``, in ``DockerSandbox``.
"""

from typing import Any

import anyio
import pytest

from cognitive import CodeAction, Pattern, WithBudget
from cognitive.everyday._code_action import extract_program, final_answer
from loop import Budget, BudgetReport, Role, State, Step, Text, ToolFinished, ToolStarted, UsageError, tool
from provider import Function, Scripted
from sandbox import DockerSandbox, ExecResult, FunctionSandbox, SandboxConfig, SandboxError, UnsafeLocalSandbox
from tests.sandbox.docker_env import docker_config  # noqa: F401  (the fixture)

QUESTION = State().append(Role.USER, Text("What is 6 times 7?"))
calls: list[str] = []


@tool
async def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    calls.append("multiply")
    return a * b


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    calls.append("lookup")
    return {"answer": "forty-two"}[key]


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    calls.clear()


def program(code: str, prose: str = "Here is the program.") -> str:
    return f"{prose}\n```python\n{code}\n```"


class FakeSandbox:
    """Returns the given results in order and records what it was asked to run."""

    bridges_tools = True  # it takes tools= (and records them)

    def __init__(self, *results: ExecResult | Exception) -> None:
        self.results = list(results)
        self.runs: list[dict[str, Any]] = []

    async def exec(self, argv: list[str], *, files: Any = None, stdin: Any = None, timeout: Any = None,
                   tools: Any = None) -> ExecResult:
        self.runs.append({"argv": argv, "files": files, "timeout": timeout, "tools": tools})
        result = self.results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result


def kinds(state: State) -> list[tuple[str, Any]]:
    return [(t.role.value, t.meta.get("kind")) for t in state]


# -- the pattern, against a fake sandbox ---------------------------------------------------------------


async def test_the_final_line_of_a_successful_program_becomes_the_answer() -> None:
    script = Scripted([program("from tools import multiply\nprint('FINAL:', multiply(a=6, b=7))")])
    sandbox = FakeSandbox(ExecResult(0, stdout="working...\nFINAL: 42.0\n", tool_calls=1))
    state = await CodeAction(Step(script), sandbox, tools=[multiply], timeout=9).run(QUESTION)
    assert state.answer == "42.0" and not state.degraded
    assert kinds(state) == [("user", None), ("system", "code_action"), ("assistant", None),
                            ("assistant", "code_action_answer")]
    assert state.outcome.data["CodeAction"] == {"attempts": 1, "tool_calls": 1}
    (run,) = sandbox.runs
    assert run["argv"] == ["python3", "main.py"] and run["timeout"] == 9
    assert run["files"] == {"main.py": "from tools import multiply\nprint('FINAL:', multiply(a=6, b=7))\n"}
    assert [t.spec.name for t in run["tools"].tools] == ["multiply"]
    assert all(r.options.tool_choice == "none" for r in script.requests)


async def test_the_prompt_lists_the_stub_signatures_and_the_rules() -> None:
    agent = CodeAction(Step(Scripted([])), FakeSandbox(), tools=[multiply, lookup], max_tool_calls=7, timeout=5)
    assert "- tools.multiply(a: float, b: float): Multiply two numbers." in agent.prompt
    assert "- tools.lookup(key: str): Look a key up." in agent.prompt
    assert "from tools import multiply, lookup" in agent.prompt
    assert "at most 7 tool calls" in agent.prompt and "`FINAL: `" in agent.prompt and "5 seconds" in agent.prompt


async def test_a_failing_program_gets_its_error_tail_back_and_is_repaired() -> None:
    script = Scripted([program("print(1/0)"), program("print('FINAL: fixed')")])
    traceback = "Traceback (most recent call last):\n  ...\nZeroDivisionError: division by zero\n"
    sandbox = FakeSandbox(ExecResult(1, stderr=traceback), ExecResult(0, stdout="FINAL: fixed\n"))
    state = await CodeAction(Step(script), sandbox).run(QUESTION)
    assert state.answer == "fixed" and not state.degraded
    assert state.outcome.data["CodeAction"]["attempts"] == 2
    report = next(t for t in state if t.meta.get("kind") == "code_action_error")
    assert report.role is Role.SYSTEM and report.meta["attempt"] == 1
    assert "failed with exit status 1" in report.text and "ZeroDivisionError: division by zero" in report.text
    assert "Attempt 1 of 3 failed" in report.text


@pytest.mark.parametrize(("reply", "result", "complaint"), [
    ("I would just say 42.", None, "held no ```python code block"),
    (program("print(42)"), ExecResult(0, stdout="42\n"), "printed no line starting with `FINAL:`"),
    (program("while True: pass"), ExecResult(137, timed_out=True), "ran past its time limit"),
    (program("x = ' ' * 10**10"), ExecResult(137, oom_killed=True), "ran out of memory"),
    (program("print('FINAL: too early'); 1/0"), ExecResult(1, stdout="FINAL: too early\n"), "exit status 1"),
    (program("print('FINAL:')"), ExecResult(0, stdout="FINAL:\n"), "printed no line starting with `FINAL:`"),
])
async def test_each_kind_of_failure_is_explained_to_the_model(reply: str, result: ExecResult | None,
                                                              complaint: str) -> None:
    script = Scripted([reply, program("print('FINAL: ok')")])
    sandbox = FakeSandbox(*([result] if result else []), ExecResult(0, stdout="FINAL: ok\n"))
    state = await CodeAction(Step(script), sandbox).run(QUESTION)
    report = next(t for t in state if t.meta.get("kind") == "code_action_error")
    assert complaint in report.text
    assert state.answer == "ok"


async def test_when_every_attempt_fails_the_model_answers_in_prose_and_the_run_is_degraded() -> None:
    script = Scripted([program("1/0"), program("1/0"), "I could not compute it; it is probably 42."])
    sandbox = FakeSandbox(ExecResult(1, stderr="ZeroDivisionError"), ExecResult(1, stderr="ZeroDivisionError"))
    state = await CodeAction(Step(script), sandbox, max_repairs=1).run(QUESTION)
    assert state.answer == "I could not compute it; it is probably 42."
    assert state.degraded and "no program succeeded in 2 attempts" in state.outcome.reason
    assert len(sandbox.runs) == 2 and script.remaining == 0
    last_note = [t for t in state if t.meta.get("kind") == "code_action_error"][-1]
    assert "No more programs will be run" in last_note.text and "ZeroDivisionError" in last_note.text


async def test_with_no_repairs_a_failure_degrades_at_once() -> None:
    script = Scripted(["no code here", "Plain answer."])
    state = await CodeAction(Step(script), FakeSandbox(), max_repairs=0).run(QUESTION)
    assert state.degraded and state.answer == "Plain answer."
    assert "1 attempt;" in state.outcome.reason


async def test_a_broken_sandbox_is_raised_not_retried() -> None:
    script = Scripted([program("print('FINAL: x')")])
    with pytest.raises(SandboxError, match="engine down"):
        await CodeAction(Step(script), FakeSandbox(SandboxError("engine down"))).run(QUESTION)


async def test_a_sandbox_without_tools_runs_tool_free_programs() -> None:
    sandbox = FunctionSandbox(lambda argv, **_: ExecResult(0, stdout="FINAL: plain\n"))
    state = await CodeAction(Step(Scripted([program("print('FINAL: plain')")])), sandbox).run(QUESTION)
    assert state.answer == "plain"


def test_misuse_is_a_usage_error() -> None:
    step = Step(Scripted([]))
    no_tools = FunctionSandbox(lambda argv, **_: ExecResult(0))
    with pytest.raises(UsageError, match="cannot bridge tools"):
        CodeAction(step, no_tools, tools=[multiply])
    with pytest.raises(UsageError, match="needs a loop.Executor"):
        CodeAction(object(), no_tools)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="needs a Sandbox"):
        CodeAction(step, object())  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="max_repairs"):
        CodeAction(step, no_tools, max_repairs=-1)
    with pytest.raises(UsageError, match="timeout"):
        CodeAction(step, no_tools, timeout=0)
    with pytest.raises(UsageError, match="timeout must be a positive number of seconds or None, got True"):
        CodeAction(step, no_tools, timeout=True)
    assert isinstance(CodeAction(step, no_tools), Pattern)


def test_programs_and_answers_are_found_in_text() -> None:
    assert extract_program("a\n```python\nx = 1\n```\nb\n```py\ny = 2\n```") == "y = 2\n"
    assert extract_program("```\nplain = True\n```") == "plain = True\n"
    assert extract_program("```python\nfirst()\n```\n```\nnot python?\n```") == "first()\n"
    assert extract_program("no code") is None and extract_program(None) is None
    assert extract_program("```python\n\n```") is None
    assert final_answer("log\nFINAL: 42\n") == "42"
    assert final_answer("FINAL: old\nFINAL: Line one\nline two\n") == "Line one\nline two"
    assert final_answer("no marker") is None and final_answer("  FINAL: indented") is None


# -- real programs --------------------------------------------------------------------------------------


async def test_a_real_program_calls_bridged_tools_and_answers_with_final() -> None:
    code = "from tools import multiply, lookup, final\nfinal(f\"{lookup(key='answer')} = {multiply(a=6, b=7):g}\")"
    state = await CodeAction(Step(Scripted([program(code)])), UnsafeLocalSandbox(),
                             tools=[multiply, lookup]).run(QUESTION)
    assert state.answer == "forty-two = 42" and calls == ["lookup", "multiply"]
    assert state.outcome.data["CodeAction"] == {"attempts": 1, "tool_calls": 2}


async def test_bridged_calls_are_published_and_charged_to_the_runs_budget(event_recorder: Any) -> None:
    code = "from tools import multiply, final\nfinal(f\"{multiply(a=6, b=7):g} {multiply(a=1, b=2):g}\")"
    step = Step(Scripted([program(code)]))
    recorder = event_recorder(step)
    agent = WithBudget(CodeAction(step, UnsafeLocalSandbox(), tools=[multiply]), Budget(max_tool_calls=10))
    state = await agent.run(QUESTION)
    assert state.answer == "42 2"
    assert [e.call.name for e in recorder.of_type(ToolStarted)] == ["multiply", "multiply"]
    assert [e.result.content for e in recorder.of_type(ToolFinished)] == ["42", "2"]
    (report,) = recorder.of_type(BudgetReport)
    assert report.spent.tool_calls == 2 and report.by_path["WithBudget/CodeAction"].tool_calls == 2


async def test_a_bridged_call_past_the_budget_fails_in_the_program_and_the_run_ends_degraded() -> None:
    code = ("from tools import multiply, ToolError\ntry:\n    multiply(a=1, b=1)\n    multiply(a=2, b=2)\n"
            "except ToolError as e:\n    print('FINAL: refused:', e)\n")
    step = Step(Scripted([program(code)]))
    agent = WithBudget(CodeAction(step, UnsafeLocalSandbox(), tools=[multiply]), Budget(max_tool_calls=1))
    state = await agent.run(QUESTION)
    assert calls == ["multiply"]  # the second call never ran
    assert state.answer is not None and "max_tool_calls=1 reached" in state.answer
    assert state.degraded and "a call was refused" in state.outcome.reason


async def test_each_repair_gets_a_fresh_tool_budget() -> None:
    spend = "from tools import multiply\nfor i in range(3):\n    multiply(a=i, b=1)\n"
    script = Scripted([program(spend + "raise ValueError('not yet')"), program(spend + "print('FINAL: done')")])
    state = await CodeAction(Step(script), UnsafeLocalSandbox(), tools=[multiply], max_tool_calls=3).run(QUESTION)
    assert state.answer == "done" and len(calls) == 6
    assert state.outcome.data["CodeAction"] == {"attempts": 2, "tool_calls": 6}


async def test_one_instance_serves_many_conversations_at_once() -> None:
    def reply(request: Any) -> str:
        question = request.turns[0].text
        return program(f"from tools import multiply\nprint('FINAL:', multiply(a={question}, b=2))")

    agent = CodeAction(Step(Function(reply)), UnsafeLocalSandbox(), tools=[multiply])
    answers: dict[int, str | None] = {}

    async def ask(n: int) -> None:
        answers[n] = (await agent.run(State().append(Role.USER, Text(str(n))))).answer

    async with anyio.create_task_group() as group:
        for n in range(4):
            group.start_soon(ask, n)
    assert answers == {n: f"{n * 2}" for n in range(4)}


@pytest.mark.docker
async def test_code_action_in_docker(docker_config: SandboxConfig) -> None:  # noqa: F811
    code = "from tools import multiply\nprint('FINAL:', int(multiply(a=6, b=7)))"
    async with DockerSandbox(docker_config, warm=1) as sandbox:
        state = await CodeAction(Step(Scripted([program(code)])), sandbox, tools=[multiply]).run(QUESTION)
    assert state.answer == "42" and calls == ["multiply"]
