"""The pattern-catalogue examples (self-consistency, a managed agent on a budget, a router, a typed answer) run as
a user runs them, offline, and show what they promise."""

import subprocess
import sys
from typing import Any
from collections.abc import Callable

import pytest

import provider
from examples import managed_budget, router, self_consistency, typed_answer
from loop import Budget, Request, Role, State, Step, Text, TurnKind, approx_tokens
from tests.examples import ROOT

EXAMPLES = ["self_consistency", "managed_budget", "router", "typed_answer"]


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No model named in the environment: the examples choose their offline demo model."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def asked(question: str) -> State:
    return State().append(Role.USER, Text(question))


class Recorder:
    """The demo model of an example, noting every request it answers."""

    def __init__(self, model: Callable[[Request], provider.Reply]) -> None:
        self.model = model
        self.requests: list[Request] = []

    def __call__(self, request: Request) -> provider.Reply:
        self.requests.append(request)
        return self.model(request)


@pytest.mark.parametrize("name", EXAMPLES)
def test_runs_from_the_command_line_offline(name: str) -> None:
    done = subprocess.run([sys.executable, f"examples/{name}.py"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Running on the offline demo model") and not done.stderr


# -- self-consistency -------------------------------------------------------------------------------------


async def test_self_consistency_prints_the_voted_answer(offline: None, capsys: pytest.CaptureFixture[str]) -> None:
    await self_consistency.main()
    lines = capsys.readouterr().out.splitlines()
    assert lines[-3:] == [
        "answer: 12 pens cost $8.",
        "votes: {'12 pens cost $8': 3, '12 pens cost $24': 1, '12 pens cost $18': 1}",
        "confidence: 60% of 5 samples (kept sample 1)",
    ]


async def test_five_hot_samples_vote_and_the_majority_wins() -> None:
    model = Recorder(self_consistency.demo_model)
    step = Step(provider.Function(model), tools=[self_consistency.multiply, self_consistency.divide])
    state = await self_consistency.make_agent(step).run(asked(self_consistency.QUESTION))
    assert state.answer == "12 pens cost $8."
    assert state.outcome is not None and state.outcome.ok
    vote = state.outcome.data["SelfConsistency"]
    assert vote["answer"] == "12 pens cost $8" and vote["confidence"] == 0.6 and vote["tie"] is False
    assert vote["votes"] == {"12 pens cost $8": 3, "12 pens cost $24": 1, "12 pens cost $18": 1}
    assert (vote["n"], vote["answered"], vote["failed"]) == (5, 5, 0)
    # The kept sample's tool work is in the conversation; the other samples' is not.
    assert [r.content for t in state for r in t.tool_results] == ["4.0", "8"]
    samples = {r.path.split("/")[1] for r in model.requests}
    assert samples == {f"sample {i}" for i in range(1, 6)}
    assert {r.options.temperature for r in model.requests} == {0.7}


# -- a managed agent on a budget --------------------------------------------------------------------------


async def test_managed_budget_prints_both_runs(offline: None, capsys: pytest.CaptureFixture[str]) -> None:
    await managed_budget.main()
    out = capsys.readouterr().out
    assert "answer: The top of Dana's reporting chain is Lee, the chief executive.  (ok)" in out
    assert "spent: {'turns': 10, 'tool_calls': 9, " in out
    assert ("with max_tool_calls=4: I followed the chain up to Hal, but the budget ran out before I could look "
            "further.  (degraded)") in out
    assert "reason: budget 'walk' ran out (max_tool_calls=4 reached); the answer was written without tools" in out
    assert "spent: {'turns': 6, 'tool_calls': 4, " in out


async def test_the_managed_agent_walks_the_whole_chain_on_a_flat_prompt() -> None:
    model = Recorder(managed_budget.demo_model)
    meter = managed_budget.PromptMeter(provider.Function(model))
    step = Step(meter, tools=[managed_budget.lookup_employee])
    budget = Budget(max_turns=15, max_tool_calls=12, name="walk")
    state = await managed_budget.make_agent(step, budget).run(asked(managed_budget.QUESTION))
    assert state.answer == "The top of Dana's reporting chain is Lee, the chief executive."
    assert state.outcome is not None and state.outcome.ok
    spent = state.outcome.data["WithBudget"]["spent"]
    assert (spent["turns"], spent["tool_calls"]) == (10, 9) and spent["input_tokens"] > 0
    # The stored conversation keeps every lookup; the model was shown a ledger of the newest facts instead.
    looked_up = [c.arguments for t in state for c in t.tool_calls]
    assert looked_up == [f'{{"name": "{n}"}}' for n in managed_budget.CHAIN]
    sizes = meter.sizes
    assert len(sizes) == 10
    assert max(sizes[4:]) - min(sizes[4:]) <= 0.05 * max(sizes[4:])  # flat once the ledger is full
    whole = approx_tokens(state.turns[:-1])
    assert sizes[-1] < whole / 3  # the transcript kept growing
    last = model.requests[-1].turns
    ledger = [t for t in last if t.meta.get("kind") == "ledger"]
    assert len(ledger) == 1 and "older facts are not listed" in ledger[0].text
    assert len([t for t in last if t.tool_results]) == 1  # the latest exchange, shown as it is


async def test_a_tighter_budget_still_answers_marked_degraded() -> None:
    step = Step(managed_budget.demo_provider(), tools=[managed_budget.lookup_employee])
    budget = Budget(max_turns=15, max_tool_calls=4, name="walk")
    state = await managed_budget.make_agent(step, budget).run(asked(managed_budget.QUESTION))
    assert state.degraded and state.outcome is not None
    assert state.outcome.reason.startswith("budget 'walk' ran out (max_tool_calls=4 reached)")
    assert state.answer is not None and "up to Hal" in state.answer
    data = state.outcome.data["WithBudget"]
    assert data["exhausted"] == "max_tool_calls=4 reached" and data["spent"]["tool_calls"] == 4
    assert state.last is not None and state.last.role is Role.ASSISTANT and not state.last.tool_calls
    refused = [r for t in state for r in t.tool_results if r.is_error]
    assert len(refused) == 1 and "max_tool_calls=4" in refused[0].content


# -- a router ---------------------------------------------------------------------------------------------


async def test_router_prints_the_route_and_answer(offline: None, capsys: pytest.CaptureFixture[str]) -> None:
    await router.main()
    lines = capsys.readouterr().out.splitlines()
    assert lines[-6:] == [
        "user: What is 48 × 17?",
        "  route: arithmetic (a calculation with two numbers)",
        "  answer: 48 × 17 = 816",
        "user: How many blue kettles are in stock?",
        "  route: lookup (needs the stock database)",
        "  answer: There are 14 blue kettles in stock.",
    ]


async def test_the_small_model_routes_and_the_chosen_pattern_answers(offline: None) -> None:
    model = Recorder(router.demo_model)
    agent = router.make_agent(Step(provider.Function(model), tools=[router.stock]))

    sum_ = await agent.run(asked("What is 48 × 17?"))
    assert sum_.outcome is not None and sum_.outcome.ok
    assert sum_.outcome.data["Router"]["route"] == "arithmetic"
    assert sum_.outcome.data["Router/arithmetic/Verify"] == {"separated": True, "checked": True}
    assert sum_.answer == "48 × 17 = 816" and sum_.last is not None
    assert "CHECK: 816 ÷ 17 = 48." in sum_.last.meta["working"]  # Verify kept the working on the answer turn
    assert [(r.path, r.options.model) for r in model.requests] == [
        ("Router/route", "small"), ("Router/arithmetic/Verify/working", None)]

    model.requests.clear()
    stock = await agent.run(asked("How many blue kettles are in stock?"))
    assert stock.outcome is not None and stock.outcome.data["Router"]["route"] == "lookup"
    assert stock.answer == "There are 14 blue kettles in stock."
    assert [c.name for t in stock for c in t.tool_calls] == ["stock"]
    assert [(r.path, r.options.model) for r in model.requests] == [
        ("Router/route", "small"), ("Router/lookup/ReAct", None), ("Router/lookup/ReAct", None)]
    # The routing exchange ran in a branch: neither conversation holds it.
    assert not any(t.role is Role.SYSTEM for state in (sum_, stock) for t in state)


# -- a typed answer ---------------------------------------------------------------------------------------


async def test_typed_answer_prints_the_value(offline: None, capsys: pytest.CaptureFixture[str]) -> None:
    await typed_answer.main()
    lines = capsys.readouterr().out.splitlines()
    assert not any(line.startswith("first answer:") for line in lines), "the run's own answer was typed"
    assert lines[-2:] == [
        "typed answer: Drive(origin='Leeds', destination='Lyon', distance_km=1080.0, hours=12.0)",
        "kept in the outcome as: {'type': 'Drive', 'value': {'origin': 'Leeds', 'destination': 'Lyon', "
        "'distance_km': 1080.0, 'hours': 12.0}}",
    ]


async def test_the_runs_own_answer_is_typed_where_the_provider_takes_a_schema_beside_tools() -> None:
    model = Recorder(typed_answer.demo_model)
    step = Step(provider.Function(model), tools=[typed_answer.road_distance])
    state = await typed_answer.make_agent(step).run(asked(typed_answer.QUESTION))
    assert typed_answer.answer_value(state, typed_answer.Drive) == typed_answer.Drive("Leeds", "Lyon", 1080.0, 12.0)
    assert state.outcome is not None and state.outcome.ok
    assert not [t for t in state if t.meta.get("kind") == TurnKind.OUTPUT_FORMAT], "no formatting turn"
    schema = typed_answer.WithOutput(typed_answer.ReAct(step), step, typed_answer.Drive).output.schema
    assert [r.options.output_schema for r in model.requests] == [schema, schema]  # the tool turn, the answer


class SaysNothing:
    """A provider that says nothing of itself (no ``info``): it is taken to honour no schema beside tools."""

    def __init__(self, fn: Any) -> None:
        self._inner = provider.Function(fn)

    def stream(self, request: Any) -> Any:
        return self._inner.stream(request)


async def test_a_prose_answer_gets_one_formatting_turn() -> None:
    model = Recorder(typed_answer.demo_model)
    step = Step(SaysNothing(model), tools=[typed_answer.road_distance])
    state = await typed_answer.make_agent(step).run(asked(typed_answer.QUESTION))
    drive = typed_answer.answer_value(state, typed_answer.Drive)
    assert drive == typed_answer.Drive("Leeds", "Lyon", 1080.0, 12.0)
    assert state.outcome is not None and state.outcome.ok
    formatting = [t for t in state if t.meta.get("kind") == TurnKind.OUTPUT_FORMAT]
    assert len(formatting) == 1  # the prose answer failed the schema once; the JSON answer passed
    assert [c.name for t in state for c in t.tool_calls] == ["road_distance"]  # the tool ran once
    schemas = [r.options.output_schema for r in model.requests]
    assert schemas[:2] == [None, None] and schemas[2] is not None and len(schemas) == 3
