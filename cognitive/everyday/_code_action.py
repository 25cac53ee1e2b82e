"""``CodeAction``: the model writes one program over the tools; a sandbox runs it; its final line is the answer."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from cognitive._kinds import PatternKind
from cognitive._pattern import check_start
from loop import (Executor, Options, Role, State, Text, TimedTool, Tool, ToolCall, ToolPipeline, ToolSpec,
                  UsageError, index_tools, require, scope, tracing)
from loop.checks import non_negative_int, positive_number
from sandbox import ExecResult, Sandbox, ToolBridge, ToolSandbox, accepts_tools

_NO_TOOLS = Options(tool_choice="none")  # tools are reached from the program, not called by the model
_BLOCK = re.compile(r"```[ \t]*(python3?|py)?[ \t]*\n(.*?)```", re.S | re.I)
MARKER = "FINAL:"
_TAIL = 2000

PROMPT = """\
Solve the user's request by writing ONE complete Python program. It runs in a sandbox with no network and \
{timeout}. From the sandbox it can call these tools, imported from the module `{module}`:

{listing}

Rules:
- Reply with the whole program in a single ```python code block.
- Import what you use (`from {module} import {example}`) and call the tools like ordinary functions; each \
returns the tool's result (text, a number, a list or a dict). Prefer keyword arguments.
- A failing tool call raises `{module}.ToolError`. One run may make at most {max_tool_calls} tool calls.
- Finish by printing the answer for the user on a line that starts with `{marker} ` (or call \
`final(answer)` from `{module}`); everything after the marker is the answer, so print it last.
"""


def extract_program(text: str | None) -> str | None:
    """The program in a reply: the last ```python block, else the last plain ``` block; ``None`` if none."""
    blocks = _BLOCK.findall(text or "")
    tagged = [code for tag, code in blocks if tag]
    chosen = tagged or [code for _, code in blocks]
    return chosen[-1].strip() + "\n" if chosen and chosen[-1].strip() else None


def final_answer(stdout: str) -> str | None:
    """The text after the last line starting with ``FINAL:`` (with any lines after it), or ``None``."""
    lines = stdout.splitlines()
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].startswith(MARKER):
            answer = "\n".join([lines[index][len(MARKER):], *lines[index + 1:]]).strip()
            return answer or None
    return None


class CodeAction:
    """The model writes one program that calls the tools as plain functions; the program runs in ``sandbox``.

    The model is asked (in a ``SYSTEM`` turn listing the tools' signatures) for one Python program in one
    reply. The program runs in the sandbox with the tools bridged in (``ToolBridge``, at most
    ``max_tool_calls`` calls per run). Its line marked ``FINAL:`` becomes the answer, appended as an
    assistant turn. If the program fails (no program, an error, a timeout, no ``FINAL:`` line), the tail of
    what went wrong goes back to the model, which may repair it up to ``max_repairs`` times, each run with a
    fresh tool budget. When every attempt failed, the model is asked for a plain-text answer and the state is
    its outcome is ``degraded``. A ``SandboxError`` (the sandbox itself is broken) is raised, not retried.

    Stateless: settings in ``__init__``; one instance can serve many conversations at once.
    """

    __slots__ = ("step", "sandbox", "pipeline", "bridge", "max_repairs", "timeout", "python", "prompt", "_bridging")

    def __init__(
        self,
        step: Executor,
        sandbox: Sandbox,
        *,
        tools: Tool | Iterable[Tool] = (),
        max_tool_calls: int = 50,
        max_repairs: int = 2,
        timeout: float | None = None,
        python: str = "python3",
    ) -> None:
        require(step, Executor, "CodeAction")
        require(sandbox, Sandbox, "CodeAction", "a Sandbox (something with exec(argv, ...))")
        non_negative_int("max_repairs", max_repairs)
        positive_number("timeout", timeout, unit="seconds", optional=True)
        tools = tuple(index_tools(tools, "in a CodeAction").values())  # one tool needs no list
        # Bridged calls go through a tool pipeline, as a model turn's do: charged to the run's budgets,
        # published as ToolStarted/ToolFinished on the step's bus, each in a scope of its own.
        self.pipeline = ToolPipeline(tools, events=step.events)
        bridge = ToolBridge([_Bridged(t, self.pipeline) for t in tools], max_tool_calls=max_tool_calls)
        bridging: ToolSandbox | None = None  # the sandbox again, when it runs programs with the tools bridged
        if bridge.tools:
            if not accepts_tools(sandbox):  # the ToolSandbox ability
                raise UsageError(f"{sandbox!r} cannot bridge tools into the program (it is not a "
                                 "sandbox.ToolSandbox, whose exec takes tools=); use DockerSandbox, or "
                                 "UnsafeLocalSandbox where there is no Docker")
            bridging = sandbox
        self.step = step
        self.sandbox = sandbox
        self._bridging = bridging
        self.bridge = bridge
        self.max_repairs = max_repairs
        self.timeout = timeout
        self.python = python
        names = [t.spec.name for t in bridge.tools]
        self.prompt = PROMPT.format(
            timeout=f"{timeout:g} seconds to run" if timeout else "a time limit",
            module=bridge.module, listing=bridge.listing or "(no tools: compute the answer yourself)",
            example=", ".join(names[:2]) or "final", max_tool_calls=max_tool_calls, marker=MARKER)

    async def run(self, state: State) -> State:
        check_start(state, "CodeAction")
        with scope("CodeAction"), tracing.span(
                "invoke_agent CodeAction",
                {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "CodeAction"}) as span:
            step = self.step
            state = await step.submit(state, Role.SYSTEM, Text(self.prompt), meta={"kind": PatternKind.CODE_ACTION})
            attempts = self.max_repairs + 1
            tool_calls = 0
            for attempt in range(1, attempts + 1):
                state = await step.turn(state, _NO_TOOLS)
                program = extract_program(state.answer)
                if program is None:
                    problem = "Your reply held no ```python code block, so nothing was run."
                else:
                    result = await self._execute(program)
                    tool_calls += result.tool_calls
                    answer = final_answer(result.stdout) if result.ok else None
                    if answer is not None:
                        span.set_attribute("code_action.attempts", attempt)
                        state = await step.submit(state, Role.ASSISTANT, Text(answer),
                                                  meta={"kind": PatternKind.CODE_ACTION_ANSWER, "attempt": attempt})
                        return state.with_outcome(data={"attempts": attempt, "tool_calls": tool_calls})
                    problem = describe_failure(result)
                if attempt < attempts:
                    note = (f"{problem}\n\nAttempt {attempt} of {attempts} failed. Reply with the whole corrected "
                            "program in one ```python block; its tool budget starts afresh.")
                    state = await step.submit(state, Role.SYSTEM, Text(note),
                                              meta={"kind": PatternKind.CODE_ACTION_ERROR, "attempt": attempt})
            note = (f"{problem}\n\nNo more programs will be run. Answer the user directly in plain text: say what "
                    "you could establish and what you could not.")
            state = await step.submit(state, Role.SYSTEM, Text(note), meta={"kind": PatternKind.CODE_ACTION_ERROR,
                                                                            "attempt": attempts})
            state = await step.turn(state, _NO_TOOLS)
            span.set_attribute("code_action.attempts", attempts)
            return state.with_outcome(
                "degraded", f"CodeAction: no program succeeded in {attempts} attempt{'s' if attempts > 1 else ''}; "
                "the answer was asked for in plain text", data={"attempts": attempts, "tool_calls": tool_calls})

    async def _execute(self, program: str) -> ExecResult:
        argv = [self.python, "main.py"]
        files = {"main.py": program}
        if self._bridging is not None:
            return await self._bridging.exec(argv, files=files, timeout=self.timeout, tools=self.bridge)
        return await self.sandbox.exec(argv, files=files, timeout=self.timeout)

    def __repr__(self) -> str:
        return (f"CodeAction({self.step!r}, {self.sandbox!r}, tools={[t.spec.name for t in self.bridge.tools]}, "
                f"max_repairs={self.max_repairs})")


def describe_failure(result: ExecResult) -> str:
    """What went wrong with a run, with the tails of its output, for the model to repair."""
    if result.timed_out:
        head = "Your program ran past its time limit and was killed."
    elif result.oom_killed:
        head = "Your program ran out of memory and was killed."
    elif result.error:
        head = f"Your program could not be started: {result.error}."
    elif result.exit_code != 0:
        head = f"Your program failed with exit status {result.exit_code}."
    else:
        head = f"Your program finished but printed no line starting with `{MARKER}`, so there is no answer."
    parts = [head]
    for label, text in (("stderr", result.stderr), ("stdout", result.stdout)):
        text = text.strip()
        if text:
            shown = text[-_TAIL:]
            what = f"the last {len(shown):,} characters of {label}" if len(shown) < len(text) else label
            parts.append(f"{what}:\n```\n{shown}\n```")
    return "\n\n".join(parts)


class _Bridged:
    """A tool as a sandboxed program calls it: through the pipeline, returning the tool's value itself."""

    __slots__ = ("spec", "timeout", "_pipeline")
    _ids = itertools.count(1)

    def __init__(self, tool: Tool, pipeline: ToolPipeline) -> None:
        self.spec: ToolSpec = tool.spec
        self.timeout = tool.timeout if isinstance(tool, TimedTool) else None
        self._pipeline = pipeline

    async def call(self, arguments: Mapping[str, Any]) -> Any:
        raw = json.dumps(dict(arguments), ensure_ascii=False)  # the bridge parsed them from JSON
        call = ToolCall(f"bridge_{next(self._ids)}", self.spec.name, raw)
        return await self._pipeline.invoke(call, arguments)
