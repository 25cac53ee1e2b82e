"""Debate: a proposer answers with the tools, a critic sends it back while its problems are severe, a judge rules,
and an answer stage writes the reply from the notes."""

import json
import re
from typing import Any

import anyio
import pytest

from cognitive import Debate, SelfConsistency, WithBudget, WithOutput, WithVerification, answer_value, build
from cognitive.testing import check_pattern
from loop import Budget, Request, Role, State, Step, Text, UsageError, tool
from provider import Function, tool_call
from verifier import FunctionVerifier, failed, passed

CAPITALS = {"France": "Paris", "Japan": "Tokyo"}


@tool
async def capital(country: str) -> str:
    """The capital city of a country."""
    return CAPITALS[country]


@tool
async def boom(country: str) -> str:
    """Always fails."""
    raise RuntimeError(f"no atlas for {country}")


TOOLS = [capital, boom]
JUNK = "I would rather not say."


class Model:
    """The three speakers and the answer stage on one offline model. The critic answers with the next of
    ``critiques`` (``(severity, issues)``, or ``JUNK``; the last repeats), the judge with the next of ``verdicts``
    (``(passed, issues)`` or ``JUNK``). The proposer calls ``tool`` once a round, then proposes from its result;
    the answer stage repeats the last proposal it finds in the notes."""

    def __init__(self, critiques: list[Any] | None = None, verdicts: list[Any] | None = None,
                 tool: str = "capital") -> None:
        self.critiques = critiques or [(0.1, ["a little terse"])]
        self.verdicts = verdicts or [(True, [])]
        self.tool = tool
        self.proposing: list[Request] = []
        self.criticizing: list[Request] = []
        self.judging: list[Request] = []
        self.answering: list[Request] = []

    def __call__(self, request: Request) -> Any:
        properties = (request.options.output_schema or {}).get("properties", {})
        if "passed" in properties:
            self.judging.append(request)
            verdict = self.verdicts[min(len(self.judging), len(self.verdicts)) - 1]
            if verdict == JUNK:
                return JUNK
            ok, issues = verdict
            return json.dumps({"passed": ok, "severity": 0.0 if ok else 0.6, "issues": issues,
                               "summary": "sound" if ok else "not yet"})
        if "severity" in properties:
            self.criticizing.append(request)
            critique = self.critiques[min(len(self.criticizing), len(self.critiques)) - 1]
            if critique == JUNK:
                return JUNK
            severity, issues = critique
            return json.dumps({"severity": severity, "issues": issues})
        if "proposer" in request.path:
            self.proposing.append(request)
            if request.turns[-1].role is Role.SYSTEM:
                return tool_call(self.tool, {"country": "France"})
            draft = sum(1 for t in request.turns if t.meta.get("stage") == "proposer")
            return f"The capital of France is {request.turns[-1].tool_results[0].content} (draft {draft})."
        self.answering.append(request)
        if "answer" in properties:  # a typed answer asked of the answer stage
            return json.dumps({"answer": _last_proposal(request)})
        return f"Final: {_last_proposal(request)}"


def _last_proposal(request: Request) -> str:
    notes = "\n".join(t.text for t in request.turns if t.kind == "work_notes")
    found = re.findall(r"^\[proposer\] (The capital.*)$", notes, re.M)
    return found[-1] if found else "nothing was proposed"


def make(**settings: Any) -> tuple[Model, Step]:
    model = Model(**settings)
    return model, Step(Function(model), tools=TOOLS)


def ask(text: str = "What is the capital of France?") -> State:
    return State().append(Role.USER, Text(text))


def data(state: State) -> Any:
    assert state.outcome is not None
    return state.outcome.data["Debate"]


async def test_a_proposal_the_critic_and_judge_accept_is_answered_in_one_round() -> None:
    model, step = make()
    state = await Debate(step).run(ask())
    assert state.answer == "Final: The capital of France is Paris (draft 1)."
    assert state.outcome is not None and state.outcome.ok
    assert data(state) == {"rounds": 1, "critiques": [{"round": 1, "severity": 0.1, "issues": ["a little terse"]}],
                           "verdicts": [{"round": 1, "passed": True, "severity": 0.0, "issues": [],
                                         "summary": "sound"}],
                           "passed": True, "ended_by": "judge"}
    assert (len(model.proposing), len(model.criticizing), len(model.judging), len(model.answering)) == (2, 1, 1, 1)
    # The conversation only grows by the notes, the answer stage's instructions and the answer.
    assert [t.role for t in state] == [Role.USER, Role.SYSTEM, Role.SYSTEM, Role.ASSISTANT]
    assert state[1].kind == "work_notes" and 'capital({"country": "France"}) returned: Paris' in state[1].text
    assert "[critic]" in state[1].text and "[judge]" in state[1].text
    # The proposer has the tools; the critic, the judge and the answer are offered none.
    assert {s.name for s in model.proposing[0].tools} == {"capital", "boom"}
    assert all(r.tools == () for r in model.criticizing + model.judging + model.answering)
    # Each speaker is named on its turns, so the judge sees who said what.
    named = {t.name for t in model.judging[0].turns if t.role is Role.ASSISTANT}
    assert named == {"proposer", "critic"}


async def test_a_severe_critique_sends_the_answer_back_with_the_critics_turn_named() -> None:
    model, step = make(critiques=[(0.7, ["it names no source"]), (0.2, [])])
    state = await Debate(step).run(ask())
    assert state.answer == "Final: The capital of France is Paris (draft 2)."
    assert state.outcome.ok and data(state)["rounds"] == 2 and data(state)["ended_by"] == "judge"
    assert [c["severity"] for c in data(state)["critiques"]] == [0.7, 0.2]
    assert len(model.judging) == 1  # the judge only rules on what the critic let through
    revision = next(r for r in model.proposing[2:] if r.turns[-1].role is Role.SYSTEM)
    critic_turns = [t for t in revision.turns if t.name == "critic"]
    assert len(critic_turns) == 1 and "it names no source" in critic_turns[0].text
    assert "The critic found these problems" in revision.turns[-1].text
    assert "- it names no source" in revision.turns[-1].text


async def test_severity_at_the_threshold_goes_to_the_judge() -> None:
    model, step = make(critiques=[(0.3, ["minor"])])
    state = await Debate(step, severity=0.3).run(ask())
    assert data(state)["rounds"] == 1 and len(model.judging) == 1
    model, step = make(critiques=[(0.3, ["minor"]), (0.0, [])])
    state = await Debate(step, severity=0.25).run(ask())
    assert data(state)["rounds"] == 2 and len(model.judging) == 1


async def test_a_failed_verdict_sends_the_answer_back_with_the_judges_issues() -> None:
    model, step = make(verdicts=[(False, ["say which country"]), (True, [])])
    state = await Debate(step).run(ask())
    assert state.answer == "Final: The capital of France is Paris (draft 2)." and state.outcome.ok
    assert [v["passed"] for v in data(state)["verdicts"]] == [False, True]
    revision = next(r for r in model.proposing[2:] if r.turns[-1].role is Role.SYSTEM)
    assert "The judge found these problems" in revision.turns[-1].text and "say which country" in revision.turns[-1].text
    assert any(t.name == "judge" for t in revision.turns)


async def test_a_judge_that_never_passes_still_answers_degraded_after_max_rounds() -> None:
    model, step = make(verdicts=[(False, ["still wrong"])])
    state = await Debate(step, max_rounds=2).run(ask())
    assert state.answer == "Final: The capital of France is Paris (draft 2)."
    assert state.degraded and "the judge still did not pass the answer after 2 rounds" in state.outcome.reason
    assert data(state)["rounds"] == 2 and data(state)["ended_by"] == "max_rounds" and not data(state)["passed"]
    assert len(model.judging) == 2 and len(model.answering) == 1


async def test_a_critic_that_is_never_satisfied_still_answers_degraded() -> None:
    model, step = make(critiques=[(0.9, ["all wrong"])])
    state = await Debate(step, max_rounds=3).run(ask())
    assert state.answer == "Final: The capital of France is Paris (draft 3)."
    assert state.degraded and "critic still rated the answer's problems 0.9 (above 0.3) after 3 rounds" \
        in state.outcome.reason
    assert len(model.criticizing) == 3 and model.judging == []


async def test_a_critic_with_no_valid_critique_is_skipped_and_the_judge_rules_degraded() -> None:
    model, step = make(critiques=[JUNK])
    state = await Debate(step).run(ask())
    assert state.answer == "Final: The capital of France is Paris (draft 1)."
    assert state.degraded and "the critic gave no valid critique in round 1" in state.outcome.reason
    assert "error" in data(state)["critiques"][0] and data(state)["ended_by"] == "judge"
    assert len(model.criticizing) == 2  # asked once more, then given up on
    assert JUNK not in state[1].text  # the failed exchange stays out of the notes


async def test_a_judge_with_no_valid_verdict_ends_the_debate_degraded() -> None:
    model, step = make(verdicts=[JUNK])
    state = await Debate(step).run(ask())
    assert state.answer == "Final: The capital of France is Paris (draft 1)."
    assert state.degraded and "the judge gave no valid verdict in round 1" in state.outcome.reason
    assert data(state)["ended_by"] == "invalid_verdict" and data(state)["rounds"] == 1
    assert len(model.judging) == 2 and len(model.answering) == 1


async def test_a_tool_that_raises_is_read_by_the_proposer_and_the_debate_goes_on() -> None:
    def reply(request: Request) -> Any:
        if "proposer" in request.path and request.turns[-1].role is Role.TOOL:
            return f"I could not look it up ({request.turns[-1].tool_results[0].content})."
        return model(request)

    model = Model(tool="boom")
    state = await Debate(Step(Function(reply), tools=TOOLS)).run(ask())
    assert state.outcome.ok and state.answer == "Final: nothing was proposed"
    assert "boom" in state[1].text and "failed" in state[1].text and "no atlas for France" in state[1].text


async def test_a_proposer_stopped_by_its_turn_cap_makes_the_debate_degraded() -> None:
    _, step = make()
    state = await Debate(step, max_turns=1).run(ask())
    assert state.answer == "Final: The capital of France is Paris (draft 1)." and data(state)["passed"]
    assert state.degraded and "the last proposal ended degraded: ReAct reached max_turns=1" in state.outcome.reason


async def test_critic_and_judge_can_be_other_steps() -> None:
    model, step = make()
    critic, judge = Model(critiques=[(0.0, [])]), Model()
    state = await Debate(step, critic=Step(Function(critic)), judge=Step(Function(judge))).run(ask())
    assert state.outcome.ok and data(state)["critiques"][0]["severity"] == 0.0
    assert (len(critic.criticizing), len(judge.judging)) == (1, 1)
    assert model.criticizing == [] and model.judging == []


async def test_settings_are_checked() -> None:
    _, step = make()
    for bad in (-0.1, 1.5, True, "0.3"):
        with pytest.raises(UsageError, match="severity must be a number from 0 to 1"):
            Debate(step, severity=bad)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="max_rounds"):
        Debate(step, max_rounds=0)
    with pytest.raises(UsageError, match="revise_prompt must contain"):
        Debate(step, revise_prompt="Fix {issues}.")
    with pytest.raises(UsageError, match="Debate's critic needs a TurnRunner"):
        Debate(step, critic="cheap")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="Debate needs a TurnRunner"):
        Debate(object())  # type: ignore[arg-type]
    assert repr(Debate(step, max_rounds=2, severity=0.5)).endswith("max_rounds=2, severity=0.5)")


async def test_it_passes_the_pattern_conformance_check() -> None:
    model = Model()
    await check_pattern(lambda step: Debate(step), reply=model)
    assert model.criticizing and model.judging
    await check_pattern(lambda step: Debate(step))  # a model that never answers typed asks: still conforms


async def test_it_nests_in_verification_consistency_and_output() -> None:
    model, step = make()
    seen: list[str] = []

    def check(state: State) -> Any:
        seen.append(state.answer or "")
        return passed() if len(seen) > 1 else failed("say it again")

    state = await WithVerification(Debate(step), step, verifiers=FunctionVerifier(check, name="twice")).run(ask())
    assert state.answer == "Final: The capital of France is Paris (draft 1)." and len(seen) == 2
    assert len(model.answering) == 2

    model, step = make()
    state = await SelfConsistency(Debate(step), n=3).run(ask())
    assert state.answer == "Final: The capital of France is Paris (draft 1)."
    assert state.outcome.data["SelfConsistency"]["confidence"] == 1 and len(model.judging) == 3

    model, step = make()
    shape = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    state = await WithOutput(Debate(step), step, shape).run(ask())
    assert answer_value(state, shape) == {"answer": "The capital of France is Paris (draft 1)."}


async def test_a_budget_that_runs_out_mid_debate_answers_from_the_latest_proposal() -> None:
    model, step = make()
    state = await WithBudget(Debate(step), Budget(max_turns=10)).run(ask())
    assert state.answer == "Final: The capital of France is Paris (draft 1)." and not state.degraded

    model, step = make(critiques=[(0.8, ["no"])])
    # Two turns propose, one criticizes, two propose again: the second critique is refused.
    state = await WithBudget(Debate(step), Budget(max_turns=5)).run(ask())
    assert state.degraded and "ran out" in state.outcome.reason
    assert state.answer == "The capital of France is Paris (draft 2)."
    assert state.common_prefix(ask()) == 1 and model.answering == []


async def test_cancelling_during_a_slow_tool_raises_out_of_the_run() -> None:
    started = anyio.Event()

    @tool
    async def slow(country: str) -> str:
        """Takes forever."""
        started.set()
        await anyio.sleep_forever()
        return "never"

    model = Model(tool="slow")
    returned = False

    async def run() -> None:
        nonlocal returned
        await Debate(Step(Function(model), tools=[slow])).run(ask())
        returned = True

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await started.wait()
            group.cancel_scope.cancel()
    assert not returned and model.criticizing == [] and model.answering == []


def test_the_registry_builds_it_from_a_step_alone() -> None:
    step = Step(Function(lambda request: "x"))
    assert isinstance(build("debate", step), Debate)
    assert build("debate", step, max_rounds=1).max_rounds == 1
