"""Proposing and scoring thoughts: the two model turns every search pattern is made of, and the answer turn that
ends a search.

A thought is one step of reasoning, kept as an assistant turn (kind ``"thought"``) on the line of thought that
leads to it. ``propose_thoughts`` asks for up to ``k`` next thoughts as a typed answer; ``score_line`` rates a line of thought
from 0 to 1, with a typed model turn or a function of the user's; ``answer_from_line`` writes the reply from the best line
found. All of them run in whatever branch the caller opened: they never decide what reaches the conversation.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Union

import attrs

from cognitive._kinds import PatternKind
from cognitive._pattern import answering
from loop import Options, Role, State, Text, TurnRunner, UsageError, add_turn, ask

PROPOSE = """\
Propose up to {k} different next steps of reasoning toward the answer to the latest request, each going on \
from the steps above (if any). Make them genuinely different from each other. Each is one short step; mark a \
step final only when it states the complete final answer."""
SCORE = """\
Rate how likely the line of reasoning above is to lead to a correct and complete answer to the latest request: \
0 when it is wrong or hopeless, 1 when it is certainly right. Judge the reasoning, not its style."""
ANSWER = """\
The reasoning above is the best line of thought found for the latest request. Write the final answer to the \
request from it, directly and completely."""

Scorer = Callable[[State], Union[float, Awaitable[float]]]
"""A user's scorer: the state ending in a thought -> a score from 0 (hopeless) to 1 (certainly right)."""


@attrs.frozen
class Proposal:
    """One proposed thought."""

    text: Annotated[str, "the step of reasoning, in a sentence or two"]
    final: Annotated[bool, "true only when this step states the complete final answer"] = False


def _proposals(values: Any) -> tuple[Proposal, ...]:
    return tuple(values)


@attrs.frozen
class Proposals:
    """The next thoughts a model proposes."""

    thoughts: Annotated[tuple[Proposal, ...], "the proposed next steps"] = attrs.field(converter=_proposals)


@attrs.frozen
class Rating:
    """A model's score of a line of thought."""

    score: Annotated[float, "from 0 (wrong or hopeless) to 1 (certainly right)"] = \
        attrs.field(validator=[attrs.validators.ge(0), attrs.validators.le(1)])
    reason: Annotated[str, "why, in a sentence"] = ""


def add_thought(state: State, proposal: Proposal) -> State:
    """``state`` with ``proposal`` as its next thought (an assistant turn of kind ``"thought"``)."""
    return state.append(Role.ASSISTANT, Text(proposal.text),
                        meta={"kind": PatternKind.THOUGHT, **({"final": True} if proposal.final else {})})


async def propose_thoughts(step: TurnRunner, state: State, k: int, *, prompt: str = PROPOSE,
                  reflections: tuple[str, ...] = ()) -> tuple[Proposal, ...]:
    """Up to ``k`` distinct, non-blank next thoughts for ``state`` (fewer when the model gives fewer). Lessons in
    ``reflections`` (from failed attempts) are shown with the request. Raises ``VerificationFailed`` when the
    model never answers in the proposals' shape."""
    text = prompt.format(k=k)
    if reflections:
        text += "\n\nLessons from earlier attempts that failed:\n" + "\n".join(f"- {r}" for r in reflections)
    asking = await add_turn(step, state, Role.SYSTEM, Text(text), meta={"kind": PatternKind.PROPOSE})
    asked = await ask(step, asking, Proposals, max_retries=1)
    seen: set[str] = set()
    found: list[Proposal] = []
    for proposal in asked.value.thoughts:
        key = "".join(proposal.text.split()).lower()
        if key and key not in seen:
            seen.add(key)
            found.append(proposal)
    return tuple(found[:k])


async def score_line(step: TurnRunner, scorer: Scorer | None, state: State, *, prompt: str = SCORE) -> float:
    """The score of the line of thought ``state`` ends in: ``scorer(state)`` when given (awaited if it returns an
    awaitable), else a typed model turn on ``step``. Raises what the scorer raises, ``UsageError`` for a score
    outside 0 to 1, and ``VerificationFailed`` when the model never gives a valid rating."""
    if scorer is not None:
        value: Any = scorer(state)
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise UsageError(f"a scorer returns a number from 0 to 1, got {value!r}")
        return float(value)
    asking = await add_turn(step, state, Role.SYSTEM, Text(prompt), meta={"kind": PatternKind.SCORE})
    rating: Rating = (await ask(step, asking, Rating, max_retries=1)).value
    return rating.score


async def answer_from_line(step: TurnRunner, start: State, line: State, *, prompt: str = ANSWER) -> State:
    """The reply, on ``start`` (the conversation): one system turn holding the chosen line of thought (the
    thoughts ``line`` added to ``start``, kind ``"search_line"``), then one tool-free turn writing the answer in
    the shape the run asks for (``loop.typed_answer``)."""
    thoughts = [t.text for t in line.turns[len(start):] if t.kind == PatternKind.THOUGHT and t.text.strip()]
    steps = "\n".join(f"{i}. {text}" for i, text in enumerate(thoughts, 1)) or "(no step of reasoning was found)"
    state = await add_turn(step, start, Role.SYSTEM, Text(f"{prompt}\n\n{steps}"),
                           meta={"kind": PatternKind.SEARCH_LINE})
    final = Options(tool_choice="none")
    shape = answering()
    return await step.turn(state, final if shape is None else final.merge(shape))


def check_scorer(scorer: Any) -> Scorer | None:
    """``scorer`` if it is ``None`` or a callable of one argument."""
    if scorer is not None and not callable(scorer):
        raise UsageError(f"scorer must be a function of the state (returning 0 to 1) or None, got {scorer!r}")
    return scorer  # type: ignore[no-any-return]
