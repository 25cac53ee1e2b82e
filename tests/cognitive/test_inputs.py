"""What every pattern's ``run`` refuses before calling a model, and a single tool or verifier given without a list."""

from typing import Any

import pytest

from cognitive import CodeAction, ReAct, SingleShot, WithVerification
from loop import Role, State, Step, Text, UsageError, tool
from provider import Scripted, tool_call
from sandbox import ExecResult, FunctionSandbox
from verifier import FunctionVerifier, passed


@tool
def double(n: int) -> int:
    """Double a number."""
    return 2 * n


def ask(text: str = "What is 2 doubled?") -> State:
    return State().append(Role.USER, Text(text))


def patterns(model: Scripted) -> dict[str, Any]:
    step = Step(model)
    sandbox = FunctionSandbox(lambda argv, **_: ExecResult(0, stdout="FINAL: 4\n"))
    return {
        "ReAct": ReAct(step),
        "SingleShot": SingleShot(step),
        "WithVerification": WithVerification(SingleShot(step), step,
                                             verifiers=FunctionVerifier(lambda state: passed(), name="fine")),
        "CodeAction": CodeAction(step, sandbox),
    }


NAMES = ["ReAct", "SingleShot", "WithVerification", "CodeAction"]


@pytest.mark.parametrize("name", NAMES)
async def test_an_empty_state_is_refused_before_the_model_is_called(name: str) -> None:
    model = Scripted(["never sent"])
    with pytest.raises(UsageError, match=rf"^{name}\.run: the state has no turns.*State\(\)\.append\(Role\.USER"):
        await patterns(model)[name].run(State())
    assert model.requests == []


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("given", [None, "What is 2 doubled?", [ask()]])
async def test_something_that_is_not_a_state_is_refused(name: str, given: object) -> None:
    model = Scripted(["never sent"])
    with pytest.raises(UsageError, match=rf"^{name}\.run takes a loop\.State, got {type(given).__name__}"):
        await patterns(model)[name].run(given)  # type: ignore[arg-type]
    assert model.requests == []


async def test_a_state_with_turns_runs() -> None:
    model = Scripted(["4"])
    assert (await ReAct(Step(model)).run(ask())).answer == "4"


async def test_a_single_tool_needs_no_list() -> None:
    step = Step(Scripted([tool_call("double", {"n": 2}), "4"]), tools=double)
    state = await ReAct(step).run(ask())
    assert state.answer == "4"
    assert [r.content for t in state for r in t.tool_results] == ["4"]


class BridgingSandbox:
    """Takes ``tools=`` as a sandbox that bridges tools into programs does; runs nothing."""

    bridges_tools = True

    async def exec(self, argv: Any, *, files: Any = None, stdin: Any = None, timeout: Any = None,
                   tools: Any = None) -> ExecResult:
        return ExecResult(0)


def test_a_single_tool_needs_no_list_in_code_action() -> None:
    action = CodeAction(Step(Scripted([])), BridgingSandbox(), tools=double)
    assert [t.spec.name for t in action.bridge.tools] == ["double"]


@pytest.mark.parametrize("tools", [lambda n: n, "double", 42])
def test_what_is_neither_a_tool_nor_a_list_of_tools_is_refused_by_name(tools: object) -> None:
    with pytest.raises(UsageError, match="tools takes a Tool or a list of tools"):
        Step(Scripted([]), tools=tools)  # type: ignore[arg-type]


async def test_a_single_verifier_needs_no_list() -> None:
    step = Step(Scripted(["4"]))
    check = FunctionVerifier(lambda state: passed(), name="always")
    wrapped = WithVerification(SingleShot(step), step, verifiers=check)
    assert wrapped.verifiers == (check,)
    state = await wrapped.run(ask())
    assert state.outcome is not None
    assert state.outcome.data["WithVerification"] == {"retries": 0, "results": {"always": "pass"}}


@pytest.mark.parametrize("verifiers", ["always", 42, lambda state: True])
def test_what_is_neither_a_verifier_nor_a_list_of_them_is_refused_by_name(verifiers: object) -> None:
    step = Step(Scripted([]))
    with pytest.raises(UsageError, match="verifiers takes a Verifier or a list of verifiers"):
        WithVerification(SingleShot(step), step, verifiers=verifiers)  # type: ignore[arg-type]
