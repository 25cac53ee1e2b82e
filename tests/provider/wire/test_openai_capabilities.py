"""An OpenAI-compatible server that does less than OpenAI (one choice whatever ``n`` asks, no ``json_schema``
response format, no usage in its stream), as a real server process on loopback: the provider learns what it
honours from what it does, and the patterns on top still get what they asked for."""

from collections.abc import Iterator

import attrs
import pytest

from cognitive import SelfConsistency, SingleShot, WithBudget, WithOutput, answer_value
from loop import Budget, Role, State, Step, Text
from tests.provider.wire.modest_server import ModestServer
from tests.provider.wire.openai_client import connect

ASK = State().append(Role.USER, Text("What is the answer?"))


@pytest.fixture
def modest() -> Iterator[ModestServer]:
    server = ModestServer()
    server.start()
    yield server
    server.stop()


async def test_samples_a_server_does_not_return_are_asked_for_one_by_one_and_remembered(modest: ModestServer) -> None:
    async with connect(modest) as provider:
        assert provider.info.choices
        step = Step(provider)
        samples = await step.sample(ASK, 3)
        assert [s.answer for s in samples] == ["answer 1", "answer 2", "answer 3"]
        assert [r.json().get("n") for r in modest.requests] == [3, None, None]
        assert not provider.info.choices and not step.samples_in_one_request
        again = await step.sample(ASK, 2)
    assert len(again) == 2 and [r.json().get("n") for r in modest.requests[3:]] == [None, None]


async def test_self_consistency_gets_its_n_samples(modest: ModestServer) -> None:
    async with connect(modest) as provider:
        state = await SelfConsistency(SingleShot(Step(provider)), n=3).run(ASK)
    votes = state.outcome.data["SelfConsistency"]  # type: ignore[union-attr]
    assert state.answer and len(votes["votes"]) == 3, votes
    assert state.outcome is not None and not state.outcome.degraded, state.outcome.reason


@attrs.frozen
class Answer:
    answer: str


@pytest.mark.parametrize("status", [400, 500])
async def test_a_refused_json_schema_becomes_json_object_with_the_schema_and_the_answer_validates(
        modest: ModestServer, status: int) -> None:
    modest.refusal_status = status
    async with connect(modest) as provider:
        step = Step(provider)
        state = await WithOutput(SingleShot(step), step, Answer, mode="native").run(ASK)
        assert answer_value(state, Answer) == Answer("42")
        assert not provider.info.json_schema
        kinds = [(r.json().get("response_format") or {}).get("type") for r in modest.requests]
        # The agent's own turn asked for the schema; refused once, it was asked again as the server takes.
        assert kinds == ["json_schema", "json_object"]
        said = modest.requests[-1].json()["messages"][-1]
        assert said["role"] == "system" and '"answer"' in said["content"]
        assert modest.requests[-1].json()["response_format"]["schema"]["required"] == ["answer"]
        await WithOutput(SingleShot(step), step, Answer, mode="native").run(ASK)
    later = [(r.json().get("response_format") or {}).get("type") for r in modest.requests[2:]]
    # Remembered: json_schema is not asked for again, so the answer comes from a formatting turn.
    assert later == [None, "json_object"]


async def test_usage_a_server_does_not_stream_is_estimated_and_budgets_hold(modest: ModestServer) -> None:
    async with connect(modest) as provider:
        step = Step(provider)
        state = await step.turn(ASK)
        usage = state.last.usage if state.last is not None else None
        assert usage is not None and usage.estimated and usage.input_tokens > 0 and usage.output_tokens > 0
        assert state.usage.estimated and not provider.info.streams_usage
        assert modest.requests[0].json()["stream_options"] == {"include_usage": True}
        capped = await WithBudget(SingleShot(step), Budget(max_input_tokens=1)).run(ASK)
    spent = capped.outcome.data["WithBudget"]  # type: ignore[union-attr]
    assert spent["spent"]["input_tokens"] > 1 and "max_input_tokens=1 passed" in spent["exhausted"]
