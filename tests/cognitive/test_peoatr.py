"""PEOATR and Deliberate: a typed plan carried out one subgoal per round, each round looked at and reflected on,
the reflection routing (continue, replan, answer) within caps, and the answer written from the work's notes."""

import json
from collections import defaultdict
from typing import Any

import anyio
import pytest

from cognitive import SelfConsistency, WithBudget, WithOutput, WithVerification, answer_value
from cognitive.planning._peoatr import PEOATR, Deliberate
from cognitive.testing import check_pattern
from loop import Budget, Request, Role, State, Step, Text, UsageError, main_line, tool
from provider import Function, tool_call
from verifier import FunctionVerifier, failed, passed

CAPITALS = {"France": "Paris", "Japan": "Tokyo"}


@tool
async def capital(country: str) -> str:
    """The capital city of a country."""
    return CAPITALS[country]


@tool
async def boom(what: str) -> str:
    """Always fails."""
    raise RuntimeError(f"no {what} today")


@tool
async def slow(tag: str) -> str:
    """Takes five seconds."""
    await anyio.sleep(5)
    return tag


TOOLS = [capital, boom, slow]
TWO = ["find the capital of France", "check it"]


def stage_of(request: Request) -> tuple[str | None, int]:
    """The stage the request is made for (the latest stage turn's name) and where that turn is."""
    for index in range(len(request.turns) - 1, -1, -1):
        turn = request.turns[index]
        if turn.kind == "stage":
            return str(turn.meta["stage"]), index
    return None, len(request.turns)


class Model:
    """A model for every stage. ``plans`` and ``decisions`` are given in turn (the last repeats); a plan that is a
    string, or a decision that is not one of the three, is sent as it is (not a valid value). Each act calls
    ``call`` once, then reports its result; the answer repeats what the work's notes found."""

    def __init__(self, *, plans: Any = (TWO,), decisions: Any = ("continue",),
                 call: tuple[str, dict[str, Any]] = ("capital", {"country": "France"}), always_call: bool = False):
        self.plans, self.decisions, self.call, self.always_call = list(plans), list(decisions), call, always_call
        self.seen: dict[str | None, list[Request]] = defaultdict(list)
        self.calls = 0

    def __call__(self, request: Request) -> Any:
        self.calls += 1
        name, at = stage_of(request)
        self.seen[name].append(request)
        properties = (request.options.output_schema or {}).get("properties", {})
        if "steps" in properties:
            plan = self.plans[min(len(self.seen["plan"]) - 1, len(self.plans) - 1)]
            return plan if isinstance(plan, str) else json.dumps({"steps": plan})
        if "decision" in properties:
            decision = self.decisions[min(len(self.seen["reflect"]) - 1, len(self.decisions) - 1)]
            if decision not in ("continue", "replan", "answer"):
                return decision
            return json.dumps({"decision": decision, "reason": f"because {decision}"})
        if name == "act":
            results = [r for t in request.turns[at:] for r in t.tool_results]
            if not results or self.always_call:
                return tool_call(*self.call)
            return f"{'failed' if results[-1].is_error else 'found'}: {results[-1].content}"
        if name in ("think", "observe"):
            return f"{name}: the results so far look right"
        notes = "".join(t.text for t in request.turns if t.kind == "work_notes")
        found = "Paris" if "returned: Paris" in notes else "unknown"
        if "answer" in properties:
            return json.dumps({"answer": found})
        return f"The capital is {found}."


def make(**settings: Any) -> tuple[Model, Step]:
    model = Model(**settings)
    return model, Step(Function(model), tools=TOOLS)


def ask(text: str = "What is the capital of France?") -> State:
    return State().append(Role.USER, Text(text))


def data(state: State, name: str = "PEOATR") -> Any:
    assert state.outcome is not None
    return state.outcome.data[name]


async def test_peoatr_plans_acts_thinks_and_reflects_per_subgoal_then_answers() -> None:
    model, step = make(decisions=["continue"])
    state = await PEOATR(step).run(ask())
    assert state.answer == "The capital is Paris." and state.outcome is not None and state.outcome.ok
    done = data(state)
    assert done["path"] == ["plan", "act", "think", "reflect", "act", "think", "reflect", "answer"]
    assert done["plans"] == [TWO] and done["rounds"] == 2 and done["replans"] == 0
    assert done["decisions"] == [
        {"round": 1, "decision": "continue", "reason": "because continue", "then": "act"},
        {"round": 2, "decision": "continue", "reason": "because continue", "then": "answer"},  # none left
    ]
    # One plan, per round two act calls (the tool call, the report), one think and one reflect, one answer.
    assert model.calls == 1 + 2 * 4 + 1
    acts = model.seen["act"]
    assert "find the capital of France" in acts[0].turns[-1].text and "check it" in acts[2].turns[-1].text
    assert acts[0].tools and all(r.options.tool_choice == "none" for r in model.seen["think"])
    assert all(r.path.startswith("PEOATR/act") for r in acts)
    reflections = [r.turns[-2].text for r in model.seen["reflect"]]
    assert "1 of its 2 subgoals done. The next one: check it" in reflections[0]
    assert "all 2 of its subgoals are done" in reflections[1]
    # The conversation only grows by the work's notes and the answer; the stages' turns stay in branches.
    assert [(t.role, t.kind) for t in state] == [(Role.USER, None), (Role.SYSTEM, "work_notes"),
                                                 (Role.SYSTEM, "stage"), (Role.ASSISTANT, None)]
    assert 'capital({"country": "France"}) returned: Paris' in state[1].text
    assert state[2].meta["stage"] == "answer" and model.seen["answer"][0].path == "PEOATR"


async def test_deliberate_thinks_first_and_observes_after_each_act() -> None:
    model, step = make(decisions=["continue"])
    state = await Deliberate(step).run(ask())
    assert state.answer == "The capital is Paris." and not state.degraded
    done = data(state, "Deliberate")
    assert done["path"] == ["think", "plan", "act", "observe", "reflect", "act", "observe", "reflect", "answer"]
    assert model.calls == 2 + 2 * 4 + 1
    think, plan = model.seen["think"][0], model.seen["plan"][0]
    assert think.options.tool_choice == "none" and "think: the results so far" in plan.turns[-3].text
    assert "Look closely at the results of the last actions" in model.seen["observe"][0].turns[-1].text
    assert [t.kind for t in state] == [None, "work_notes", "stage", None]


@pytest.mark.parametrize("pattern", [PEOATR, Deliberate])
async def test_an_answer_decision_ends_the_work_early(pattern: Any) -> None:
    model, step = make(plans=[["one", "two", "three"]], decisions=["answer"])
    state = await pattern(step).run(ask())
    done = data(state, pattern.__name__)
    assert done["rounds"] == 1 and done["path"][-2:] == ["reflect", "answer"] and not state.degraded
    assert done["decisions"][0]["then"] == "answer" and len(model.seen["act"]) == 2


async def test_a_replan_plans_again_from_what_was_found() -> None:
    model, step = make(plans=[["a wrong subgoal", "another"], ["the right subgoal"]],
                       decisions=["replan", "continue"])
    state = await PEOATR(step).run(ask())
    done = data(state)
    assert done["path"] == ["plan", "act", "think", "reflect", "plan", "act", "think", "reflect", "answer"]
    assert done["plans"] == [["a wrong subgoal", "another"], ["the right subgoal"]]
    assert done["replans"] == 1 and done["rounds"] == 2 and not state.degraded
    assert [d["then"] for d in done["decisions"]] == ["plan", "answer"]
    replanning = model.seen["plan"][1]
    assert "because replan" in "".join(t.text for t in replanning.turns)  # it sees why, and what was found
    assert any(r.content == "Paris" for t in replanning.turns for r in t.tool_results)
    assert "the right subgoal" in model.seen["act"][2].turns[-1].text


async def test_deliberate_replans_without_thinking_again() -> None:
    model, step = make(plans=[["x"], ["y"]], decisions=["replan", "answer"])
    state = await Deliberate(step).run(ask())
    assert data(state, "Deliberate")["path"] == ["think", "plan", "act", "observe", "reflect", "plan", "act",
                                                 "observe", "reflect", "answer"]
    assert len(model.seen["think"]) == 1


async def test_replans_past_the_cap_go_on_with_the_plan_and_the_run_is_degraded() -> None:
    model, step = make(plans=[["a", "b"], ["c", "d", "e"]], decisions=["replan"])
    state = await PEOATR(step, max_replans=1, max_rounds=10).run(ask())
    done = data(state)
    assert done["replans"] == 1 and done["plans"] == [["a", "b"], ["c", "d", "e"]] and len(model.seen["plan"]) == 2
    assert done["rounds"] == 4 and [d["then"] for d in done["decisions"]] == ["plan", "act", "act", "answer"]
    assert state.answer == "The capital is Paris."
    assert state.degraded and "replan past max_replans=1; it went on with the plan it had" in state.outcome.reason


async def test_max_replans_zero_never_replans() -> None:
    model, step = make(plans=[["a"]], decisions=["replan"])
    state = await PEOATR(step, max_replans=0).run(ask())
    assert len(model.seen["plan"]) == 1 and data(state)["replans"] == 0
    assert state.degraded and "no subgoal was left, so it answered" in state.outcome.reason


@pytest.mark.parametrize("pattern", [PEOATR, Deliberate])
async def test_max_rounds_answers_from_the_work_so_far_degraded(pattern: Any) -> None:
    model, step = make(plans=[["1", "2", "3", "4", "5"]], decisions=["continue"])
    state = await pattern(step, max_rounds=2).run(ask())
    done = data(state, pattern.__name__)
    assert done["rounds"] == 2 and len(model.seen["act"]) == 4 and done["decisions"][-1]["then"] == "answer"
    assert state.answer == "The capital is Paris."
    assert state.degraded and f"{pattern.__name__} reached max_rounds=2" in state.outcome.reason


async def test_a_reflection_that_never_decides_ends_the_work_degraded() -> None:
    model, step = make(plans=[["1", "2", "3"]], decisions=["perhaps"])
    state = await PEOATR(step).run(ask())
    done = data(state)
    assert len(model.seen["reflect"]) == 2  # max_retries=1: asked, corrected once, then given up
    assert done["path"] == ["plan", "act", "think", "reflect", "answer"] and done["rounds"] == 1
    assert done["decisions"][0]["decision"] is None and "no valid decision" in done["decisions"][0]["reason"]
    assert state.answer == "The capital is Paris."
    assert state.degraded and "reflection in round 1 gave no valid decision" in state.outcome.reason


async def test_a_planner_that_never_plans_is_replaced_by_the_whole_request() -> None:
    model, step = make(plans=["no plan today"], decisions=["continue"])
    state = await Deliberate(step, max_retries=0).run(ask())
    done = data(state, "Deliberate")
    assert len(model.seen["plan"]) == 1 and done["plans"] == [["everything the latest request asks for"]]
    assert "everything the latest request asks for" in model.seen["act"][0].turns[-1].text
    assert state.answer == "The capital is Paris."
    assert state.degraded and "planner never gave a valid plan" in state.outcome.reason


async def test_an_empty_plan_is_answered_at_once() -> None:
    model, step = make(plans=[[]])
    state = await PEOATR(step).run(ask("Hello?"))
    assert data(state)["path"] == ["plan", "answer"] and not state.degraded and not model.seen["act"]


async def test_a_tool_that_raises_is_an_error_result_the_act_reads() -> None:
    model, step = make(plans=[["try the broken tool"]], call=("boom", {"what": "luck"}))
    state = await PEOATR(step).run(ask())
    report = model.seen["act"][1]
    assert report.turns[-1].tool_results[0].is_error
    assert "the tool raised RuntimeError: no luck today" in report.turns[-1].tool_results[0].content
    assert state.answer == "The capital is unknown." and not state.degraded
    assert data(state)["path"][-1] == "answer" and "boom" in state[1].text


async def test_an_act_stopped_by_its_turn_cap_makes_the_run_degraded() -> None:
    model, step = make(plans=[["1"]], always_call=True)
    state = await PEOATR(step, max_turns=2).run(ask())
    assert len(model.seen["act"]) == 3 and state.answer == "The capital is Paris."
    assert state.degraded and "act in round 1: ReAct reached max_turns=2" in state.outcome.reason


async def test_on_the_main_line_only_the_notes_and_the_answer_are_recorded() -> None:
    recorded: list[State] = []

    async def record(state: State) -> None:
        recorded.append(state)

    _, step = make()
    with main_line(recorder=record):
        state = await PEOATR(step).run(ask())
    assert recorded and recorded[-1].turns == state.turns[:len(recorded[-1])]
    assert {t.kind for s in recorded for t in s} <= {None, "work_notes", "stage"} and len(recorded[-1]) <= 4


@pytest.mark.parametrize("pattern", [PEOATR, Deliberate])
async def test_both_pass_the_pattern_conformance_check(pattern: Any) -> None:
    model = Model()
    await check_pattern(pattern, reply=model)
    assert model.seen["act"] and model.seen["reflect"]
    await check_pattern(pattern)  # a model that never gives a typed value: the fallbacks still answer


@pytest.mark.parametrize("pattern", [PEOATR, Deliberate])
async def test_a_budget_running_out_mid_work_answers_from_the_work(pattern: Any) -> None:
    model, step = make(decisions=["continue"])
    first = 2 if pattern is Deliberate else 1
    state = await WithBudget(pattern(step), Budget(max_turns=first + 4)).run(ask())  # round 2's act is refused
    assert state.answer == "The capital is Paris." and state.degraded and "ran out" in state.outcome.reason
    assert [t.kind for t in state] == [None, "work_notes", "budget", None]
    assert "returned: Paris" in state[1].text and len(model.seen["act"]) == 2

    model, step = make(decisions=["continue"])
    state = await WithBudget(pattern(step), Budget(max_turns=20, max_tool_calls=5)).run(ask())
    assert state.answer == "The capital is Paris." and not state.degraded


@pytest.mark.parametrize("pattern", [PEOATR, Deliberate])
async def test_a_budget_running_out_at_the_answer_answers_from_what_the_main_line_stored(pattern: Any) -> None:
    recorded: list[State] = []

    async def record(state: State) -> None:
        assert not recorded or state.common_prefix(recorded[-1], meta=False) == len(recorded[-1]), "a rewrite"
        recorded.append(state)

    model, step = make(decisions=["continue"])
    needed = (2 if pattern is Deliberate else 1) + 2 * 4 + 1
    with main_line(recorder=record):
        state = await WithBudget(pattern(step), Budget(max_turns=needed - 1)).run(ask())
    assert state.degraded and state.answer == "The capital is Paris."
    assert [r.path for r in model.seen["answer"]] == ["WithBudget"]  # the answer stage was refused its call
    assert [t.kind for t in state] == [None, "work_notes", "stage", "budget", None]
    assert state.common_prefix(recorded[-1], meta=False) == len(recorded[-1])


async def test_it_nests_in_verification_consistency_and_output() -> None:
    model, step = make(decisions=["answer"])
    seen: list[str] = []

    def check(state: State) -> Any:
        seen.append(state.answer or "")
        return passed() if len(seen) > 1 else failed("say it again")

    state = await WithVerification(PEOATR(step), step, verifiers=FunctionVerifier(check, name="twice")).run(ask())
    assert state.answer == "The capital is Paris." and len(seen) == 2 and len(model.seen["plan"]) == 2
    assert [t.role for t in state].count(Role.ASSISTANT) == 2  # each run added its notes and answer

    model, step = make(decisions=["answer"])
    state = await SelfConsistency(Deliberate(step), n=3).run(ask())
    assert state.answer == "The capital is Paris." and state.outcome.data["SelfConsistency"]["confidence"] == 1
    assert len(model.seen["plan"]) == 3

    model, step = make(decisions=["answer"])
    shape = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    state = await WithOutput(PEOATR(step), step, shape).run(ask())
    assert answer_value(state, shape) == {"answer": "Paris"}
    assert "answer" in model.seen["answer"][0].options.output_schema["properties"]


@pytest.mark.parametrize("pattern", [PEOATR, Deliberate])
async def test_cancelling_during_a_slow_tool_raises_out_of_the_run(pattern: Any) -> None:
    _, step = make(plans=[["wait"]], call=("slow", {"tag": "late"}))
    returned: list[State] = []
    started = anyio.current_time()
    with anyio.move_on_after(0.2) as cancel:
        returned.append(await pattern(step).run(ask()))
    assert cancel.cancelled_caught and not returned
    assert anyio.current_time() - started < 2


async def test_settings_are_checked() -> None:
    _, step = make()
    with pytest.raises(UsageError, match="max_rounds"):
        PEOATR(step, max_rounds=0)
    with pytest.raises(UsageError, match="max_replans"):
        Deliberate(step, max_replans=-1)
    with pytest.raises(UsageError, match="act_prompt must contain {subgoal}"):
        PEOATR(step, act_prompt="Do it.")
    with pytest.raises(UsageError, match="observe_prompt"):
        Deliberate(step, observe_prompt="")
    with pytest.raises(UsageError, match="PEOATR needs a TurnRunner"):
        PEOATR("a step")  # type: ignore[arg-type]
    assert repr(Deliberate(step, max_rounds=3)).startswith("Deliberate(") and "max_rounds=3" in repr(PEOATR(step,
                                                                                                         max_rounds=3))
    with pytest.raises(UsageError, match="PEOATR.run takes a loop.State"):
        await PEOATR(step).run("hi")  # type: ignore[arg-type]
