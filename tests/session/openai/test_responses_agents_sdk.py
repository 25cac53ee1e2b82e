"""The OpenAI Agents SDK whose model is the served agent, through its default model class,
``OpenAIResponsesModel``, over ``POST /v1/responses``: plain and streamed runs, the agent's own tools, function
tools the SDK runs itself, typed output, and conversations continued with ``previous_response_id``."""

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import agents
import httpx2
import openai
import pytest
from agents import Agent, Runner, function_tool
from agents.items import MessageOutputItem, ReasoningItem
from agents.models.openai_responses import OpenAIResponsesModel
from openai.types.responses import ResponseTextDeltaEvent

from loop import Request, Role, tool
from provider import tool_call
from tests.session.openai.clients_helpers import MODEL, PARIS, City, compact, names, results, serving
from tests.session.openai.test_server import TOKEN


@pytest.fixture
def anyio_backend() -> str:
    """The Agents SDK runs its tools and streams with asyncio's own tasks and queues: it works on asyncio only."""
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    """The SDK exports traces to OpenAI unless told not to."""
    agents.set_tracing_disabled(True)


@tool
async def lookup(city: str) -> str:
    """The population of a city (the served agent's own tool; it runs on the server)."""
    return str(PARIS["population"])


@function_tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


@asynccontextmanager
async def responses_model(url: str, sent: list[dict[str, Any]] | None = None) -> AsyncIterator[OpenAIResponsesModel]:
    """The SDK's Responses model for the served agent, over a client closed afterwards; the JSON body of each
    request it sends is appended to ``sent``."""

    async def record(request: httpx2.Request) -> None:
        if sent is not None:
            sent.append(json.loads(request.content))

    http = httpx2.AsyncClient(event_hooks={"request": [record]}, timeout=10.0)
    async with openai.AsyncOpenAI(base_url=url, api_key=TOKEN, max_retries=0, http_client=http) as client:
        yield OpenAIResponsesModel(MODEL, client)


def lookup_then_answer(request: Request) -> object:
    """Calls the server's lookup tool, writing working text first, then answers with its result."""
    done = results(request)
    if done:
        return f"{done[-1].content} people live in Paris."
    return ["Let me look that up.", tool_call("lookup", {"city": "Paris"})]


def lookup_then_weather(request: Request) -> object:
    """Calls the server's lookup tool, then the client's weather tool, then answers with the weather."""
    done = results(request)
    if any(result.name == "weather" for result in done):
        return f"Paris: {done[-1].content}"
    if done:
        return tool_call("weather", {"city": "Paris"})
    return ["Let me look that up.", tool_call("lookup", {"city": "Paris"})]


def users(request: Request) -> str:
    """Every user message the model was shown, oldest first."""
    return " | ".join(turn.text for turn in request.turns if turn.role is Role.USER)


async def test_a_run_answers_with_the_served_agents_reply() -> None:
    sent: list[dict[str, Any]] = []
    with serving(lambda request: "Paris is the capital of France.") as served:
        async with responses_model(served.url, sent) as model:
            result = await Runner.run(Agent(name="geographer", instructions="Be brief.", model=model),
                                      "Capital of France?")
    assert result.final_output == "Paris is the capital of France."
    assert result.last_response_id is not None and result.last_response_id.startswith("resp_")
    (seen,) = served.requests
    assert [(turn.role, turn.text) for turn in seen.turns] == [(Role.SYSTEM, "Be brief."),
                                                               (Role.USER, "Capital of France?")]
    assert names(seen) == set()
    assert sent[0]["instructions"] == "Be brief." and "previous_response_id" not in sent[0]


async def test_the_agents_own_tool_runs_on_the_server_and_its_work_is_a_reasoning_item() -> None:
    with serving(lookup_then_answer, [lookup]) as served:
        async with responses_model(served.url) as model:
            result = await Runner.run(Agent(name="census", model=model), "How many people live in Paris?")
    assert result.final_output == "2100000 people live in Paris."
    assert len(result.raw_responses) == 1, "the tool ran within one response"
    work, answer = result.new_items
    assert isinstance(work, ReasoningItem) and isinstance(answer, MessageOutputItem)
    summary = work.raw_item.summary[0].text
    assert "Let me look that up." in summary and '→ calling lookup({"city": "Paris"})' in summary
    assert "← lookup: 2100000" in summary
    assert len(served.requests) == 2 and names(served.requests[0]) == {"lookup"}
    assert [result.content for result in results(served.requests[-1])] == ["2100000"]


async def test_a_function_tool_the_sdk_runs_is_called_by_the_served_model_and_its_output_sent_back() -> None:
    # The served agent runs its own lookup, then calls the client's weather tool, which ends its response; the
    # SDK runs weather and sends the whole conversation again with the function_call_output.
    sent: list[dict[str, Any]] = []
    with serving(lookup_then_weather, [lookup]) as served:
        async with responses_model(served.url, sent) as model:
            result = await Runner.run(Agent(name="forecaster", model=model, tools=[weather]), "Weather in Paris?")
    assert result.final_output == "Paris: sunny in Paris"
    assert len(result.raw_responses) == 2
    offered = next(spec for spec in served.requests[0].tools if spec.name == "weather")
    assert names(served.requests[0]) == {"lookup", "weather"}
    assert offered.description == "Today's weather in a city." and "city" in offered.parameters["properties"]
    [call] = [item for item in sent[1]["input"] if item.get("type") == "function_call"]
    [output] = [item for item in sent[1]["input"] if item.get("type") == "function_call_output"]
    assert (call["name"], json.loads(call["arguments"])) == ("weather", {"city": "Paris"})
    assert output == {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny in Paris"}
    last = served.requests[-1]
    assert [(r.call_id, r.name, r.content, r.is_error) for r in results(last)] == [
        (call["call_id"], "weather", "sunny in Paris", False)]
    # The work summary the SDK sent back is left out: without previous_response_id the model sees the
    # conversation the client holds.
    assert [turn.role for turn in last.turns] == [Role.USER, Role.ASSISTANT, Role.TOOL]


async def test_output_type_asks_for_a_json_schema_and_the_answer_is_the_model_instance() -> None:
    sent: list[dict[str, Any]] = []

    def model(request: Request) -> str:
        return compact(PARIS) if request.options.output_schema is not None else "About 2.1 million people."

    with serving(model) as served:
        async with responses_model(served.url, sent) as responses:
            result = await Runner.run(Agent(name="census", model=responses, output_type=City), "Paris?")
    assert result.final_output == City(**PARIS)
    assert sent[0]["text"]["format"]["type"] == "json_schema"
    (asked,) = served.requests  # the agent's own turn was asked for the schema and answered with it
    schema = asked.options.output_schema
    assert schema is not None and set(schema["required"]) == {"name", "population"}


async def test_a_streamed_run_delivers_text_deltas_and_the_same_output_as_a_plain_run() -> None:
    answer = "Paris is the capital of France, and its largest city."
    with serving(lambda request: answer) as served:
        async with responses_model(served.url) as model:
            agent = Agent(name="geographer", model=model)
            plain = await Runner.run(agent, "Capital of France?")
            streamed = Runner.run_streamed(agent, "Capital of France?")
            deltas = [event.data.delta async for event in streamed.stream_events()
                      if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent)]
    assert len(deltas) > 1, "the text arrived in pieces"
    assert "".join(deltas) == streamed.final_output == plain.final_output == answer
    assert [users(request) for request in served.requests] == ["Capital of France?"] * 2


async def test_a_streamed_run_carries_the_agents_work_as_a_reasoning_item() -> None:
    with serving(lookup_then_answer, [lookup]) as served:
        async with responses_model(served.url) as model:
            agent = Agent(name="census", model=model)
            plain = await Runner.run(agent, "How many people live in Paris?")
            streamed = Runner.run_streamed(agent, "How many people live in Paris?")
            created = [event.item async for event in streamed.stream_events() if event.type == "run_item_stream_event"]
    assert streamed.final_output == plain.final_output == "2100000 people live in Paris."
    work, answer = created
    assert isinstance(work, ReasoningItem) and isinstance(answer, MessageOutputItem)
    plain_work = plain.new_items[0]
    assert isinstance(plain_work, ReasoningItem)
    assert work.raw_item.summary[0].text == plain_work.raw_item.summary[0].text
    assert len(served.requests) == 4  # two model calls per run: the lookup, then the answer


async def test_previous_response_id_continues_the_conversation_on_the_server() -> None:
    sent: list[dict[str, Any]] = []
    with serving(users) as served:
        async with responses_model(served.url, sent) as model:
            agent = Agent(name="echo", instructions="Repeat.", model=model)
            one = await Runner.run(agent, "one")
            two = await Runner.run(agent, "two", previous_response_id=one.last_response_id)
    assert two.final_output == "one | two"
    assert sent[1]["previous_response_id"] == one.last_response_id
    assert sent[1]["input"] == [{"role": "user", "content": "two"}], "only the new message was sent"
    seen = served.requests[-1].turns
    assert [(turn.role, turn.text) for turn in seen] == [
        (Role.SYSTEM, "Repeat."), (Role.USER, "one"), (Role.ASSISTANT, "one"), (Role.USER, "two")]


async def test_auto_previous_response_id_sends_only_the_function_output_and_the_model_keeps_its_work() -> None:
    sent: list[dict[str, Any]] = []
    with serving(lookup_then_weather, [lookup]) as served:
        async with responses_model(served.url, sent) as model:
            result = await Runner.run(Agent(name="forecaster", model=model, tools=[weather]), "Weather in Paris?",
                                      auto_previous_response_id=True)
    assert result.final_output == "Paris: sunny in Paris"
    first, second = result.raw_responses
    assert sent[1]["previous_response_id"] == first.response_id
    [output] = sent[1]["input"]
    assert output["type"] == "function_call_output" and output["output"] == "sunny in Paris"
    assert second.response_id is not None and first.response_id is not None
    assert second.response_id.rsplit("_", 1)[0] == first.response_id.rsplit("_", 1)[0], "the same conversation"
    # The model sees the lookup it made on the server, kept by the conversation, before the client's call.
    last = served.requests[-1]
    assert [(r.name, r.content) for r in results(last)] == [("lookup", "2100000"), ("weather", "sunny in Paris")]
    assert last.turns[1].text == "Let me look that up."


async def test_a_handoff_continued_by_previous_response_id_runs_under_the_new_agents_instructions() -> None:
    def model(request: Request) -> object:
        if not results(request):
            return tool_call("transfer_to_french", {})
        return " / ".join(turn.text for turn in request.turns if turn.role is Role.SYSTEM)

    with serving(model) as served:
        async with responses_model(served.url) as responses:
            french = Agent(name="french", instructions="Answer in French.", model=responses)
            triage = Agent(name="triage", instructions="Hand off to the right agent.", model=responses,
                           handoffs=[french])
            result = await Runner.run(triage, "Bonjour ?", auto_previous_response_id=True)
    assert result.last_agent is french
    assert names(served.requests[0]) == {"transfer_to_french"} and names(served.requests[-1]) == set()
    assert result.final_output == "Answer in French."
