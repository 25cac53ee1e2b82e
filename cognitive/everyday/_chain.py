"""``Chain`` and ``Stage``: a fixed sequence of stages, each run once, each output feeding the next."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cognitive._kinds import PatternKind
from cognitive._pattern import Pattern, check_start, left_open, picked_up
from cognitive.everyday._react import ReAct
from cognitive.prompts._paths import CONVERSATION_ROOTS, StatePath
from cognitive.prompts._template import Template, show
from cognitive.wrappers._output import WithOutput
from loop import (OutputType, Role, State, Text, TurnExecutor, TurnRunner, TurnSubmitter, UsageError,
                  branch, has, scope, tracing)


class Stage:
    """One stage of a ``Chain``: ``instructions`` (a ``Template`` or its text) given as a system turn, then
    ``runner`` run once: a ``Pattern``, or a step, which runs as ``ReAct(step)``.

    Its output, the answer's text or, with ``output_type``, the validated JSON value (the runner is wrapped in
    ``WithOutput``, formatting through ``runner`` if it is a step, else through ``step``), is kept under
    ``key`` (the stage's ``name`` by default) for the templates of later stages: ``{facts}``,
    ``{facts@items#0}``. ``reads`` limits the stage to some names: earlier stages' keys and ``input`` (the
    person's latest message). With ``history=False`` the stage sees no conversation, only its instructions and
    a user turn holding the values it reads (all earlier outputs and ``input`` when ``reads`` is not given).
    """

    __slots__ = ("name", "template", "pattern", "output", "key", "history", "reads", "step")

    def __init__(
        self,
        name: str,
        instructions: str | Template,
        runner: Any,
        *,
        output_type: Any = None,
        key: str | None = None,
        history: bool = True,
        reads: Iterable[str] | None = None,
        step: Any = None,
    ) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise UsageError(f"a stage name is an identifier (it names the stage's output), got {name!r}")
        self.name = name
        self.template = instructions if isinstance(instructions, Template) else Template(instructions)
        if has(runner, Pattern):
            pattern: Pattern = runner
        elif has(runner, TurnRunner):
            pattern = ReAct(runner)
            step = runner if step is None else step
        else:
            raise UsageError(f"stage {name!r}: runner must be a Pattern or a step (TurnRunner), got {runner!r}")
        self.output: OutputType[Any] | None = None
        if output_type is not None:
            if not has(step, TurnExecutor):
                raise UsageError(f"stage {name!r} has an output_type, so it needs a step to ask for the format: "
                                 "give a step as runner, or step=")
            self.output = OutputType.of(output_type)
            pattern = WithOutput(pattern, step, self.output)
        self.pattern = pattern
        self.step = step if has(step, TurnSubmitter) else None
        self.key = name if key is None else key
        if not isinstance(self.key, str) or not self.key.isidentifier() or self.key in CONVERSATION_ROOTS:
            raise UsageError(f"stage {name!r}: key must be an identifier other than "
                             f"{', '.join(sorted(CONVERSATION_ROOTS))}; got {self.key!r}")
        if not isinstance(history, bool):
            raise UsageError(f"stage {name!r}: history must be True or False, got {history!r}")
        self.history = history
        if isinstance(reads, str):
            raise UsageError(f"stage {name!r}: reads takes names, got the string {reads!r}; write reads=[{reads!r}]")
        self.reads: tuple[str, ...] | None = None if reads is None else tuple(reads)

    def __repr__(self) -> str:
        return f"Stage({self.name!r}, {self.pattern!r}, key={self.key!r}, history={self.history})"


class Chain:
    """Runs ``stages`` in order, each once; the last writes the answer.

    Stages before the last run as branches: their turns are neither streamed nor stored; only their outputs go
    on. The last stage runs on the conversation (streamed and stored as usual) when it sees the history, and
    as a branch whose answer is then written to the conversation when it does not. Every output is kept in
    the answer's outcome (``data[path]["outputs"]``). A stage that ended degraded makes the run degraded.

    Checked when built: names and keys are unique, ``reads`` name only ``input`` and earlier keys, and no
    template reads a key that a later stage writes. Costs the model calls of its stages.
    """

    __slots__ = ("stages",)

    def __init__(self, *stages: Stage) -> None:
        if not stages:
            raise UsageError("Chain needs at least one Stage")
        keys: list[str] = []
        for stage in stages:
            if not isinstance(stage, Stage):
                raise UsageError(f"Chain takes Stage values, got {stage!r}")
            if stage.key in keys:
                raise UsageError(f"two stages write the key {stage.key!r}; give one of them another key=")
            later = {s.key: s.name for s in stages[stages.index(stage) + 1:]}
            for root in stage.template.roots:
                if root in later:
                    raise UsageError(f"stage {stage.name!r} reads {root!r}, which stage {later[root]!r} writes "
                                     "only after it")
            for name in stage.reads or ():
                if name != "input" and name not in keys:
                    raise UsageError(f"stage {stage.name!r} reads {name!r}, which is neither 'input' nor the key "
                                     f"of an earlier stage ({', '.join(map(repr, keys)) or 'none yet'})")
            if stage.reads is not None:
                allowed = set(stage.reads) | CONVERSATION_ROOTS
                outside = [r for r in stage.template.roots if r in keys and r not in allowed]
                if outside:
                    raise UsageError(f"stage {stage.name!r}'s instructions read {', '.join(map(repr, outside))}, "
                                     f"outside its reads ({', '.join(map(repr, stage.reads))})")
            keys.append(stage.key)
        if len({s.name for s in stages}) < len(stages):
            raise UsageError("two stages have the same name; stage names must be unique")
        self.stages = stages

    async def run(self, state: State) -> State:
        check_start(state, "Chain")
        with scope("Chain"), tracing.span("invoke_agent Chain", {"gen_ai.operation.name": "invoke_agent",
                                                                 "gen_ai.agent.name": "Chain"}):
            outputs: dict[str, Any] = {}
            worst: tuple[str, str] | None = None
            waited = picked_up(state)
            resuming = waited is not None and isinstance(waited.get("outputs"), dict)
            first = 1
            if waited is not None and resuming:  # the caller answered what its last stage left open: it goes on
                outputs, first = dict(waited["outputs"]), len(self.stages)
                saved = waited.get("worst")
                worst = (str(saved[0]), str(saved[1])) if saved else None
            for number, stage in enumerate(self.stages[first - 1:], first):
                last = number == len(self.stages)
                visible = outputs if stage.reads is None else {k: v for k, v in outputs.items() if k in stage.reads}
                on_main = last and stage.history
                if on_main:
                    begun = state if resuming else state.append(
                        Role.SYSTEM, Text(stage.template.render(state, visible)),
                        meta={"kind": PatternKind.STAGE, "stage": stage.name})
                    result = await stage.pattern.run(begun)
                    if left_open(result):  # the caller answers; the stage goes on from its results
                        return result.with_outcome(data={"outputs": outputs, "worst": worst})
                else:
                    instructions = stage.template.render(state, visible)
                    with branch(stage.name):
                        result = await stage.pattern.run(self._start(stage, state, instructions, visible))
                outputs[stage.key] = _output(stage, result)
                outcome = result.outcome
                if outcome is not None and not outcome.ok and worst is None:
                    worst = (outcome.status, f"stage {stage.name!r}: {outcome.reason}")
                if last:
                    state = result if on_main else await _write(stage, state, result.answer or "")
            data = {"outputs": outputs}
            if worst is not None:
                return state.with_outcome(worst[0] if worst[0] != "pending" else "degraded", worst[1], data=data)
            return state.with_outcome(data=data)

    @staticmethod
    def _start(stage: Stage, state: State, instructions: str, visible: dict[str, Any]) -> State:
        start = State() if not stage.history else state
        start = start.append(Role.SYSTEM, Text(instructions), meta={"kind": PatternKind.STAGE, "stage": stage.name})
        if stage.history:
            return start
        names = stage.reads if stage.reads is not None else ("input", *visible)
        sections = []
        for name in names:
            sections.append(f"## {name}\n\n{show(StatePath.parse(name).read(state, visible))}")
        return start.append(Role.USER, Text("\n\n".join(sections)))

    def __repr__(self) -> str:
        return f"Chain({', '.join(s.name for s in self.stages)})"


def _output(stage: Stage, result: State) -> Any:
    if stage.output is None:
        return result.answer or ""
    return stage.output.extract(result.answer or "")


async def _write(stage: Stage, state: State, answer: str) -> State:
    """The answer of a last stage that ran as a branch, written to the conversation (published through the
    stage's step when it has one)."""
    meta = {"stage": stage.name}
    if stage.step is not None:
        written: State = await stage.step.submit(state, Role.ASSISTANT, Text(answer), meta=meta)
        return written
    return state.append(Role.ASSISTANT, Text(answer), meta=meta)
