"""The OpenAI-compatible endpoint over a real server on 127.0.0.1 (uvicorn on asyncio, Hypercorn on trio), with the
official ``openai`` client."""

import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import openai
import pytest

from cognitive import new_turn_processor, react_factory
from loop import Request, TextDelta
from provider import Function
from session import Manager, MemoryStore
from session.openai import openai_app
from tests.session.openai.threaded import Errors, serving_app

TOKEN = "loopback-token"
ASK = [{"role": "user", "content": "hello"}]




class Model:
    """Echoes, except that "live" waits until the client has seen its first delta and "hang" never finishes."""

    def __init__(self) -> None:
        self.client_saw_first = threading.Event()
        self.hang_cancelled = threading.Event()

    async def __call__(self, request: Request) -> AsyncIterator[Any]:
        text = request.turns[-1].text
        if text == "live":
            yield TextDelta("first ")
            seen = await anyio.to_thread.run_sync(self.client_saw_first.wait, 10)
            yield TextDelta("second" if seen else "(the first delta was held back)")
        elif text == "hang":
            yield TextDelta("partial")
            try:
                await anyio.sleep_forever()
            finally:
                self.hang_cancelled.set()
        else:
            yield TextDelta(text.upper())


class Agent:
    """The agent served over ``model``: the server's thread makes its manager, on the server's event loop."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.made: list[Manager] = []

    def app(self) -> Any:
        manager = Manager(new_turn_processor(react_factory), provider=Function(self.model), store=MemoryStore())
        self.made.append(manager)
        return openai_app(manager, token=TOKEN)

    @property
    def manager(self) -> Manager:
        return self.made[0]


@contextmanager
def serving(model: Model) -> Iterator[tuple[str, Errors, Agent]]:
    """Runs ``openai_app`` for ``model`` on a loopback socket in a thread; its lifespan enters the manager."""
    agent = Agent(model)
    with serving_app(agent.app) as (url, errors):
        yield url, errors, agent


async def test_answers_stream_live_over_a_real_server() -> None:
    model = Model()
    with serving(model) as (url, errors, _):
        async with openai.AsyncOpenAI(base_url=url, api_key=TOKEN, max_retries=0) as client:
            reply = await client.chat.completions.create(model="agent", messages=ASK)
            pieces = []
            stream = await client.chat.completions.create(
                model="agent", messages=[{"role": "user", "content": "live"}], stream=True,
                stream_options={"include_usage": True})
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    pieces.append(chunk.choices[0].delta.content)
                    model.client_saw_first.set()  # the model writes its second delta only after this
            with pytest.raises(openai.AuthenticationError):
                await client.with_options(api_key="wrong").models.list()
    assert reply.choices[0].message.content == "HELLO" and reply.choices[0].finish_reason == "stop"
    assert pieces == ["first ", "second"]
    assert chunk.usage is not None and chunk.choices == []
    assert errors.records == []


async def test_a_client_that_disconnects_mid_stream_interrupts_its_run_and_the_server_goes_on() -> None:
    model = Model()
    with serving(model) as (url, errors, agent):
        async with openai.AsyncOpenAI(base_url=url, api_key=TOKEN, max_retries=0) as client:
            stream = await client.chat.completions.create(
                model="agent", messages=[{"role": "user", "content": "hang"}], stream=True)
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content == "partial":
                    break
            await stream.close()
            assert await anyio.to_thread.run_sync(model.hang_cancelled.wait, 10), "the run was not interrupted"
            with anyio.fail_after(10):
                while agent.manager.open_sessions:  # the per-request session is closed after the interrupted run ends
                    await anyio.sleep(0.01)
            after = await client.chat.completions.create(model="agent", messages=ASK)
    assert after.choices[0].message.content == "HELLO"
    assert errors.records == []
