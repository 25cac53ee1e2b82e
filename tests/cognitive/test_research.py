"""Research: search with the tools, check the findings against their sources (a failed check searches again, at
most max_verify_rounds checks), then synthesize the answer from the notes."""

import json
import re
from typing import Any

import anyio
import pytest

from cognitive import Research, SelfConsistency, WithBudget, WithOutput, WithVerification, answer_value, build
from cognitive.testing import check_pattern
from loop import Budget, Request, Role, State, Step, Text, UsageError, tool
from provider import Function, tool_call
from verifier import FunctionVerifier, failed, passed

POPULATION = {"Paris": 2_100_000, "Tokyo": 14_000_000}


@tool
async def population(city: str) -> int:
    """How many people live in a city."""
    return POPULATION[city]


@tool
async def boom(city: str) -> str:
    """Always fails."""
    raise RuntimeError(f"the census of {city} is lost")


TOOLS = [population, boom]
JUNK = "Looks fine to me."
PASS = {"backed": True, "consistent": True, "covered": True, "issues": []}
UNBACKED = {"backed": False, "consistent": True, "covered": True, "issues": ["the figure has no source"]}


class Model:
    """Search calls ``tool`` once a round and reports what it returned; the check answers with the next of
    ``checks`` (a ``SourceCheck`` as a dict, or ``JUNK``; the last repeats); synthesize repeats the last finding
    in the notes."""

    def __init__(self, checks: list[Any] | None = None, tool: str = "population") -> None:
        self.checks = checks or [PASS]
        self.tool = tool
        self.searching: list[Request] = []
        self.checking: list[Request] = []
        self.answering: list[Request] = []

    def __call__(self, request: Request) -> Any:
        properties = (request.options.output_schema or {}).get("properties", {})
        if "backed" in properties:
            self.checking.append(request)
            check = self.checks[min(len(self.checking), len(self.checks)) - 1]
            return check if check == JUNK else json.dumps(check)
        if "/search/" in request.path:
            self.searching.append(request)
            if request.turns[-1].role is Role.SYSTEM:
                return tool_call(self.tool, {"city": "Paris"})
            search = sum(1 for t in request.turns if t.meta.get("stage") == "search")
            return f"Finding: Paris has {request.turns[-1].tool_results[0].content} people (search {search})."
        self.answering.append(request)
        if "answer" in properties:
            return json.dumps({"answer": _last_finding(request)})
        return f"Answer: {_last_finding(request)}"


def _last_finding(request: Request) -> str:
    notes = "\n".join(t.text for t in request.turns if t.kind == "work_notes")
    found = re.findall(r"^\[search\] Finding: (.*)$", notes, re.M)
    return found[-1] if found else "nothing was found"


def make(**settings: Any) -> tuple[Model, Step]:
    model = Model(**settings)
    return model, Step(Function(model), tools=TOOLS)


def ask(text: str = "How many people live in Paris?") -> State:
    return State().append(Role.USER, Text(text))


def data(state: State) -> Any:
    assert state.outcome is not None
    return state.outcome.data["Research"]


async def test_findings_that_pass_their_check_are_synthesized() -> None:
    model, step = make()
    state = await Research(step).run(ask())
    assert state.answer == "Answer: Paris has 2100000 people (search 1)."
    assert state.outcome is not None and state.outcome.ok
    assert data(state) == {"rounds": 1, "passed": True, "checks": [{"round": 1, **PASS, "passed": True}]}
    assert (len(model.searching), len(model.checking), len(model.answering)) == (2, 1, 1)
    assert [t.role for t in state] == [Role.USER, Role.SYSTEM, Role.SYSTEM, Role.ASSISTANT]
    assert state[1].kind == "work_notes" and 'population({"city": "Paris"}) returned: 2100000' in state[1].text
    assert "[verify]" in state[1].text
    # The search has the tools; the check and the answer are offered none. The check reads the tool results.
    assert {s.name for s in model.searching[0].tools} == {"population", "boom"}
    assert all(r.tools == () for r in model.checking + model.answering)
    assert any(r.content == "2100000" for t in model.checking[0].turns for r in t.tool_results)


async def test_a_failed_check_sends_its_issues_back_to_search() -> None:
    model, step = make(checks=[UNBACKED, PASS])
    state = await Research(step).run(ask())
    assert state.answer == "Answer: Paris has 2100000 people (search 2)." and state.outcome.ok
    assert data(state)["rounds"] == 2 and [c["passed"] for c in data(state)["checks"]] == [False, True]
    again = next(r for r in model.searching[2:] if r.turns[-1].role is Role.SYSTEM)
    assert "A check of your findings" in again.turns[-1].text and "- the figure has no source" in again.turns[-1].text


async def test_a_failed_check_that_names_no_issue_says_what_failed() -> None:
    model, step = make(checks=[{"backed": True, "consistent": True, "covered": False, "issues": []}, PASS])
    await Research(step).run(ask())
    again = next(r for r in model.searching[2:] if r.turns[-1].role is Role.SYSTEM)
    assert "- part of the request is not covered" in again.turns[-1].text


async def test_checks_that_never_pass_still_answer_degraded_after_max_verify_rounds() -> None:
    model, step = make(checks=[UNBACKED])
    state = await Research(step, max_verify_rounds=3).run(ask())
    assert state.answer == "Answer: Paris has 2100000 people (search 3)."
    assert state.degraded and "still failed their check after 3 rounds (the figure has no source)" \
        in state.outcome.reason
    assert data(state)["rounds"] == 3 and not data(state)["passed"] and len(model.checking) == 3
    assert len(model.answering) == 1

    model, step = make(checks=[UNBACKED])
    state = await Research(step, max_verify_rounds=1).run(ask())
    assert state.degraded and "after 1 round (" in state.outcome.reason and len(model.checking) == 1


async def test_a_check_with_no_valid_answer_ends_verifying_degraded() -> None:
    model, step = make(checks=[JUNK])
    state = await Research(step).run(ask())
    assert state.answer == "Answer: Paris has 2100000 people (search 1)."
    assert state.degraded and "the check gave no valid answer in round 1" in state.outcome.reason
    assert "error" in data(state)["checks"][0] and data(state)["rounds"] == 1
    assert len(model.checking) == 2 and len(model.searching) == 2  # asked once more; no search again
    assert JUNK not in state[1].text


async def test_a_tool_that_raises_is_a_finding_the_check_reads() -> None:
    def reply(request: Request) -> Any:
        if "/search/" in request.path and request.turns[-1].role is Role.TOOL:
            return f"No finding: {request.turns[-1].tool_results[0].content}"
        return model(request)

    model = Model(tool="boom", checks=[{**UNBACKED, "issues": ["nothing is backed"]}])
    state = await Research(Step(Function(reply), tools=TOOLS), max_verify_rounds=1).run(ask())
    assert state.degraded and state.answer == "Answer: nothing was found"
    assert "boom" in state[1].text and "the census of Paris is lost" in state[1].text


async def test_a_search_stopped_by_its_turn_cap_makes_the_run_degraded() -> None:
    _, step = make()
    state = await Research(step, max_turns=1).run(ask())
    assert state.answer == "Answer: Paris has 2100000 people (search 1)." and data(state)["passed"]
    assert state.degraded and "the last search ended degraded: ReAct reached max_turns=1" in state.outcome.reason


async def test_the_checker_can_be_another_step() -> None:
    model, step = make()
    checker = Model(checks=[UNBACKED, PASS])
    state = await Research(step, checker=Step(Function(checker))).run(ask())
    assert state.outcome.ok and data(state)["rounds"] == 2
    assert len(checker.checking) == 2 and model.checking == []


async def test_settings_are_checked() -> None:
    _, step = make()
    with pytest.raises(UsageError, match="max_verify_rounds"):
        Research(step, max_verify_rounds=0)
    with pytest.raises(UsageError, match="max_turns"):
        Research(step, max_turns=0)
    with pytest.raises(UsageError, match="search_again_prompt must contain"):
        Research(step, search_again_prompt="Try again.")
    with pytest.raises(UsageError, match="Research's checker needs a TurnRunner"):
        Research(step, checker=3)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="Research needs a TurnRunner"):
        Research(None)  # type: ignore[arg-type]
    assert repr(Research(step, max_verify_rounds=4)).endswith("max_verify_rounds=4)")


async def test_it_passes_the_pattern_conformance_check() -> None:
    model = Model()
    await check_pattern(lambda step: Research(step), reply=model)
    assert model.checking and model.answering
    await check_pattern(lambda step: Research(step))  # a model that never answers typed asks: still conforms


async def test_it_nests_in_verification_consistency_and_output() -> None:
    model, step = make()
    seen: list[str] = []

    def check(state: State) -> Any:
        seen.append(state.answer or "")
        return passed() if len(seen) > 1 else failed("say it again")

    state = await WithVerification(Research(step), step, verifiers=FunctionVerifier(check, name="twice")).run(ask())
    assert state.answer == "Answer: Paris has 2100000 people (search 1)." and len(seen) == 2
    assert len(model.answering) == 2

    model, step = make()
    state = await SelfConsistency(Research(step), n=3).run(ask())
    assert state.answer == "Answer: Paris has 2100000 people (search 1)."
    assert state.outcome.data["SelfConsistency"]["confidence"] == 1 and len(model.checking) == 3

    model, step = make()
    shape = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    state = await WithOutput(Research(step), step, shape).run(ask())
    assert answer_value(state, shape) == {"answer": "Paris has 2100000 people (search 1)."}


async def test_a_budget_that_runs_out_mid_research_answers_from_the_latest_findings() -> None:
    model, step = make()
    state = await WithBudget(Research(step), Budget(max_turns=10)).run(ask())
    assert state.answer == "Answer: Paris has 2100000 people (search 1)." and not state.degraded

    model, step = make(checks=[UNBACKED])
    # Two turns search, one checks, two search again: the second check is refused.
    state = await WithBudget(Research(step), Budget(max_turns=5)).run(ask())
    assert state.degraded and "ran out" in state.outcome.reason
    assert state.answer == "Finding: Paris has 2100000 people (search 2)."
    assert state.common_prefix(ask()) == 1 and model.answering == []

    model, step = make(checks=[UNBACKED])
    state = await WithBudget(Research(step), Budget(max_tool_calls=1)).run(ask())  # the second search's call
    assert state.degraded and state.answer == "Finding: Paris has 2100000 people (search 1)."


async def test_cancelling_during_a_slow_tool_raises_out_of_the_run() -> None:
    started = anyio.Event()

    @tool
    async def slow(city: str) -> str:
        """Takes forever."""
        started.set()
        await anyio.sleep_forever()
        return "never"

    model = Model(tool="slow")
    returned = False

    async def run() -> None:
        nonlocal returned
        await Research(Step(Function(model), tools=[slow])).run(ask())
        returned = True

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await started.wait()
            group.cancel_scope.cancel()
    assert not returned and model.checking == [] and model.answering == []


def test_the_registry_builds_it_from_a_step_alone() -> None:
    step = Step(Function(lambda request: "x"))
    assert isinstance(build("research", step), Research)
    assert build("research", step, max_verify_rounds=1).max_verify_rounds == 1
