"""pydantic-ai agents whose model is the served agent: typed output (tool and native) and client-side tools."""

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import openai
import pytest
from pydantic_ai import Agent, NativeOutput
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from loop import Request, tool
from provider import tool_call
from tests.session.openai.clients_helpers import MODEL, PARIS, City, names, results, serving
from tests.session.openai.test_server import TOKEN


@pytest.fixture
def anyio_backend() -> str:
    """pydantic-ai starts its runs with ``asyncio.create_task``: it works on asyncio only."""
    return "asyncio"

looked_up: list[str] = []


@tool
async def lookup(city: str) -> str:
    """The population of a city (the served agent's own tool; it runs on the server)."""
    looked_up.append(city)
    return str(PARIS["population"])


@asynccontextmanager
async def chat_model(url: str) -> AsyncIterator[OpenAIChatModel]:
    """pydantic-ai's OpenAI model for the served agent, over a client closed afterwards (pydantic-ai leaves its own
    client's connections open)."""
    async with openai.AsyncOpenAI(base_url=url, api_key=TOKEN, max_retries=0) as client:
        yield OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=client))


async def test_tool_output_is_a_client_tool_the_served_model_calls() -> None:
    # pydantic-ai asks for a City by offering an output tool ("final_result") with tool_choice "required".
    def model(request: Request) -> object:
        done = results(request)
        if not done:
            return tool_call("lookup", {"city": "Paris"})
        output_tool = next(spec.name for spec in request.tools if spec.name != "lookup")
        return tool_call(output_tool, {"name": "Paris", "population": int(done[-1].content)})

    looked_up.clear()
    with serving(model, [lookup]) as served:
        async with chat_model(served.url) as chat:
            result = await Agent(chat, output_type=City).run("How many people live in Paris?")
    assert result.output == City(**PARIS)
    assert looked_up == ["Paris"]
    first = served.requests[0]
    assert names(first) == {"lookup", "final_result"}
    output_spec = next(spec for spec in first.tools if spec.name == "final_result")
    assert set(output_spec.parameters["properties"]) == {"name", "population"}
    assert all(request.options.tool_choice == "required" for request in served.requests)
    assert len(served.requests) == 2  # the lookup turn, then the output tool call that ended the run


async def test_native_output_is_asked_of_the_agents_own_turn_one_model_call() -> None:
    # The model answers in prose unless the turn asks for the schema: the agent's own turn asks for it.
    def model(request: Request) -> str:
        if request.options.output_schema is None:
            return "Paris has about 2.1 million inhabitants."
        return json.dumps(PARIS)

    with serving(model) as served:
        async with chat_model(served.url) as chat:
            result = await Agent(chat, output_type=NativeOutput(City)).run("Paris?")
    assert result.output == City(**PARIS)
    (asked,) = served.requests
    assert set(asked.options.output_schema["properties"]) == {"name", "population"}
    assert asked.options.tool_choice is None, "the agent's own turn, tools still on"


async def test_native_output_from_a_prose_answer_is_formatted_by_a_turn_with_the_schema() -> None:
    answers = iter(["Paris has about 2.1 million inhabitants.", json.dumps(PARIS)])

    with serving(lambda request: next(answers)) as served:
        async with chat_model(served.url) as chat:
            result = await Agent(chat, output_type=NativeOutput(City)).run("Paris?")
    assert result.output == City(**PARIS)
    formatting = served.requests[-1]
    assert len(served.requests) == 2 and formatting.options.tool_choice == "none"
    assert set(formatting.options.output_schema["properties"]) == {"name", "population"}


async def test_a_client_tool_round_trip_beside_the_agents_own_tool() -> None:
    # First request: the model calls the agent's lookup (run on the server), then the client's weather tool,
    # which ends the run with tool_calls. Second request: the model sees the client's result and answers.
    def model(request: Request) -> object:
        done = results(request)
        if any(result.content.startswith("sunny") for result in done):
            return f"Paris: {done[-1].content}"
        if done:
            return tool_call("weather", {"city": "Paris"})
        return tool_call("lookup", {"city": "Paris"})

    weather_calls: list[str] = []

    def weather(city: str) -> str:
        """Today's weather in a city."""
        weather_calls.append(city)
        return f"sunny in {city}"

    looked_up.clear()
    with serving(model, [lookup]) as served:
        async with chat_model(served.url) as chat:
            agent = Agent(chat)
            agent.tool_plain(weather)
            result = await agent.run("What is the weather in Paris?")
    assert result.output == "Paris: sunny in Paris"
    assert weather_calls == ["Paris"] and looked_up == ["Paris"]
    assert all(names(request) == {"lookup", "weather"} for request in served.requests)
    weather_spec = next(spec for spec in served.requests[0].tools if spec.name == "weather")
    assert weather_spec.description.startswith("Today's weather") and "city" in weather_spec.parameters["properties"]
    last = results(served.requests[-1])[-1]
    call = next(call for turn in served.requests[-1].turns for call in turn.tool_calls if call.id == last.call_id)
    assert (call.name, json.loads(call.arguments)) == ("weather", {"city": "Paris"})
    assert last.content == "sunny in Paris" and not last.is_error
