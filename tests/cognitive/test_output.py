"""``WithOutput``: typed answers validated, formatted in one tool-free turn, retried only there."""

from __future__ import annotations

import dataclasses
from typing import TypedDict

import attrs
import pytest

from cognitive import ReAct, WithOutput, WithVerification, answer_value
from loop import Role, State, Step, Text, UsageError, tool
from loop.errors import VerificationFailed
from provider import Scripted, tool_call
from verifier import FunctionVerifier, passed

START = State().append(Role.USER, Text("Which city, and how many people?"))


@attrs.frozen
class City:
    name: str
    population: int


@dataclasses.dataclass
class Point:
    x: float
    y: float


class Pair(TypedDict):
    left: str
    right: str


async def test_an_answer_that_already_validates_needs_no_formatting_turn() -> None:
    model = Scripted(['{"name": "Paris", "population": 2100000}'])
    step = Step(model)
    state = await WithOutput(ReAct(step), step, City).run(START)
    assert len(model.requests) == 1
    assert state.outcome is not None and state.outcome.ok
    assert state.outcome.data["WithOutput"] == {"type": "City", "value": {"name": "Paris", "population": 2100000}}
    assert answer_value(state, City) == City("Paris", 2100000)


async def test_prose_gets_one_tool_free_formatting_turn_with_the_schema() -> None:
    model = Scripted(["Paris, with about 2.1 million people.", '{"name": "Paris", "population": 2100000}'])
    step = Step(model)
    state = await WithOutput(ReAct(step), step, City).run(START)
    formatting = model.requests[1]
    assert formatting.options.tool_choice == "none"
    assert formatting.options.output_schema == WithOutput(ReAct(step), step, City).output.schema  # native mode
    *report, note = [t for t in formatting.turns if t.role is Role.SYSTEM]
    assert '"population"' in note.text and "JSON" in note.text
    # The agent's own turn was asked for the schema too (the provider takes one beside tools), so the report on
    # its prose comes first.
    assert model.requests[0].options.output_schema == formatting.options.output_schema
    assert [t.kind for t in report] == ["verification"]
    assert answer_value(state, City) == City("Paris", 2100000)


async def test_only_the_formatting_turn_is_retried_and_tools_never_run_again() -> None:
    calls: list[str] = []

    @tool
    async def book(city: str) -> str:
        """Book a trip (a side effect)."""
        calls.append(city)
        return "booked"

    model = Scripted([tool_call("book", {"city": "Paris"}), "Booked Paris for you.",
                      '{"name": "Paris"}', '{"name": "Paris", "population": 2100000}'])
    step = Step(model, tools=[book])
    state = await WithOutput(ReAct(step), step, City, mode="text").run(START)
    assert calls == ["Paris"]  # the side effect happened once
    assert [r.options.output_schema for r in model.requests[2:]] == [None, None]  # text mode
    report = [t for t in model.requests[3].turns if t.meta.get("kind") == "verification"]
    assert len(report) == 1 and "population" in report[0].text and "required" in report[0].text
    assert answer_value(state, City).population == 2100000


async def test_an_answer_that_never_validates_raises_verification_failed_with_a_failed_outcome() -> None:
    model = Scripted(["not json at all", "still not json", '{"name": 3}'])
    step = Step(model)
    with pytest.raises(VerificationFailed, match="never matched City in 2 formatting turns") as caught:
        await WithOutput(ReAct(step), step, City, max_retries=1).run(START)
    outcome = caught.value.state.outcome
    assert outcome is not None and outcome.status == "failed"
    assert "population" in outcome.data["WithOutput"]["error"]
    with pytest.raises(UsageError):
        answer_value(caught.value.state, City)


async def test_on_failure_degrade_returns_the_last_answer_marked_degraded() -> None:
    step = Step(Scripted(["nope", "still nope"]))
    state = await WithOutput(ReAct(step), step, City, max_retries=0, on_failure="degrade").run(START)
    assert state.degraded and state.answer == "still nope"
    assert state.outcome is not None and "never matched City" in state.outcome.reason


@pytest.mark.parametrize(("spec", "reply", "expected"), [
    (Point, '{"x": 1.5, "y": -2}', Point(1.5, -2)),
    (Pair, 'Sure: {"left": "a", "right": "b"}', {"left": "a", "right": "b"}),
    ({"type": "array", "items": {"type": "integer"}}, "```json\n[1, 2, 3]\n```", [1, 2, 3]),
])
async def test_every_kind_of_output_type_reaches_code_as_a_value(spec: object, reply: str, expected: object) -> None:
    step = Step(Scripted([reply]))
    state = await WithOutput(ReAct(step), step, spec).run(START)
    assert answer_value(state, spec) == expected


async def test_the_value_is_read_back_from_a_stored_conversation() -> None:
    step = Step(Scripted(["Paris.", '{"name": "Paris", "population": 2100000}']))
    state = await WithOutput(ReAct(step), step, City).run(START)
    stored = State.from_json(state.to_json())
    assert answer_value(stored, City) == City("Paris", 2100000)


async def test_nested_in_verification_the_value_is_kept_under_its_own_path() -> None:
    step = Step(Scripted(['{"name": "Rome", "population": 2800000}']))
    agent = WithVerification(WithOutput(ReAct(step), step, City), step, verifiers=[FunctionVerifier(lambda s: passed(), name="ok")])
    state = await agent.run(START)
    assert state.outcome is not None
    assert "WithVerification/WithOutput" in state.outcome.data and "WithVerification" in state.outcome.data
    assert answer_value(state, City) == City("Rome", 2800000)


def test_bad_wiring_is_refused_with_a_clear_error() -> None:
    step = Step(Scripted([]))
    with pytest.raises(UsageError, match="mode must be one of native, text"):
        WithOutput(ReAct(step), step, City, mode="xml")
    with pytest.raises(UsageError, match="output type must be"):
        WithOutput(ReAct(step), step, int)
    with pytest.raises(UsageError, match="on_failure"):
        WithOutput(ReAct(step), step, City, on_failure="ignore")
    with pytest.raises(UsageError, match="TurnExecutor"):
        WithOutput(ReAct(step), object(), City)
