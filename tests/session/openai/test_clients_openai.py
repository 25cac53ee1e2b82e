"""The official ``openai`` client against the served agent: parsed output, timeouts, idempotent retries, refusals."""

import json
import threading
import time
from collections.abc import Awaitable, Callable

import anyio
import openai
import pytest
from openai.types.chat import ChatCompletion

from loop import CANCELLED, Request, Role, tool
from provider import tool_call
from tests.session.openai.clients_helpers import MODEL, PARIS, City, compact, names, results, serving
from tests.session.openai.test_server import TOKEN

ASK = [{"role": "user", "content": "How many people live in Paris?"}]
LOOKUP = {"type": "function", "function": {"name": "lookup", "description": "A client tool named like the agent's.",
                                           "parameters": {"type": "object", "properties": {}}}}

hang_cancelled = threading.Event()
slow_calls: list[float] = []


@tool
async def lookup(city: str) -> str:
    """The population of a city."""
    return str(PARIS["population"])


@tool
async def hang(city: str) -> str:
    """Never finishes; notes its cancellation."""
    try:
        await anyio.sleep_forever()
    finally:
        hang_cancelled.set()
    return city


@tool
async def slow(city: str) -> str:
    """Takes 2.5 s: past the client's 1.5 s timeout, and done while its first retry still waits."""
    slow_calls.append(time.monotonic())
    await anyio.sleep(2.5)
    return "2100000"


def call_first(name: str) -> Callable[[Request], object]:
    """A model that calls ``name`` once, then answers with the tool's result."""
    def model(request: Request) -> object:
        done = results(request)
        return f"{done[-1].name}: {done[-1].content}" if done else tool_call(name, {"city": "Paris"})
    return model


def client(url: str, *, timeout: float = 10.0, max_retries: int = 0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url, api_key=TOKEN, timeout=timeout, max_retries=max_retries)


async def test_parse_returns_the_model_instance_from_the_compacted_answer() -> None:
    with serving(lambda request: json.dumps(PARIS, indent=2)) as served:
        async with client(served.url) as openai_client:
            reply = await openai_client.chat.completions.parse(model=MODEL, messages=ASK, response_format=City)
    message = reply.choices[0].message
    assert message.parsed == City(**PARIS)
    assert message.content == compact(PARIS)  # the model's own answer validated, sent compact
    assert len(served.requests) == 1  # so no formatting turn was needed


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streaming"])
async def test_a_client_timeout_cancels_the_run_and_the_open_call_is_recorded_cancelled(stream: bool) -> None:
    hang_cancelled.clear()
    with serving(call_first("hang"), [hang], keep_conversations=True) as served:
        async with client(served.url, timeout=1.0) as openai_client:
            with pytest.raises(openai.APITimeoutError):
                if stream:
                    async with await openai_client.chat.completions.create(
                            model=MODEL, messages=ASK, stream=True) as chunks:
                        async for _ in chunks:
                            pass
                else:
                    await openai_client.chat.completions.create(model=MODEL, messages=ASK)
        assert await anyio.to_thread.run_sync(hang_cancelled.wait, 10), "the run went on after the client left"
        with anyio.fail_after(10):
            while served.manager.open_sessions:
                await anyio.sleep(0.02)
    [name] = await served.store.sessions()
    stored = await served.store.load(name)
    assert stored is not None
    [tool_turn] = [turn for turn in stored.turns if turn.role is Role.TOOL]
    [result] = tool_turn.tool_results
    assert result.name == "hang" and result.is_error and CANCELLED in result.content
    assert len(served.requests) == 1


async def test_a_retry_after_a_timeout_takes_over_the_run_with_its_request_id() -> None:
    # The SDK times out after 1.5 s and retries (0.4-0.5 s later) with the same X-Request-Id; the run takes 2.5 s,
    # so the first retry is still waiting when it ends. Without the key, the retry would run the agent again.
    slow_calls.clear()
    with serving(call_first("slow"), [slow]) as served:
        async with client(served.url, timeout=1.5, max_retries=2) as openai_client:
            started = time.monotonic()
            reply = await openai_client.chat.completions.create(model=MODEL, messages=ASK,
                                                                extra_headers={"X-Request-Id": "retry-1"})
            took = time.monotonic() - started
    assert reply.choices[0].message.content == "slow: 2100000"
    assert len(slow_calls) == 1
    assert [bool(results(request)) for request in served.requests] == [False, True]  # one run: call, then answer
    assert took >= 2.5  # longer than the client's timeout: the answer came to a retry


async def test_a_finished_request_id_is_answered_again_without_running() -> None:
    answers = iter(["first run", "second run"])
    with serving(lambda request: next(answers)) as served:
        async with client(served.url) as openai_client:
            def ask(key: str) -> Awaitable[ChatCompletion]:
                return openai_client.chat.completions.create(model=MODEL, messages=ASK,
                                                             extra_headers={"X-Request-Id": key})
            once, again, other = await ask("same"), await ask("same"), await ask("other")
    assert [reply.choices[0].message.content for reply in (once, again, other)] == [
        "first run", "first run", "second run"]
    assert len(served.requests) == 2


async def test_tool_choice_none_is_what_the_model_is_asked_with() -> None:
    weather = {"type": "function", "function": {"name": "weather", "description": "Today's weather.",
                                                "parameters": {"type": "object", "properties": {}}}}
    with serving(lambda request: "no tools today", [lookup]) as served:
        async with client(served.url) as openai_client:
            reply = await openai_client.chat.completions.create(model=MODEL, messages=ASK, tools=[weather],
                                                                tool_choice="none")
    assert reply.choices[0].message.content == "no tools today" and not reply.choices[0].message.tool_calls
    [request] = served.requests
    assert names(request) == {"lookup", "weather"} and request.options.tool_choice == "none"


async def test_a_client_tool_named_like_an_agent_tool_is_refused() -> None:
    with serving(lambda request: "never asked", [lookup]) as served:
        async with client(served.url) as openai_client:
            with pytest.raises(openai.BadRequestError) as refused:
                await openai_client.chat.completions.create(model=MODEL, messages=ASK, tools=[LOOKUP])
    assert refused.value.status_code == 400 and "lookup" in refused.value.message
    assert served.requests == []


async def test_a_response_format_with_an_invalid_schema_is_refused() -> None:
    bad = {"type": "json_schema", "json_schema": {"name": "City", "strict": True,
                                                  "schema": {"type": "object", "properties": {"name": {"type": 7}}}}}
    with serving(lambda request: "never asked") as served:
        async with client(served.url) as openai_client:
            with pytest.raises(openai.BadRequestError) as refused:
                await openai_client.chat.completions.create(model=MODEL, messages=ASK, response_format=bad)
    assert refused.value.status_code == 400
    assert served.requests == []
