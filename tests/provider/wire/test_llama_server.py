"""The provider against a real OpenAI-compatible server with a real model (see ``llama_server``): a server that
returns one choice whatever ``n`` asks, refuses ``json_schema`` (with a 500) and streams no usage. The patterns
on top still get what they asked for: every sample, a typed answer that validates, and usage that is counted
and marked estimated."""

from collections.abc import Iterator

import attrs
import pytest

from cognitive import SelfConsistency, SingleShot, WithBudget, WithOutput, answer_value
from loop import Budget, Options, Role, State, Step, Text
from provider import OpenAICompatible
from tests.provider.wire.llama_server import LlamaServer

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

ASK = State().append(Role.USER, Text("What is the capital of France? Answer in a few words."))
SHORT = Options(max_tokens=24)


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaServer]:
    server = LlamaServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def connect(server: LlamaServer) -> OpenAICompatible:
    return OpenAICompatible("smollm2-135m", base_url=f"{server.url}/v1", api_key="unused")


async def test_self_consistency_gets_every_sample_from_a_server_that_ignores_n(llama: LlamaServer) -> None:
    async with connect(llama) as provider:
        assert provider.info.choices, "a server is taken to honour n until it shows otherwise"
        state = await SelfConsistency(SingleShot(Step(provider, options=SHORT)), n=3).run(ASK)
        assert not provider.info.choices, "one choice for three asked: learned"
    found = state.outcome.data["SelfConsistency"]  # type: ignore[union-attr]
    assert found["answered"] == sum(found["votes"].values()) == 3, found
    assert state.answer and not state.outcome.degraded  # type: ignore[union-attr]


@attrs.frozen
class City:
    city: str


async def test_a_typed_answer_validates_on_a_server_that_refuses_json_schema(llama: LlamaServer) -> None:
    async with connect(llama) as provider:
        step = Step(provider, options=Options(max_tokens=48))
        state = await WithOutput(SingleShot(step), step, City, mode="native").run(ASK)
        assert not provider.info.json_schema, "the refusal was learned"
    value = answer_value(state, City)
    assert isinstance(value, City) and isinstance(value.city, str)


async def test_usage_the_server_does_not_stream_is_estimated_and_a_token_budget_trips(llama: LlamaServer) -> None:
    async with connect(llama) as provider:
        step = Step(provider, options=SHORT)
        state = await step.turn(ASK)
        usage = state.last.usage if state.last is not None else None
        assert usage is not None and usage.estimated, usage
        assert usage.input_tokens > 0 and usage.output_tokens > 0
        assert not provider.info.streams_usage
        capped = await WithBudget(SingleShot(step), Budget(max_input_tokens=5)).run(ASK)
    spent = capped.outcome.data["WithBudget"]  # type: ignore[union-attr]
    assert spent["spent"]["input_tokens"] > 5 and "max_input_tokens=5 passed" in spent["exhausted"]
