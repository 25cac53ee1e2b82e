"""``ReWOO``: plan every tool call up front, run the plan without the model, then answer from the evidence."""

from __future__ import annotations

import graphlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

import anyio
import attrs

from cognitive._kinds import PatternKind
from cognitive._pattern import answering as _answering, check_prompt, check_start
from loop import (ArgumentChecker, Deriver, Options, Role, State, Text, ToolCall, ToolPipeline, ToolRunner, ToolSpec,
                  TurnRunner, add_turn, ask, branch, has, json_default, require, scope, tracing)
from loop.checks import non_negative_int, positive_int
from loop.errors import VerificationFailed

PLAN_PROMPT = """\
Plan every tool call the latest request needs. You see no result before the plan has run, so write all the \
calls now.

Number the steps E1, E2, ... in order; each calls one tool and can use earlier steps' results: an argument that \
is exactly "#E1" gets E1's result as it is, and "#E1" inside a longer text is replaced by its text. "depends_on" \
lists the steps a step waits for; steps that need nothing of each other run at once. If no tool is needed, give \
no steps.

Tools ("?": an optional parameter):
{tools}"""

REPLAN_PROMPT = """\
This plan cannot be run:

{problems}

Make a new plan that fixes this."""

SOLVE_PROMPT = """\
Answer the latest request using only the plan below and the evidence its steps gathered; no tool can be \
called now. If the evidence is not enough, say so plainly.

{evidence}"""

_REF = re.compile(r"#(E\d+)")
_ID = re.compile(r"E[1-9]\d*")
_SUMMARY_CHARS = 200
# What a tool's parameters and a parameter's schema may hold to be listed as a signature (titles repeat names).
_TOP_KEYS = {"type", "properties", "required", "additionalProperties", "title", "$schema"}
_SHAPE_KEYS = {"type", "enum", "const", "items", "properties", "required", "additionalProperties", "anyOf", "oneOf",
               "title"}
_STEP_SCHEMA = {"type": "object",
                "properties": {"id": {"type": "string"}, "tool": {"type": "string"}, "arguments": {"type": "object"},
                               "depends_on": {"type": "array", "items": {"type": "string"}}},
                "required": ["id", "tool", "arguments"]}
_PLAN_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"steps": {"type": "array", "items": _STEP_SCHEMA}},
                                "required": ["steps"]}


@attrs.frozen
class _Task:
    """One step of a checked plan: ``needs`` are the steps it waits for (``depends_on`` and its references)."""

    id: str
    tool: str
    arguments: Mapping[str, Any]
    needs: tuple[str, ...]


@attrs.frozen
class _Evidence:
    id: str
    tool: str
    arguments: str  # as the tool was called, references filled ("" when it was not run)
    content: str
    error: bool


@attrs.frozen
class _Planned:
    """What a planning attempt gave: the checked ``tasks``, or the ``problems`` that stop them running."""

    steps: tuple[Any, ...]
    tasks: tuple[_Task, ...] = ()
    problems: tuple[str, ...] = ()


class ReWOO:
    """Reasoning without observation: a planner turn writes every tool call at once, workers run them, and a
    solver turn answers.

    **Plan.** A typed answer (``loop.ask``, in a branch that never enters the conversation) that sees the
    conversation and the tools but no tool result. The tools are listed as signatures, which say what their
    JSON schemas say in fewer tokens: ``- name(a: string, b?: integer = 5) — description``, then a line of notes
    per parameter. The plan is steps ``E1``, ``E2``... each naming a ``tool``, its ``arguments`` and the
    steps it ``depends_on``. An argument value that is exactly ``"#E1"`` receives step E1's evidence as it is
    (parsed as JSON when the tool's schema wants no string there); ``#E1`` inside a longer string is replaced by
    its text. A plan with a cycle, an unknown tool, a reference to a missing or later step, or arguments that
    break the tool's schema goes back to the planner with a report naming each problem, at most
    ``max_replans`` times; after that the solver answers without evidence and the outcome is ``degraded``.

    **Work.** No model call: each step goes through the step's tool ``pipeline`` (argument checks, timeouts,
    events, budget charges) once the steps it needs are done, independent ones concurrently (at most ``limit``
    at once; ``None``: no limit). A tool that fails gives error evidence, and the steps that need it are not run.

    **Solve.** A system turn with the plan and its evidence (kind ``"rewoo_evidence"``) joins the conversation,
    then one turn with no tools offered writes the answer. The outcome data (under this pattern's run path)
    holds the ``plan``, the ``evidence`` (each step's tool, arguments, ``ok`` and the start of its result) and
    the number of ``replans``. Costs one planning call (more on a bad plan) and one solving call.
    """

    __slots__ = ("step", "max_replans", "limit", "max_steps", "plan_prompt", "solve_prompt", "_toolless")

    def __init__(self, step: TurnRunner, *, max_replans: int = 2, limit: int | None = None, max_steps: int = 20,
                 plan_prompt: str = PLAN_PROMPT, solve_prompt: str = SOLVE_PROMPT) -> None:
        require(step, TurnRunner, "ReWOO", "a TurnRunner with a tool pipeline, such as a loop.Step")
        require(step, ToolRunner, "ReWOO", "a ToolRunner (its tool pipeline runs the plan), such as a loop.Step")
        self.step = step
        self.max_replans = non_negative_int("max_replans", max_replans)
        self.limit = positive_int("limit", limit, optional=True)
        self.max_steps = positive_int("max_steps", max_steps)
        self.plan_prompt = check_prompt("plan_prompt", plan_prompt, "tools")
        self.solve_prompt = check_prompt("solve_prompt", solve_prompt, "evidence")
        # The planner and the solver are offered no tool where the step can say so (the planner reads them in its
        # prompt, and neither may call one); elsewhere tools are only switched off.
        self._toolless: TurnRunner = cast(Deriver, step).derive(tools=()) if has(step, Deriver) else step

    async def run(self, state: State) -> State:
        check_start(state, "ReWOO")
        with scope("ReWOO"), tracing.span("invoke_agent ReWOO", {"gen_ai.operation.name": "invoke_agent",
                                                                 "gen_ai.agent.name": "ReWOO"}) as span:
            pipeline = cast(ToolRunner, self.step).pipeline
            planned, replans = await self._plan(state, pipeline)
            span.set_attribute("rewoo.steps", len(planned.tasks))
            span.set_attribute("rewoo.replans", replans)
            evidence = await self._work(planned.tasks, pipeline) if not planned.problems else ()
            state = await add_turn(self.step, state, Role.SYSTEM,
                                   Text(self.solve_prompt.format(evidence=_report(planned, evidence))),
                                   meta={"kind": PatternKind.REWOO_EVIDENCE})
            answering = _answering()
            final = Options(tool_choice="none")
            state = await self._toolless.turn(state, final if answering is None else final.merge(answering))
            data = {"plan": [_plain(s) for s in planned.steps], "evidence": [_summary(e) for e in evidence],
                    "replans": replans}
            if planned.problems:
                return state.with_outcome("degraded", f"ReWOO found no runnable plan in {replans + 1} "
                                          f"tr{'ies' if replans else 'y'} ({'; '.join(planned.problems)}); the "
                                          "solver answered without evidence", data=data)
            return state.with_outcome(data=data)

    async def _plan(self, state: State, pipeline: ToolPipeline) -> tuple[_Planned, int]:
        """The planner's last plan (checked) and how many times it was sent back."""
        tools = "\n".join(_signature(t.spec) for t in pipeline.tools) or "(none)"
        with branch("plan"):
            asking = await add_turn(self.step, state, Role.SYSTEM, Text(self.plan_prompt.format(tools=tools)),
                                    meta={"kind": PatternKind.REWOO_PLAN})
            for attempt in range(self.max_replans + 1):
                try:
                    asked = await ask(self._toolless, asking, _PLAN_SCHEMA, max_retries=1)
                except VerificationFailed as exc:
                    planned = _Planned((), problems=(f"the answer was not a plan: {exc}",))
                    asking = exc.state if isinstance(exc.state, State) else asking
                else:
                    asking = asked.state
                    planned = _check(asked.value["steps"], pipeline, self.max_steps)
                if not planned.problems or attempt == self.max_replans:
                    return planned, attempt
                problems = "\n".join(f"- {p}" for p in planned.problems)
                asking = await add_turn(self.step, asking, Role.SYSTEM, Text(REPLAN_PROMPT.format(problems=problems)),
                                        meta={"kind": PatternKind.REWOO_REPLAN})
        raise AssertionError("unreachable: the last attempt returns")  # pragma: no cover

    async def _work(self, tasks: Sequence[_Task], pipeline: ToolPipeline) -> tuple[_Evidence, ...]:
        """Each task run through ``pipeline`` once the tasks it needs are done; evidence in plan order."""
        done: dict[str, _Evidence] = {}
        finished = {task.id: anyio.Event() for task in tasks}
        limiter = None if self.limit is None else anyio.CapacityLimiter(self.limit)

        async def one(task: _Task) -> None:
            for need in task.needs:
                await finished[need].wait()
            failed = [need for need in task.needs if done[need].error]
            if failed:
                done[task.id] = _Evidence(task.id, task.tool, "", f"not run: {', '.join(failed)} failed", True)
            else:
                spec = pipeline.find(task.tool)
                properties = spec.spec.parameters.get("properties", {}) if spec is not None else {}
                arguments = {k: _fill(v, done, properties.get(k)) for k, v in task.arguments.items()}
                text = json.dumps(arguments, ensure_ascii=False, default=json_default)
                call = ToolCall(f"rewoo_{task.id}", task.tool, text)
                if limiter is None:
                    result = await pipeline.call(call)
                else:
                    async with limiter:
                        result = await pipeline.call(call)
                done[task.id] = _Evidence(task.id, task.tool, text, result.content, result.is_error)
            finished[task.id].set()

        async with anyio.create_task_group() as group:
            for task in tasks:
                group.start_soon(one, task)
        return tuple(done[task.id] for task in tasks)

    def __repr__(self) -> str:
        limit = "" if self.limit is None else f", limit={self.limit}"
        return f"ReWOO({self.step!r}, max_replans={self.max_replans}{limit})"


def _check(steps: Sequence[Any], pipeline: ToolPipeline, max_steps: int) -> _Planned:
    """The plan's tasks, or every problem that stops it running, in words the planner can act on."""
    steps = tuple(steps)
    problems: list[str] = []
    if len(steps) > max_steps:
        return _Planned(steps, problems=(f"the plan has {len(steps)} steps; at most {max_steps} are allowed",))
    order: dict[str, int] = {}
    for index, step in enumerate(steps):
        ident = step["id"]
        if not _ID.fullmatch(ident):
            problems.append(f"step {index + 1} has the id {ident!r}; ids are E1, E2, ...")
        elif ident in order:
            problems.append(f"two steps have the id {ident}")
        else:
            order[ident] = index
    names = ", ".join(t.spec.name for t in pipeline.tools) or "none"
    tasks: list[_Task] = []
    for index, step in enumerate(steps):
        ident, name, arguments = step["id"], step["tool"], step["arguments"]
        tool = pipeline.find(name)
        if tool is None:
            problems.append(f"step {ident} calls the unknown tool {name!r}; the tools are: {names}")
        referring: set[str] = set()
        for key, value in arguments.items():
            for ref in _references(value):
                referring.add(key)
                if ref not in order:
                    problems.append(f"step {ident} refers to #{ref}, which no step of the plan produces")
                elif order[ref] >= index:
                    problems.append(f"step {ident} refers to #{ref}, which is not an earlier step: a step can "
                                    "only use the evidence of the steps before it")
        depends = tuple(step.get("depends_on") or ())
        for need in depends:
            if need not in order:
                problems.append(f"step {ident} depends on {need}, which is not a step of the plan")
        if tool is not None:
            problem = _misfit(tool.spec.parameters, arguments, referring)
            if problem is not None:
                problems.append(f"step {ident}'s arguments for {name!r} do not fit its schema: {problem}")
        refs = [r for v in arguments.values() for r in _references(v)]
        needs = tuple(dict.fromkeys(n for n in (*depends, *refs) if n in order and n != ident))
        if ident in depends:
            problems.append(f"step {ident} depends on itself")
        tasks.append(_Task(ident, name, arguments, needs))
    cycle = _cycle(tasks)
    if cycle:
        problems.append(f"the steps {' -> '.join(cycle)} depend on each other in a cycle, so none of them can start")
    if problems:
        return _Planned(steps, problems=tuple(dict.fromkeys(problems)))
    return _Planned(steps, tasks=tuple(tasks))


def _misfit(schema: Mapping[str, Any], arguments: Mapping[str, Any], referring: set[str]) -> str | None:
    """What is wrong with ``arguments`` for ``schema``, or ``None``. The values holding a reference are known
    only once the plan runs, so they are let pass here: the pipeline checks them then."""
    if referring:
        properties = dict(schema.get("properties", {}))
        properties.update({key: {} for key in referring})
        schema = {**schema, "properties": properties}
    checked = ArgumentChecker(schema).check(dict(arguments))
    return checked if isinstance(checked, str) else None


def _cycle(tasks: Sequence[_Task]) -> list[str]:
    """One cycle among the tasks' needs (its ids, each needing the next, the first repeated at the end), or ``[]``."""
    try:
        graphlib.TopologicalSorter({task.id: task.needs for task in tasks}).prepare()
    except graphlib.CycleError as exc:
        return list(reversed(exc.args[1]))  # it lists each node before the one that needs it
    return []


def _references(value: Any) -> list[str]:
    if isinstance(value, str):
        return _REF.findall(value)
    if isinstance(value, Mapping):
        return [r for v in value.values() for r in _references(v)]
    if isinstance(value, list):
        return [r for v in value for r in _references(v)]
    return []


def _fill(value: Any, done: Mapping[str, _Evidence], schema: Any) -> Any:
    """``value`` with its references replaced by evidence; ``schema`` (the value's, if known) says whether a
    whole-value reference is wanted as text or as the JSON value the text holds."""
    schema = schema if isinstance(schema, Mapping) else {}
    if isinstance(value, str):
        whole = _REF.fullmatch(value)
        if whole is not None:
            text = done[whole[1]].content
            if schema.get("type") == "string":
                return text
            try:
                return ArgumentChecker.loads(text)
            except ValueError:
                return text
        return _REF.sub(lambda m: done[m[1]].content, value)
    if isinstance(value, Mapping):
        properties = schema.get("properties", {})
        return {k: _fill(v, done, properties.get(k) if isinstance(properties, Mapping) else None)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, done, schema.get("items")) for v in value]
    return value


def _report(planned: _Planned, evidence: Sequence[_Evidence]) -> str:
    """The plan and its evidence, as the solver reads them."""
    if planned.problems:
        return ("No plan could be run, so there is no evidence. The planner's last plan had these problems:\n"
                + "\n".join(f"- {p}" for p in planned.problems))
    if not evidence:
        return "The plan has no steps: the request needs no tool, so there is no evidence."
    lines = ["The plan and its evidence:"]
    for item in evidence:
        called = f"{item.tool}({item.arguments})" if item.arguments else item.tool
        lines.append(f"{item.id} = {called}\n{item.id} {'failed' if item.error else 'returned'}: {item.content}")
    return "\n\n".join(lines)


def _signature(spec: ToolSpec) -> str:
    """How the planner reads a tool: ``- name(a: string, b?: integer = 5) — description``, then a line for each
    parameter with its description and what of its schema the signature cannot show, as compact JSON. A tool
    whose parameters are not a plain object of named properties is listed with its whole schema."""
    schema, about = spec.parameters, f" — {_flat(spec.description)}" if spec.description else ""
    properties, required = schema.get("properties", {}), schema.get("required", [])
    if (not set(schema) <= _TOP_KEYS or schema.get("type", "object") != "object"
            or isinstance(schema.get("additionalProperties"), Mapping) or not isinstance(properties, Mapping)
            or not all(isinstance(p, Mapping) for p in properties.values())
            or not isinstance(required, list) or not {str(r) for r in required} <= set(properties)):
        return f"- {spec.name}{about}\n  parameters: {_compact(schema)}"
    params, notes = [], []
    for name, prop in properties.items():
        rest = {k: v for k, v in prop.items() if k not in ("description", "default", "title")}
        shape, more = _shape(rest), ""
        if shape is None:  # more than a signature shows: the type there, the rest of its schema in the note
            kind = rest.pop("type", "any")
            shape = " | ".join(map(str, kind)) if isinstance(kind, list) else str(kind)
            more = _compact(rest) if rest else ""
        default = f" = {_compact(prop['default'])}" if "default" in prop else ""
        params.append(f"{name}{'' if name in required else '?'}: {shape}{default}")
        note = " ".join(part for part in (_flat(str(prop.get("description") or "")), more) if part)
        notes.extend([f"\n  {name}: {note}"] if note else [])
    if not properties and schema.get("additionalProperties") is not False:
        params.append("...")  # takes any arguments
    return f"- {spec.name}({', '.join(params)}){about}{''.join(notes)}"


def _shape(schema: Mapping[str, Any], depth: int = 0) -> str | None:
    """A type-like rendering of ``schema`` (``string``, ``integer[]``, ``"a" | "b"``, ``{x: number, y?: string}``),
    or ``None`` when the schema says more than that shows."""
    if depth > 2 or not set(schema) <= _SHAPE_KEYS or isinstance(schema.get("additionalProperties"), Mapping):
        return None
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else schema["enum"]
        return " | ".join(_compact(v) for v in values) if isinstance(values, list) and values else None
    union = schema.get("anyOf", schema.get("oneOf"))
    if union is not None:
        shapes = [_shape(s, depth + 1) if isinstance(s, Mapping) else None for s in union]
        return None if "type" in schema or not shapes or None in shapes else " | ".join(cast(list[str], shapes))
    kind, items, properties = schema.get("type", "any"), schema.get("items"), schema.get("properties")
    if isinstance(kind, list):
        return " | ".join(kind) if all(isinstance(k, str) and k not in ("array", "object") for k in kind) else None
    if kind == "array" and isinstance(items, Mapping):
        inner = _shape(items, depth + 1)
        return None if inner is None else f"({inner})[]" if " | " in inner else f"{inner}[]"
    if kind == "object" and isinstance(properties, Mapping) and properties:
        required = schema.get("required", [])
        fields = [(n, _shape(p, depth + 1) if isinstance(p, Mapping) else None) for n, p in properties.items()]
        if any(shape is None for _, shape in fields) or not isinstance(required, list):
            return None
        return "{" + ", ".join(f"{n}{'' if n in required else '?'}: {t}" for n, t in fields) + "}"
    return kind if isinstance(kind, str) and items is None and properties is None else None


def _flat(text: str) -> str:
    return " ".join(text.split())  # a description's line breaks are layout, not content: one line reads the same


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)  # no spaces: the planner pays every byte


def _plain(step: Any) -> Any:
    return json.loads(json.dumps(step, default=json_default))  # a plain copy: the outcome data is stored


def _summary(item: _Evidence) -> dict[str, Any]:
    content = item.content if len(item.content) <= _SUMMARY_CHARS else item.content[:_SUMMARY_CHARS] + "…"
    return {"id": item.id, "tool": item.tool, "arguments": item.arguments, "ok": not item.error, "result": content}
