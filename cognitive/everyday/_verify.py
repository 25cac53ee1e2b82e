"""``Verify``: one turn that plans, solves, checks its answer another way, fixes it, and answers."""

from __future__ import annotations

import re

from cognitive._kinds import PatternKind
from cognitive._pattern import check_start
from loop import Options, Role, State, Text, TurnExecutor, UsageError, branch, require, scope, tracing

PROMPT = """\
Work through the request in this order, in one reply, with each heading on a line of its own:

PLAN: the steps you will take.
SOLVE: carry the plan out, showing the work.
CHECK: check the result a different way than you found it (work backwards, estimate, substitute it back, \
count again). Do not repeat the same steps.
FIX: if the check disagrees, find the mistake and correct it; otherwise write "none".
ANSWER: the final answer alone, as the person should read it, without the working."""

_ANSWER = re.compile(r"^[ \t>*#_]*(?:final[ \t]+)?answer[ \t*_]*:[ \t*_]*", re.IGNORECASE | re.MULTILINE)
_CHECK = re.compile(r"^[ \t>*#_]*check[ \t*_]*:", re.IGNORECASE | re.MULTILINE)
_TOOL_FREE = Options(tool_choice="none")


class Verify:
    """Plan, solve, check, fix and answer in a single model turn: a self-check at the cost of one call.

    The working turn is asked for with ``instructions`` (``PROMPT`` by default) as a system turn and tools
    off; it runs as a branch, so neither the instructions nor the working are streamed or stored as the
    conversation. What follows the reply's last ``ANSWER:`` heading is then written as the answer turn,
    with the whole working kept in that turn's ``meta["working"]``. A reply with no ``ANSWER:`` heading is
    written whole, its outcome ``degraded`` (the answer could not be told apart from the working).

    ``step`` is a ``TurnExecutor`` (a ``Step``): it runs the turn and writes the answer. Costs one model call.
    """

    __slots__ = ("step", "instructions")

    def __init__(self, step: TurnExecutor, *, instructions: str = PROMPT) -> None:
        require(step, TurnExecutor, "Verify")
        if not isinstance(instructions, str) or not instructions.strip():
            raise UsageError(f"instructions must be a non-empty string, got {instructions!r}")
        self.step = step
        self.instructions = instructions

    async def run(self, state: State) -> State:
        check_start(state, "Verify")
        with scope("Verify"), tracing.span("invoke_agent Verify", {"gen_ai.operation.name": "invoke_agent",
                                                                   "gen_ai.agent.name": "Verify"}) as span:
            with branch("working"):
                asked = state.append(Role.SYSTEM, Text(self.instructions))
                worked = await self.step.turn(asked, _TOOL_FREE)
            working = worked.answer or ""
            answer, found = _split_answer(working)
            checked = _CHECK.search(working) is not None
            span.set_attribute("verify.separated", found)
            state = await self.step.submit(state, Role.ASSISTANT, Text(answer),
                                           meta={"kind": PatternKind.VERIFY_ANSWER, "working": working})
            data = {"separated": found, "checked": checked}
            if not answer:
                return state.with_outcome("degraded", "the model wrote no answer", data=data)
            if not found:
                return state.with_outcome("degraded", "the reply had no ANSWER: heading, so it is given whole, "
                                                      "working included", data=data)
            return state.with_outcome(data=data)

    def __repr__(self) -> str:
        custom = "" if self.instructions == PROMPT else ", instructions=..."
        return f"Verify({self.step!r}{custom})"


def _split_answer(text: str) -> tuple[str, bool]:
    """The final answer in a Verify reply (what follows its last ``ANSWER:`` heading) and whether one was
    found; without a heading, the whole text."""
    matches = list(_ANSWER.finditer(text))
    if not matches:
        return text.strip(), False
    answer = text[matches[-1].end():].strip()
    return (answer, True) if answer else (text.strip(), False)
