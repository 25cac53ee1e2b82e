"""PlanAndExecute: a typed plan, each subgoal run by an executor pattern in a branch, a review after each one that
keeps, replaces or ends the plan; capped, and answered from work notes on the main line."""

import json
import re
from typing import Any

import anyio
import pytest

from cognitive import PlanAndExecute, ReAct, WithBudget, WithOutput, answer_value, build
from cognitive.planning._plan_execute import WHOLE_REQUEST
from cognitive.testing import check_pattern
from loop import Budget, Options, Request, Role, State, Step, Text, UsageError, main_line, tool
from loop.errors import VerificationFailed
from provider import Function, tool_call

CAPITALS = {"France": "Paris", "Japan": "Tokyo"}
PEOPLE = {"Paris": 2_100_000, "Tokyo": 14_000_000}


@tool
async def capital(country: str) -> str:
    """The capital city of a country."""
    return CAPITALS[country]


@tool
async def population(city: str) -> int:
    """How many people live in a city."""
    return PEOPLE[city]


@tool
async def slow(tag: str) -> str:
    """Takes a long while."""
    await anyio.sleep(5)
    return tag


TOOLS = [capital, population, slow]
SUBGOAL = re.compile(r"(?:with the tools|Your step now): (\w+):(\w+)")


class Model:
    """Plans with ``plans[0]``, re-plans with the next of ``plans`` (the last repeats); reviews with the next of
    ``decisions`` (the last repeats); a step ``tool:arg`` calls that tool on that argument and reports what it
    returned; the answer lists every result the notes hold. ``"invalid"`` as a plan or decision is no JSON."""

    def __init__(self, plans: list[Any], decisions: tuple[str, ...] = ("continue",)) -> None:
        self.plans = plans
        self.decisions = decisions
        self.requests: dict[str, list[Request]] = {"plan": [], "replan": [], "review": [], "step": [], "answer": []}

    def __call__(self, request: Request) -> Any:
        properties = (request.options.output_schema or {}).get("properties", {})
        if "steps" in properties:
            kind = "replan" if "/replan" in request.path else "plan"
            asked = self.requests[kind]
            asked.append(request)
            if kind == "plan":
                plan = self.plans[0]
            else:
                plan = self.plans[min(len(self.requests["replan"]), len(self.plans) - 1)]
            return "invalid" if plan == "invalid" else json.dumps({"steps": plan})
        if "decision" in properties:
            self.requests["review"].append(request)
            decision = self.decisions[min(len(self.requests["review"]), len(self.decisions)) - 1]
            return "invalid" if decision == "invalid" else json.dumps({"decision": decision, "reason": "because"})
        if "/step " in request.path:
            self.requests["step"].append(request)
            last = request.turns[-1]
            if last.role is Role.TOOL:
                result = last.tool_results[0]
                return f"{result.name} gave {result.content}"
            found = SUBGOAL.findall(next(t.text for t in reversed(request.turns) if t.role is Role.SYSTEM))
            spec = next((s for s in request.tools if found and s.name == found[-1][0]), None)
            if spec is None:  # no plan, or a step with no tools: it reports in words
                return "I worked on it."
            return tool_call(spec.name, {next(iter(spec.parameters["properties"])): found[-1][1]})
        self.requests["answer"].append(request)
        notes = " ".join(t.text for t in request.turns if t.kind == "work_notes")
        found = ", ".join(dict.fromkeys(re.findall(r"gave (\S+)", notes))) or "nothing"
        if "answer" in properties:
            return json.dumps({"answer": found})
        return f"Found: {found}."


def make(plans: list[Any], decisions: tuple[str, ...] = ("continue",)) -> tuple[Model, Step]:
    model = Model(plans, decisions)
    return model, Step(Function(model), tools=TOOLS)


def ask(text: str = "How many people live in the capital of France?") -> State:
    return State().append(Role.USER, Text(text))


def data(state: State) -> dict[str, Any]:
    assert state.outcome is not None
    found: dict[str, Any] = state.outcome.data["PlanAndExecute"]
    return found


def tool_turns(request: Request) -> list[str]:
    return [r.content for t in request.turns for r in t.tool_results]


TWO = ["capital:France", "population:Paris"]


async def test_each_subgoal_runs_in_its_own_branch_and_the_answer_is_written_from_the_notes() -> None:
    model, step = make([[*TWO, "capital:Japan"]])
    state = await PlanAndExecute(step).run(ask())
    assert state.answer == "Found: Paris, 2100000, Tokyo."
    assert state.outcome is not None and state.outcome.ok
    found = data(state)
    assert found["plans"] == [[*TWO, "capital:Japan"]] and found["replans"] == 0 and found["ledger"] is False
    assert [(s["subgoal"], s["status"], s["result"]) for s in found["steps"]] == [
        ("capital:France", "ok", "capital gave Paris"), ("population:Paris", "ok", "population gave 2100000"),
        ("capital:Japan", "ok", "capital gave Tokyo")]
    assert [d["decision"] for d in found["decisions"]] == ["continue"] * 3
    # One plan, two turns per step, a review after each, one answer.
    assert [len(model.requests[k]) for k in ("plan", "replan", "review", "step", "answer")] == [1, 0, 3, 6, 1]
    assert {r.path for r in model.requests["step"]} == {f"PlanAndExecute/step {n}/ReAct" for n in (1, 2, 3)}
    # Without a ledger a later step reads the earlier steps' work; the executor is never asked for the run's answer.
    assert tool_turns(model.requests["step"][2]) == ["Paris"]
    assert all(r.options.output_schema is None for r in model.requests["step"])
    # The conversation: the question, the work notes, the answer stage; the stages' own turns stay in branches.
    assert [t.role for t in state] == [Role.USER, Role.SYSTEM, Role.SYSTEM, Role.ASSISTANT]
    assert state[1].kind == "work_notes" and "[step 2] population" in state[1].text
    assert "returned: 2100000" in state[1].text
    assert state[2].meta["stage"] == "synthesize"
    assert not any(r.role is Role.TOOL for r in state)


async def test_a_review_that_asks_to_replan_replaces_the_remaining_steps() -> None:
    model, step = make([["capital:France", "population:Lyon", "capital:Nowhere"], ["population:Paris"]],
                       ("replan", "continue"))
    state = await PlanAndExecute(step).run(ask())
    assert state.answer == "Found: Paris, 2100000." and state.outcome.ok
    found = data(state)
    assert found["plans"] == [["capital:France", "population:Lyon", "capital:Nowhere"], ["population:Paris"]]
    assert [s["subgoal"] for s in found["steps"]] == ["capital:France", "population:Paris"]
    assert found["replans"] == 1 and [d["decision"] for d in found["decisions"]] == ["replan", "continue"]
    # The re-planner reads what was found and what was still to do.
    replan = model.requests["replan"][0]
    assert replan.path == "PlanAndExecute/replan 1"
    asked = replan.turns[-2].text  # the re-plan instructions, then ask's schema turn
    assert "1. capital:France -> capital gave Paris" in asked and "2. population:Lyon" in asked
    assert "at most 7" in asked


async def test_an_empty_replan_answers_at_once_and_an_answer_decision_stops_the_plan() -> None:
    model, step = make([TWO, []], ("replan",))
    state = await PlanAndExecute(step).run(ask())
    assert state.outcome.ok and [s["subgoal"] for s in data(state)["steps"]] == ["capital:France"]
    assert data(state)["plans"] == [TWO, []]

    model, step = make([TWO], ("answer",))
    state = await PlanAndExecute(step).run(ask())
    assert state.outcome.ok and state.answer == "Found: Paris."
    assert len(model.requests["step"]) == 2 and len(model.requests["review"]) == 1


async def test_an_empty_plan_goes_straight_to_the_answer() -> None:
    model, step = make([[]])
    state = await PlanAndExecute(step).run(ask("Hello?"))
    assert state.answer == "Found: nothing." and state.outcome.ok
    assert data(state)["steps"] == [] and not model.requests["review"]


async def test_past_max_replans_the_work_stops_and_the_answer_is_degraded() -> None:
    model, step = make([["capital:France"], ["capital:Japan"]], ("replan",))
    state = await PlanAndExecute(step, max_replans=1).run(ask())
    assert state.answer == "Found: Paris, Tokyo." and state.degraded
    assert "max_replans=1 reached" in state.outcome.reason and "after step 2" in state.outcome.reason
    assert data(state)["replans"] == 1 and len(model.requests["replan"]) == 1

    model, step = make([["capital:France"]], ("replan",))
    state = await PlanAndExecute(step, max_replans=0).run(ask())
    assert state.degraded and "max_replans=0" in state.outcome.reason and not model.requests["replan"]


async def test_past_max_steps_the_work_stops_and_the_answer_is_degraded() -> None:
    model, step = make([TWO, ["capital:Japan", "population:Tokyo"]], ("replan", "continue"))
    state = await PlanAndExecute(step, max_steps=2).run(ask())
    assert state.answer == "Found: Paris, Tokyo." and state.degraded
    assert "max_steps=2 reached with 1 step still to do" in state.outcome.reason
    assert [s["subgoal"] for s in data(state)["steps"]] == ["capital:France", "capital:Japan"]

    # A review at the cap that wants a re-plan ends the work there, without asking for one.
    model, step = make([TWO, ["capital:Japan"]], ("continue", "replan"))
    state = await PlanAndExecute(step, max_steps=2).run(ask())
    assert state.degraded and "max_steps=2 reached with more steps still to do" in state.outcome.reason
    assert not model.requests["replan"]

    # A first plan is cut to max_steps (its prompt says so); a review at the cap may end the work cleanly.
    model, step = make([[*TWO, "capital:Japan"]], ("continue", "answer"))
    state = await PlanAndExecute(step, max_steps=2).run(ask())
    assert state.outcome.ok and data(state)["plans"] == [TWO]
    assert "at most 2." in model.requests["plan"][0].turns[-2].text


async def test_a_plan_that_never_validates_falls_back_to_one_step_for_the_whole_request() -> None:
    model, step = make(["invalid"])
    state = await PlanAndExecute(step).run(ask())
    assert state.answer and state.degraded
    assert "the planner gave no valid plan" in state.outcome.reason
    assert len(model.requests["plan"]) == 2  # the plan's one retry, then the fallback
    assert [s["subgoal"] for s in data(state)["steps"]] == [WHOLE_REQUEST]
    assert len(model.requests["answer"]) == 1


async def test_a_review_or_replan_that_never_validates_keeps_the_plan_bounded() -> None:
    model, step = make([TWO], ("invalid",))
    state = await PlanAndExecute(step).run(ask())
    assert state.answer == "Found: Paris, 2100000." and state.degraded
    assert "the review after step 1 gave no valid decision" in state.outcome.reason
    assert len(model.requests["review"]) == 4  # two tries after each step, no more

    model, step = make([TWO, "invalid"], ("replan", "continue"))
    state = await PlanAndExecute(step).run(ask())
    assert state.answer == "Found: Paris, 2100000." and state.degraded
    assert "re-plan 1 gave no valid plan" in state.outcome.reason and data(state)["replans"] == 1
    assert [s["subgoal"] for s in data(state)["steps"]] == TWO  # the old remaining step was kept


class Failing:
    """An executor whose typed stage never validates on its first subgoal."""

    def __init__(self, inner: ReAct) -> None:
        self.inner = inner
        self.runs = 0

    async def run(self, state: State) -> State:
        self.runs += 1
        if self.runs == 1:
            raise VerificationFailed("the answer never matched Facts", state=state, results=())
        return await self.inner.run(state)


async def test_an_executor_that_fails_or_degrades_is_recorded_and_the_work_goes_on() -> None:
    model, step = make([TWO])
    state = await PlanAndExecute(step, executor=Failing(ReAct(step))).run(ask())
    assert state.answer == "Found: 2100000." and state.outcome.ok
    steps = data(state)["steps"]
    assert [s["status"] for s in steps] == ["failed", "ok"]
    assert "the answer never matched Facts" in steps[0]["result"]
    assert "1. capital:France -> [failed] the step gave no valid answer" in model.requests["review"][0].turns[-2].text

    model, step = make([TWO])
    state = await PlanAndExecute(step, executor=ReAct(step, max_turns=1)).run(ask())
    assert state.outcome.ok and [s["status"] for s in data(state)["steps"]] == ["degraded", "degraded"]


async def test_a_tool_that_raises_is_an_error_result_the_executor_reads() -> None:
    model, step = make([["capital:Atlantis", "capital:Japan"]])
    state = await PlanAndExecute(step).run(ask())
    assert state.outcome.ok and state.answer is not None and "Tokyo" in state.answer
    first = data(state)["steps"][0]
    assert first["status"] == "ok" and "capital gave error: the tool raised KeyError" in first["result"]


async def test_calls_a_step_leaves_for_the_caller_are_closed_and_the_work_goes_on() -> None:
    model, step = make([TWO])
    holding = ReAct(step.derive(options=Options(run_tools=False)))
    state = await PlanAndExecute(step, executor=holding).run(ask())
    assert state.answer and state.outcome.ok and not state.pending_calls
    steps = data(state)["steps"]
    assert [s["status"] for s in steps] == ["failed", "failed"] and "left tool calls" in steps[0]["result"]
    # The next step's transcript is valid: the open call was answered with an error.
    assert tool_turns(model.requests["step"][1]) == ["error: not run: a step of a plan cannot wait for the caller"]


async def test_with_a_ledger_a_step_sees_the_request_the_plan_and_the_ledger_but_no_transcript() -> None:
    conversation = (State().append(Role.SYSTEM, Text("You are a careful geographer."))
                    .append(Role.USER, Text("Earlier question?")).append(Role.ASSISTANT, Text("Earlier answer."))
                    .append(Role.USER, Text("How many people live in the capital of France?")))
    model, step = make([TWO])
    state = await PlanAndExecute(step, ledger=True).run(conversation)
    assert state.answer == "Found: Paris, 2100000." and state.outcome.ok and data(state)["ledger"] is True
    second = [r for r in model.requests["step"] if r.path == "PlanAndExecute/step 2/ReAct"][0]
    assert [t.role for t in second.turns] == [Role.SYSTEM, Role.USER, Role.SYSTEM]
    assert second.turns[0].text == "You are a careful geographer."
    assert second.turns[1].text == "How many people live in the capital of France?"
    shown = second.turns[2].text
    assert "1. capital:France -> capital gave Paris" in shown and "Your step now: population:Paris" in shown
    assert tool_turns(second) == [] and "Earlier answer." not in "".join(t.text for t in second.turns)
    # The reviews read the same ledger, never a step's turns; the notes hold the steps' reports.
    assert all(tool_turns(r) == [] for r in model.requests["review"])
    assert "capital gave Paris" in model.requests["review"][0].turns[-2].text
    assert "[step 1] capital:France" in state[-3].text and "returned:" not in state[-3].text

    # Without the ledger the same step reads the earlier step's tool result and the whole conversation.
    model, step = make([TWO])
    await PlanAndExecute(step).run(conversation)
    second = [r for r in model.requests["step"] if r.path == "PlanAndExecute/step 2/ReAct"][0]
    assert tool_turns(second) == ["Paris"] and "Earlier answer." in "".join(t.text for t in second.turns)


async def test_a_budget_that_runs_out_mid_work_still_answers_from_the_work_done() -> None:
    model, step = make([[*TWO, "capital:Japan"]])
    state = await WithBudget(PlanAndExecute(step), Budget(max_turns=5)).run(ask())
    assert state.degraded and "ran out" in state.outcome.reason
    assert state.answer == "Found: Paris."  # written from the notes the run offered, not from nothing
    assert len(model.requests["step"]) < 6
    assert [t.kind for t in state][:2] == [None, "work_notes"]

    model, step = make([TWO])
    state = await WithBudget(PlanAndExecute(step), Budget(max_turns=20)).run(ask())
    assert state.answer == "Found: Paris, 2100000." and not state.degraded


async def test_a_budget_that_runs_out_at_the_answer_answers_from_what_the_main_line_stored() -> None:
    recorded: list[State] = []

    async def record(state: State) -> None:
        assert not recorded or state.common_prefix(recorded[-1], meta=False) == len(recorded[-1]), "a rewrite"
        recorded.append(state)

    model, step = make([TWO])
    needed = 1 + 2 * (2 + 1) + 1  # the plan, two steps of two turns and a review each, the answer
    with main_line(recorder=record):
        state = await WithBudget(PlanAndExecute(step), Budget(max_turns=needed - 1)).run(ask())
    assert state.degraded and state.answer == "Found: Paris, 2100000."
    assert [r.path for r in model.requests["answer"]] == ["WithBudget"]  # the answer stage was refused its call
    assert [t.kind for t in state] == [None, "work_notes", "stage", "budget", None]
    assert state.common_prefix(recorded[-1], meta=False) == len(recorded[-1])


async def test_a_typed_answer_is_asked_of_the_answer_stage() -> None:
    model, step = make([TWO])
    shape = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    state = await WithOutput(PlanAndExecute(step), step, shape).run(ask())
    assert answer_value(state, shape) == {"answer": "Paris, 2100000"}
    assert model.requests["answer"][0].options.output_schema == shape
    assert all(r.options.output_schema is None for r in model.requests["step"])


async def test_it_passes_the_pattern_conformance_check() -> None:
    model = Model([TWO])
    await check_pattern(PlanAndExecute, reply=model)
    assert model.requests["step"] and model.requests["review"]
    await check_pattern(lambda step: PlanAndExecute(step, ledger=True))  # words only: every fallback at once


async def test_a_cancelled_run_raises_instead_of_answering() -> None:
    model, step = make([["slow:x", "capital:France"]])
    with pytest.raises(TimeoutError):
        with anyio.fail_after(0.2):
            await PlanAndExecute(step).run(ask())
    assert model.requests["step"] and not model.requests["answer"] and not model.requests["review"]

    with anyio.move_on_after(0.2) as waited:
        await PlanAndExecute(step, ledger=True).run(ask())
        raise AssertionError("the run returned although it was cancelled")
    assert waited.cancelled_caught


async def test_settings_are_checked() -> None:
    _, step = make([TWO])
    for bad, match in [({"max_steps": 0}, "max_steps"), ({"max_replans": -1}, "max_replans"),
                       ({"ledger": "yes"}, "ledger"), ({"executor": object()}, "executor"),
                       ({"review_prompt": "Decide."}, "review_prompt must contain {progress}"),
                       ({"ledger_prompt": "{progress}"}, "{subgoal}"),
                       ({"replan_prompt": "{progress} {other}"}, "replan_prompt may use only")]:
        with pytest.raises(UsageError, match=match):
            PlanAndExecute(step, **bad)
    with pytest.raises(UsageError, match="TurnRunner"):
        PlanAndExecute(object())  # type: ignore[arg-type]
    assert type(PlanAndExecute(step, executor="managed").executor).__name__ == "Managed"
    built = build("plan-and-execute", step, executor="single-shot", max_steps=4, ledger=True)
    assert isinstance(built, PlanAndExecute) and type(built.executor).__name__ == "SingleShot"
    assert (built.max_steps, built.ledger, built.max_replans) == (4, True, 3)
    assert repr(PlanAndExecute(step, max_steps=3, ledger=True)).endswith("max_replans=3, max_steps=3, ledger=True)")
