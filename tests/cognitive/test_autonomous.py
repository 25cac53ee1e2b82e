"""Autonomous: the model picks each next step from a pool, in branches; the menu never enters the conversation; a
step that writes the answer always ends the run."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from cognitive import (Act, Autonomous, Plan, PoolStep, ReAct, Reflect, SelfConsistency, SingleShot, Synthesize, Think,
                       WithBudget, WithOutput, answer_value, build, left_open)
from cognitive.testing import check_pattern
from loop import (Budget, Request, Role, State, Step, Text, ToolSpec, TurnKind, UsageError, external_tools, main_line,
                  tool)
from provider import Function, tool_call

CAPITALS = {"France": "Paris", "Japan": "Tokyo"}


@tool
async def capital(country: str) -> str:
    """The capital city of a country."""
    return CAPITALS[country]


@tool
async def clock() -> str:
    """The time now."""
    return "09:00"


class Model:
    """Chooses by how many steps the work already holds: the next of ``choices`` (the last repeats); a choice sent
    back is answered with ``retry`` when given. A tool step calls ``capital`` once, then reports; typed stages
    get valid values; any other turn says where it runs."""

    def __init__(self, *choices: str, retry: str | None = None) -> None:
        self.choices = choices
        self.retry = retry
        self.requests: list[Request] = []

    def choosing(self) -> list[Request]:
        return [r for r in self.requests if r.path.endswith("/choose")]

    def __call__(self, request: Request) -> Any:
        self.requests.append(request)
        props = (request.options.output_schema or {}).get("properties", {})
        turns = request.turns
        if "next" in props:
            if self.retry is not None and any(t.kind == TurnKind.VERIFICATION for t in turns):
                return json.dumps({"next": self.retry, "reason": "asked again"})
            ran = sum(1 for t in turns if t.kind == "stage")
            choice = self.choices[min(ran, len(self.choices) - 1)]
            return json.dumps({"next": choice, "reason": f"step {ran + 1}"})
        if "steps" in props:
            return json.dumps({"steps": ["find the capital", "  ", "say it"]})
        if "decision" in props:
            return json.dumps({"decision": "answer", "reason": "the capital is known"})
        if "answer" in props:
            return json.dumps({"answer": "Paris"})
        stage = next((t.meta.get("stage") for t in reversed(turns) if t.kind == "stage"), None)
        if request.tools and request.options.tool_choice != "none" and turns[-1].role is Role.SYSTEM:
            return tool_call("capital", {"country": "France"})
        if turns[-1].role is Role.TOOL:
            return f"found: {turns[-1].tool_results[0].content}"
        if stage == "synthesize":
            return "The capital of France is Paris."
        return f"{stage} at {request.path}"


def make(*choices: str, retry: str | None = None, tools: list[Any] | None = None) -> tuple[Model, Step]:
    model = Model(*choices, retry=retry)
    return model, Step(Function(model), tools=[capital, clock] if tools is None else tools)


def ask(text: str = "What is the capital of France?") -> State:
    return State().append(Role.USER, Text(text))


def data(state: State) -> Any:
    assert state.outcome is not None
    return state.outcome.data["Autonomous"]


async def test_reason_then_analyze_then_synthesize() -> None:
    model, step = make("reason", "analyze", "synthesize")
    state = await Autonomous(step).run(ask())
    assert state.answer == "The capital of France is Paris."
    assert state.outcome is not None and state.outcome.ok
    found = data(state)
    assert found["steps"] == ["reason", "analyze", "synthesize"]
    assert [(c["next"], c["step"]) for c in found["choices"]] == [
        ("reason", "reason"), ("analyze", "analyze"), ("synthesize", "synthesize")]
    assert found["choices"][0]["reason"] == "step 1"
    # The conversation: the question, the notes of the work, the answer stage's instructions and its answer.
    assert [(t.role, t.kind) for t in state] == [(Role.USER, None), (Role.SYSTEM, "work_notes"),
                                                (Role.SYSTEM, "stage"), (Role.ASSISTANT, None)]
    notes = state[1].text
    assert '[reason] capital({"country": "France"}) returned: Paris' in notes
    assert "[reason] found: Paris" in notes and "[analyze] analyze at Autonomous/analyze" in notes
    assert [r.path for r in model.requests] == [
        "Autonomous/choose", "Autonomous/reason/ReAct", "Autonomous/reason/ReAct", "Autonomous/choose",
        "Autonomous/analyze", "Autonomous/choose", "Autonomous"]
    # The reason step worked on the chooser's reason; the chooser was offered no tool but read their names.
    assert "Work on the latest request with the tools: step 1" in model.requests[1].turns[-1].text
    chooser = model.choosing()[0]
    assert chooser.tools == () and "- reason: " in chooser.turns[-2].text and "(tools: capital, clock)" in \
        chooser.turns[-2].text
    assert (chooser.options.output_schema or {})["properties"]["next"]["enum"] == [
        "reason", "analyze", "synthesize", "capital", "clock"]


async def test_the_menu_and_the_choices_never_reach_the_conversation_or_the_answer_stage() -> None:
    model, step = make("reason", "analyze", "synthesize")
    recorded: list[State] = []

    async def record(state: State) -> None:
        recorded.append(state)

    with main_line(recorder=record):
        state = await Autonomous(step).run(ask())
    answering = model.requests[-1]
    stored = [t for s in (state, *recorded) for t in s]
    for turns in (stored, answering.turns, *(r.turns for r in model.requests if not r.path.endswith("/choose"))):
        assert not [t for t in turns if t.kind in ("route", TurnKind.OUTPUT_FORMAT)]
        assert not any("Choose the next step" in t.text or '"next"' in t.text for t in turns)
    assert answering.options.output_schema is None and answering.options.tool_choice == "none"
    assert [t.role for t in recorded[-1]] == [Role.USER, Role.SYSTEM, Role.SYSTEM, Role.ASSISTANT]


async def test_a_model_that_never_chooses_synthesize_is_stopped_after_max_steps() -> None:
    model, step = make("analyze")
    state = await Autonomous(step, max_steps=3).run(ask())
    assert state.answer == "The capital of France is Paris." and state.degraded
    assert state.outcome is not None and "max_steps=3" in state.outcome.reason
    assert "'synthesize' answered from the work done" in state.outcome.reason
    assert data(state)["steps"] == ["analyze", "analyze", "analyze", "synthesize"]
    assert len(model.choosing()) == 3
    assert "At most 3 more steps" in model.choosing()[0].turns[-2].text
    assert "At most 1 more steps" in model.choosing()[-1].turns[-2].text


async def test_choosing_to_answer_at_the_last_step_is_not_degraded() -> None:
    _, step = make("analyze", "synthesize")
    state = await Autonomous(step, max_steps=2).run(ask())
    assert state.outcome is not None and state.outcome.ok and data(state)["steps"] == ["analyze", "synthesize"]


async def test_a_choice_outside_the_pool_is_sent_back_once_with_the_problem() -> None:
    model, step = make("dance", "synthesize", retry="analyze")
    state = await Autonomous(step).run(ask())
    assert state.outcome is not None and state.outcome.ok
    assert data(state)["steps"] == ["analyze", "synthesize"]
    sent_back = model.choosing()[1]
    assert "'dance' is not one of ['reason', 'analyze', 'synthesize', 'capital', 'clock']" in sent_back.turns[-1].text


async def test_a_second_choice_outside_the_pool_falls_back_to_synthesize_degraded() -> None:
    model, step = make("reason", "dance")
    state = await Autonomous(step).run(ask())
    assert state.answer == "The capital of France is Paris." and state.degraded
    assert state.outcome is not None and "choice 2 named no step of the pool, also when asked again" in \
        state.outcome.reason
    found = data(state)
    assert found["steps"] == ["reason", "synthesize"]
    last = found["choices"][-1]
    assert last["step"] == "synthesize" and "dance" in last["next"] and "is not one of" in last["problem"]
    assert len(model.choosing()) == 3  # one good choice, one bad one asked twice
    assert "[reason] found: Paris" in state[1].text  # the work done still reaches the answer


async def test_an_answer_that_is_no_json_at_all_falls_back_too() -> None:
    def reply(request: Request) -> str:
        return "I think we should reason." if request.path.endswith("/choose") else "An answer."

    state = await Autonomous(Step(Function(reply))).run(ask())
    assert state.answer == "An answer." and state.degraded
    assert data(state)["choices"][0]["next"] == "I think we should reason."


async def test_a_tool_name_runs_the_first_step_offering_that_tool() -> None:
    model, step = make("clock", "capital", "synthesize")
    pool = [Act(step.derive(tools=["clock"]), name="timekeeper", description="tell the time"),
            Act(step, name="reason", description="use every tool"), Synthesize(step)]
    state = await Autonomous(step, pool=pool).run(ask())
    found = data(state)
    assert [(c["next"], c["step"]) for c in found["choices"]] == [
        ("clock", "timekeeper"), ("capital", "reason"), ("synthesize", "synthesize")]
    assert found["steps"] == ["timekeeper", "reason", "synthesize"]
    acting = [r for r in model.requests if r.path.endswith("/ReAct")]
    assert "step 1 (use the tool clock)" in acting[0].turns[-1].text
    assert [s.name for s in acting[0].tools] == ["clock"]
    schema = model.choosing()[0].options.output_schema or {}
    assert schema["properties"]["next"]["enum"] == ["timekeeper", "reason", "synthesize", "clock", "capital"]


async def test_a_pool_of_plan_act_reflect_synthesize() -> None:
    model, step = make("plan", "act", "reflect", "answer")
    pool = [Plan(step, max_steps=2), Act(step), Reflect(step), Synthesize(step, name="answer")]
    state = await Autonomous(step, pool=pool).run(ask())
    assert state.outcome is not None and state.outcome.ok
    assert data(state)["steps"] == ["plan", "act", "reflect", "answer"]
    notes = state[1].text
    assert '[plan] {"steps": ["find the capital", "  ", "say it"]}' in notes
    assert '[reflect] {"decision": "answer"' in notes and "[act] found: Paris" in notes
    assert "- answer: write the final answer from everything found, and finish (writes the answer" in \
        model.choosing()[0].turns[-2].text


async def test_a_pool_step_runs_any_pattern_under_its_name() -> None:
    model, step = make("lookup", "synthesize")
    pool = [PoolStep("lookup", "ask a one-shot model", SingleShot(step), instructions="Say what you know."),
            PoolStep("synthesize", "write the answer", SingleShot(step))]
    state = await Autonomous(step, pool=pool).run(ask())
    assert state.outcome is not None and state.outcome.ok
    assert "[lookup] found: Paris" in state[1].text  # SingleShot called the tool, then answered
    assert state[2].text == "Next step: synthesize (write the answer)." and state[2].meta["stage"] == "synthesize"
    assert data(state)["steps"] == ["lookup", "synthesize"]
    lookup = next(r for r in model.requests if r.path == "Autonomous/lookup/SingleShot")
    assert lookup.turns[-1].text == "Say what you know." and lookup.turns[-1].meta["stage"] == "lookup"


async def test_a_deciding_step_that_never_gives_a_value_adds_nothing_and_degrades() -> None:
    calls: list[str] = []

    def reply(request: Request) -> str:
        calls.append(request.path)
        props = (request.options.output_schema or {}).get("properties", {})
        if "next" in props:
            return json.dumps({"next": "plan" if calls.count("Autonomous/choose") == 1 else "synthesize",
                               "reason": "r"})
        return "not a plan" if "steps" in props else "An answer."

    step = Step(Function(reply))
    state = await Autonomous(step, pool=[Plan(step), Synthesize(step)]).run(ask())
    assert state.answer == "An answer." and state.degraded
    assert state.outcome is not None and "step 1 ('plan') gave no valid answer" in state.outcome.reason
    assert data(state)["steps"] == ["synthesize"]
    assert calls.count("Autonomous/plan") == 2  # asked, sent back once, then given up
    assert "[plan]" not in state[1].text


async def test_a_step_whose_own_run_ended_degraded_degrades_the_run() -> None:
    def reply(request: Request) -> Any:
        props = (request.options.output_schema or {}).get("properties", {})
        if "next" in props:
            ran = sum(1 for t in request.turns if t.kind == "stage")
            return json.dumps({"next": ["reason", "synthesize"][min(ran, 1)], "reason": "r"})
        if request.options.tool_choice == "none":
            return "An answer."
        return tool_call("clock", {})

    step = Step(Function(reply), tools=[clock])
    pool = [Act(step, name="reason", max_turns=2), Synthesize(step)]
    state = await Autonomous(step, pool=pool).run(ask())
    assert state.answer == "An answer." and state.degraded
    assert state.outcome is not None and "step 1 ('reason') ended degraded: ReAct reached max_turns=2" in \
        state.outcome.reason


async def test_an_answering_step_that_leaves_calls_for_the_caller_returns_them_at_once() -> None:
    weather = ToolSpec("weather", "The weather, from the caller's app.",
                       {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    model, step = make("analyze", "synthesize")

    def reply(request: Request) -> Any:
        if request.path == "Autonomous/ReAct":
            return tool_call("weather", {"city": "Oslo"})
        return model(request)

    step = Step(Function(reply), tools=[capital])
    pool = [Think(step, name="analyze"), PoolStep("synthesize", "answer, asking the caller's app", ReAct(step))]
    with external_tools([weather]):
        state = await Autonomous(step, pool=pool).run(ask())
    assert left_open(state) and state.outcome is not None and state.outcome.status == "pending"
    assert data(state)["steps"] == ["analyze", "synthesize"]
    assert all("weather" not in [s.name for s in r.tools] for r in model.requests)  # the work never offers it


def test_invalid_pools_and_settings_are_refused_with_clear_errors() -> None:
    _, step = make()
    cases: list[tuple[Any, str]] = [
        ([], "pool is empty"),
        ("reason", "pool takes a sequence of stages"),
        ({"a": Synthesize(step)}, "pool takes a sequence of stages"),
        ([Think(step), Think(step)], "two pool steps are named 'think'"),
        ([Think(step), Act(step)], "has no step that writes the answer: add Synthesize(step)"),
        ([SingleShot(step), Synthesize(step)], "give a pattern a name with PoolStep"),
        ([("look", "look things up", SingleShot(step)), Synthesize(step)], "pool item 0 is not a stage"),
    ]
    for pool, problem in cases:
        with pytest.raises(UsageError, match=problem.replace("(", r"\(").replace(")", r"\)")):
            Autonomous(step, pool=pool)
    with pytest.raises(UsageError, match="max_steps must be a positive integer"):
        Autonomous(step, max_steps=0)
    with pytest.raises(UsageError, match=r"prompt must contain \{left\}"):
        Autonomous(step, prompt="Pick one of {menu}.")
    with pytest.raises(UsageError, match="Autonomous needs a TurnRunner"):
        Autonomous("a step")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="chooser"):
        Autonomous(step, chooser=42)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="a step's name is an identifier"):
        PoolStep("look up", "look things up", SingleShot(step))
    with pytest.raises(UsageError, match="description must be a non-empty string"):
        PoolStep("look", " ", SingleShot(step))
    with pytest.raises(UsageError, match="needs a Pattern"):
        PoolStep("look", "look things up", step)  # type: ignore[arg-type]
    # A pool named "synthesize" answers as well as a Synthesize does.
    assert Autonomous(step, pool=[PoolStep("synthesize", "answer", SingleShot(step))]).pool[0].name == "synthesize"
    assert repr(Autonomous(step, max_steps=3)).endswith("pool=[reason, analyze, synthesize], max_steps=3)")


async def test_a_chooser_of_its_own_makes_the_choices() -> None:
    model, step = make("reason")
    chooser_model = Model("analyze", "synthesize")
    chooser = Step(Function(chooser_model))
    state = await Autonomous(step, chooser=chooser).run(ask())
    assert data(state)["steps"] == ["analyze", "synthesize"]
    assert len(chooser_model.requests) == 2 and not model.choosing()


def choosing_reply(request: Request) -> Any:
    """For the conformance check: reason once, then answer."""
    return Model("reason", "synthesize")(request)


async def test_it_passes_the_pattern_conformance_check() -> None:
    await check_pattern(lambda step: Autonomous(step), reply=choosing_reply)
    await check_pattern(lambda step: Autonomous(step))  # every choice fails: the fallback still answers


async def test_a_budget_that_runs_out_answers_from_the_work_done_degraded() -> None:
    model, step = make("reason", "analyze", "synthesize")
    state = await WithBudget(Autonomous(step), Budget(max_turns=4, name="small")).run(ask())
    assert state.answer and state.degraded
    assert state.outcome is not None and "budget 'small' ran out (max_turns=4 reached)" in state.outcome.reason
    # choose, tool call, report, choose: analyze was refused; the answer was written from the notes.
    assert [(t.role, t.kind) for t in state] == [(Role.USER, None), (Role.SYSTEM, "work_notes"),
                                                (Role.SYSTEM, "budget"), (Role.ASSISTANT, None)]
    assert "[reason] found: Paris" in state[1].text
    assert "[reason] found: Paris" in model.requests[-1].turns[1].text

    _, step = make("reason")
    state = await WithBudget(Autonomous(step), Budget(max_turns=1)).run(ask())
    assert state.answer and state.degraded  # nothing was done: the answer comes from the question alone


async def test_it_nests_in_with_output_and_the_answer_stage_writes_the_typed_answer() -> None:
    model, step = make("reason", "synthesize")
    shape = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    state = await WithOutput(Autonomous(step), step, shape).run(ask())
    assert answer_value(state, shape) == {"answer": "Paris"}
    assert model.requests[-1].path == "WithOutput/Autonomous"
    assert model.requests[-1].options.output_schema is not None
    assert "answer" in model.requests[-1].options.output_schema["properties"]
    # Only the answer stage was asked for the run's shape: the working steps were not.
    assert all("answer" not in (r.options.output_schema or {}).get("properties", {}) for r in model.requests[:-1])


async def test_it_nests_in_self_consistency() -> None:
    model, step = make("reason", "analyze", "synthesize")
    state = await SelfConsistency(Autonomous(step), n=3).run(ask())
    assert state.outcome is not None and state.outcome.data["SelfConsistency"]["confidence"] == 1
    assert state.answer == "The capital of France is Paris."
    assert {r.path.split("/")[1] for r in model.requests} == {"sample 1", "sample 2", "sample 3"}
    assert len(model.choosing()) == 9


async def test_cancelling_during_a_slow_tool_raises_out_of_the_run() -> None:
    started = anyio.Event()

    @tool
    async def slow(topic: str) -> str:
        """Takes forever."""
        started.set()
        await anyio.sleep_forever()
        return "never"

    def reply(request: Request) -> Any:
        if "next" in (request.options.output_schema or {}).get("properties", {}):
            return json.dumps({"next": "slow", "reason": "look it up"})
        return tool_call("slow", {"topic": "x"})

    returned = False

    async def run() -> None:
        nonlocal returned
        await Autonomous(Step(Function(reply), tools=[slow])).run(ask())
        returned = True

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await started.wait()
            group.cancel_scope.cancel()
    assert not returned


def test_the_registry_builds_it_from_a_step_alone() -> None:
    step = Step(Function(lambda request: "x"))
    assert isinstance(build("autonomous", step), Autonomous)
    assert build("autonomous", step, max_steps=2).max_steps == 2
