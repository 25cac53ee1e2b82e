"""Escalation: the cheapest rung first, one rung up when its answer is not trusted, never down."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from cognitive import Escalation, Pattern, ReAct, SelfConsistency, SingleShot, WithBudget, confidence_of
from cognitive.testing import check_pattern
from loop import Budget, Outcome, Request, Role, State, Step, Text, UsageError, tool
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
    from cognitive import TreeOfThoughts, build

    plain = Step(Function(lambda request: "x"))
    ladder = build("escalation", plain)
    assert isinstance(ladder, Escalation) and list(ladder.rungs) == ["react", "tree-of-thoughts"]
    assert isinstance(ladder.rungs["react"], ReAct) and isinstance(ladder.rungs["tree-of-thoughts"], TreeOfThoughts)
    assert (ladder.agree, ladder.samples, ladder.confidence) == (2, 32, 0.8)
    assert ladder.judge is plain and ladder.tools is None  # a step without tools sends nothing to a tool pattern
    tooled = build("escalation", Step(Function(lambda request: "x"), tools=[lookup]), rungs=["single-shot"],
                   confidence=0.5, agree=None)
    assert isinstance(tooled, Escalation) and list(tooled.rungs) == ["single-shot"]
    assert isinstance(tooled.tools, ReAct) and tooled.confidence == 0.5
    assert tooled.agree is None  # answers rated by the step instead
    with pytest.raises(UsageError, match="registry names"):
        build("escalation", plain, rungs="react")


def outcome_of(state: State) -> Outcome:
    assert state.outcome is not None, "the run wrote no outcome"
    return state.outcome


def _rung_requests(model: Model, marker: str) -> list[Request]:
    return [r for r in model.requests if any(t.text == marker for t in r.turns)]


async def test_agreeing_runs_trust_an_answer_with_no_judge_call() -> None:
    model = Model(answers={"rung a": ["7", "42", "42."]})
    step = Step(Function(model))
    state = await Escalation({"a": Marked(step, "rung a"), "b": Marked(step, "rung b")}, judge=step, agree=2,
                             samples=5).run(ask())
    assert state.answer == "42" and outcome_of(state).ok  # "42." agrees with "42": answers are normalised
    assert outcome_of(state).data["Escalation"]["choices"] == [
        {"rung": "a", "votes": 2, "runs": 3, "source": "agreement", "reason": "trusted"}]
    runs = _rung_requests(model, "rung a")
    assert [r.path for r in runs] == ["Escalation/a/SingleShot", "Escalation/a/run 2/SingleShot",
                                      "Escalation/a/run 3/SingleShot"]
    assert [r.options.temperature for r in runs] == [None, 0.7, 0.7]  # the runs after the first are hot
    assert len(model.requests) == 3 and not _rung_requests(model, "rung b")  # no judge, no rung up
    assert "7" not in [t.text for t in state]  # the runs that lost the vote leave nothing


async def test_runs_that_never_agree_go_one_rung_up_and_the_last_takes_the_most_given_answer_degraded() -> None:
    model = Model(answers={"rung a": ["1", "2", "3"], "rung b": ["5", "6", "6", "7"]})
    step = Step(Function(model))
    state = await Escalation({"a": Marked(step, "rung a"), "b": Marked(step, "rung b")}, agree=3,
                             samples=4).run(ask())
    assert state.answer == "6" and outcome_of(state).degraded
    assert "or 3 runs agreeing on it" in outcome_of(state).reason and "2 agreeing of 4 runs" in outcome_of(state).reason
    choices = outcome_of(state).data["Escalation"]["choices"]
    assert [(c["rung"], c["votes"], c["runs"], c["reason"]) for c in choices] == [
        ("a", 1, 4, "not trusted; one rung up"), ("b", 2, 4, "not trusted; the last rung's answer is taken")]


async def test_a_round_runs_only_what_could_complete_the_agreement_side_by_side() -> None:
    paths: list[str] = []
    both = anyio.Event()

    async def reply(request: Request) -> str:
        paths.append(request.path)
        if "/run " in request.path:
            if sum("/run " in p for p in paths) == 2:
                both.set()
            await both.wait()  # returns only once the other run of the round has started too
        return "42"

    with anyio.fail_after(10):
        state = await Escalation([SingleShot(Step(Function(reply)))], agree=3, samples=9).run(ask())
    assert state.answer == "42" and outcome_of(state).data["Escalation"]["choices"][0]["runs"] == 3
    # one run, then the two that could complete three agreeing, at once
    assert sorted(paths) == ["Escalation/SingleShot/SingleShot", "Escalation/SingleShot/run 2/SingleShot",
                             "Escalation/SingleShot/run 3/SingleShot"]


async def test_under_agreement_a_rung_that_states_its_confidence_runs_once() -> None:
    model = Model(answers={"rung ?": ["7", "42", "42", "7", "42"]})
    step = Step(Function(model))
    state = await Escalation([SelfConsistency(SingleShot(step), n=5), Marked(step, "rung dear")], confidence=0.6,
                             agree=2).run(ask())
    assert state.answer == "42" and len(model.requests) == 5
    assert outcome_of(state).data["Escalation"]["choices"][0]["source"] == "outcome"


async def test_a_later_run_whose_gate_gives_up_gives_no_vote() -> None:
    class Flaky:
        def __init__(self, step: Step) -> None:
            self.step, self.runs = step, 0

        async def run(self, state: State) -> State:
            self.runs += 1
            if self.runs == 2:
                raise VerificationFailed("the check never passed", state=state, results=())
            return await SingleShot(self.step).run(state)

    step = Step(Function(Model()))
    flaky = Flaky(step)
    state = await Escalation([flaky], agree=2, samples=4).run(ask())
    assert state.answer == "rung ? says 42" and flaky.runs == 3
    assert outcome_of(state).data["Escalation"]["choices"][0]["votes"] == 2


async def test_a_budget_that_runs_out_while_runs_agree_still_ends_in_an_answer() -> None:
    model = Model(answers={"rung a": [str(n) for n in range(20)]})
    step = Step(Function(model))
    state = await WithBudget(Escalation([Marked(step, "rung a"), Marked(step, "rung b")], agree=2, samples=20),
                             Budget(max_turns=3, name="small")).run(ask())
    assert state.answer and outcome_of(state).degraded and "small" in outcome_of(state).reason
    assert not _rung_requests(model, "rung b")


async def test_answers_are_compared_by_the_normaliser_given() -> None:
    model = Model(answers={"rung a": ["The answer is 42", "42"]})
    step = Step(Function(model))
    state = await Escalation([Marked(step, "rung a")], agree=2, samples=2,
                             normalise=lambda text: text.split()[-1]).run(ask())
    assert state.answer == "The answer is 42" and outcome_of(state).ok


@pytest.mark.parametrize("kwargs, problem", [
    ({"agree": 1}, "2 or more"),
    ({"agree": 0}, "agree"),
    ({"agree": 3, "samples": 2}, "at least agree=3"),
    ({"agree": 2, "temperature": -1}, "temperature"),
    ({"normalise": "lower"}, "normalise"),
])
def test_bad_agreement_settings_are_refused_naming_the_problem(kwargs: dict[str, Any], problem: str) -> None:
    step = Step(Function(lambda r: "x"))
    with pytest.raises(UsageError, match=problem):
        Escalation({"a": SingleShot(step)}, **kwargs)


async def test_it_keeps_the_pattern_contract_when_runs_must_agree() -> None:
    await check_pattern(lambda step: Escalation([SingleShot(step), SingleShot(step)], agree=2, samples=3))


def test_the_example_runs_offline_and_settles_each_task_by_agreement_or_tools() -> None:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "examples/escalation.py"], cwd=root, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)})
    assert done.returncode == 0 and not done.stderr, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    assert [row[0] for row in rows] == ["arithmetic-1", "arithmetic-2", "game24-1", "game24-2", "lookup-1",
                                        "lookup-2"]
    for row in rows:
        if row[0].startswith("lookup"):
            assert row[1:6] == ["tools", "the", "request", "needs", "tools"], row
        else:  # two runs agreed, each run one call
            assert row[1:3] == ["react", "2"] and row[3:7] == ["of", row[4], "runs", "agreed"] and row[4] == row[7]
    assert sum(row[-1] == "right" for row in rows) >= 5, done.stdout
