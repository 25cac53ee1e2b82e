"""The nesting matrix: every wrapper around every pattern, inside one shared budget.

Each cell runs on one offline model that answers whatever it is asked the way a cooperative model would (a
tool call first when it has tools, valid JSON when a schema is asked for, the Verify headings, a program for
CodeAction). A cell must end in a written answer with the right outcome, and every model call it made must
be charged to the shared budget around it. Then the same cell runs again with one turn fewer than it needs:
it must still end in a written answer, marked degraded.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from cognitive import (MCTS, Act, Autonomous, Chain, ChainOfThought, CodeAction, Debate, Deliberate, Escalation,
                       GraphOfThoughts, Pattern,
                       PEOATR, PlanAndExecute, ReAct, Research, ReWOO, Router, SelfConsistency, SelfRefine, Reflexion,
                       SingleShot, Stage, Synthesize, TreeOfThoughts, Verify, WithBudget, WithGuardrails, WithOutput,
                       WithVerification)
from cognitive.everyday._managed import Managed
from loop import Budget, Request, Role, State, Step, Text, tool
from provider import Function, tool_call
from sandbox import ExecResult, FunctionSandbox
from verifier import JudgeVerifier, MaxLength, NoPII, NoSecrets


@attrs.frozen
class Answer:
    value: int


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"{key} is 42"


def instance(schema: dict[str, Any], root: dict[str, Any] | None = None) -> Any:
    """A small valid value of a JSON schema, as a cooperative model would write it."""
    root = root if root is not None else schema
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return instance(root.get("$defs", root.get("definitions", {}))[name], root)
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return instance(schema[key][0], root)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next(k for k in kind if k != "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: instance(props[name], root) for name in schema.get("required", props)}
    return {"array": [], "string": "ok", "integer": 42, "number": 0.0, "boolean": True, "null": None}[kind]


class Model:
    """The cooperative offline model; counts the requests it answers (a request for several choices, as native
    sampling makes, is one request and one turn)."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    @property
    def calls(self) -> int:
        return len({id(r) for r in self.requests})

    def __call__(self, request: Request) -> Any:
        self.requests.append(request)
        schema = request.options.output_schema
        if schema is not None:
            properties = schema.get("properties", {})
            if "thoughts" in properties:  # a search's proposal: one thought that states the answer
                return json.dumps({"thoughts": [{"text": "The answer is 42.", "final": True}]})
            if "score" in properties:  # a search's rating: the line is right
                return json.dumps({"score": 1.0, "reason": "it is"})
            return json.dumps(instance(dict(schema)))
        turns = request.turns
        last = turns[-1]
        if last.role is Role.SYSTEM and "python" in last.text and "FINAL:" in last.text:
            return "```python\nprint('FINAL: 42')\n```"
        if last.role is Role.SYSTEM and '"Answer:"' in last.text:  # ChainOfThought's instructions
            return "40 + 2 is 42.\nAnswer: 42"
        if last.role is Role.SYSTEM and "ANSWER:" in last.text:
            return "PLAN: look.\nSOLVE: 40 + 2.\nCHECK: 42 - 2 = 40.\nFIX: none\nANSWER: 42"
        since_user = [t for t in turns[_last_user(turns):]]
        if request.tools and request.options.tool_choice != "none" and not any(t.role is Role.TOOL for t in since_user):
            return tool_call("lookup", {"key": "answer"})
        return "42"


def _last_user(turns: tuple[Any, ...]) -> int:
    return max((i for i, t in enumerate(turns) if t.role is Role.USER), default=0)


def program_runner(argv: Any, **_: Any) -> ExecResult:
    return ExecResult(0, stdout="FINAL: 42\n")


PATTERNS: dict[str, Callable[[Step], Pattern]] = {
    "ReAct": lambda step: ReAct(step),
    "SingleShot": lambda step: SingleShot(step),
    "Verify": lambda step: Verify(step),
    "Managed": lambda step: Managed(step),
    "Chain": lambda step: Chain(Stage("draft", "Draft an answer to: {input}", step),
                                Stage("final", "Give the final answer; the draft said {draft}.", step)),
    "Router": lambda step: Router({"tools": ReAct(step), "check": Verify(step)}, step),
    "CodeAction": lambda step: CodeAction(step, FunctionSandbox(program_runner)),
    "ReWOO": lambda step: ReWOO(step),
    "PlanAndExecute": lambda step: PlanAndExecute(step),
    "PEOATR": lambda step: PEOATR(step),
    "Deliberate": lambda step: Deliberate(step),
    "Debate": lambda step: Debate(step),
    "Research": lambda step: Research(step),
    # The cooperative model picks the first name it is offered: synthesize, so the run answers at once.
    "Autonomous": lambda step: Autonomous(step, pool=[Synthesize(step), Act(step, name="reason")]),
    "ChainOfThought": lambda step: ChainOfThought(step),
    "TreeOfThoughts": lambda step: TreeOfThoughts(step),
    "GraphOfThoughts": lambda step: GraphOfThoughts(step),
    "MCTS": lambda step: MCTS(step),
    "Escalation": lambda step: Escalation([ChainOfThought(step), TreeOfThoughts(step)], judge=step),
}


def judge(step: Step) -> JudgeVerifier:
    return JudgeVerifier(step, criteria="The answer is a number.")


WRAPPERS: dict[str, Callable[[Pattern, Step], Pattern]] = {
    "WithVerification": lambda inner, step: WithVerification(inner, step, verifiers=[judge(step)]),
    "WithBudget": lambda inner, step: WithBudget(inner, Budget(max_turns=30, name="inner")),
    "WithOutput": lambda inner, step: WithOutput(inner, step, Answer),
    "WithGuardrails": lambda inner, step: WithGuardrails(inner, step, input=[NoSecrets(), MaxLength(10_000)],
                                                         output=NoSecrets(), repair=NoPII()),
    "SelfConsistency": lambda inner, step: SelfConsistency(inner, n=3),
    "SelfRefine": lambda inner, step: SelfRefine(inner, step, judge(step)),
    "Reflexion": lambda inner, step: Reflexion(inner, step, judge(step)),
}

SHARED = Budget(max_turns=60, max_tool_calls=30, name="shared")


def start() -> State:
    return State().append(Role.USER, Text("What is the answer?"))


async def run_cell(wrapper: str, pattern: str, budget: Budget) -> tuple[State, Model]:
    model = Model()
    step = Step(Function(model), tools=[lookup])
    cell = WithBudget(WRAPPERS[wrapper](PATTERNS[pattern](step), step), budget)
    return await cell.run(start()), model


def shared_spend(state: State) -> dict[str, Any]:
    assert state.outcome is not None
    return state.outcome.data["WithBudget"]


@pytest.mark.parametrize("pattern", list(PATTERNS))
@pytest.mark.parametrize("wrapper", list(WRAPPERS))
async def test_every_wrapper_around_every_pattern_answers_inside_the_shared_budget(wrapper: str, pattern: str) -> None:
    state, model = await run_cell(wrapper, pattern, SHARED)
    last = state.last
    assert last is not None and last.role is Role.ASSISTANT and state.answer
    assert not state.pending_calls
    assert state.outcome is not None and state.outcome.status == "ok", state.outcome
    spend = shared_spend(state)
    assert spend["budget"] == "shared" and "exhausted" not in spend
    assert spend["spent"]["turns"] == model.calls  # every model call, branches included, charged to the budget
    if wrapper == "WithOutput":
        assert json.loads(state.answer) == {"value": 42} or "42" in state.answer


# These cells make one model call, so no budget is one turn short of what they need: a budget of no turns is
# refused when it is made. Every other cell is checked to need more than one. A typed answer asked of a pattern
# whose answer is a plain turn takes one call from a model that complies with the schema at once.
ONE_CALL = {("WithBudget", "Verify"), ("WithBudget", "CodeAction"), ("WithBudget", "ChainOfThought"), ("WithOutput", "ReAct"),
            ("WithOutput", "SingleShot"), ("WithOutput", "Managed"),
            ("WithGuardrails", "Verify"), ("WithGuardrails", "CodeAction"), ("WithGuardrails", "ChainOfThought")}
SHORT = [(w, p) for w in WRAPPERS for p in PATTERNS if (w, p) not in ONE_CALL]


async def test_the_cells_left_out_of_the_short_budget_run_make_one_call() -> None:
    for wrapper, pattern in ONE_CALL:
        _, model = await run_cell(wrapper, pattern, SHARED)
        assert model.calls == 1, (wrapper, pattern, model.calls)


@pytest.mark.parametrize("wrapper, pattern", SHORT)
async def test_with_one_turn_too_few_every_cell_still_answers_degraded(wrapper: str, pattern: str) -> None:
    _, model = await run_cell(wrapper, pattern, SHARED)
    needed = model.calls
    assert needed > 1
    state, _ = await run_cell(wrapper, pattern, Budget(max_turns=needed - 1, name="tight"))
    last = state.last
    assert last is not None and last.role is Role.ASSISTANT and state.answer is not None
    assert not state.pending_calls
    assert state.outcome is not None and state.outcome.status == "degraded", state.outcome
    assert "tight" in state.outcome.reason
    spend = shared_spend(state)
    if "best candidate" in state.outcome.reason:  # a search or a debate offered one: it is the answer, no turn more
        assert spend["spent"]["turns"] == needed - 1
    else:
        assert spend["spent"]["turns"] == needed  # the limit, plus the one final answer written past it
