"""Chain and Stage: stages run once in order, outputs feed later templates, only the last writes the answer."""

import json

import attrs
import pytest

from cognitive import PatternKind
from cognitive import ReAct, SingleShot
from cognitive.everyday._chain import Chain, Stage
from cognitive.prompts._paths import TemplateError
from loop import Role, State, Step, Text, UsageError, tool
from provider import Scripted, tool_call


@attrs.frozen
class Facts:
    items: list[str]


def ask(text: str = "Tell me about tea") -> State:
    return State().append(Role.USER, Text(text))


async def test_outputs_feed_later_stages_and_only_the_last_stage_enters_the_conversation() -> None:
    script = Scripted({"Chain/extract": ["tea is a drink"], "Chain/analyze": ["it is popular"],
                       "Chain/ReAct": ["Tea: a popular drink."]})
    step = Step(script)
    chain = Chain(Stage("extract", "Extract facts from: {input}", step),
                  Stage("analyze", "Analyse these facts: {extract}", step),
                  Stage("report", "Write a report from {extract} and {analyze}.", step))
    state = await chain.run(ask())
    assert [t.role for t in state] == [Role.USER, Role.SYSTEM, Role.ASSISTANT]
    assert state.answer == "Tea: a popular drink."
    assert state[1].kind == PatternKind.STAGE and state[1].meta["stage"] == "report"
    assert state[1].text == "Write a report from tea is a drink and it is popular."
    assert script.requests[0].turns[-1].text == "Extract facts from: Tell me about tea"
    assert script.requests[1].turns[-1].text == "Analyse these facts: tea is a drink"
    assert state.outcome.data["Chain"]["outputs"] == {"extract": "tea is a drink", "analyze": "it is popular",
                                                      "report": "Tea: a popular drink."}


async def test_a_stage_without_history_sees_only_its_instructions_and_inputs() -> None:
    script = Scripted({"Chain/first": ["draft"], "Chain/second": ["final"]})
    step = Step(script)
    chain = Chain(Stage("first", "Draft it.", step),
                  Stage("second", "Polish the draft.", step, history=False, reads=["first"]))
    state = await chain.run(ask("earlier").append(Role.ASSISTANT, Text("old")).append(Role.USER, Text("now")))
    polish = script.requests[1]
    assert [t.role for t in polish.turns] == [Role.SYSTEM, Role.USER]
    assert polish.turns[1].text == "## first\n\ndraft"
    # the last stage ran as a branch, so its answer is written to the conversation
    assert [t.role for t in state][-1] is Role.ASSISTANT and state.answer == "final"
    assert len(state) == 4


async def test_without_reads_a_stage_without_history_gets_the_request_and_every_earlier_output() -> None:
    script = Scripted({"Chain/a": ["A"], "Chain/b": ["B"]})
    step = Step(script)
    await Chain(Stage("a", "one", step), Stage("b", "two", step, history=False)).run(ask("the request"))
    assert script.requests[1].turns[1].text == "## input\n\nthe request\n\n## a\n\nA"


async def test_a_typed_stage_output_is_read_by_path() -> None:
    script = Scripted({"Chain/facts": [json.dumps({"items": ["green", "black"]})], "Chain/ReAct": ["Two kinds."]})
    step = Step(script)
    chain = Chain(Stage("facts", "List the kinds.", step, output_type=Facts),
                  Stage("reply", "The first kind is {facts@items#0}; there are more.", step))
    state = await chain.run(ask())
    assert script.requests[1].turns[-1].text == "The first kind is green; there are more."
    assert state.outcome.data["Chain"]["outputs"]["facts"] == {"items": ["green", "black"]}


async def test_a_stage_can_run_any_pattern_with_tools() -> None:
    @tool
    async def brew(kind: str) -> str:
        """Brew."""
        return f"{kind} brewed"

    script = Scripted({"Chain/make": [tool_call("brew", {"kind": "green"}), "made green"],
                       "Chain/SingleShot": ["served"]})
    step = Step(script, tools=[brew])
    state = await Chain(Stage("make", "Make tea.", ReAct(step)), Stage("serve", "Serve {make}.", SingleShot(step))).run(ask())
    assert state.answer == "served"
    assert script.requests[-1].turns[-1].text == "Serve made green."
    assert not any(t.role is Role.TOOL for t in state)  # the first stage's tool exchange stayed in its branch


async def test_a_degraded_stage_makes_the_run_degraded() -> None:
    @tool
    async def spin() -> str:
        """Spin."""
        return "again"

    script = Scripted({"Chain/a": [tool_call("spin"), "gave up"], "Chain/ReAct": ["done"]})
    step = Step(script, tools=[spin])
    chain = Chain(Stage("a", "Go.", ReAct(step, max_turns=1)), Stage("b", "Finish {a}.", step))
    state = await chain.run(ask())
    assert state.answer == "done" and state.degraded and "stage 'a'" in state.outcome.reason


async def test_a_missing_template_path_fails_naming_it() -> None:
    step = Step(Scripted({"Chain/a": ["x"]}))
    chain = Chain(Stage("a", "Use {plan@title}.", step))
    with pytest.raises(TemplateError, match="plan@title"):
        await chain.run(ask())


def test_chains_are_checked_when_built() -> None:
    step = Step(Scripted([]))
    with pytest.raises(UsageError, match="at least one"):
        Chain()
    with pytest.raises(UsageError, match="'b', which stage 'b' writes only after it"):
        Chain(Stage("a", "{b}", step), Stage("b", "x", step))
    with pytest.raises(UsageError, match="two stages write the key 'k'"):
        Chain(Stage("a", "x", step, key="k"), Stage("b", "x", step, key="k"))
    with pytest.raises(UsageError, match="reads 'z', which is neither 'input'"):
        Chain(Stage("a", "x", step), Stage("b", "x", step, reads=["z"]))
    with pytest.raises(UsageError, match="outside its reads"):
        Chain(Stage("a", "x", step), Stage("c", "x", step), Stage("b", "{a}", step, reads=["c"]))
    with pytest.raises(UsageError, match="identifier"):
        Stage("two words", "x", step)
    with pytest.raises(UsageError, match="needs a step"):
        Stage("a", "x", SingleShot(step), output_type=Facts)
    with pytest.raises(UsageError, match="runner must be a Pattern or a step"):
        Stage("a", "x", object())
    with pytest.raises(TemplateError):
        Stage("a", "unbalanced {", step)
