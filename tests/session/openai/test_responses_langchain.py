"""LangChain's ChatOpenAI talking to the served agent over ``POST /v1/responses`` (``use_responses_api=True``):
invoke and stream, bound client tools answered with a ``ToolMessage`` (the whole conversation sent again, or
continued by ``previous_response_id``), and structured output by JSON schema."""

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import Runnable
from langchain_core.tools import tool as langchain_tool
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from loop import Request, Role, tool
from provider import tool_call
from tests.session.openai.clients_helpers import MODEL, PARIS, City, compact, names, results, serving
from tests.session.openai.test_server import TOKEN


@pytest.fixture
def anyio_backend() -> str:
    """LangChain runs its callbacks with ``asyncio.gather``: it works on asyncio only."""
    return "asyncio"


@tool
async def lookup(city: str) -> str:
    """The population of a city (the served agent's own tool; it runs on the server)."""
    return str(PARIS["population"])


@langchain_tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


@asynccontextmanager
async def responses_chat(url: str, **settings: Any) -> AsyncIterator[ChatOpenAI]:
    """ChatOpenAI on the Responses API for the served agent, over HTTP clients closed afterwards (by default
    LangChain keeps one per base URL for the life of the process)."""
    async with httpx2.AsyncClient(timeout=10.0) as http_async:
        with httpx2.Client(timeout=10.0) as http:
            yield ChatOpenAI(model=MODEL, base_url=url, api_key=SecretStr(TOKEN), max_retries=0, use_responses_api=True,
                             http_client=http, http_async_client=http_async, **settings)


def lookup_then_weather(request: Request) -> object:
    """Calls the server's lookup tool, then the client's weather tool, then answers with the weather."""
    done = results(request)
    if any(result.name == "weather" for result in done):
        return f"Paris: {done[-1].content}"
    if done:
        return tool_call("weather", {"city": "Paris"})
    return ["Let me look that up.", tool_call("lookup", {"city": "Paris"})]


async def weather_round_trip(llm: Runnable[list[BaseMessage], BaseMessage]) -> list[AIMessage]:
    """Asks for the weather, runs the weather calls the answer holds, sends their results back: both answers."""
    messages: list[BaseMessage] = [HumanMessage("What is the weather in Paris?")]
    asked = await llm.ainvoke(messages)
    assert isinstance(asked, AIMessage)
    messages.append(asked)
    for call in asked.tool_calls:
        messages.append(ToolMessage(weather.invoke(call["args"]), tool_call_id=call["id"]))
    final = await llm.ainvoke(messages)
    assert isinstance(final, AIMessage)
    return [asked, final]


async def test_invoke_answers_with_the_served_agents_reply() -> None:
    with serving(lambda request: "Paris is the capital of France.") as served:
        async with responses_chat(served.url) as chat:
            answer = await chat.ainvoke([SystemMessage("Be brief."), HumanMessage("Capital of France?")])
    assert answer.text == "Paris is the capital of France."
    assert answer.response_metadata["status"] == "completed"
    assert answer.response_metadata["id"].startswith("resp_")
    (seen,) = served.requests
    assert [(turn.role, turn.text) for turn in seen.turns] == [(Role.SYSTEM, "Be brief."),
                                                               (Role.USER, "Capital of France?")]


async def test_stream_chunks_join_to_the_invoked_answer() -> None:
    answer = "Paris is the capital of France, and its largest city."
    with serving(lambda request: answer) as served:
        async with responses_chat(served.url) as chat:
            invoked = await chat.ainvoke("Capital of France?")
            chunks = [chunk async for chunk in chat.astream("Capital of France?")]
    pieces = [chunk.text for chunk in chunks if chunk.text]
    assert len(pieces) > 1, "the text arrived in pieces"
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged = merged + chunk
    assert isinstance(merged, AIMessageChunk)
    assert "".join(pieces) == merged.text == invoked.text == answer
    assert len(served.requests) == 2


async def test_bound_tool_calls_come_back_parsed_and_a_tool_message_answers_them() -> None:
    with serving(lookup_then_weather, [lookup]) as served:
        async with responses_chat(served.url) as chat:
            asked, final = await weather_round_trip(chat.bind_tools([weather]))
    assert [(call["name"], call["args"]) for call in asked.tool_calls] == [("weather", {"city": "Paris"})]
    [work] = [block for block in asked.content if isinstance(block, dict) and block["type"] == "reasoning"]
    assert "← lookup: 2100000" in work["summary"][0]["text"], "the served agent's own work, as a reasoning block"
    assert final.text == "Paris: sunny in Paris" and not final.tool_calls
    assert names(served.requests[0]) == {"lookup", "weather"}
    weather_spec = next(spec for spec in served.requests[0].tools if spec.name == "weather")
    assert weather_spec.description == "Today's weather in a city." and "city" in weather_spec.parameters["properties"]
    last = served.requests[-1]
    assert [(r.call_id, r.name, r.content) for r in results(last)] == [
        (asked.tool_calls[0]["id"], "weather", "sunny in Paris")]
    # The whole conversation was sent again; its reasoning block, a summary of the work, is left out.
    assert [turn.role for turn in last.turns] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    [call] = last.turns[1].tool_calls
    assert (call.id, json.loads(call.arguments)) == (asked.tool_calls[0]["id"], {"city": "Paris"})


async def test_use_previous_response_id_sends_the_tool_message_only_and_the_model_keeps_its_work() -> None:
    with serving(lookup_then_weather, [lookup]) as served:
        async with responses_chat(served.url, use_previous_response_id=True) as chat:
            asked, final = await weather_round_trip(chat.bind_tools([weather]))
    assert final.text == "Paris: sunny in Paris"
    first, second = asked.response_metadata["id"], final.response_metadata["id"]
    assert second.rsplit("_", 1)[0] == first.rsplit("_", 1)[0], "the second response continued the first's conversation"
    last = served.requests[-1]
    assert [(r.name, r.content) for r in results(last)] == [("lookup", "2100000"), ("weather", "sunny in Paris")]
    assert last.turns[1].text == "Let me look that up."


async def test_structured_output_by_json_schema_is_asked_of_the_agents_own_turn() -> None:
    def model(request: Request) -> str:
        return "About 2.1 million people." if request.options.output_schema is None else compact(PARIS)

    with serving(model) as served:
        async with responses_chat(served.url) as chat:
            city = await chat.with_structured_output(City, method="json_schema").ainvoke("Paris?")
    assert city == City(**PARIS)
    (asked,) = served.requests  # one model call: the schema was asked of the agent's own turn
    schema = asked.options.output_schema
    assert schema is not None and set(schema["required"]) == {"name", "population"}
    assert asked.options.tool_choice is None
