"""The official ``openai`` client over ``POST /v1/responses``: create streamed and not, parse with a pydantic
model, function tools handed to the client and their outputs sent back, ``previous_response_id``, cancellation and
retries."""

import json

import anyio
import openai
import pytest

from loop import CANCELLED, Request, Role, Turn
from provider import tool_call
from tests.session.openai.clients_helpers import MODEL, PARIS, City, Served, compact, results, serving
from tests.session.openai.test_clients_openai import client, hang, hang_cancelled, lookup

def lookup_then_answer(request: Request) -> object:
    """Calls the server's lookup tool, writing working text first, then answers with its result."""
    done = results(request)
    if done:
        return f"{done[-1].content} people live in Paris."
    return ["Let me look that up.", tool_call("lookup", {"city": "Paris"})]


async def test_create_answers_with_a_message_and_the_work_as_a_reasoning_summary() -> None:
    with serving(lookup_then_answer, tools=[lookup]) as served:
        async with client(served.url) as api:
            response = await api.responses.create(model=MODEL, input="How many people live in Paris?")
    assert response.status == "completed"
    assert response.output_text == "2100000 people live in Paris."
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "message"]
    summary = response.output[0].summary[0].text
    assert "Let me look that up." in summary and '→ calling lookup({"city": "Paris"})' in summary
    assert response.usage is not None and response.usage.total_tokens == 0  # the scripted model reports none
    assert response.id.startswith("resp_")


async def test_a_stream_ends_with_the_response_the_events_built() -> None:
    with serving(lookup_then_answer, tools=[lookup]) as served:
        async with client(served.url) as api, \
                api.responses.stream(model=MODEL, input="How many people live in Paris?") as stream:
            events = [event async for event in stream]
            final = await stream.get_final_response()
    types = [event.type for event in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert text == final.output_text == "2100000 people live in Paris."
    assert [item.type for item in final.output] == ["reasoning", "message"]


async def test_streamed_and_not_streamed_answers_agree() -> None:
    with serving(lookup_then_answer, tools=[lookup]) as served:
        async with client(served.url) as api:
            plain = await api.responses.create(model=MODEL, input="How many people live in Paris?")
            async with api.responses.stream(model=MODEL, input="How many people live in Paris?") as stream:
                streamed = await stream.get_final_response()
    assert plain.output_text == streamed.output_text
    assert plain.output[0].summary[0].text == streamed.output[0].summary[0].text


async def test_text_streams_live_when_no_turn_can_call_a_tool() -> None:
    with serving(lambda request: "Paris is the capital of France.") as served:
        async with client(served.url) as api:
            stream = await api.responses.create(model=MODEL, input="Capital of France?", stream=True)
            deltas = [event.delta async for event in stream if event.type == "response.output_text.delta"]
    assert "".join(deltas) == "Paris is the capital of France."


async def test_parse_returns_the_model_instance() -> None:
    with serving(lambda request: compact(PARIS)) as served:
        async with client(served.url) as api:
            response = await api.responses.parse(model=MODEL, input="Paris?", text_format=City)
    assert response.output_parsed == City(**PARIS)
    assert len(served.requests) == 1  # the model's own answer validated: no formatting turn


async def test_a_client_function_tool_round_trip_with_previous_response_id() -> None:
    def model(request: Request) -> object:
        done = results(request)
        return f"It is {done[-1].content} there." if done else tool_call("weather", {"city": "Paris"})

    weather = {"type": "function", "name": "weather", "description": "The weather in a city.",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
    with serving(model) as served:
        async with client(served.url) as api:
            first = await api.responses.create(model=MODEL, input="Weather in Paris?", tools=[weather])
            calls = [item for item in first.output if item.type == "function_call"]
            assert [(c.name, json.loads(c.arguments)) for c in calls] == [("weather", {"city": "Paris"})]
            second = await api.responses.create(
                model=MODEL, previous_response_id=first.id, tools=[weather],
                input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"}])
    assert second.output_text == "It is sunny there."
    assert second.previous_response_id == first.id
    shown = served.requests[-1]
    assert [r.content for r in results(shown)] == ["sunny"]


async def test_previous_response_id_continues_the_conversation_and_forks_from_an_earlier_one() -> None:
    def model(request: Request) -> object:
        said = [t.text for t in request.turns if t.role is Role.USER]
        return " | ".join(said)

    brief = "Be brief."
    with serving(model) as served:
        async with client(served.url) as api:
            one = await api.responses.create(model=MODEL, input="one", instructions=brief)
            two = await api.responses.create(model=MODEL, input="two", previous_response_id=one.id,
                                             instructions=brief)
            three = await api.responses.create(model=MODEL, input="three", previous_response_id=two.id,
                                               instructions=brief)
            fork = await api.responses.create(model=MODEL, input="again", previous_response_id=one.id,
                                              instructions=brief)
            plain = await api.responses.create(model=MODEL, input="four", previous_response_id=three.id)
        conversations = await served.store.list_sessions()
    assert three.output_text == "one | two | three"
    assert fork.output_text == "one | again"
    assert plain.output_text == "one | two | three | four"
    systems = [[t.text for t in r.turns if t.role is Role.SYSTEM] for r in served.requests]
    assert systems == [[brief]] * 4 + [[]]  # instructions are not carried over, as on OpenAI
    assert len(conversations) == 3  # one, two and three continued in place; the fork and the plain one are new


async def test_an_unknown_or_unstored_previous_response_is_404() -> None:
    with serving(lambda request: "ok") as served:
        async with client(served.url) as api:
            kept = await api.responses.create(model=MODEL, input="hi", store=False)
            for previous in (kept.id, "resp_nope", "resp_" + "0" * 32 + "_0"):
                with pytest.raises(openai.NotFoundError) as caught:
                    await api.responses.create(model=MODEL, input="again", previous_response_id=previous)
                assert caught.value.code == "previous_response_not_found"


async def test_full_input_with_calls_and_outputs_is_the_conversation_the_model_sees() -> None:
    def model(request: Request) -> object:
        return "done"

    items = [
        {"role": "developer", "content": "Answer in French."},
        {"role": "user", "content": "Weather?"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"role": "user", "content": [{"type": "input_text", "text": "Thanks"}]},
    ]
    with serving(model) as served:
        async with client(served.url) as api:
            response = await api.responses.create(model=MODEL, input=items)
    assert response.output_text == "done"
    seen = served.requests[0].turns
    assert [t.role for t in seen] == [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL, Role.USER]
    assert seen[2].text == "Checking." and [c.name for c in seen[2].tool_calls] == ["weather"]
    assert seen[3].tool_results[0].content == "sunny"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_timeout_cancels_the_run_and_the_open_call_is_recorded_cancelled(stream: bool) -> None:
    hang_cancelled.clear()
    with serving(lambda request: tool_call("hang", {"city": "Paris"}), tools=[hang]) as served:
        async with client(served.url, timeout=1.0) as api:
            with pytest.raises(openai.APITimeoutError):
                if stream:
                    async for _ in await api.responses.create(model=MODEL, input="Paris?", stream=True):
                        pass
                else:
                    await api.responses.create(model=MODEL, input="Paris?")
            with anyio.fail_after(10):
                while not hang_cancelled.is_set():
                    await anyio.sleep(0.05)
            stored = await _only_conversation(served)
    [result] = stored[-1].tool_results
    assert result.name == "hang" and result.is_error and CANCELLED in result.content


async def test_a_request_id_runs_once_and_a_retry_gets_the_same_response() -> None:
    with serving(lambda request: "once") as served:
        async with client(served.url) as api:
            first = await api.responses.create(model=MODEL, input="hi", extra_headers={"X-Request-Id": "k1"})
            again = await api.responses.create(model=MODEL, input="hi", extra_headers={"X-Request-Id": "k1"})
            streams = [await api.responses.create(model=MODEL, input="hi", extra_headers={"X-Request-Id": "k2"},
                                                  stream=True) for _ in range(2)]
            live, burst = [[event async for event in stream] for stream in streams]
    assert len(served.requests) == 2  # one run per key
    assert again.id == first.id and again.output_text == "once"
    assert [e.type for e in burst] == [e.type for e in live]
    assert burst[-1].type == "response.completed" and burst[-1].response.id == live[-1].response.id
    assert burst[-1].response.output_text == "once"


async def test_bad_requests_name_the_parameter() -> None:
    with serving(lambda request: "ok") as served:
        async with client(served.url) as api:
            cases = [
                ({"input": "hi", "background": True}, "background"),
                ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
                ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
                ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "bad name", "schema": {}}}},
                 "text.format.name"),
                ({"input": [{"type": "function_call_output", "call_id": "zz", "output": "x"}]}, "input[0].call_id"),
            ]
            for body, param in cases:
                with pytest.raises(openai.BadRequestError) as caught:
                    await api.responses.create(model=MODEL, **body)
                assert caught.value.param == param, (body, caught.value.message)


async def _only_conversation(served: Served) -> list[Turn]:
    """The turns of the one conversation the served agent's store keeps."""
    listed = await served.store.list_sessions()
    assert len(listed) == 1, listed
    state = await served.store.load(listed[0].id)
    assert state is not None
    return list(state.turns)
