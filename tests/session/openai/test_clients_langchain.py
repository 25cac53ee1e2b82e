"""LangChain's ChatOpenAI talking to the served agent: structured output in each mode, and bound client tools."""

import json

import pytest
from langchain_core.messages import AIMessageChunk, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool as langchain_tool
from langchain_openai import ChatOpenAI

from loop import Request, UseTool
from provider import tool_call
from tests.session.openai.clients_helpers import MODEL, PARIS, City, names, results, serving
from tests.session.openai.test_server import TOKEN


@pytest.fixture
def anyio_backend() -> str:
    """LangChain runs its callbacks with ``asyncio.gather``: it works on asyncio only."""
    return "asyncio"


def chat(url: str) -> ChatOpenAI:
    return ChatOpenAI(model=MODEL, base_url=url, api_key=TOKEN, max_retries=0)


@langchain_tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


def weather_then_answer(request: Request) -> object:
    """Calls the client's weather tool, then answers with what it returned."""
    done = results(request)
    return f"Paris: {done[-1].content}" if done else tool_call("weather", {"city": "Paris"})


async def test_structured_output_by_default_sends_a_json_schema_and_a_bad_answer_is_reported_and_redone() -> None:
    # The agent's own turn is asked for the schema; its answer misses a property, and the formatting turn that
    # follows carries the report naming it.
    formatted = iter([json.dumps({"name": "Paris"}), json.dumps(PARIS)])

    def model(request: Request) -> str:
        return "About 2.1 million people." if request.options.output_schema is None else next(formatted)

    with serving(model) as served:
        city = await chat(served.url).with_structured_output(City).ainvoke("How many people live in Paris?")
    assert city == City(**PARIS)
    assert [request.options.output_schema is not None for request in served.requests] == [True, True]
    first_try, second_try = served.requests
    assert first_try.options.output_schema == second_try.options.output_schema
    assert set(first_try.options.output_schema["required"]) == {"name", "population"}
    assert first_try.options.tool_choice is None and second_try.options.tool_choice == "none"
    report = " ".join(turn.text for turn in second_try.turns if turn not in first_try.turns)
    assert "population" in report


async def test_structured_output_in_json_mode_asks_for_any_object() -> None:
    def model(request: Request) -> str:
        return "Paris, about 2.1 million." if request.options.output_schema is None else json.dumps(PARIS)

    with serving(model) as served:
        city = await chat(served.url).with_structured_output(City, method="json_mode").ainvoke(
            "How many people live in Paris? Answer in JSON with name and population.")
    assert city == City(**PARIS)
    # One model call: the agent's own turn was asked for a JSON object, and the answer was one.
    assert [request.options.output_schema for request in served.requests] == [{"type": "object"}]


async def test_structured_output_by_function_calling_forces_the_named_tool() -> None:
    def model(request: Request) -> object:
        choice = request.options.tool_choice
        return tool_call(choice.name, PARIS) if isinstance(choice, UseTool) else "no tool was forced"

    with serving(model) as served:
        city = await chat(served.url).with_structured_output(City, method="function_calling").ainvoke("Paris?")
    assert city == City(**PARIS)
    assert [request.options.tool_choice for request in served.requests] == [UseTool("City")]
    assert names(served.requests[0]) == {"City"}


async def test_bound_tool_round_trip() -> None:
    with serving(weather_then_answer) as served:
        llm = chat(served.url).bind_tools([weather])
        messages: list[BaseMessage] = [HumanMessage("What is the weather in Paris?")]
        asked = await llm.ainvoke(messages)
        messages.append(asked)
        for call in asked.tool_calls:
            messages.append(ToolMessage(weather.invoke(call["args"]), tool_call_id=call["id"]))
        final = await llm.ainvoke(messages)
    assert [(call["name"], call["args"]) for call in asked.tool_calls] == [("weather", {"city": "Paris"})]
    assert asked.response_metadata["finish_reason"] == "tool_calls"
    assert final.content == "Paris: sunny in Paris" and not final.tool_calls
    assert final.response_metadata["finish_reason"] == "stop"
    assert names(served.requests[0]) == {"weather"}
    seen = results(served.requests[-1])
    assert [(result.call_id, result.content) for result in seen] == [(asked.tool_calls[0]["id"], "sunny in Paris")]


async def test_bound_tool_call_streams_as_tool_call_deltas() -> None:
    with serving(weather_then_answer) as served:
        llm = chat(served.url).bind_tools([weather])
        merged: AIMessageChunk | None = None
        async for chunk in llm.astream("What is the weather in Paris?"):
            merged = chunk if merged is None else merged + chunk
    assert merged is not None
    assert [(call["name"], call["args"]) for call in merged.tool_calls] == [("weather", {"city": "Paris"})]
    assert merged.response_metadata["finish_reason"] == "tool_calls"
    assert len(served.requests) == 1
