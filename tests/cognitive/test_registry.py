"""The registry: every pattern by name, settings checked against what the pattern takes."""

import inspect

import pytest

import cognitive
from cognitive import (Chain, Managed, ReAct, RegistryError, Router, SelfConsistency, SingleShot, Stage, Verify,
                       WithBudget, build, names, register, settings)
from loop import Budget, Role, State, Step, Text, UsageError
from provider import Scripted


def step() -> Step:
    return Step(Scripted([]))


def test_every_pattern_and_wrapper_has_a_name() -> None:
    assert names() == ("autonomous", "chain", "chain-of-thought", "code-action", "critic", "debate", "deliberate",
                       "escalation", "graph-of-thoughts", "managed", "mcts", "peoatr", "plan-and-execute", "react",
                       "reflexion", "research", "rewoo", "router", "self-consistency", "self-refine", "single-shot",
                       "tree-of-thoughts", "verify", "with-budget", "with-guardrails", "with-output", "with-verification")


def test_build_passes_settings_and_wraps_react_by_default() -> None:
    s = step()
    react = build("react", s, max_turns=3)
    assert isinstance(react, ReAct) and react.max_turns == 3 and react.step is s
    voted = build("self-consistency", s, n=7)
    assert isinstance(voted, SelfConsistency) and voted.n == 7 and isinstance(voted.inner, ReAct)
    assert isinstance(build("self-consistency", s, inner="verify").inner, Verify)
    budgeted = build("with-budget", s, budget=Budget(max_turns=2), inner=SingleShot(s))
    assert isinstance(budgeted, WithBudget) and budgeted.step is s and isinstance(budgeted.inner, SingleShot)


def test_router_choices_and_chain_stages_are_built_too() -> None:
    s = step()
    router = build("router", s, choices={"math": "verify", "look": ReAct(s)})
    assert isinstance(router, Router) and isinstance(router.choices["math"], Verify)
    chain = build("chain", s, stages=[Stage("a", "x", s), Stage("b", "{a}", s)])
    assert isinstance(chain, Chain) and [st.name for st in chain.stages] == ["a", "b"]
    assert isinstance(build("managed", s), Managed)


def test_an_unknown_name_lists_the_valid_ones_and_suggests_the_closest() -> None:
    with pytest.raises(RegistryError, match=r"no pattern is named 'self_consistency' \(did you mean "
                                            r"'self-consistency'\?\); valid names: autonomous, chain, chain-of-thought"):
        build("self_consistency", step())
    with pytest.raises(ValueError):
        build("nope", step())


def test_an_unknown_or_missing_setting_lists_the_valid_ones() -> None:
    with pytest.raises(RegistryError, match="'react' has no setting 'turns'; its settings are: max_turns, "
                                            "detect_loops"):
        build("react", step(), turns=3)
    with pytest.raises(RegistryError, match="'router' needs the setting 'choices'"):
        build("router", step())
    with pytest.raises(ValueError, match="needs the setting 'budget'"):
        build("with-budget", step())


def test_settings_lists_each_with_its_default() -> None:
    assert settings("react") == {"max_turns": 12, "detect_loops": False}
    assert settings("with-output")["output_type"] is inspect.Parameter.empty
    assert settings("self-consistency")["inner"] == "react"


async def test_a_registered_pattern_of_ones_own_is_built_like_the_others() -> None:
    class Echo:
        def __init__(self, step: Step, *, prefix: str = ">") -> None:
            self.step, self.prefix = step, prefix

        async def run(self, state: State) -> State:
            return state.append(Role.ASSISTANT, Text(f"{self.prefix} {state.last.text}"))

    register("echo-test", Echo)
    try:
        built = build("echo-test", step(), prefix="#")
        assert (await built.run(State().append(Role.USER, Text("hi")))).answer == "# hi"
        with pytest.raises(UsageError, match="already registered"):
            register("echo-test", Echo)
    finally:
        cognitive._registry._FACTORIES.pop("echo-test")
    with pytest.raises(UsageError, match="lower case"):
        register("Echo Test", Echo)


def test_the_verification_gate_cannot_be_built_without_verifiers() -> None:
    with pytest.raises(RegistryError, match="'with-verification' needs the setting 'verifiers'"):
        build("with-verification", step())
