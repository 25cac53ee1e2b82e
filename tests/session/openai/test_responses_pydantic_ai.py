"""pydantic-ai agents whose model is the served agent over ``POST /v1/responses`` (``OpenAIResponsesModel``):
plain and streamed runs, typed output (tool and native), and client tools, with the whole conversation sent
again or continued by ``previous_response_id``."""

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import openai
import pytest
from pydantic_ai import Agent, NativeOutput
from pydantic_ai.models.openai import OpenAIResponsesModel, OpenAIResponsesModelSettings
from pydantic_ai.providers.openai import OpenAIProvider

from loop import Request, Role, tool
from provider import tool_call
from tests.session.openai.clients_helpers import MODEL, PARIS, City, compact, names, results, serving
from tests.session.openai.test_server import TOKEN


@pytest.fixture
def anyio_backend() -> str:
    """pydantic-ai starts its runs with ``asyncio.create_task``: it works on asyncio only."""
    return "asyncio"


@tool
async def lookup(city: str) -> str:
    """The population of a city (the served agent's own tool; it runs on the server)."""
    return str(PARIS["population"])


@asynccontextmanager
async def responses_model(url: str) -> AsyncIterator[OpenAIResponsesModel]:
    """pydantic-ai's Responses model for the served agent, over a client closed afterwards (pydantic-ai leaves its
    own client's connections open)."""
    async with openai.AsyncOpenAI(base_url=url, api_key=TOKEN, max_retries=0) as client:
        yield OpenAIResponsesModel(MODEL, provider=OpenAIProvider(openai_client=client))


def lookup_then_weather(request: Request) -> object:
    """Calls the server's lookup tool, then the client's weather tool, then answers with the weather."""
    done = results(request)
    if any(result.name == "weather" for result in done):
        return f"Paris: {done[-1].content}"
    if done:
        return tool_call("weather", {"city": "Paris"})
    return ["Let me look that up.", tool_call("lookup", {"city": "Paris"})]


def forecaster(model: OpenAIResponsesModel, weather_calls: list[str],
               settings: OpenAIResponsesModelSettings | None = None) -> Agent[None, str]:
    """An agent with the client tool ``weather``, which notes each city it is asked about."""
    agent = Agent(model, model_settings=settings)

    @agent.tool_plain
    def weather(city: str) -> str:
        """Today's weather in a city."""
        weather_calls.append(city)
        return f"sunny in {city}"

    return agent


async def test_a_run_answers_with_the_served_agents_reply() -> None:
    with serving(lambda request: "Paris is the capital of France.") as served:
        async with responses_model(served.url) as model:
            result = await Agent(model, instructions="Be brief.").run("Capital of France?")
    assert result.output == "Paris is the capital of France."
    assert result.response.provider_response_id is not None
    assert result.response.provider_response_id.startswith("resp_")
    (seen,) = served.requests
    assert [(turn.role, turn.text) for turn in seen.turns] == [(Role.SYSTEM, "Be brief."),
                                                               (Role.USER, "Capital of France?")]


async def test_tool_output_is_a_client_tool_the_served_model_calls_after_its_own() -> None:
    # pydantic-ai asks for a City by offering an output tool ("final_result") with tool_choice "required".
    def model(request: Request) -> object:
        done = results(request)
        if not done:
            return tool_call("lookup", {"city": "Paris"})
        return tool_call("final_result", {"name": "Paris", "population": int(done[-1].content)})

    with serving(model, [lookup]) as served:
        async with responses_model(served.url) as responses:
            result = await Agent(responses, output_type=City).run("How many people live in Paris?")
    assert result.output == City(**PARIS)
    first = served.requests[0]
    assert names(first) == {"lookup", "final_result"}
    output_spec = next(spec for spec in first.tools if spec.name == "final_result")
    assert set(output_spec.parameters["properties"]) == {"name", "population"}
    assert all(request.options.tool_choice == "required" for request in served.requests)
    assert len(served.requests) == 2  # the lookup turn, then the output tool call that ended the response
    assert [r.content for r in results(served.requests[-1])] == ["2100000"]


async def test_native_output_is_asked_of_the_agents_own_turn() -> None:
    def model(request: Request) -> str:
        return "About 2.1 million people." if request.options.output_schema is None else compact(PARIS)

    with serving(model) as served:
        async with responses_model(served.url) as responses:
            result = await Agent(responses, output_type=NativeOutput(City)).run("Paris?")
    assert result.output == City(**PARIS)
    (asked,) = served.requests  # one model call: the schema was asked of the agent's own turn
    schema = asked.options.output_schema
    assert schema is not None and set(schema["properties"]) == {"name", "population"}
    assert asked.options.tool_choice is None


async def test_a_client_tool_round_trip_beside_the_agents_own_tool() -> None:
    weather_calls: list[str] = []
    with serving(lookup_then_weather, [lookup]) as served:
        async with responses_model(served.url) as model:
            result = await forecaster(model, weather_calls).run("What is the weather in Paris?")
    assert result.output == "Paris: sunny in Paris"
    assert weather_calls == ["Paris"]
    assert all(names(request) == {"lookup", "weather"} for request in served.requests)
    weather_spec = next(spec for spec in served.requests[0].tools if spec.name == "weather")
    assert weather_spec.description == "Today's weather in a city." and "city" in weather_spec.parameters["properties"]
    last = served.requests[-1]
    [shown] = results(last)
    call = next(call for turn in last.turns for call in turn.tool_calls if call.id == shown.call_id)
    assert (call.name, json.loads(call.arguments)) == ("weather", {"city": "Paris"})
    assert (shown.name, shown.content, shown.is_error) == ("weather", "sunny in Paris", False)
    # pydantic-ai sends the reasoning item's summary back as the assistant's text, in <think> tags (its profile
    # for this model does not send reasoning items back): the model sees the work it did as its own words.
    assert [turn.role for turn in last.turns] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    assert "← lookup: 2100000" in last.turns[1].text


async def test_a_client_tool_round_trip_continued_by_previous_response_id() -> None:
    weather_calls: list[str] = []
    with serving(lookup_then_weather, [lookup]) as served:
        async with responses_model(served.url) as model:
            agent = forecaster(model, weather_calls, OpenAIResponsesModelSettings(openai_previous_response_id="auto"))
            result = await agent.run("What is the weather in Paris?")
    assert result.output == "Paris: sunny in Paris" and weather_calls == ["Paris"]
    first, second = [message.provider_response_id for message in result.new_messages()
                     if message.kind == "response"]
    assert first is not None and second is not None
    assert second.rsplit("_", 1)[0] == first.rsplit("_", 1)[0], "the second response continued the first's conversation"
    # The model sees its lookup as the conversation kept it (a call and its result), not as text sent back.
    last = served.requests[-1]
    assert [(r.name, r.content) for r in results(last)] == [("lookup", "2100000"), ("weather", "sunny in Paris")]
    assert [call.name for call in last.turns[1].tool_calls] == ["lookup"]
    assert last.turns[1].text == "Let me look that up."


async def test_a_streamed_run_delivers_text_in_pieces_and_the_same_output_as_a_plain_run() -> None:
    answer = "Paris is the capital of France, and its largest city."
    with serving(lambda request: answer) as served:
        async with responses_model(served.url) as model:
            agent = Agent(model)
            plain = await agent.run("Capital of France?")
            async with agent.run_stream("Capital of France?") as stream:
                # Undebounced: pydantic-ai would otherwise join the pieces that arrive within 0.1 s.
                deltas = [delta async for delta in stream.stream_text(delta=True, debounce_by=None)]
                streamed = await stream.get_output()
    assert len(deltas) > 1, "the text arrived in pieces"
    assert "".join(deltas) == streamed == plain.output == answer
    assert len(served.requests) == 2
