"""Router: a typed choice of the pattern that answers; the routing never enters the conversation."""

import json

import pytest

from cognitive import ReAct, SingleShot
from cognitive.everyday._router import Router
from loop import Options, Role, State, Step, Text, UsageError
from loop.errors import VerificationFailed
from provider import Scripted


def ask(text: str = "What is 2 + 2?") -> State:
    return State().append(Role.USER, Text(text))


def choose(route: str, reason: str = "it fits") -> str:
    return json.dumps({"route": route, "reason": reason})


async def test_the_chosen_pattern_answers_and_the_choice_stays_out_of_the_conversation() -> None:
    script = Scripted({"Router/route": [choose("math")], "Router/math": ["4"], "Router/lookup": ["never"]})
    step = Step(script)
    router = Router({"math": SingleShot(step), "lookup": ReAct(step)}, step,
                    descriptions={"math": "arithmetic", "lookup": "facts"})
    state = await router.run(ask())
    assert [t.role for t in state] == [Role.USER, Role.ASSISTANT] and state.answer == "4"
    assert state.outcome is not None and state.outcome.ok
    assert state.outcome.data["Router"] == {"route": "math", "reason": "it fits"}
    routing = script.requests[0]
    assert "- math: arithmetic" in routing.turns[-2].text and "- lookup: facts" in routing.turns[-2].text
    assert routing.options.output_schema["properties"]["route"]["enum"] == ["math", "lookup"]
    assert routing.options.tool_choice == "none"


async def test_an_unknown_route_goes_back_to_the_model_with_the_valid_names() -> None:
    script = Scripted({"Router/route": [choose("poetry"), choose("lookup")], "Router/lookup": ["Paris"]})
    step = Step(script)
    state = await Router({"math": SingleShot(step), "lookup": SingleShot(step)}, step).run(ask("capital?"))
    assert state.answer == "Paris"
    report = script.requests[1].turns[-1].text
    assert "'poetry' is not one of ['math', 'lookup']" in report


async def test_no_valid_choice_falls_back_to_the_default_degraded_or_raises_without_one() -> None:
    script = Scripted({"Router/route": ["no idea"] * 2, "Router/math": ["4"]})
    step = Step(script)
    state = await Router({"math": SingleShot(step)}, step, default="math", max_retries=1).run(ask())
    assert state.answer == "4" and state.degraded and "default route 'math'" in state.outcome.reason
    with pytest.raises(VerificationFailed):
        await Router({"math": SingleShot(step)}, Step(Scripted(["no idea"])), max_retries=0).run(ask())


async def test_a_cheap_step_can_do_the_routing() -> None:
    script = Scripted([choose("math"), "4"])
    step = Step(script, options=Options(model="strong"))
    await Router({"math": SingleShot(step)}, step.derive(options=Options(model="cheap"))).run(ask())
    assert [r.options.model for r in script.requests] == ["cheap", "strong"]


@pytest.mark.parametrize("choices, match", [({}, "non-empty"), ({"a/b": None}, "without '/'"),
                                            ({"a": object()}, "route 'a' needs a Pattern")])
def test_bad_choices_are_refused(choices: dict, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        Router(choices, Step(Scripted([])))


def test_unknown_default_and_descriptions_are_refused() -> None:
    step = Step(Scripted([]))
    with pytest.raises(UsageError, match="default='x' is not a route"):
        Router({"a": SingleShot(step)}, step, default="x")
    with pytest.raises(UsageError, match="descriptions name routes that do not exist: 'b'"):
        Router({"a": SingleShot(step)}, step, descriptions={"b": "?"})
