"""Reflexion: fresh trials that carry lessons from failed ones, a memory that persists in ``state.meta``."""

import json
import re
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from cognitive import ReAct, WithBudget
from cognitive.everyday._reflexion import MEMORY_KIND, Reflexion
from loop import Budget, Request, Role, State, Step, Text, UsageError, tool
from provider import Function, Scripted, tool_call
from verifier import FunctionVerifier, Result, failed, passed

START = State().append(Role.USER, Text("Convert 3 miles to km."))


def trial_of(request: Request) -> int:
    found = re.search(r"trial (\d+)", request.path)
    assert found is not None, request.path
    return int(found.group(1))


class Model:
    """Answers trial ``n`` with ``answer(n)`` and each reflection with lesson ``L<n>``; keeps every request."""

    def __init__(self, answer: Callable[[int], str] = lambda n: f"attempt {n}") -> None:
        self.answer = answer
        self.requests: list[Request] = []

    def __call__(self, request: Request) -> Any:
        self.requests.append(request)
        n = trial_of(request)
        if request.path.endswith("/reflect"):
            return json.dumps({"lesson": f"L{n}"})
        return self.answer(n)

    def shown(self, trial: int) -> list[str]:
        """The lessons the model was shown in trial ``trial`` (of the last run that had one)."""
        request = [r for r in self.requests if trial_of(r) == trial and "/ReAct" in r.path][-1]
        memory = [t for t in request.turns if t.meta.get("kind") == MEMORY_KIND]
        return re.findall(r"\d+\. (.*)", memory[0].text) if memory else []


def passes_on(answer: str) -> FunctionVerifier:
    def check(state: State) -> Result:
        return passed() if state.answer == answer else failed(f"{state.answer!r} is not right: mind the units.")

    return FunctionVerifier(check, name="check")


def data(state: State) -> Any:
    assert state.outcome is not None
    return state.outcome.data["Reflexion"]


def memory(state: State) -> Any:
    return state.meta["reflexion"]


async def test_a_failed_trial_leaves_a_lesson_and_the_next_fresh_trial_passes() -> None:
    model = Model()
    step = Step(Function(model))
    state = await Reflexion(ReAct(step), step, passes_on("attempt 2")).run(START)
    assert state.answer == "attempt 2"
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT], "no failed trial, memory turn or reflection"
    assert state.outcome is not None and state.outcome.ok
    assert data(state) == {"trials": 2, "passed": True, "reflections": 1, "external_failures": 0, "memory": 1}
    assert memory(state) == {"trials": 2, "reflections": [{"lesson": "L1", "trial": 1}]}
    assert [r.path for r in model.requests] == ["Reflexion/trial 1/ReAct", "Reflexion/trial 1/reflect",
                                                "Reflexion/trial 2/ReAct"]
    reflect = model.requests[1]
    assert reflect.options.tool_choice == "none" and reflect.options.output_schema is not None
    assert any("mind the units" in t.text for t in reflect.turns), "the reflection saw the evaluator's report"
    assert reflect.turns[1].text == "attempt 1", "and the failed trial"
    trial2 = model.requests[2].turns
    assert [t.role for t in trial2] == [Role.USER, Role.SYSTEM], "a fresh start, with the memory"
    assert "1. L1" in trial2[1].text
    json.dumps(dict(state.meta))  # the memory is JSON data


async def test_lessons_are_shown_oldest_first_and_only_the_newest_memory_size_are_kept() -> None:
    model = Model()
    step = Step(Function(model))
    state = await Reflexion(ReAct(step), step, passes_on("never"), max_trials=4, memory_size=2).run(START)
    assert [model.shown(n) for n in (1, 2, 3, 4)] == [[], ["L1"], ["L1", "L2"], ["L2", "L3"]]
    assert state.answer == "attempt 4" and state.degraded
    assert state.outcome is not None
    assert state.outcome.reason == "no trial passed in 4 (the last: the evaluator still failed it)"
    assert data(state) == {"trials": 4, "passed": False, "reflections": 4, "external_failures": 0, "memory": 2}
    assert memory(state)["reflections"] == [{"lesson": "L3", "trial": 3}, {"lesson": "L4", "trial": 4}]
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT]


async def test_a_lesson_expires_after_reflection_ttl_trials() -> None:
    model = Model()
    step = Step(Function(model))
    state = await Reflexion(ReAct(step), step, passes_on("never"), max_trials=4, reflection_ttl=2).run(START)
    assert [model.shown(n) for n in (1, 2, 3, 4)] == [[], ["L1"], ["L1", "L2"], ["L2", "L3"]]
    # Trial 5 (a later run) would see L3 and L4 only: L2 is not kept.
    assert memory(state)["reflections"] == [{"lesson": "L3", "trial": 3}, {"lesson": "L4", "trial": 4}]


async def test_an_evaluator_error_is_an_external_failure_that_teaches_nothing() -> None:
    model = Model()
    step = Step(Function(model))
    calls = 0

    def flaky(state: State) -> Result:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("the grader's network is down")
        return passed() if state.answer == "attempt 2" else failed("wrong")

    state = await Reflexion(ReAct(step), step, FunctionVerifier(flaky)).run(START)
    assert state.answer == "attempt 2" and state.outcome is not None and state.outcome.ok
    assert data(state) == {"trials": 2, "passed": True, "reflections": 0, "external_failures": 1, "memory": 0}
    assert not any(r.path.endswith("/reflect") for r in model.requests), "no reflection on an outage"
    assert model.shown(2) == []


async def test_every_trial_failing_externally_is_degraded_and_says_so() -> None:
    step = Step(Function(Model()))

    def down(state: State) -> Result:
        raise ConnectionError("down")

    state = await Reflexion(ReAct(step), step, FunctionVerifier(down), max_trials=2).run(START)
    assert state.degraded and state.outcome is not None
    assert state.outcome.reason == "no trial passed in 2 (the last: the evaluator could not run)"
    assert data(state)["external_failures"] == 2


async def test_the_memory_persists_across_runs_of_the_conversation() -> None:
    model = Model(lambda n: "wrong")
    step = Step(Function(model))
    agent = Reflexion(ReAct(step), step, passes_on("attempt 1"), max_trials=1, reflection_ttl=2)
    first = await agent.run(State().append(Role.USER, Text("Convert 5 miles to km.")))
    assert first.degraded and memory(first) == {"trials": 1, "reflections": [{"lesson": "L1", "trial": 1}]}, \
        "the last trial's lesson is written for later messages"
    # Stored and read back, as a session does between messages.
    stored = State.from_json(first.to_json())
    model.answer = lambda n: "attempt 1"
    second = await agent.run(stored.append(Role.USER, Text("Convert 3 miles to km.")))
    assert model.shown(1) == ["L1"], "the second message's trial saw the first's lesson"
    assert second.answer == "attempt 1" and second.outcome is not None and second.outcome.ok
    assert memory(second) == {"trials": 2, "reflections": [{"lesson": "L1", "trial": 1}]}
    assert [t.role for t in second] == [Role.USER, Role.ASSISTANT] * 2


async def test_the_ttl_counts_trials_over_runs() -> None:
    model = Model()
    step = Step(Function(model))
    agent = Reflexion(ReAct(step), step, passes_on("never"), max_trials=1, reflection_ttl=1)
    state = START
    shown = []
    for _ in range(3):
        state = await agent.run(state)
        shown.append(model.shown(1))
        state = state.append(Role.USER, Text("again"))
    assert shown == [[], ["L1"], ["L1"]], "each lesson was shown to the one trial after it (run 2 wrote L1 too)"
    assert memory(state)["trials"] == 3
    assert memory(state)["reflections"] == [{"lesson": "L1", "trial": 3}]


async def test_a_reflection_the_model_cannot_format_is_skipped() -> None:
    def model(request: Request) -> str:
        return "not json at all" if request.path.endswith("/reflect") else f"attempt {trial_of(request)}"

    step = Step(Function(model))
    state = await Reflexion(ReAct(step), step, passes_on("attempt 2")).run(START)
    assert state.answer == "attempt 2"
    assert data(state)["reflections"] == 0 and memory(state)["reflections"] == []


async def test_tool_turns_of_the_kept_trial_are_kept_and_failed_trials_are_not() -> None:
    @tool
    async def convert(miles: float) -> str:
        """Miles to km."""
        return f"{miles * 1.609:.2f} km"

    def model(request: Request) -> Any:
        n = trial_of(request)
        if request.path.endswith("/reflect"):
            return '{"lesson": "Use the tool."}'
        if request.turns[-1].role is Role.TOOL:
            return f"It is {request.turns[-1].tool_results[0].content}."
        return tool_call("convert", {"miles": 3}, id=f"t{n}") if n == 2 else "about 5 km"

    step = Step(Function(model), tools=[convert])
    state = await Reflexion(ReAct(step), step, passes_on("It is 4.83 km.")).run(START)
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert [c.id for c in state[1].tool_calls] == ["t2"]
    assert all("about 5 km" not in t.text and "Use the tool" not in t.text for t in state)


async def test_a_budget_hit_during_a_trial_ends_in_the_budgets_answer() -> None:
    def model(request: Request) -> str:
        if request.options.tool_choice == "none" and request.options.output_schema is None:
            return "out of budget"
        return Model()(request)

    step = Step(Function(model))
    agent = WithBudget(Reflexion(ReAct(step), step, passes_on("never")), Budget(max_turns=3), step=step)
    with anyio.fail_after(2):
        state = await agent.run(START)
    assert state.answer == "out of budget" and state.degraded
    assert [t.role for t in state] == [Role.USER, Role.SYSTEM, Role.ASSISTANT], "no trial reached the conversation"


async def test_a_foreign_value_under_the_memory_key_is_refused() -> None:
    step = Step(Scripted(["x"]))
    with pytest.raises(UsageError, match="is not a Reflexion memory"):
        await Reflexion(ReAct(step), step, passes_on("x")).run(START.with_meta(reflexion="mine"))
    state = await Reflexion(ReAct(step), step, passes_on("x"), memory_key="lessons").run(
        START.with_meta(reflexion="mine"))
    assert state.meta["reflexion"] == "mine" and state.meta["lessons"] == {"trials": 1, "reflections": []}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_trials": 0}, "max_trials"),
    ({"memory_size": 0}, "memory_size"),
    ({"reflection_ttl": 0}, "reflection_ttl"),
    ({"reflection_ttl": 1.5}, "reflection_ttl"),
    ({"memory_key": ""}, "memory_key"),
    ({"evaluator_timeout": -1}, "evaluator_timeout"),
    ({"memory_prompt": "no lessons here"}, "memory_prompt must contain {lessons}"),
    ({"reflect_prompt": "{feedback} {x}"}, "reflect_prompt may use only {feedback}"),
])
def test_bad_settings_are_refused(kwargs: dict[str, Any], message: str) -> None:
    step = Step(Scripted([]))
    with pytest.raises(UsageError, match=message):
        Reflexion(ReAct(step), step, passes_on("x"), **kwargs)


def test_wiring_and_repr() -> None:
    step = Step(Scripted([]))
    with pytest.raises(UsageError, match="needs a Pattern to wrap"):
        Reflexion(step, step, passes_on("x"))  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="TurnExecutor"):
        Reflexion(ReAct(step), object(), passes_on("x"))  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="evaluator must be a verifier.Verifier"):
        Reflexion(ReAct(step), step, lambda s: True)  # type: ignore[arg-type]
    assert repr(Reflexion(ReAct(step), step, passes_on("x"), reflection_ttl=3)) == (
        f"Reflexion({ReAct(step)!r}, evaluator='check', max_trials=4, memory_size=6, reflection_ttl=3)")
