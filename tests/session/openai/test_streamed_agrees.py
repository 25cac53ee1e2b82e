"""A streamed reply's content is the non-streamed reply's content: the final answer, on Chat Completions and on the
Responses API. Text a model writes before calling the agent's tools is working text, carried in
``reasoning_content`` (the reasoning item's summary on the Responses API), streamed or not, never in content."""

from __future__ import annotations

from typing import Any

import pytest

from cognitive import ReAct, WithVerification, new_turn_processor
from loop import Request, Role, TurnKind, tool
from provider import Function, Scripted, tool_call
from tests.session.openai.test_api import collect, content, finishes, reasoning, serving
from verifier import FunctionVerifier, failed, passed

WORKING = "Let me work that out with the divide tool."
ANSWER = "10 / 4 = 2.5"
ASK = [{"role": "user", "content": "What is 10 / 4?"}]


@tool
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


def divider(request: Request) -> Any:
    """Writes a sentence, then calls the tool in the same turn; answers from its result."""
    last = request.turns[-1]
    if last.role is Role.USER:
        return [WORKING, tool_call("divide", {"a": 10, "b": 4})]
    return ANSWER


def hasty(request: Request) -> Any:
    """As ``divider``, but its first answer is wrong; it answers right once a verification report says so."""
    last = request.turns[-1]
    if last.role is Role.USER:
        return [WORKING, tool_call("divide", {"a": 10, "b": 4})]
    return ANSWER if last.kind == TurnKind.VERIFICATION else "10 / 4 = 2"


def exact(state: Any) -> Any:
    return passed() if "2.5" in (state.answer or "") else failed("10 / 4 is 2.5, not 2.")


def verified_react(step: Any) -> Any:
    return WithVerification(ReAct(step), step, verifiers=[FunctionVerifier(exact)])


async def both(model: Any, **serving_options: Any) -> tuple[Any, list]:
    """The non-streamed reply and the streamed chunks for the same request, each run afresh."""
    async with serving(Function(model, chunk_size=4), tools=(divide,), **serving_options) as s:
        reply = await s.client.chat.completions.create(model="agent", messages=ASK)
        chunks = await collect(s.client, ASK)
    return reply, chunks


@pytest.mark.parametrize("processor", [None, new_turn_processor(verified_react)], ids=["ReAct", "WithVerification"])
async def test_text_written_before_a_tool_call_is_working_text_in_both_modes(processor: Any) -> None:
    reply, chunks = await both(divider, processor=processor)
    message = reply.choices[0].message
    assert message.content == content(chunks) == ANSWER
    trace = f'{WORKING}\n→ calling divide({{"a": 10, "b": 4}})\n← divide: 2.5\n'
    assert message.model_extra["reasoning_content"] == reasoning(chunks) == trace
    assert reply.choices[0].finish_reason == "stop" and finishes(chunks) == ["stop"]


async def test_a_draft_the_verifier_rejects_is_in_neither_mode() -> None:
    reply, chunks = await both(hasty, processor=new_turn_processor(verified_react))
    message = reply.choices[0].message
    assert message.content == content(chunks) == ANSWER
    trace = reasoning(chunks)
    assert trace == message.model_extra["reasoning_content"]
    assert trace.startswith(f"{WORKING}\n→ calling divide(") and "10 / 4 is 2.5, not 2." in trace
    assert "10 / 4 = 2\n" not in trace and "10 / 4 = 2\n" not in content(chunks)


async def test_the_working_text_streams_before_the_tool_runs_and_the_answer_after() -> None:
    _, chunks = await both(divider)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    said = [getattr(d, "reasoning_content", None) or "" for d in deltas]
    working_at = next(i for i, text in enumerate(said) if WORKING in text)
    result_at = next(i for i, text in enumerate(said) if "← divide" in text)
    (answer_at,) = [i for i, d in enumerate(deltas) if d.content]  # the answer, whole, once the run ended
    assert working_at < result_at < answer_at and deltas[answer_at].content == ANSWER


def handing_over(request: Request) -> Any:
    return ["Let me look that up.", tool_call("lookup", {"city": "Oslo"})]


async def test_text_beside_calls_handed_to_the_client_is_the_content_in_both_modes() -> None:
    lookup = {"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}
    async with serving(Function(handing_over, chunk_size=4), tools=(divide,)) as s:
        reply = await s.client.chat.completions.create(model="agent", messages=ASK, tools=[lookup])
        chunks = await collect(s.client, ASK, tools=[lookup])
    choice = reply.choices[0]
    assert choice.message.content == content(chunks) == "Let me look that up."
    assert choice.finish_reason == "tool_calls" and finishes(chunks) == ["tool_calls"]
    assert "Let me look that up." not in reasoning(chunks)
    assert getattr(choice.message, "reasoning_content", None) is None


async def test_without_tools_the_answer_still_streams_as_it_is_written() -> None:
    async with serving(Function(lambda r: "a plain answer", chunk_size=3)) as s:
        reply = await s.client.chat.completions.create(model="agent", messages=ASK)
        chunks = await collect(s.client, ASK)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) == 5 and "".join(pieces) == reply.choices[0].message.content == "a plain answer"


async def test_tool_choice_none_lets_text_stream_as_it_is_written_though_tools_exist() -> None:
    async with serving(Function(lambda r: "no tools today", chunk_size=3), tools=(divide,)) as s:
        held = await collect(s.client, ASK)
        live = await collect(s.client, ASK, tool_choice="none")
    assert content(held) == content(live) == "no tools today"
    assert len([c for c in held if c.choices and c.choices[0].delta.content]) == 1  # held back, then whole
    assert len([c for c in live if c.choices and c.choices[0].delta.content]) == 5


async def test_a_scripted_react_run_agrees_streamed_or_not() -> None:
    turn = [WORKING, tool_call("divide", {"a": 10, "b": 4})]
    async with serving(Scripted([turn, ANSWER, turn, ANSWER], chunk_size=5), tools=(divide,)) as s:
        reply = await s.client.chat.completions.create(model="agent", messages=ASK)
        chunks = await collect(s.client, ASK)
    assert reply.choices[0].message.content == content(chunks) == ANSWER
    assert reply.choices[0].message.model_extra["reasoning_content"] == reasoning(chunks)
    assert reasoning(chunks).startswith(f"{WORKING}\n→ calling divide(")


@pytest.mark.parametrize(("model", "processor"), [(divider, None), (hasty, new_turn_processor(verified_react))],
                         ids=["ReAct", "WithVerification-rejected-draft"])
async def test_the_responses_api_agrees_streamed_or_not(model: Any, processor: Any) -> None:
    async with serving(Function(model, chunk_size=4), tools=(divide,), processor=processor) as s:
        plain = await s.client.responses.create(model="agent", input="What is 10 / 4?")
        async with s.client.responses.stream(model="agent", input="What is 10 / 4?") as stream:
            streamed = await stream.get_final_response()
    assert plain.output_text == streamed.output_text == ANSWER
    summaries = [[s.text for item in r.output if item.type == "reasoning" for s in item.summary]
                 for r in (plain, streamed)]
    assert summaries[0] == summaries[1] and summaries[0][0].startswith(f"{WORKING}\n→ calling divide(")
    assert "10 / 4 = 2\n" not in summaries[0][0]
