"""Escalation: the cheapest rung first, one rung up when its answer is not trusted, never down."""

import json
from typing import Any

import pytest

from cognitive import Escalation, Pattern, ReAct, SelfConsistency, SingleShot, WithBudget, confidence_of
from cognitive.testing import check_pattern
from loop import Budget, Request, Role, State, Step, Text, UsageError, tool
from loop.errors import VerificationFailed
from provider import Function, tool_call


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"{key} is 42"


class Model:
    """Answers with the rung's marker (a system turn names it), rates answers by a table, decides tool needs."""

    def __init__(self, ratings: dict[str, float] | None = None, needs_tools: bool = False,
                 answers: dict[str, list[str]] | None = None) -> None:
        self.ratings = ratings or {}
        self.needs_tools = needs_tools
        self.answers = {k: list(v) for k, v in (answers or {}).items()}
        self.requests: list[Request] = []

    def __call__(self, request: Request) -> Any:
        self.requests.append(request)
        schema = request.options.output_schema or {}
        props = schema.get("properties", {})
        if "score" in props:
            answer = next(t.text for t in reversed(request.turns) if t.role is Role.ASSISTANT)
            return json.dumps({"score": self.ratings.get(answer, 0.0), "reason": "as rated"})
        if "tools" in props:
            return json.dumps({"tools": self.needs_tools})
        if request.tools and not any(t.role is Role.TOOL for t in request.turns):
            return tool_call("lookup", {"key": "k"})
        if any(t.role is Role.TOOL for t in request.turns):
            return "looked up: 42"
        rung = next((t.text for t in reversed(request.turns) if t.role is Role.SYSTEM and t.text.startswith("rung")),
                     "rung ?")
        queue = self.answers.get(rung)
        return queue.pop(0) if queue else f"{rung} says 42"


class Marked:
    """A rung that names itself to the model in a system turn, then answers in one turn (no confidence)."""

    def __init__(self, step: Step, name: str) -> None:
        self.step, self.name = step, name

    async def run(self, state: State) -> State:
        return await SingleShot(self.step).run(state.append(Role.SYSTEM, Text(self.name)))


def ask() -> State:
    return State().append(Role.USER, Text("What is it?"))


async def test_a_trusted_first_rung_is_the_answer_and_nothing_else_runs() -> None:
    model = Model(ratings={"rung cheap says 42": 0.9})
    step = Step(Function(model))
    state = await Escalation({"cheap": Marked(step, "rung cheap"), "dear": Marked(step, "rung dear")},
                             judge=step).run(ask())
    assert state.answer == "rung cheap says 42"
    data = state.outcome.data["Escalation"]
    assert data["rung"] == "cheap" and [c["rung"] for c in data["choices"]] == ["cheap"]
    assert data["choices"][0] == {"rung": "cheap", "confidence": 0.9, "source": "judge", "reason": "trusted"}
    assert not any("rung dear" in t.text for r in model.requests for t in r.turns)


async def test_an_untrusted_answer_goes_one_rung_up_and_leaves_nothing_behind() -> None:
    model = Model(ratings={"rung cheap says 42": 0.3, "rung dear says 42": 0.95})
    step = Step(Function(model))
    state = await Escalation({"cheap": Marked(step, "rung cheap"), "dear": Marked(step, "rung dear")},
                             judge=step).run(ask())
    assert state.answer == "rung dear says 42" and state.outcome.ok
    assert [(c["rung"], c["confidence"]) for c in state.outcome.data["Escalation"]["choices"]] == [
        ("cheap", 0.3), ("dear", 0.95)]
    assert "rung cheap says 42" not in [t.text for t in state]  # the rejected answer is not in the conversation
    assert state.turns[0] == ask().turns[0]


async def test_a_rung_with_its_own_confidence_needs_no_judge() -> None:
    model = Model(answers={"rung ?": ["7", "42", "42", "7", "42"]})
    step = Step(Function(model))
    cheap = SelfConsistency(SingleShot(step), n=5)
    state = await Escalation([cheap, Marked(step, "rung dear")], confidence=0.6, judge=step).run(ask())
    assert state.answer == "42"
    choice = state.outcome.data["Escalation"]["choices"][0]
    assert (choice["confidence"], choice["source"]) == (0.6, "outcome")
    assert not any("score" in (r.options.output_schema or {}).get("properties", {}) for r in model.requests)


async def test_when_no_rung_is_trusted_the_last_answer_is_taken_degraded() -> None:
    model = Model(ratings={})
    step = Step(Function(model))
    state = await Escalation([Marked(step, "rung a"), Marked(step, "rung b")], judge=step).run(ask())
    assert state.answer == "rung b says 42"
    assert state.outcome.degraded and "no rung gave an answer with confidence 0.8" in state.outcome.reason
    assert [c["reason"] for c in state.outcome.data["Escalation"]["choices"]] == [
        "not trusted; one rung up", "not trusted; the last rung's answer is taken"]


async def test_a_rung_measured_unreliable_is_passed_over_but_never_the_last() -> None:
    model = Model(ratings={"rung b says 42": 0.1})
    step = Step(Function(model))
    state = await Escalation({"a": Marked(step, "rung a"), "b": Marked(step, "rung b")}, judge=step,
                             reliability={"a": 0.2, "b": 0.1}).run(ask())
    assert state.answer == "rung b says 42"
    choices = state.outcome.data["Escalation"]["choices"]
    assert choices[0] == {"rung": "a", "skipped": True, "reason": "measured accuracy 0.2 is below 0.8"}
    assert not any("rung a" in t.text for r in model.requests for t in r.turns)


async def test_a_request_that_needs_tools_goes_to_the_tool_pattern() -> None:
    model = Model(needs_tools=True)
    step = Step(Function(model), tools=[lookup])
    state = await Escalation([Marked(step, "rung a")], judge=step, tools=ReAct(step)).run(ask())
    assert state.answer == "looked up: 42"
    assert state.outcome.data["Escalation"]["choices"] == [{"rung": "tools", "reason": "the request needs tools"}]


async def test_a_rung_whose_gate_gives_up_sends_the_run_up_but_the_last_one_raises() -> None:
    class GivesUp:
        async def run(self, state: State) -> State:
            raise VerificationFailed("the check never passed", state=state, results=())

    model = Model(ratings={"rung b says 42": 1.0})
    step = Step(Function(model))
    state = await Escalation([GivesUp(), Marked(step, "rung b")], judge=step).run(ask())
    assert state.answer == "rung b says 42"
    assert state.outcome.data["Escalation"]["choices"][0]["reason"].startswith("it failed: the check never passed")
    doubted = Step(Function(Model(ratings={})))
    with pytest.raises(VerificationFailed):
        await Escalation([Marked(doubted, "rung b"), GivesUp()], judge=doubted).run(ask())


async def test_a_budget_around_it_still_ends_in_an_answer() -> None:
    model = Model(ratings={})
    step = Step(Function(model))
    state = await WithBudget(Escalation([Marked(step, "rung a"), Marked(step, "rung b")], judge=step),
                             Budget(max_turns=2, name="small")).run(ask())
    assert state.answer and state.outcome.degraded and "small" in state.outcome.reason


def test_confidence_of_reads_the_lowest_stated_confidence_and_zero_for_a_bad_run() -> None:
    answered = ask().append(Role.ASSISTANT, Text("42"))
    assert confidence_of(answered) is None
    assert confidence_of(answered.with_outcome(data={"confidence": 0.7})) == 0.7
    both = answered.with_outcome(data={"confidence": 0.7}).with_outcome(data={"confidence": 0.5}, path="x")
    assert confidence_of(both) == 0.5
    assert confidence_of(answered.with_outcome("degraded", "cap")) == 0.0


@pytest.mark.parametrize("kwargs, problem", [
    ({"rungs": []}, "at least one rung"),
    ({"rungs": "react"}, "list of patterns"),
    ({"rungs": {"a/b": None}}, "without '/'"),
    ({"rungs": [object()]}, "Pattern"),
    ({"confidence": 1.5}, "from 0 to 1"),
    ({"reliability": {"nope": 0.5}}, "do not exist"),
    ({"reliability": {"a": 2}}, "accuracy from 0 to 1"),
    ({"tools": "react"}, "tools"),
])
def test_bad_settings_are_refused_naming_the_problem(kwargs: dict[str, Any], problem: str) -> None:
    step = Step(Function(lambda r: "x"))
    settings: dict[str, Any] = {"rungs": {"a": SingleShot(step)}, **kwargs}
    rungs = settings.pop("rungs")
    with pytest.raises(UsageError, match=problem):
        Escalation(rungs, **settings)


async def test_it_keeps_the_pattern_contract() -> None:
    def reply(request: Request) -> str:
        if "score" in (request.options.output_schema or {}).get("properties", {}):
            return json.dumps({"score": 0.5, "reason": "so so"})
        return "Paris."

    def make(step: Step) -> Pattern:
        return Escalation([SingleShot(step), SingleShot(step)], judge=step)

    await check_pattern(make, reply=reply)


def test_the_registry_builds_the_usual_ladder_from_a_step_alone() -> None:
    from cognitive import ChainOfThought, TreeOfThoughts, build

    plain = Step(Function(lambda request: "x"))
    ladder = build("escalation", plain)
    assert isinstance(ladder, Escalation) and list(ladder.rungs) == ["chain-of-thought", "self-consistency",
                                                                     "tree-of-thoughts"]
    assert isinstance(ladder.rungs["chain-of-thought"], ChainOfThought)
    assert isinstance(ladder.rungs["tree-of-thoughts"], TreeOfThoughts)
    assert ladder.judge is plain and ladder.tools is None  # a step without tools sends nothing to a tool pattern
    tooled = build("escalation", Step(Function(lambda request: "x"), tools=[lookup]), rungs=["single-shot"],
                   confidence=0.5)
    assert list(tooled.rungs) == ["single-shot"] and isinstance(tooled.tools, ReAct) and tooled.confidence == 0.5
    with pytest.raises(UsageError, match="registry names"):
        build("escalation", plain, rungs="react")
