"""The stages the planning patterns are made of, as values: ``Think``, ``Plan``, ``Act``, ``Reflect``,
``Synthesize``, ``Criticize``, ``Judge`` and ``CheckSources``.

Each stage is a small ``Pattern``: ``run(state)`` adds a system turn with the stage's instructions (kind
``"stage"``, ``meta["stage"]`` its ``name``) and the model's work, and returns the longer state. A stage that
decides (``Plan``, ``Reflect``, ``Criticize``, ``Judge``, ``CheckSources``) also has ``decide(state)``, which
returns the typed value beside the state (``loop.ask``), so that code routes on it. A stage opens no branch of
its own: the pattern running it decides what reaches the conversation. ``Chain`` stages and an ``Autonomous``
pool take them unchanged; ``name`` and ``description`` are what a pool's menu shows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Generic, Literal, TypeVar

import attrs

from cognitive._kinds import PatternKind
from cognitive._pattern import answering, check_prompt
from cognitive.everyday._react import ReAct
from loop import Options, Role, State, Text, TurnRunner, UsageError, add_turn, ask, current_scope, offer, require
from loop.checks import non_negative_int, positive_int
from verifier import Verdict

T = TypeVar("T")

THINK = """\
Think about the request and what has been found so far: what is known, what is still missing, and what \
matters most. Write your reasoning; do not answer the request yet."""
OBSERVE = """\
Look closely at the results of the last actions above: what each one showed, whether it was what was \
expected, and what it changes. Write what you observe; do not answer the request yet."""
PLAN = """\
Break the latest request into a short list of concrete subgoals, in the order to do them, at most \
{max_steps}. Each subgoal is one sentence saying what to find out or do. Take into account everything \
found so far, and leave out what is already done."""
ACT = """\
Work on this with the tools: {subgoal}
Report what you found; do not answer the whole request yet."""
REFLECT = """\
Reflect on the progress so far against the request and the plan. Decide what happens next:
- "answer" when what has been found is enough to answer the request well;
- "continue" when the plan is sound and its next subgoal should be done;
- "replan" when the plan is wrong or no longer fits what was found."""
SYNTHESIZE = """\
Write the final answer to the latest request from everything found above. Answer the person directly and \
completely; say plainly what could not be established."""
CRITICIZE = """\
Act as a critic of the last proposed answer above. Challenge it: look for factual errors, gaps in the \
reasoning, missing cases and weak arguments. Rate how severe its problems are, from 0 (none) to 1 (the \
answer is wrong or useless), and list each problem to fix."""
JUDGE = """\
Act as an impartial judge of the last proposed answer above. Decide whether it answers the request \
correctly and completely; list each problem that must be fixed before it can be given."""
CHECK_SOURCES = """\
Check the findings above against the tool results they came from: every claim must be backed by a tool \
result, nothing may contradict the sources, and the request must be fully covered. List each issue to \
fix: a claim without a source, a contradiction, a part of the request not covered."""


def _strings(values: Iterable[str]) -> tuple[str, ...]:
    if isinstance(values, str):
        raise UsageError(f"a list of strings is wanted, got the string {values!r}; wrap it in a list")
    return tuple(values)


@attrs.frozen
class Decided(Generic[T]):
    """What a deciding stage gave: its typed ``value`` and the ``state`` after its turns."""

    value: T
    state: State


@attrs.frozen
class Steps:
    """A plan: the subgoals, in order."""

    steps: Annotated[tuple[str, ...], "the subgoals in the order to do them, one sentence each"] = \
        attrs.field(converter=_strings)


@attrs.frozen
class Next:
    """A reflection's decision: what happens next, and why."""

    decision: Annotated[Literal["continue", "replan", "answer"], "what happens next"]
    reason: Annotated[str, "why, in a sentence or two"]


@attrs.frozen
class Critique:
    """A critic's judgement of an answer."""

    severity: Annotated[float, "how severe the problems are, from 0 (none) to 1 (the answer is wrong or useless)"] = \
        attrs.field(validator=[attrs.validators.ge(0), attrs.validators.le(1)])
    issues: Annotated[tuple[str, ...], "each problem to fix, one short sentence each; empty when there is none"] = \
        attrs.field(converter=_strings)


@attrs.frozen
class SourceCheck:
    """A check of findings against their sources."""

    backed: Annotated[bool, "every claim is backed by a tool result"]
    consistent: Annotated[bool, "nothing contradicts the tool results"]
    covered: Annotated[bool, "every part of the request is covered"]
    issues: Annotated[tuple[str, ...], "each issue to fix, one short sentence each; empty when there is none"] = \
        attrs.field(converter=_strings)

    @property
    def passed(self) -> bool:
        return self.backed and self.consistent and self.covered


class _Stage:
    """What every stage shares: a step, a name, instructions, and the system turn that gives them."""

    __slots__ = ("step", "name", "prompt", "description")

    def __init__(self, step: TurnRunner, *, name: str, prompt: str, description: str) -> None:
        who = type(self).__name__
        require(step, TurnRunner, who, "a TurnRunner (a step)")
        if not isinstance(name, str) or not name.isidentifier():
            raise UsageError(f"{who}: a stage name is an identifier, got {name!r}")
        if not isinstance(description, str) or not description.strip():
            raise UsageError(f"{who}: description must be a non-empty string, got {description!r}")
        self.step = step
        self.name = name
        self.prompt = prompt
        self.description = description

    async def _begin(self, state: State, text: str | None = None) -> State:
        return await add_turn(self.step, state, Role.SYSTEM, Text(self.prompt if text is None else text),
                              meta={"kind": PatternKind.STAGE, "stage": self.name})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.step!r}, name={self.name!r})"


class Think(_Stage):
    """One turn with no tools in which the model reasons about the request and what was found (``OBSERVE`` as
    ``prompt`` makes it the observe stage). Its output is the text. Costs one model call."""

    __slots__ = ()

    def __init__(self, step: TurnRunner, *, name: str = "think", prompt: str = THINK,
                 description: str = "reason about what is known and what is missing, without tools") -> None:
        super().__init__(step, name=name, prompt=check_prompt("prompt", prompt), description=description)

    async def run(self, state: State) -> State:
        return await self.step.turn(await self._begin(state), Options(tool_choice="none"))


class Synthesize(_Stage):
    """One turn with no tools that writes the final answer from everything above: the stage a multi-stage run
    ends with. On the main line it writes the answer in the shape the run asks for (``loop.typed_answer``).
    Costs one model call."""

    __slots__ = ()

    def __init__(self, step: TurnRunner, *, name: str = "synthesize", prompt: str = SYNTHESIZE,
                 description: str = "write the final answer from everything found, and finish") -> None:
        super().__init__(step, name=name, prompt=check_prompt("prompt", prompt), description=description)

    async def run(self, state: State) -> State:
        final = Options(tool_choice="none")
        shape = answering()
        return await self.step.turn(await self._begin(state), final if shape is None else final.merge(shape))


class Act(_Stage):
    """A tool loop (``ReAct``, at most ``max_turns`` turns) on one subgoal: ``run`` works on the request as it
    stands, ``act(state, subgoal)`` on the subgoal given. Costs one model call per round of tool calls, plus
    one."""

    __slots__ = ("max_turns",)

    def __init__(self, step: TurnRunner, *, name: str = "act", prompt: str = ACT, max_turns: int = 6,
                 description: str = "use the tools to find things out or get things done") -> None:
        super().__init__(step, name=name, prompt=check_prompt("prompt", prompt, "subgoal"), description=description)
        self.max_turns = positive_int("max_turns", max_turns)

    async def run(self, state: State) -> State:
        return await self.act(state, "the next thing the request needs.")

    async def act(self, state: State, subgoal: str) -> State:
        begun = await self._begin(state, self.prompt.format(subgoal=subgoal))
        return await ReAct(self.step, max_turns=self.max_turns).run(begun)


class _Deciding(_Stage, Generic[T]):
    """A stage whose output is a typed value (``loop.ask``): ``decide`` returns it beside the state; ``run``
    returns the state, its last turn the value as JSON. ``decide`` raises ``loop.errors.VerificationFailed``
    when the model never gives a valid value in ``max_retries + 1`` tries."""

    __slots__ = ("max_retries",)
    output: Any = None

    def __init__(self, step: TurnRunner, *, name: str, prompt: str, description: str, max_retries: int) -> None:
        super().__init__(step, name=name, prompt=prompt, description=description)
        self.max_retries = non_negative_int("max_retries", max_retries)

    async def decide(self, state: State, instructions: str | None = None) -> Decided[T]:
        asked = await ask(self.step, await self._begin(state, instructions), self.output,
                          max_retries=self.max_retries)
        return Decided(asked.value, asked.state)

    async def run(self, state: State) -> State:
        return (await self.decide(state)).state


class Plan(_Deciding[Steps]):
    """A typed plan (``Steps``): at most ``max_steps`` subgoals, in order. Costs one model call (more when the
    answer is not a plan)."""

    __slots__ = ("max_steps",)
    output = Steps

    def __init__(self, step: TurnRunner, *, name: str = "plan", prompt: str = PLAN, max_steps: int = 6,
                 max_retries: int = 1, description: str = "break the request into subgoals") -> None:
        self.max_steps = positive_int("max_steps", max_steps)
        super().__init__(step, name=name, prompt=check_prompt("prompt", prompt, "max_steps").format(
            max_steps=self.max_steps), description=description, max_retries=max_retries)

    async def decide(self, state: State, instructions: str | None = None) -> Decided[Steps]:
        decided = await super().decide(state, instructions)
        steps = tuple(s.strip() for s in decided.value.steps if s.strip())[:self.max_steps]
        return Decided(Steps(steps), decided.state)


class Reflect(_Deciding[Next]):
    """A typed decision (``Next``): ``continue``, ``replan`` or ``answer``, with a reason."""

    __slots__ = ()
    output = Next

    def __init__(self, step: TurnRunner, *, name: str = "reflect", prompt: str = REFLECT, max_retries: int = 1,
                 description: str = "judge the progress: go on, plan again, or answer") -> None:
        super().__init__(step, name=name, prompt=check_prompt("prompt", prompt), description=description,
                         max_retries=max_retries)


class Criticize(_Deciding[Critique]):
    """A typed ``Critique`` of the last answer: severity from 0 to 1 and the issues."""

    __slots__ = ()
    output = Critique

    def __init__(self, step: TurnRunner, *, name: str = "critic", prompt: str = CRITICIZE, max_retries: int = 1,
                 description: str = "challenge the last proposed answer") -> None:
        super().__init__(step, name=name, prompt=check_prompt("prompt", prompt), description=description,
                         max_retries=max_retries)


class Judge(_Deciding[Verdict]):
    """A typed ``verifier.Verdict`` on the last answer: passed or not, with the issues."""

    __slots__ = ()
    output = Verdict

    def __init__(self, step: TurnRunner, *, name: str = "judge", prompt: str = JUDGE, max_retries: int = 1,
                 description: str = "decide whether the last proposed answer can be given") -> None:
        super().__init__(step, name=name, prompt=check_prompt("prompt", prompt), description=description,
                         max_retries=max_retries)


class CheckSources(_Deciding[SourceCheck]):
    """A typed ``SourceCheck`` of the findings above against the tool results they came from."""

    __slots__ = ()
    output = SourceCheck

    def __init__(self, step: TurnRunner, *, name: str = "verify", prompt: str = CHECK_SOURCES,
                 max_retries: int = 1, description: str = "check the findings against their sources") -> None:
        super().__init__(step, name=name, prompt=check_prompt("prompt", prompt), description=description,
                         max_retries=max_retries)


NOTES = """\
What the work on the latest request found, stage by stage (the tools' results are shortened):

{notes}"""
_CLIP = 1500


def work_notes(start: State, working: State) -> str:
    """The turns ``working`` added after ``start`` as text a later turn can read: each stage's output under its
    name, each tool call with its (shortened) result; the stages' own instructions are left out."""
    lines: list[str] = []
    stage = "work"
    calls: dict[str, str] = {}
    for turn in working.turns[len(start):]:
        if turn.role is Role.SYSTEM:
            if turn.kind == PatternKind.STAGE:
                stage = str(turn.meta.get("stage", stage))
            continue
        for call in turn.tool_calls:
            calls[call.id] = f"{call.name}({call.arguments})"
        for result in turn.tool_results:
            content = result.content if len(result.content) <= _CLIP else result.content[:_CLIP] + "…"
            made = calls.get(result.call_id, result.name)
            lines.append(f"[{stage}] {made} {'failed' if result.is_error else 'returned'}: {content}")
        if turn.role is Role.ASSISTANT and turn.text.strip():
            lines.append(f"[{stage}] {turn.text.strip()}")
    return "\n\n".join(lines) or "(nothing: no stage ran)"


async def write_notes(step: TurnRunner, start: State, working: State, *, prompt: str = NOTES) -> State:
    """``start`` (the conversation) with one system turn holding ``work_notes(start, working)`` (kind
    ``"work_notes"``), so that the answer stage and later messages read what the work found while the work's own
    turns stay out of the conversation."""
    prompt = check_prompt("prompt", prompt, "notes")
    return await add_turn(step, start, Role.SYSTEM, Text(prompt.format(notes=work_notes(start, working))),
                          meta={"kind": PatternKind.WORK_NOTES})


def offer_notes(start: State, working: State) -> None:
    """Offer the work so far to the run's budgets (``loop.offer``) as the conversation plus its notes, so that a
    ``WithBudget`` that runs out writes its answer from what the work found. Nothing is built when no budget
    could read it (the notes cost a pass over the work)."""
    if current_scope().budgets:
        offer(start.append(Role.SYSTEM, Text(NOTES.format(notes=work_notes(start, working))),
                           meta={"kind": PatternKind.WORK_NOTES}))
