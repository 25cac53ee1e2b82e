"""ReWOO: a planner writes every call at once, the pipeline runs them by their dependencies, a solver answers."""

import json
import re
from typing import Any

import anyio
import attrs
import pytest

from cognitive import ReWOO, SelfConsistency, WithBudget, WithOutput, WithVerification, answer_value, build
from cognitive.testing import check_pattern
from loop import Budget, Request, Role, State, Step, Text, ToolPipeline, ToolSpec, UsageError, tool
from provider import Function
from verifier import FunctionVerifier, failed, passed

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
    """Takes a while, then gives the tag back."""
    await anyio.sleep(0.3)
    return f"done {tag}"


@tool
async def boom(what: str) -> str:
    """Always fails."""
    raise RuntimeError(f"no {what} today")


TOOLS = [capital, population, slow, boom]


class Model:
    """Plans with the next of ``plans`` (the last repeats) when asked for a plan; solves from the evidence turn."""

    def __init__(self, *plans: list[dict[str, Any]]) -> None:
        self.plans = list(plans)
        self.planning: list[Request] = []
        self.solving: list[Request] = []

    def __call__(self, request: Request) -> str:
        schema = request.options.output_schema
        if schema is not None and "steps" in schema.get("properties", {}):
            plan = self.plans[min(len(self.planning), len(self.plans) - 1)]
            self.planning.append(request)
            return json.dumps({"steps": plan})
        self.solving.append(request)
        evidence = request.turns[-1].text
        found = re.findall(r"^(E\d+) returned: (.*)$", evidence, re.M)
        if not found:
            return "I could not find out."
        return f"From the evidence: {found[-1][1]}."


def make(*plans: list[dict[str, Any]]) -> tuple[Model, Step]:
    model = Model(*plans)
    return model, Step(Function(model), tools=TOOLS)


def ask(text: str = "How many people live in the capital of France?") -> State:
    return State().append(Role.USER, Text(text))


def s(ident: str, name: str, depends_on: list[str] | None = None, **arguments: Any) -> dict[str, Any]:
    return {"id": ident, "tool": name, "arguments": arguments, "depends_on": depends_on or []}


TWO_HOPS = [s("E1", "capital", country="France"), s("E2", "population", ["E1"], city="#E1")]


async def test_a_two_step_plan_passes_evidence_on_and_the_solver_answers_from_it() -> None:
    model, step = make(TWO_HOPS)
    state = await ReWOO(step).run(ask())
    assert state.answer == "From the evidence: 2100000."
    assert state.outcome is not None and state.outcome.ok
    data = state.outcome.data["ReWOO"]
    assert data["plan"] == TWO_HOPS and data["replans"] == 0
    assert [(e["id"], e["ok"], e["result"]) for e in data["evidence"]] == [("E1", True, "Paris"),
                                                                              ("E2", True, "2100000")]
    assert data["evidence"][1]["arguments"] == '{"city": "Paris"}'
    assert len(model.planning) == 1 and len(model.solving) == 1  # one plan, one answer: no call per worker
    # The planner sees the question and the tools, never a result; the solver is offered no tool.
    planning = model.planning[0]
    assert "capital" in planning.turns[-2].text and "Paris" not in "".join(t.text for t in planning.turns)
    assert model.solving[0].tools == () and model.solving[0].options.tool_choice == "none"
    # The conversation: the question, the plan's evidence, the answer. The planning stays out of it.
    assert [t.role for t in state] == [Role.USER, Role.SYSTEM, Role.ASSISTANT]
    assert state[1].kind == "rewoo_evidence" and "E1 = capital" in state[1].text


async def test_a_reference_inside_a_longer_text_is_substituted_as_text() -> None:
    model, step = make([s("E1", "capital", country="Japan"), s("E2", "slow", tag="in #E1 now")])
    state = await ReWOO(step).run(ask())
    assert state.answer == "From the evidence: done in Tokyo now."


async def timed(pattern: ReWOO) -> tuple[State, float]:
    started = anyio.current_time()
    state = await pattern.run(ask("Two things at once?"))
    return state, anyio.current_time() - started


PARALLEL = [s("E1", "slow", tag="a"), s("E2", "slow", tag="b")]


async def test_independent_steps_run_concurrently() -> None:
    _, step = make(PARALLEL)
    state, took = await timed(ReWOO(step))
    assert took < 0.6, f"two independent 0.3 s steps took {took:.2f} s"  # one after the other: at least 0.6 s
    assert [e["result"] for e in state.outcome.data["ReWOO"]["evidence"]] == ["done a", "done b"]


async def test_limit_one_runs_them_one_at_a_time() -> None:
    _, step = make(PARALLEL)
    _, took = await timed(ReWOO(step, limit=1))
    assert took >= 0.6


async def test_a_dependency_without_a_reference_still_orders_the_steps() -> None:
    _, step = make([s("E1", "slow", ["E2"], tag="a"), s("E2", "slow", tag="b")])
    _, took = await timed(ReWOO(step))
    assert took >= 0.6


BAD_PLANS = {
    "cycle": ([s("E1", "slow", ["E2"], tag="a"), s("E2", "slow", ["E1"], tag="b")],
              "E1 -> E2 -> E1 depend on each other in a cycle"),
    "unknown tool": ([s("E1", "serch", q="x")], "unknown tool 'serch'; the tools are: capital, population"),
    "missing reference": ([s("E1", "population", city="#E3")], "refers to #E3, which no step of the plan produces"),
    "later reference": ([s("E1", "population", city="#E2"), s("E2", "capital", country="France")],
                        "refers to #E2, which is not an earlier step"),
    "schema": ([s("E1", "capital", country=5)], "step E1's arguments for 'capital' do not fit its schema"),
}


@pytest.mark.parametrize("bad", list(BAD_PLANS))
async def test_a_bad_plan_goes_back_to_the_planner_with_the_problem(bad: str) -> None:
    plan, problem = BAD_PLANS[bad]
    model, step = make(plan, TWO_HOPS)
    state = await ReWOO(step).run(ask())
    assert state.answer == "From the evidence: 2100000." and state.outcome.ok
    assert len(model.planning) == 2
    report = model.planning[1].turns[-2].text  # the replan report, then ask's turn
    assert "This plan cannot be run" in report and problem in report
    assert state.outcome.data["ReWOO"]["replans"] == 1


@pytest.mark.parametrize("bad", list(BAD_PLANS))
async def test_after_max_replans_the_solver_answers_without_evidence_degraded(bad: str) -> None:
    plan, problem = BAD_PLANS[bad]
    model, step = make(plan)
    state = await ReWOO(step, max_replans=2).run(ask())
    assert len(model.planning) == 3 and len(model.solving) == 1
    assert state.answer == "I could not find out."
    assert state.degraded and "no runnable plan in 3 tries" in state.outcome.reason and problem in state.outcome.reason
    assert state.outcome.data["ReWOO"]["evidence"] == []
    assert "No plan could be run" in model.solving[0].turns[-1].text


async def test_max_replans_zero_asks_once() -> None:
    model, step = make(BAD_PLANS["cycle"][0])
    state = await ReWOO(step, max_replans=0).run(ask())
    assert len(model.planning) == 1 and state.degraded and "in 1 try" in state.outcome.reason


async def test_a_tool_that_raises_is_error_evidence_and_what_needs_it_is_not_run() -> None:
    model, step = make([s("E1", "boom", what="luck"), s("E2", "slow", tag="#E1"), s("E3", "capital", country="Japan")])
    state = await ReWOO(step).run(ask())
    assert state.answer == "From the evidence: Tokyo." and state.outcome.ok
    evidence = state.outcome.data["ReWOO"]["evidence"]
    assert [(e["id"], e["ok"]) for e in evidence] == [("E1", False), ("E2", False), ("E3", True)]
    assert "the tool raised RuntimeError: no luck today" in evidence[0]["result"]
    assert evidence[1]["result"] == "not run: E1 failed"
    assert "E1 failed: error: the tool raised RuntimeError" in model.solving[0].turns[-1].text


async def test_an_empty_plan_goes_straight_to_the_solver() -> None:
    model, step = make([])
    state = await ReWOO(step).run(ask("Hello?"))
    assert state.answer == "I could not find out." and state.outcome.ok
    assert len(model.planning) == 1 and "no steps" in model.solving[0].turns[-1].text


async def test_settings_are_checked() -> None:
    _, step = make([])
    with pytest.raises(UsageError, match="limit"):
        ReWOO(step, limit=0)
    with pytest.raises(UsageError, match="max_replans"):
        ReWOO(step, max_replans=-1)
    with pytest.raises(UsageError, match="tool pipeline"):
        ReWOO(Function(lambda r: "x"))  # type: ignore[arg-type]
    assert repr(ReWOO(step, limit=2)).endswith("max_replans=2, limit=2)")
    assert isinstance(build("rewoo", step, max_replans=1), ReWOO)


class _WithTools:
    """The check's step with a tool pipeline of our own: ReWOO needs only turns and a pipeline."""

    def __init__(self, step: Step) -> None:
        self.step = step
        self.pipeline = ToolPipeline(TOOLS)

    async def turn(self, state: State, options: Any = None) -> State:
        return await self.step.turn(state, options)

    async def submit(self, state: State, role: Any, *parts: Any, meta: Any = None, name: Any = None) -> State:
        return await self.step.submit(state, role, *parts, meta=meta, name=name)


async def test_it_passes_the_pattern_conformance_check_with_a_real_plan() -> None:
    model = Model(TWO_HOPS)
    await check_pattern(lambda step: ReWOO(_WithTools(step)), reply=model)
    assert model.planning
    assert any("E2 returned: 2100000" in r.turns[-1].text for r in model.solving)


async def test_it_nests_in_verification_budget_consistency_and_output() -> None:
    model, step = make(TWO_HOPS)
    seen: list[str] = []

    def check(state: State) -> Any:
        seen.append(state.answer or "")
        return passed() if len(seen) > 1 else failed("say it again")

    state = await WithVerification(ReWOO(step), step, verifiers=FunctionVerifier(check, name="twice")).run(ask())
    assert state.answer == "From the evidence: 2100000." and len(seen) == 2 and len(model.planning) == 2

    model, step = make(TWO_HOPS)
    state = await WithBudget(ReWOO(step), Budget(max_turns=10, max_tool_calls=5)).run(ask())
    assert state.answer == "From the evidence: 2100000." and not state.degraded

    model, step = make(TWO_HOPS)
    state = await WithBudget(ReWOO(step), Budget(max_tool_calls=1)).run(ask())
    assert state.answer and state.degraded  # the second call was refused: the run still answers

    model, step = make(TWO_HOPS)
    state = await SelfConsistency(ReWOO(step), n=3).run(ask())
    assert state.answer == "From the evidence: 2100000." and state.outcome.data["SelfConsistency"]["confidence"] == 1
    assert len(model.planning) == 3


async def test_a_typed_answer_is_asked_of_the_solver() -> None:
    def reply(request: Request) -> str:
        schema = request.options.output_schema or {}
        if "steps" in schema.get("properties", {}):
            return json.dumps({"steps": TWO_HOPS})
        assert "answer" in schema.get("properties", {}), "the solver is asked for the typed answer"
        return json.dumps({"answer": request.turns[-1].text.rsplit(": ", 1)[-1]})

    step = Step(Function(reply), tools=TOOLS)
    shape = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    state = await WithOutput(ReWOO(step), step, shape).run(ask())
    assert answer_value(state, shape) == {"answer": "2100000"}


@attrs.frozen
class Described:
    """A tool with a hand-written spec: the planner lists it from its schema alone."""

    spec: ToolSpec

    async def call(self, arguments: Any) -> str:
        return "ok"


MIXED = ToolSpec("mix", "Mixes things.\n  Over two lines.", {
    "type": "object",
    "properties": {
        "mode": {"enum": ["fast", "slow"], "description": "How to mix."},
        "ids": {"type": "array", "items": {"type": ["integer", "string"]}},
        "box": {"type": "object", "title": "Box", "properties": {"w": {"type": "number"}, "h": {"type": "number"}},
                "required": ["w"]},
        "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "k": {"type": "integer", "minimum": 1, "default": 2, "description": "How many."},
        "rows": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string",
                                                                                  "description": "A cell."}}}},
        "raw": {},
    },
    "required": ["mode", "ids"],
    "additionalProperties": False,
})
NESTED = ToolSpec("nested", "Takes a model.", {"$defs": {"P": {"type": "object", "properties": {"x": {}}}},
                                               "type": "object", "properties": {"p": {"$ref": "#/$defs/P"}}})


async def planner_sees(*specs: ToolSpec) -> str:
    model = Model([])
    await ReWOO(Step(Function(model), tools=[Described(spec) for spec in specs])).run(ask())
    return model.planning[0].turns[-2].text  # the plan turn, then ask's


async def test_the_planner_reads_each_tool_as_a_signature_with_a_note_per_parameter() -> None:
    listed = (await planner_sees(MIXED)).split("Tools (\"?\": an optional parameter):\n", 1)[1]
    assert listed == (
        '- mix(mode: "fast" | "slow", ids: (integer | string)[], box?: {w: number, h?: number}, '
        "maybe?: string | null = null, k?: integer = 2, rows?: array, raw?: any) — Mixes things. Over two lines.\n"
        "  mode: How to mix.\n"
        '  k: How many. {"minimum":1}\n'  # what the signature cannot show stays, as JSON
        '  rows: {"items":{"type":"object","properties":{"a":{"type":"string","description":"A cell."}}}}')


async def test_the_signatures_carry_what_the_demonstrations_tools_say_in_fewer_characters() -> None:
    from examples.rewoo_vs_react import TOOLS as ARCHIVE_TOOLS

    model = Model([])
    await ReWOO(Step(Function(model), tools=ARCHIVE_TOOLS)).run(ask())
    listed = model.planning[0].turns[-2].text.split("Tools (\"?\": an optional parameter):\n", 1)[1]
    specs = "".join(t.spec.name + t.spec.description + json.dumps(t.spec.parameters, separators=(",", ":"))
                    for t in ARCHIVE_TOOLS)
    assert '"properties"' not in listed and len(listed) < 0.75 * len(specs)
    for spec in (t.spec for t in ARCHIVE_TOOLS):
        assert " ".join(spec.description.split()) in listed
        for name, schema in spec.parameters["properties"].items():
            optional = "" if name in spec.parameters["required"] else "?"
            assert f"{name}{optional}: {schema['type']}" in listed and schema["description"] in listed
    assert "- search_people(query: string, limit?: integer = 5) — Find people" in listed


async def test_tools_without_parameters_and_tools_too_rich_for_a_signature() -> None:
    listed = await planner_sees(ToolSpec("now", "The time.", {"type": "object", "properties": {},
                                                               "additionalProperties": False}),
                                ToolSpec("anything", "", {}), NESTED)
    assert "- now() — The time.\n- anything(...)\n" in listed  # none, and any arguments
    assert listed.endswith("- nested — Takes a model.\n  parameters: "
                           + json.dumps(NESTED.parameters, separators=(",", ":")))  # the whole schema, as it is
