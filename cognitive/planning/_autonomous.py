"""``Autonomous``: the model picks each next step of its work from a pool of stages, and one of them answers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, cast, runtime_checkable

import attrs

from cognitive._kinds import PatternKind
from cognitive._pattern import Pattern, check_prompt, check_start, left_open
from cognitive.planning._stages import Act, Synthesize, Think, offer_notes, write_notes
from loop import (Deriver, Role, State, Text, ToolRunner, TurnRunner, UsageError, add_turn, ask, branch, has, require,
                  scope, tracing)
from loop.checks import positive_int
from loop.errors import VerificationFailed

CHOOSE = """\
Choose the next step of the work on the latest request, from what has been done so far. The steps:

{menu}

A step that uses tools may also be chosen by the name of one of its tools. At most {left} more steps can \
be taken; choose the step that writes the answer as soon as what has been found is enough. Say which step \
is next and, in a sentence, why and what it should do."""
REASON = """\
Work on the latest request with the tools: {subgoal}
Call them as often as you need and read their results. Report what you found; do not answer the whole \
request yet."""
ANALYZE = """\
Analyze what has been found so far against the latest request: what the results show, how they fit \
together, any calculation or comparison the request needs, and what is still missing or uncertain. Write \
your analysis; do not answer the request yet."""
TERMINAL = "synthesize"
_GIVEN_CHARS = 200


@runtime_checkable
class _Named(Protocol):
    """What a pool holds: a stage with a ``name`` and a ``description`` (what the menu shows) and ``run``."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    async def run(self, state: State) -> State: ...


@attrs.frozen
class PoolStep:
    """Any pattern as a step of an ``Autonomous`` pool, under a ``name`` (an identifier) and a ``description``
    (what the model reads in the menu). Its ``run`` adds a system turn (kind ``"stage"``, ``meta["stage"]``
    its name) holding ``instructions``, or the name and description when none are given, then runs
    ``pattern``: so its work is listed under its name in the notes the answer is written from. Named
    ``"synthesize"`` it is a step that writes the answer."""

    name: str
    description: str
    pattern: Pattern
    instructions: str | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise UsageError(f"PoolStep: a step's name is an identifier, got {self.name!r}")
        if not isinstance(self.description, str) or not self.description.strip():
            raise UsageError(f"PoolStep {self.name!r}: description must be a non-empty string (the menu shows it), "
                             f"got {self.description!r}")
        require(self.pattern, Pattern, f"PoolStep {self.name!r}", "a Pattern (something with run(state))")
        if self.instructions is not None:
            check_prompt("instructions", self.instructions)

    async def run(self, state: State) -> State:
        text = self.instructions or f"Next step: {self.name} ({self.description})."
        return await self.pattern.run(state.append(Role.SYSTEM, Text(text),
                                                   meta={"kind": PatternKind.STAGE, "stage": self.name}))


def _terminal(stage: _Named) -> bool:
    return isinstance(stage, Synthesize) or stage.name == TERMINAL


class Autonomous:
    """The model builds its own path: before each step it chooses, from a ``pool`` of stages, what to do next,
    until it chooses a step that writes the answer.

    **The pool.** Stages with a ``name``, a ``description`` and ``run(state)``: the values of ``Think``,
    ``Plan``, ``Act``, ``Reflect``, ``Criticize``, ``Judge``, ``CheckSources``, ``Synthesize``, or any pattern
    given a name as a ``PoolStep``. Names are unique. A step that writes the answer is a ``Synthesize`` or a
    step named ``"synthesize"``; the pool needs one (the first of them is the fallback below). The default pool:
    ``reason`` (``Act``: a whole tool loop with the step's tools), ``analyze`` (``Think``, without tools) and
    ``synthesize`` (``Synthesize``).

    **Choosing.** A typed answer (``loop.ask``, on ``chooser``: by default the step with no tools offered) in
    a branch of its own, on the work so far plus a system turn with the menu (``prompt``, its fields
    ``{menu}``, each step's name and description, and ``{left}``, how many steps are left):
    ``{"next": name, "reason": why}``, ``next`` one of the pool's names or one of the tools its ``Act`` steps
    offer, which runs the first ``Act`` step offering that tool.
    An ``Act`` step works on the reason given as its subgoal. An answer that names nothing of the pool is
    sent back once with the problem; a second such answer ends the work, and the fallback answers,
    ``degraded``. The menu and the choices never enter the work or the conversation.

    **Working.** Each chosen step runs in a branch (``loop.branch(name)``) on the work so far: its turns are
    neither stored nor streamed as the conversation. After each, the notes of the work are offered to a
    ``WithBudget`` around it (``loop.offer``), which answers from them if it runs out. At most ``max_steps``
    steps are chosen; when the last is not the answer, the fallback answers anyway, ``degraded``. A step whose
    typed answer never validates (``VerificationFailed``) adds nothing, and the run goes on, ``degraded``; so
    does one whose own outcome is not ok.

    **Answering.** On the conversation: one system turn with what the steps found (``write_notes``, kind
    ``"work_notes"``), then the answering step's run (``Synthesize`` writes the answer in the run's typed shape,
    ``loop.typed_answer``). A ``PoolStep`` answering with tools that leaves calls for the caller returns them
    at once (outcome ``pending``); running again from their results starts a new choice of steps.

    Costs one model call per choice (two when an answer is sent back), the calls of the steps chosen, and
    the answer's. The outcome data (under this pattern's run path) holds ``choices`` (each ``next`` as the
    model gave it, its ``reason`` and the pool ``step`` it ran; ``problem`` when it named nothing of the pool)
    and ``steps``, the pool steps run in order, the answering one last.
    """

    __slots__ = ("step", "pool", "max_steps", "prompt", "chooser", "_fallback", "_by_name", "_menu", "_schema")

    def __init__(self, step: TurnRunner, *, pool: Iterable[object] | None = None, max_steps: int = 8,
                 prompt: str = CHOOSE, chooser: TurnRunner | None = None) -> None:
        require(step, TurnRunner, "Autonomous", "a TurnRunner (a step), such as a loop.Step")
        if chooser is not None:
            require(chooser, TurnRunner, "Autonomous's chooser", "a TurnRunner (a step) or None")
        self.step = step
        self.max_steps = positive_int("max_steps", max_steps)
        self.prompt = check_prompt("prompt", prompt, "menu", "left")
        self.pool: tuple[_Named, ...] = _default_pool(step) if pool is None else _checked(pool)
        # The chooser reads the tools' names in the menu but may not call one: it is offered none where it can.
        self.chooser: TurnRunner = chooser if chooser is not None else (
            cast(Deriver, step).derive(tools=()) if has(step, Deriver) else step)
        self._fallback = next(stage for stage in self.pool if _terminal(stage))
        by_name: dict[str, tuple[_Named, str | None]] = {stage.name: (stage, None) for stage in self.pool}
        lines = []
        for stage in self.pool:
            tools = _tools(stage)
            for tool in tools:
                by_name.setdefault(tool, (stage, tool))
            uses = f" (tools: {', '.join(tools)})" if tools else ""
            ends = " (writes the answer and ends the work)" if _terminal(stage) else ""
            lines.append(f"- {stage.name}: {stage.description}{uses}{ends}")
        self._by_name = by_name
        self._menu = "\n".join(lines)
        self._schema: Mapping[str, Any] = {
            "title": "NextStep",
            "type": "object",
            "properties": {
                "next": {"type": "string", "enum": list(by_name), "description": "the name of the next step, or of "
                         "a tool to use"},
                "reason": {"type": "string", "description": "why this step now, and what it should do"},
            },
            "required": ["next", "reason"],
            "additionalProperties": False,
        }

    async def run(self, state: State) -> State:
        check_start(state, "Autonomous")
        with scope("Autonomous"), tracing.span("invoke_agent Autonomous", {
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Autonomous"}) as span:
            start = working = state
            choices: list[dict[str, Any]] = []
            ran: list[str] = []
            problems: list[str] = []
            answering = self._fallback
            for number in range(1, self.max_steps + 1):
                choice = await self._choose(working, self.max_steps - number + 1)
                choices.append(choice)
                if "problem" in choice:
                    problems.append(f"choice {number} named no step of the pool, also when asked again "
                                    f"({choice['problem']}); {answering.name!r} answered from the work done")
                    break
                stage, tool = self._by_name[choice["next"]]
                if _terminal(stage):
                    answering = stage
                    break
                with branch(stage.name):
                    try:
                        done = await _work(stage, working, choice["reason"], tool)
                    except VerificationFailed as exc:
                        problems.append(f"step {number} ({stage.name!r}) gave no valid answer: {exc}")
                        continue
                ran.append(stage.name)
                outcome = done.outcome
                if outcome is not None and not outcome.ok:
                    problems.append(f"step {number} ({stage.name!r}) ended {outcome.status}: {outcome.reason}")
                working = done
                offer_notes(start, working)  # a budget that runs out answers from the work done
            else:
                problems.append(f"Autonomous took max_steps={self.max_steps} steps without choosing to answer; "
                                f"{answering.name!r} answered from the work done")
            span.set_attribute("autonomous.steps", len(ran))
            state = await write_notes(self.step, start, working)
            state = await answering.run(state)
            ran.append(answering.name)
            data = {"choices": choices, "steps": ran}
            if problems and not left_open(state):
                return state.with_outcome("degraded", "; ".join(problems), data=data)
            return state.with_outcome(data=data)

    async def _choose(self, working: State, left: int) -> dict[str, Any]:
        """The model's choice, as the outcome keeps it: ``next``, ``reason`` and the pool ``step``; with
        ``problem`` when it named nothing of the pool twice (``step`` is then the fallback)."""
        with branch("choose"):
            menu = await add_turn(self.chooser, working, Role.SYSTEM,
                                  Text(self.prompt.format(menu=self._menu, left=left)),
                                  meta={"kind": PatternKind.ROUTE})
            try:
                asked = await ask(self.chooser, menu, self._schema, max_retries=1)
            except VerificationFailed as exc:
                given = (exc.state.answer if isinstance(exc.state, State) else None) or ""
                clipped = given if len(given) <= _GIVEN_CHARS else given[:_GIVEN_CHARS] + "…"
                return {"next": clipped, "reason": "", "step": self._fallback.name, "problem": str(exc)}
        name, reason = asked.value["next"], asked.value["reason"]
        return {"next": name, "reason": reason, "step": self._by_name[name][0].name}

    def __repr__(self) -> str:
        return (f"Autonomous({self.step!r}, pool=[{', '.join(s.name for s in self.pool)}], "
                f"max_steps={self.max_steps})")


async def _work(stage: _Named, working: State, reason: str, tool: str | None) -> State:
    """``stage`` run on the work so far: an ``Act`` step on the chooser's reason as its subgoal."""
    if not isinstance(stage, Act):
        return await stage.run(working)
    subgoal = reason.strip() or "the next thing the request needs."
    if tool is not None:
        subgoal = f"{subgoal} (use the tool {tool})"
    return await stage.act(working, subgoal)


def _tools(stage: _Named) -> tuple[str, ...]:
    """The tools an ``Act`` step offers (the names a choice may give for it)."""
    if isinstance(stage, Act) and has(stage.step, ToolRunner):
        return tuple(t.spec.name for t in cast(ToolRunner, stage.step).pipeline.tools)
    return ()


def _default_pool(step: TurnRunner) -> tuple[_Named, ...]:
    return (
        Act(step, name="reason", prompt=REASON,
            description="use the tools to find things out or get things done: calls them as often as needed "
                        "and reads their results"),
        Think(step, name="analyze", prompt=ANALYZE,
              description="work out what the findings mean, compare and compute, and note what is missing; "
                          "no tools"),
        Synthesize(step),
    )


def _checked(pool: object) -> tuple[_Named, ...]:
    """The pool's stages, checked (any values are taken: a list of stages of several types is a ``list[object]``
    to a type checker, so they are checked here)."""
    if isinstance(pool, (str, bytes, Mapping)) or not isinstance(pool, Iterable):
        raise UsageError(f"pool takes a sequence of stages (Think, Act, Synthesize, ... or PoolStep values), "
                         f"got {pool!r}")
    given = tuple(pool)
    if not given:
        raise UsageError("pool is empty: give the steps to choose from, with one that writes the answer, such "
                         "as Synthesize(step)")
    seen: set[str] = set()
    stages: list[_Named] = []
    for index, stage in enumerate(given):
        if not has(stage, _Named):
            hint = " (give a pattern a name with PoolStep(name, description, pattern))" if has(stage, Pattern) else ""
            raise UsageError(f"pool item {index} is not a stage with a name, a description and run(state): "
                             f"{stage!r}{hint}")
        name, description = stage.name, stage.description
        if not isinstance(name, str) or not name.isidentifier():
            raise UsageError(f"pool item {index}: a step's name is an identifier, got {name!r}")
        if not isinstance(description, str) or not description.strip():
            raise UsageError(f"pool step {name!r}: description must be a non-empty string (the menu shows it), "
                             f"got {description!r}")
        if name in seen:
            raise UsageError(f"two pool steps are named {name!r}; names must be unique: give one another name=")
        seen.add(name)
        stages.append(cast(_Named, stage))
    if not any(_terminal(stage) for stage in stages):
        raise UsageError(f"the pool ({', '.join(sorted(seen))}) has no step that writes the answer: add "
                         "Synthesize(step), or a step named 'synthesize'")
    return tuple(stages)
