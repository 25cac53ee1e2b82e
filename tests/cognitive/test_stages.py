"""The stages as values: each adds its instructions as a stage turn and the model's work; the deciding ones give a
typed value (sent back when it is not valid); the notes of a run's work; each works as a ``Chain`` stage."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from cognitive import (Act, Chain, CheckSources, Criticize, Critique, Decided, Judge, Next, Plan, Reflect, SourceCheck,
                       Stage, Steps, Synthesize, Think, work_notes, write_notes)
from cognitive.planning._stages import OBSERVE, PLAN, SYNTHESIZE, THINK
from loop import (Request, Role, State, Step, Text, ToolCall, ToolResult, TurnKind, UsageError, branch, main_line, tool,
                  typed_answer)
from loop.errors import VerificationFailed
from provider import Function, tool_call
from verifier import Verdict


@tool
async def capital(country: str) -> str:
    """The capital city of a country."""
    return {"France": "Paris"}[country]


class Replies:
    """A model answering each request with the next of ``replies`` (the last repeats), keeping the requests."""

    def __init__(self, *replies: Any) -> None:
        self.replies = replies
        self.requests: list[Request] = []

    def __call__(self, request: Request) -> Any:
        self.requests.append(request)
        reply = self.replies[min(len(self.requests), len(self.replies)) - 1]
        return reply(request) if callable(reply) else reply


def make(*replies: Any) -> tuple[Replies, Step]:
    model = Replies(*replies)
    return model, Step(Function(model), tools=[capital])


def ask(text: str = "What is the capital of France?") -> State:
    return State().append(Role.USER, Text(text))


def stage_turn(state: State, index: int = 1) -> tuple[str, str, str]:
    turn = state[index]
    return turn.role, str(turn.kind), str(turn.meta.get("stage"))


# -- the stages that write ----------------------------------------------------------------------------------------


async def test_think_adds_its_instructions_and_reasons_without_tools() -> None:
    model, step = make("Paris is likely; nothing is confirmed yet.")
    state = await Think(step).run(ask())
    assert [t.role for t in state] == [Role.USER, Role.SYSTEM, Role.ASSISTANT]
    assert stage_turn(state) == (Role.SYSTEM, "stage", "think") and state[1].text == THINK
    assert state.answer == "Paris is likely; nothing is confirmed yet."
    assert model.requests[0].options.tool_choice == "none"

    _, step = make("The lookup returned Paris.")
    state = await Think(step, name="observe", prompt=OBSERVE, description="look at the results").run(ask())
    assert stage_turn(state) == (Role.SYSTEM, "stage", "observe") and state[1].text == OBSERVE


async def test_synthesize_answers_without_tools_and_in_the_runs_shape_on_the_main_line_only() -> None:
    shape = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    model, step = make('{"answer": "Paris"}')
    with typed_answer(shape):
        state = await Synthesize(step).run(ask())
        with branch("draft"):
            await Synthesize(step).run(ask())
    assert state.answer == '{"answer": "Paris"}' and state[1].text == SYNTHESIZE
    assert stage_turn(state) == (Role.SYSTEM, "stage", "synthesize")
    main, drafted = model.requests
    assert main.options.output_schema == shape and main.options.tool_choice == "none"
    assert drafted.options.output_schema is None and drafted.options.tool_choice == "none"
    model, step = make("Paris.")
    await Synthesize(step).run(ask())
    assert model.requests[0].options.output_schema is None  # no shape asked for: none given


async def test_act_runs_a_tool_loop_on_a_subgoal() -> None:
    model, step = make(tool_call("capital", {"country": "France"}), "Found: Paris.")
    state = await Act(step).act(ask(), "find the capital of France")
    assert state.answer == "Found: Paris."
    assert stage_turn(state) == (Role.SYSTEM, "stage", "act")
    assert state[1].text.endswith("with the tools: find the capital of France\nReport what you found; do not "
                                  "answer the whole request yet.")
    assert [r.content for t in state for r in t.tool_results] == ["Paris"]
    assert model.requests[0].tools and model.requests[0].options.tool_choice != "none"

    _, step = make("Nothing to do.")
    state = await Act(step, name="work").run(ask())
    assert "the next thing the request needs." in state[1].text and state[1].meta["stage"] == "work"


async def test_act_is_bounded_by_max_turns() -> None:
    model, step = make(lambda r: "Stopped." if r.options.tool_choice == "none" else
                       tool_call("capital", {"country": "France"}))
    state = await Act(step, max_turns=2).run(ask())
    assert state.answer == "Stopped." and state.degraded and len(model.requests) == 3


# -- the stages that decide -----------------------------------------------------------------------------------


async def test_plan_gives_its_steps_without_blanks_and_at_most_max_steps() -> None:
    model, step = make(json.dumps({"steps": [" find the capital ", "", "   ", "count its people", "compare",
                                             "answer"]}))
    decided = await Plan(step, max_steps=3).decide(ask())
    assert isinstance(decided, Decided) and isinstance(decided.value, Steps)
    assert decided.value.steps == ("find the capital", "count its people", "compare")
    assert stage_turn(decided.state) == (Role.SYSTEM, "stage", "plan")
    assert decided.state[1].text == PLAN.format(max_steps=3) and "at most 3" in decided.state[1].text
    assert decided.state[2].kind == TurnKind.OUTPUT_FORMAT and decided.state.answer is not None
    request = model.requests[0]
    assert request.options.output_schema is not None and "steps" in request.options.output_schema["properties"]
    assert request.options.tool_choice == "none"
    # run gives the state alone, its last turn the plan as the model wrote it.
    state = await Plan(step).run(ask())
    assert json.loads(state.answer or "")["steps"][0] == " find the capital "


async def test_decide_takes_other_instructions() -> None:
    _, step = make(json.dumps({"steps": ["a"]}))
    decided = await Plan(step).decide(ask(), "Plan again: the last plan failed.")
    assert decided.state[1].text == "Plan again: the last plan failed." and decided.state[1].meta["stage"] == "plan"


async def test_a_value_that_is_not_valid_is_sent_back_and_then_fails() -> None:
    model, step = make("no plan", json.dumps({"steps": ["look it up"]}))
    decided = await Plan(step).decide(ask())
    assert decided.value.steps == ("look it up",) and len(model.requests) == 2
    assert model.requests[1].turns[-1].kind == TurnKind.VERIFICATION

    model, step = make("no plan")
    with pytest.raises(VerificationFailed, match="never matched Steps in 3 attempts") as caught:
        await Plan(step, max_retries=2).decide(ask())
    assert len(model.requests) == 3 and isinstance(caught.value.state, State)


async def test_reflect_decides_what_happens_next() -> None:
    model, step = make(json.dumps({"decision": "maybe", "reason": "?"}),
                       json.dumps({"decision": "replan", "reason": "the plan missed the population"}))
    decided = await Reflect(step).decide(ask())
    assert decided.value == Next("replan", "the plan missed the population")
    assert stage_turn(decided.state) == (Role.SYSTEM, "stage", "reflect")
    assert "'maybe' is not one of ['continue', 'replan', 'answer']" in model.requests[1].turns[-1].text


@pytest.mark.parametrize("severity", [1.5, -0.2])
async def test_criticize_refuses_a_severity_outside_zero_to_one_and_asks_again(severity: float) -> None:
    model, step = make(json.dumps({"severity": severity, "issues": ["wrong city"]}),
                       json.dumps({"severity": 0.8, "issues": ["wrong city"]}))
    decided = await Criticize(step).decide(ask())
    assert decided.value == Critique(0.8, ("wrong city",))
    assert stage_turn(decided.state) == (Role.SYSTEM, "stage", "critic")
    report = model.requests[1].turns[-1].text
    assert "refused" in report and "'severity' must be" in report
    with pytest.raises(ValueError):
        Critique(severity, ())


async def test_judge_gives_a_verdict() -> None:
    verdict = {"passed": False, "severity": 0.6, "issues": ["no source"], "summary": "unsupported"}
    _, step = make(json.dumps(verdict))
    decided = await Judge(step).decide(ask())
    assert isinstance(decided.value, Verdict) and decided.value.passed is False
    assert decided.value.issues == ("no source",) and stage_turn(decided.state) == (Role.SYSTEM, "stage", "judge")


@pytest.mark.parametrize(("backed", "consistent", "covered", "passed"), [
    (True, True, True, True), (False, True, True, False), (True, False, True, False), (True, True, False, False)])
async def test_check_sources_passes_only_when_every_check_does(backed: bool, consistent: bool, covered: bool,
                                                              passed: bool) -> None:
    _, step = make(json.dumps({"backed": backed, "consistent": consistent, "covered": covered, "issues": []}))
    decided = await CheckSources(step).decide(ask())
    assert isinstance(decided.value, SourceCheck) and decided.value.passed is passed
    assert stage_turn(decided.state) == (Role.SYSTEM, "stage", "verify")


# -- notes ----------------------------------------------------------------------------------------------------


def test_work_notes_list_each_stages_output_and_tool_calls_but_not_their_instructions() -> None:
    start = ask()
    long = "x" * 2000
    working = (start
               .append(Role.SYSTEM, Text("Carry out the plan."), meta={"kind": "stage", "stage": "act"})
               .append(Role.ASSISTANT, Text("Looking."), ToolCall("c1", "capital", '{"country": "France"}'),
                       ToolCall("c2", "capital", '{"country": "Mars"}'))
               .append(Role.TOOL, ToolResult("c1", "capital", "Paris"),
                       ToolResult("c2", "capital", "error: no such country", is_error=True))
               .append(Role.ASSISTANT, Text("The capital is Paris."))
               .append(Role.SYSTEM, Text("Think now."), meta={"kind": "stage", "stage": "think"})
               .append(Role.SYSTEM, Text("A format note."))
               .append(Role.ASSISTANT, Text(f"  {long}  ")))
    notes = work_notes(start, working)
    assert notes.split("\n\n") == [
        "[act] Looking.",
        "[act] capital({\"country\": \"France\"}) returned: Paris",
        "[act] capital({\"country\": \"Mars\"}) failed: error: no such country",
        "[act] The capital is Paris.",
        f"[think] {long}",
    ]
    assert "Carry out the plan." not in notes and "Think now." not in notes and "A format note." not in notes
    assert work_notes(start, start) == "(nothing: no stage ran)"
    clipped = work_notes(start, start.append(Role.ASSISTANT, ToolCall("c3", "capital", "{}"))
                         .append(Role.TOOL, ToolResult("c3", "capital", long)))
    assert clipped == f"[work] capital({{}}) returned: {'x' * 1500}…"


async def test_write_notes_adds_one_work_notes_turn_to_the_start_and_records_it() -> None:
    _, step = make("unused")
    start = ask()
    working = start.append(Role.SYSTEM, Text("Think."), meta={"kind": "stage", "stage": "think"}).append(
        Role.ASSISTANT, Text("It is Paris."))
    recorded: list[State] = []

    async def record(state: State) -> None:
        recorded.append(state)

    with main_line(recorder=record):
        state = await write_notes(step, start, working)
    assert [t.role for t in state] == [Role.USER, Role.SYSTEM] and state[1].kind == "work_notes"
    assert state[1].text.endswith("[think] It is Paris.") and state.common_prefix(start) == 1
    assert recorded == [state]
    custom = await write_notes(step, start, working, prompt="Found:\n{notes}")
    assert custom[1].text == "Found:\n[think] It is Paris."


# -- settings -------------------------------------------------------------------------------------------------


STAGES: list[Callable[..., Any]] = [Think, Plan, Act, Reflect, Synthesize, Criticize, Judge, CheckSources]


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.__name__)
def test_bad_settings_raise_usage_errors(stage: Callable[..., Any]) -> None:
    _, step = make()
    with pytest.raises(UsageError, match="a stage name is an identifier"):
        stage(step, name="two words")
    with pytest.raises(UsageError, match="description must be a non-empty string"):
        stage(step, description="  ")
    with pytest.raises(UsageError, match="needs a TurnRunner"):
        stage("not a step")
    with pytest.raises(UsageError, match="prompt must be a non-empty string"):
        stage(step, prompt="")
    made = stage(step, name="mine", description="does a thing")
    assert (made.name, made.description) == ("mine", "does a thing")
    assert repr(made).startswith(f"{stage.__name__}(") and repr(made).endswith("name='mine')")


def test_stage_specific_settings_are_checked() -> None:
    _, step = make()
    with pytest.raises(UsageError, match="max_steps must be a positive integer"):
        Plan(step, max_steps=0)
    with pytest.raises(UsageError, match=r"prompt must contain \{max_steps\}"):
        Plan(step, prompt="Plan it.")
    with pytest.raises(UsageError, match="max_turns must be a positive integer"):
        Act(step, max_turns=0)
    with pytest.raises(UsageError, match=r"prompt must contain \{subgoal\}"):
        Act(step, prompt="Do it.")
    for deciding in (Plan, Reflect, Criticize, Judge, CheckSources):
        with pytest.raises(UsageError, match="max_retries must be an integer >= 0"):
            deciding(step, max_retries=-1)


# -- as Chain stages --------------------------------------------------------------------------------------------


async def test_the_stages_work_as_chain_stages() -> None:
    def reply(request: Request) -> Any:
        props = (request.options.output_schema or {}).get("properties", {})
        if "steps" in props:
            return json.dumps({"steps": ["find the capital"]})
        if request.turns[-1].role is Role.TOOL:
            return "Found: Paris."
        if request.path == "Chain/act/ReAct":
            return tool_call("capital", {"country": "France"})
        return "The capital of France is Paris."

    model = Replies(reply)
    step = Step(Function(model), tools=[capital])
    chain = Chain(Stage("plan", "Plan the work.", Plan(step)),
                  Stage("act", "Carry out this plan: {plan}", Act(step)),
                  Stage("final", "Answer from what was found: {act}", Synthesize(step)))
    state = await chain.run(ask())
    assert state.answer == "The capital of France is Paris."
    assert state.outcome is not None and state.outcome.ok
    outputs = state.outcome.data["Chain"]["outputs"]
    assert json.loads(outputs["plan"]) == {"steps": ["find the capital"]} and outputs["act"] == "Found: Paris."
    assert [r.path for r in model.requests] == ["Chain/plan", "Chain/act/ReAct", "Chain/act/ReAct", "Chain"]
    assert 'Carry out this plan: {"steps": ["find the capital"]}' in model.requests[1].turns[1].text
    # The last stage ran on the conversation: its instructions, the stage's own, and the answer.
    assert [t.kind for t in state][1:] == ["stage", "stage", None]
