"""The OpenAI-compatible endpoint, driven in process by the official ``openai`` client."""

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs
import httpx
import openai
import pytest

from cognitive import PatternKind
from cognitive import ReAct, WithVerification, new_turn_processor, react_factory
from loop import Request, Role, State, Text, TextDelta, ToolCall, ToolResult, Turn, TurnKind, Usage, fan_out, tool
from loop.errors import ServerError
from provider import Function, Scripted, tool_call
from session import Manager, MemoryStore, step_factory
from session.openai import openai_app
from tests.session.models import echo
from verifier import FunctionVerifier, failed, passed

ASK = [{"role": "user", "content": "hello there"}]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@attrs.define
class Served:
    client: openai.AsyncOpenAI
    manager: Manager
    store: MemoryStore
    http: httpx.AsyncClient
    app: Any


@asynccontextmanager
async def serving(provider: Any, *, processor: Any = None, tools: tuple = (), token: str | None = None,
                  api_key: str = "key", **settings: Any) -> AsyncIterator[Served]:
    store = MemoryStore()
    manager = Manager(processor or new_turn_processor(react_factory), provider=provider, store=store,
                      make_step=step_factory(tools))
    app = openai_app(manager, token=token, enter_manager=False, **settings)
    async with manager, httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as http:
        yield Served(openai.AsyncOpenAI(base_url="http://test/v1", api_key=api_key, http_client=http),
                     manager, store, http, app)


async def collect(client: openai.AsyncOpenAI, messages: list = ASK, **options: Any) -> list:
    stream = await client.chat.completions.create(model="agent", messages=messages, stream=True, **options)
    return [chunk async for chunk in stream]


def content(chunks: list) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def reasoning(chunks: list) -> str:
    return "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)


def finishes(chunks: list) -> list:
    return [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]


async def test_a_completion_answers_with_the_final_answer_and_forgets_its_session() -> None:
    async with serving(Function(echo)) as s:
        reply = await s.client.chat.completions.create(model="agent", messages=ASK)
        assert s.manager.open_sessions == 0 and await s.store.sessions() == []
    assert reply.object == "chat.completion" and reply.id.startswith("chatcmpl-") and reply.model == "agent"
    (choice,) = reply.choices
    assert choice.message.role == "assistant" and choice.message.content == "HELLO THERE"
    assert choice.finish_reason == "stop"
    assert getattr(choice.message, "reasoning_content", None) is None


async def test_a_streamed_answer_assembles_to_the_final_answer() -> None:
    async with serving(Function(echo, chunk_size=3)) as s:
        final = await s.client.chat.completions.create(model="agent", messages=ASK)
        chunks = await collect(s.client)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 4  # "HEL", "LO ", "THE", "RE"
    assert content(chunks) == final.choices[0].message.content == "HELLO THERE"
    assert finishes(chunks) == ["stop"] and chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)  # no usage chunk unless asked for


async def test_usage_sums_every_model_call_of_the_run() -> None:
    replies = [[tool_call("add", {"a": 1, "b": 2}), Usage(10, 2)], ["three", Usage(15, 3, cache_read_tokens=8)]]
    async with serving(Scripted(replies), tools=(add,)) as s:
        reply = await s.client.chat.completions.create(model="agent", messages=ASK)
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (25, 5, 30)
    assert reply.usage.prompt_tokens_details is not None and reply.usage.prompt_tokens_details.cached_tokens == 8


async def test_a_stream_ends_with_a_usage_chunk_when_asked() -> None:
    async with serving(Scripted([["fine", Usage(7, 1)]])) as s:
        chunks = await collect(s.client, stream_options={"include_usage": True})
    *body, last = chunks
    assert last.choices == [] and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (7, 1, 8)
    assert all(c.usage is None for c in body) and finishes(body) == ["stop"] and content(body) == "fine"


def adder(request: Request) -> Any:
    last = request.turns[-1]
    if last.role is Role.USER:
        return tool_call("add", {"a": 2, "b": 3})
    return f"The sum is {last.tool_results[0].content}."


async def test_tool_calls_and_results_are_reported_as_reasoning_lines() -> None:
    async with serving(Function(adder), tools=(add,)) as s:
        chunks = await collect(s.client)
        reply = await s.client.chat.completions.create(model="agent", messages=ASK)
    lines = '→ calling add({"a": 2, "b": 3})\n← add: 5\n'
    assert reasoning(chunks) == lines and content(chunks) == "The sum is 5."
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    result_at = next(i for i, d in enumerate(deltas) if "← add" in (getattr(d, "reasoning_content", None) or ""))
    answer_at = next(i for i, d in enumerate(deltas) if d.content)
    assert result_at < answer_at  # reported as it happened, before the answer streamed
    assert reply.choices[0].message.content == "The sum is 5."
    assert getattr(reply.choices[0].message, "reasoning_content", None) == lines


def says_42(state: Any) -> Any:
    return passed() if "42" in (state.answer or "") else failed("The answer must be 42.")


def guesser(request: Request) -> str:
    last = request.turns[-1]
    return "It is 42." if last.kind == TurnKind.VERIFICATION else "It is 48."


async def test_verification_reports_are_visible_and_the_final_answer_is_the_verified_one() -> None:
    processor = new_turn_processor(lambda step: WithVerification(ReAct(step), step,
                                                                 verifiers=[FunctionVerifier(says_42)]))
    async with serving(Function(guesser), processor=processor) as s:
        chunks = await collect(s.client)
        reply = await s.client.chat.completions.create(model="agent", messages=ASK)
    trace = reasoning(chunks)
    assert trace.startswith("verification report (attempt 1):\n# Verification: 1 of 1 checks did not pass\n")
    assert "## says_42: FAIL\n\nThe answer must be 42.\n" in trace
    # What was streamed stays streamed: the rejected draft, then the verified answer (as documented).
    assert content(chunks) == "It is 48.\n\nIt is 42." and finishes(chunks) == ["stop"]
    assert reply.choices[0].message.content == "It is 42."
    assert getattr(reply.choices[0].message, "reasoning_content", "") == trace


def stubborn(request: Request) -> Any:
    return "gave up" if request.options.tool_choice == "none" else tool_call("add", {"a": 1, "b": 1})


async def test_a_degraded_run_finishes_with_length_and_says_why() -> None:
    processor = new_turn_processor(lambda step: ReAct(step, max_turns=1))
    async with serving(Function(stubborn), processor=processor, tools=(add,)) as s:
        reply = await s.client.chat.completions.create(model="agent", messages=ASK)
        chunks = await collect(s.client)
    choice = reply.choices[0]
    assert choice.finish_reason == "length" and choice.message.content == "gave up"
    assert "degraded: ReAct reached max_turns=1" in getattr(choice.message, "reasoning_content", "")
    assert finishes(chunks) == ["length"] and content(chunks) == "gave up"
    assert reasoning(chunks) == choice.message.model_extra["reasoning_content"]  # the same lines either way
    assert reasoning(chunks).endswith("\ndegraded: ReAct reached max_turns=1 with tools still being called; "
                                      "the final answer was asked for with tools disabled\n")


async def test_a_run_that_raises_is_a_server_error_that_is_not_retried() -> None:
    calls = []

    def failing(request: Request) -> Any:
        calls.append(request)
        return ServerError("upstream exploded", status=500)

    async with serving(Function(failing)) as s:  # the client retries 5xx twice by default
        with pytest.raises(openai.APIStatusError) as raised:
            await s.client.chat.completions.create(model="agent", messages=ASK)
        assert s.manager.open_sessions == 0
    assert raised.value.status_code == 502 and len(calls) == 1
    assert raised.value.body["code"] == "provider_error" and "upstream exploded" in raised.value.body["message"]
    assert raised.value.response.headers["x-should-retry"] == "false"


async def test_a_bug_in_the_pattern_is_a_500_that_does_not_leak_details() -> None:
    async def broken(executor: Any, state: Any) -> Any:
        raise RuntimeError("secret internals")

    async with serving(Function(echo), processor=broken) as s:
        with pytest.raises(openai.InternalServerError) as raised:
            await s.client.chat.completions.create(model="agent", messages=ASK)
    assert raised.value.body["code"] == "internal_error" and "RuntimeError" in raised.value.body["message"]
    assert "secret" not in raised.value.body["message"]


async def test_failed_verification_is_an_error_not_an_answer() -> None:
    processor = new_turn_processor(lambda step: WithVerification(ReAct(step), step, max_retries=0,
                                                                 verifiers=[FunctionVerifier(says_42)]))
    async with serving(Function(lambda r: "It is 48."), processor=processor) as s:
        with pytest.raises(openai.InternalServerError) as raised:
            await s.client.chat.completions.create(model="agent", messages=ASK)
    assert raised.value.body["code"] == "verification_failed" and "says_42" in raised.value.body["message"]


async def test_a_stream_that_fails_ends_in_an_error_event_without_done() -> None:
    async def breaks(request: Request) -> AsyncIterator[Any]:
        yield TextDelta("partial ")
        raise ServerError("connection reset", status=500)

    async with serving(Function(breaks)) as s:
        seen = []
        with pytest.raises(openai.APIError) as raised:
            async for chunk in await s.client.chat.completions.create(model="agent", messages=ASK, stream=True):
                seen.append(chunk)
        raw = await s.http.post("/v1/chat/completions", json={"model": "agent", "messages": ASK, "stream": True})
    assert content(seen) == "partial " and finishes(seen) == []
    assert raised.value.code == "provider_error" and "connection reset" in raised.value.message
    assert raw.status_code == 200 and raw.text.rstrip().endswith("}}") and "[DONE]" not in raw.text
    assert '"error":{"message":"The model provider failed: connection reset"' in raw.text


async def test_models_are_listed_and_retrieved() -> None:
    async with serving(Function(echo), model_name="helper") as s:
        listed = [m.id async for m in s.client.models.list()]
        model = await s.client.models.retrieve("helper")
        with pytest.raises(openai.NotFoundError) as raised:
            await s.client.models.retrieve("gpt-4o")
        reply = await s.client.chat.completions.create(model="helper", messages=ASK)
    assert listed == ["helper"] and model.id == "helper" and model.object == "model"
    assert raised.value.body["code"] == "model_not_found"
    assert reply.model == "helper"


async def test_a_token_guards_every_route() -> None:
    async with serving(Function(echo), token="s3cret", api_key="wrong") as s:
        with pytest.raises(openai.AuthenticationError) as raised:
            await s.client.chat.completions.create(model="agent", messages=ASK)
        with pytest.raises(openai.AuthenticationError):
            await s.client.models.list()
        bare = await s.http.get("/v1/models")
        good = s.client.with_options(api_key="s3cret")
        reply = await good.chat.completions.create(model="agent", messages=ASK)
        assert [m.id async for m in good.models.list()] == ["agent"]
    assert raised.value.status_code == 401 and raised.value.body["code"] == "invalid_api_key"
    assert raised.value.response.headers["www-authenticate"] == "Bearer"
    assert bare.status_code == 401 and set(bare.json()["error"]) == {"message", "type", "param", "code"}
    assert reply.choices[0].message.content == "HELLO THERE"


def recording(seen: list) -> Callable[[Request], str]:
    def model(request: Request) -> str:
        seen.append(request.turns)
        return f"answer {len(seen)}"

    return model


async def test_the_model_sees_the_earlier_messages_of_the_request() -> None:
    seen: list = []
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "What is 2 + 2?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "4"},
        {"role": "assistant", "content": "4"},
        {"role": "developer", "content": "Answer in words."},
        {"role": "user", "content": "And times 3?"},
    ]
    async with serving(Function(recording(seen))) as s:
        reply = await s.client.chat.completions.create(model="agent", messages=messages)
    (turns,) = seen
    assert [t.role for t in turns] == [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT,
                                       Role.SYSTEM, Role.USER]
    assert [t.text for t in turns] == ["Be brief.", "What is 2 + 2?", "", "", "4", "Answer in words.", "And times 3?"]
    assert turns[2].parts == (ToolCall("c1", "add", '{"a": 2, "b": 2}'),)
    assert turns[3].parts == (ToolResult("c1", "add", "4"),)
    assert turns[1].parts == (Text("What is 2 + 2?"),)
    assert reply.choices[0].message.content == "answer 1"


async def test_a_session_header_keeps_the_conversation_on_the_server() -> None:
    seen: list = []
    headers = {"X-Session-Id": "conv-1"}
    async with serving(Function(recording(seen))) as s:
        first = await s.client.chat.completions.with_raw_response.create(
            model="agent", messages=[{"role": "system", "content": "Be kind."}, {"role": "user", "content": "one"}],
            extra_headers=headers)
        # The stored conversation wins over the client's copy of it; only the last message is new.
        await s.client.chat.completions.create(model="agent", extra_headers=headers, messages=[
            {"role": "user", "content": "one"}, {"role": "assistant", "content": "edited"},
            {"role": "user", "content": "two"}])
        stored = await s.store.load("conv-1")
        assert s.manager.get("conv-1") is not None
    assert first.headers["x-session-id"] == "conv-1" and first.parse().choices[0].message.content == "answer 1"
    assert [t.text for t in seen[1]] == ["Be kind.", "one", "answer 1", "two"]
    assert stored is not None and [t.text for t in stored] == ["Be kind.", "one", "answer 1", "two", "answer 2"]


async def test_kept_conversations_are_named_in_the_response() -> None:
    async with serving(Function(echo), keep_conversations=True) as s:
        raw = await s.client.chat.completions.with_raw_response.create(model="agent", messages=ASK)
        session_id = raw.headers["x-session-id"]
        stored = await s.store.load(session_id)
        assert s.manager.open_sessions == 0
    assert session_id == raw.parse().id
    assert stored is not None and [t.text for t in stored] == ["hello there", "HELLO THERE"]


async def test_names_given_out_lead_back_to_their_conversation_through_a_session_key() -> None:
    """With ``session_key`` the manager knows sessions by their key; clients only ever see their names."""
    async with serving(Function(echo), keep_conversations=True,
                       session_key=lambda request, name: f"ns:{name}") as s:
        raw = await s.client.chat.completions.with_raw_response.create(model="agent", messages=ASK)
        name = raw.headers["x-session-id"]
        again = await s.client.chat.completions.with_raw_response.create(
            model="agent", messages=[{"role": "user", "content": "more"}], extra_headers={"X-Session-Id": name})
        stored = await s.store.load(f"ns:{name}")
    assert name.startswith("chatcmpl-") and name == raw.parse().id
    assert again.headers["x-session-id"] == name
    assert stored is not None and [t.text for t in stored] == ["hello there", "HELLO THERE", "more", "MORE"]


async def test_the_streamed_content_always_ends_with_the_final_answer() -> None:
    async def replayed(executor: Any, state: Any) -> Any:  # like a cache: the answer is never streamed
        return await executor.submit(state, Role.ASSISTANT, Text("from the cache"))

    async def first_of_two(executor: Any, state: Any) -> Any:  # a branch other than the last one wins
        first = await executor.turn(state)
        await executor.turn(state)
        return first

    replies = iter(["draft one", "draft two"])
    async with serving(Function(echo), processor=replayed) as s:
        cached = await collect(s.client)
    async with serving(Function(lambda r: next(replies)), processor=first_of_two) as s:
        branched = await collect(s.client)
    assert content(cached) == "from the cache" and finishes(cached) == ["stop"]
    assert content(branched) == "draft one\n\ndraft two\n\ndraft one"


async def test_five_streamed_samples_never_interleave_the_content_is_the_final_answer() -> None:
    async def vote(executor: Any, state: Any) -> Any:  # five samples as branches; the majority is the answer
        results = await fan_out([functools.partial(executor.turn, state)] * 5, name="sample")
        answers = [r.state.answer for r in results]
        best = max(set(answers), key=answers.count)
        return next(r.state for r in results if r.state.answer == best)

    def sampler(request: Request) -> str:  # samples 1, 3 and 5 agree; each answer streams in small chunks
        return "forty-two is the answer" if request.path.endswith(("1", "3", "5")) else f"maybe {request.path}"

    async with serving(Function(sampler, chunk_size=4), processor=vote) as s:
        chunks = await collect(s.client)
        stored = await s.store.sessions()
    assert content(chunks) == "forty-two is the answer" and finishes(chunks) == ["stop"]
    assert stored == []  # a per-request conversation: nothing kept, nothing of the branches either


async def test_a_quiet_stream_is_kept_alive_with_comments_clients_ignore() -> None:
    kept_alive = anyio.Event()

    @tool
    async def slow() -> str:
        """Finishes only once the stream has sent a keep-alive."""
        await kept_alive.wait()
        return "done"

    replies = iter([tool_call("slow"), "finished"])
    async with serving(Function(lambda r: next(replies)), tools=(slow,), keepalive=0.01) as s:
        async def watching(scope: Any, receive: Any, send: Any) -> None:
            async def watched(message: Any) -> None:
                if b": keep-alive\n\n" in message.get("body", b""):
                    kept_alive.set()
                await send(message)

            await s.app(scope, receive, watched)

        async with httpx.AsyncClient(transport=httpx.ASGITransport(watching), base_url="http://test") as http:
            client = openai.AsyncOpenAI(base_url="http://test/v1", api_key="k", http_client=http)
            with anyio.fail_after(10):
                chunks = await collect(client)
    assert kept_alive.is_set() and content(chunks) == "finished" and "← slow: done" in reasoning(chunks)


async def test_concurrent_requests_on_one_session_each_stream_their_own_answer() -> None:
    headers = {"X-Session-Id": "shared"}
    results: dict[str, list] = {}

    async with serving(Function(echo, chunk_size=2)) as s:
        async def ask(text: str) -> None:
            results[text] = await collect(s.client, [{"role": "user", "content": text}], extra_headers=headers)

        async with anyio.create_task_group() as group:
            for text in ("first question", "second question", "third question"):
                group.start_soon(ask, text)
        stored = await s.store.load("shared")
    assert {text: content(chunks) for text, chunks in results.items()} == {
        "first question": "FIRST QUESTION", "second question": "SECOND QUESTION", "third question": "THIRD QUESTION"}
    assert stored is not None and len(stored) == 6


def test_the_trace_shows_reports_by_their_kind_including_ones_stored_before_turn_kinds() -> None:
    from session.openai._answer import trace_lines as _trace

    turns = [Turn(Role.SYSTEM, [Text("# Verification: failed")], {"kind": "verification", "attempt": 2}),
             Turn(Role.SYSTEM, [Text("a budget note")], {"kind": PatternKind.BUDGET}),
             Turn(Role.SYSTEM, [Text("# Verification: failed again")], {"kind": TurnKind.VERIFICATION})]
    assert _trace(turns, State()) == ["verification report (attempt 2):\n# Verification: failed",
                                      "verification report:\n# Verification: failed again"]
