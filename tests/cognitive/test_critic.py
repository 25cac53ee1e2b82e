"""CRITIC: a check with tools in a branch, a typed verdict, and a revision on what the check found."""

import json
from typing import Any

import attrs
import pytest

from cognitive import ReAct, SingleShot, WithVerification
from cognitive.everyday._critic import Critic, ToolCheckedVerifier
from verifier import Verdict
from loop import Request, Role, State, Step, Text, TurnKind, UsageError, tool
from loop.errors import VerificationError
from provider import Function, Scripted, tool_call
from verifier import Status

START = State().append(Role.USER, Text("What is 17 * 24?"))
CHECK = "Critic/verify:tool_check/check"


class Tools:
    """``calculate`` (for the check) and ``search`` (for the answer), counting their calls."""

    def __init__(self) -> None:
        self.calculated: list[str] = []
        tools = self

        @tool
        async def calculate(expression: str) -> str:
            """Evaluate an arithmetic expression."""
            tools.calculated.append(expression)
            a, b = expression.split("*")
            return str(int(a) * int(b))

        @tool
        async def search(query: str) -> str:
            """Search the web."""
            return "no results"

        self.all = [calculate, search]


class Model:
    """Answers the question (wrongly until told), checks answers with ``calculate``, and gives verdicts that
    fail while the answer under check is wrong."""

    def __init__(self, fixes: bool = True) -> None:
        self.fixes = fixes
        self.requests: list[Request] = []

    def __call__(self, request: Request) -> Any:
        self.requests.append(request)
        turns = request.turns
        if request.path.startswith(CHECK):
            checked = _checked_answer(turns)
            if request.options.output_schema is not None:  # the verdict
                if "408" in checked:
                    return json.dumps({"passed": True, "severity": 0, "issues": [], "summary": "holds up"})
                return json.dumps({"passed": False, "severity": 0.8, "issues": [f"17 * 24 is 408, not what was said: {checked}"],
                                   "summary": "wrong"})
            if turns[-1].role is Role.TOOL:
                return f"calculate says {turns[-1].tool_results[0].content}; the answer said: {checked}"
            return tool_call("calculate", {"expression": "17*24"}, id=f"check{len(self.requests)}")
        told = any(t.kind == TurnKind.VERIFICATION for t in turns)
        return "17 * 24 = 408" if told and self.fixes else "17 * 24 = 398"


def _checked_answer(turns: tuple[Any, ...]) -> str:
    """The answer the check is about: the last assistant text before the check's own instruction."""
    index = max(i for i, t in enumerate(turns) if t.role is Role.SYSTEM and "Check the last answer" in t.text)
    return [t for t in turns[:index] if t.role is Role.ASSISTANT][-1].text


def data(state: State) -> Any:
    assert state.outcome is not None
    return state.outcome.data["Critic"]


async def test_a_check_with_tools_finds_an_error_and_the_revision_passes() -> None:
    tools = Tools()
    model = Model()
    step = Step(Function(model), tools=tools.all)
    state = await Critic(ReAct(step), step, tools=["calculate"]).run(START)
    assert state.answer == "17 * 24 = 408"
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT, Role.SYSTEM, Role.ASSISTANT]
    report = state[2]
    assert report.kind == TurnKind.VERIFICATION
    assert "- 17 * 24 is 408, not what was said: 17 * 24 = 398" in report.text
    assert '- `calculate({"expression": "17*24"})` → 408' in report.text, "the evidence goes with the issues"
    assert state.outcome is not None and state.outcome.ok
    assert data(state) == {"rounds": 2, "passed": True, "critic": "tool_check"}
    assert tools.calculated == ["17*24", "17*24"], "each answer was checked with the tool"
    # The checks ran in a branch, with only the checking tool; none of their turns are in the conversation.
    checks = [r for r in model.requests if r.path.startswith(CHECK)]
    assert {r.path for r in checks} == {f"{CHECK}/ReAct", CHECK}
    assert {tuple(s.name for s in r.tools) for r in checks if r.path.endswith("ReAct")} == {("calculate",)}
    assert {tuple(s.name for s in r.tools) for r in model.requests if r.path == "Critic/ReAct"} == {
        ("calculate", "search")}
    assert all(not t.tool_calls and "calculate says" not in t.text for t in state)


async def test_a_check_that_never_passes_degrades_after_max_rounds() -> None:
    model = Model(fixes=False)
    step = Step(Function(model), tools=Tools().all)
    state = await Critic(ReAct(step), step, tools=["calculate"], max_rounds=3).run(START)
    assert state.answer == "17 * 24 = 398" and state.degraded
    assert len([r for r in model.requests if r.path == "Critic/ReAct"]) == 3
    assert len([t for t in state if t.kind == TurnKind.VERIFICATION]) == 2
    assert state.outcome is not None
    assert state.outcome.reason == "critic tool_check still not satisfied after 3 rounds"
    assert data(state)["passed"] is False and "not what was said" in data(state)["feedback"]


async def test_a_check_that_cannot_give_a_verdict_is_an_error() -> None:
    def model(request: Request) -> str:
        return "no idea" if request.path.startswith(CHECK) else "17 * 24 = 408"

    step = Step(Function(model), tools=Tools().all)
    with pytest.raises(VerificationError, match="critic tool_check could not run.*never matched Verdict"):
        await Critic(SingleShot(step), step).run(START)


async def test_a_failing_verdict_without_issues_reports_the_checks_notes() -> None:
    def model(request: Request) -> Any:
        if request.options.output_schema is not None:
            return '{"passed": false, "severity": 0.5, "issues": [], "summary": "off"}'
        return "Looks off to me." if request.path.startswith("check") else "an answer"

    step = Step(Function(model))
    checked = START.append(Role.ASSISTANT, Text("an answer"))
    result = await ToolCheckedVerifier(step).verify(checked)
    assert result.status is Status.FAIL
    assert "named no issue" in result.report and "Looks off to me." in result.report


async def test_the_check_is_a_verifier_that_composes_with_with_verification() -> None:
    model = Model()
    step = Step(Function(lambda r: model(_as_critic(r))), tools=Tools().all)
    check = ToolCheckedVerifier(step.derive(tools=["calculate"]))
    state = await WithVerification(ReAct(step), step, verifiers=[check]).run(START)
    assert state.answer == "17 * 24 = 408"
    assert state.outcome is not None and state.outcome.data["WithVerification"]["results"] == {"tool_check": "pass"}


def _as_critic(request: Request) -> Request:
    """The same request, its path spelled as under ``Critic`` (so ``Model`` answers checks as checks)."""
    path = request.path.replace("WithVerification/verify:tool_check/check", CHECK)
    return attrs.evolve(request, path=path)


async def test_the_check_alone_runs_in_a_branch_and_passes_with_its_evidence() -> None:
    seen: list[str] = []

    def model(request: Request) -> Any:
        seen.append(request.path)
        if request.options.output_schema is not None:
            return '{"passed": true, "severity": 0, "issues": [], "summary": "fine"}'
        if request.turns[-1].role is Role.TOOL:
            return "correct"
        return tool_call("calculate", {"expression": "17*24"})

    step = Step(Function(model), tools=Tools().all)
    result = await ToolCheckedVerifier(step, name="math").verify(START.append(Role.ASSISTANT, Text("408")))
    assert result.status is Status.PASS and result.name == "math"
    assert result.report.startswith("The check found no problems.") and "→ 408" in result.report
    assert seen == ["check/ReAct", "check/ReAct", "check"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_rounds": 0}, "max_rounds"),
    ({"max_check_turns": 0}, "max_turns"),
    ({"check_timeout": 0}, "check_timeout"),
    ({"tools": "calculate"}, "tools= takes tool names"),
    ({"tools": ["calculator"]}, "has no tool 'calculator'"),
    ({"prompt": "revise"}, "prompt must contain {feedback}"),
])
def test_bad_settings_are_refused(kwargs: dict[str, Any], message: str) -> None:
    step = Step(Scripted([]), tools=Tools().all)
    with pytest.raises(UsageError, match=message):
        Critic(SingleShot(step), step, **kwargs)


def test_tools_need_a_step_that_can_derive_and_repr() -> None:
    step = Step(Scripted([]), tools=Tools().all)

    class Executor:
        async def turn(self, state: State, options: Any = None) -> State:
            return state

        async def submit(self, state: State, role: Role, *parts: Any, meta: Any = None) -> State:
            return state

    with pytest.raises(UsageError, match="narrow the tools of with derive"):
        Critic(SingleShot(step), Executor(), tools=["calculate"])  # type: ignore[arg-type]
    assert repr(Critic(SingleShot(step), step, tools=["calculate"])) == (
        f"Critic({SingleShot(step)!r}, tools=['calculate'], max_rounds=2)")
    with pytest.raises(UsageError, match="TurnExecutor"):
        ToolCheckedVerifier(object())  # type: ignore[arg-type]
    assert Verdict(passed=True, severity=0, issues=[], summary="").issues == ()
