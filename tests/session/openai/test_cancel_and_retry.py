"""A client that leaves stops its run; a retry with an idempotency key gets the first run's answer instead of
running the agent again. Driven through the ASGI interface, with the client's disconnect sent when a test says."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from cognitive import new_turn_processor, react_factory
from loop import Request, Role, ToolCall, tool
from provider import Function
from session import Manager, MemoryStore, step_factory
from session.openai import openai_app

ASK = {"model": "agent", "messages": [{"role": "user", "content": "work"}]}


class Work:
    """The agent's one tool: waits until released (or cancelled), counting runs and cancellations."""

    def __init__(self) -> None:
        self.started = 0
        self.cancelled = 0
        self.release = anyio.Event()
        self.running = anyio.Event()

    async def __call__(self) -> str:
        self.started += 1
        self.running.set()
        try:
            await self.release.wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise
        return "worked"


class Client:
    """One request over ASGI: ``leave`` makes it disconnect; ``response`` is what it got."""

    def __init__(self, app: Any, body: dict[str, Any], headers: dict[str, str]) -> None:
        self.app = app
        self.body = json.dumps(body).encode()
        self.headers = [(b"content-type", b"application/json"),
                        *((k.lower().encode(), v.encode()) for k, v in headers.items())]
        self.gone = anyio.Event()
        self.messages: list[dict[str, Any]] = []
        self.done = anyio.Event()

    async def run(self) -> None:
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": self.body, "more_body": False}
            await self.gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            self.messages.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
                 "query_string": b"", "root_path": "", "headers": self.headers, "client": ("127.0.0.1", 5000),
                 "server": ("127.0.0.1", 80)}
        try:
            await self.app(scope, receive, send)
        finally:
            self.done.set()

    @property
    def status(self) -> int | None:
        return next((m["status"] for m in self.messages if m["type"] == "http.response.start"), None)

    @property
    def text(self) -> str:
        return b"".join(m.get("body", b"") for m in self.messages if m["type"] == "http.response.body").decode()


@asynccontextmanager
async def serving(**settings: Any) -> AsyncIterator[tuple[Any, Manager, Work, list[Request]]]:
    work = Work()
    requests: list[Request] = []

    @tool(name="work")
    async def work_tool() -> str:
        """Does the work."""
        return await work()

    def model(request: Request) -> Any:
        requests.append(request)
        if request.turns[-1].role is Role.USER:
            return ToolCall("w1", "work", "{}")
        return "all done"

    manager = Manager(new_turn_processor(react_factory), provider=Function(model), store=MemoryStore(),
                      make_step=step_factory([work_tool]))
    async with manager:
        yield openai_app(manager, enter_manager=False, keep_conversations=True, **settings), manager, work, requests


async def stored_results(manager: Manager) -> list[str]:
    results = []
    for session_id in await manager.store.sessions():
        state = await manager.store.load(session_id)
        assert state is not None
        results += [r.content for t in state for r in t.tool_results]
    return results


@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_that_leaves_stops_its_run(stream: bool) -> None:
    async with serving() as (app, manager, work, requests):
        client = Client(app, {**ASK, "stream": stream}, {})
        async with anyio.create_task_group() as group:
            group.start_soon(client.run)
            await work.running.wait()
            client.gone.set()
            with anyio.fail_after(5):
                await client.done.wait()
        assert (work.started, work.cancelled) == (1, 1)
        assert manager.open_sessions == 0
        results = await stored_results(manager)
    assert len(results) == 1 and results[0].startswith("error: cancelled")
    assert len(requests) == 1  # the model was not asked again after the cancel


async def test_a_retry_with_the_same_key_gets_the_first_answer_and_the_agent_runs_once() -> None:
    async with serving() as (app, manager, work, requests):
        headers = {"X-Request-Id": "req-1"}
        first, retry = Client(app, ASK, headers), Client(app, ASK, headers)
        async with anyio.create_task_group() as group:
            group.start_soon(first.run)
            await work.running.wait()
            group.start_soon(retry.run)  # the client retried while the first attempt still runs
            await anyio.sleep(0.05)
            work.release.set()
        again = Client(app, ASK, headers)  # and once more, after the answer
        await again.run()
    assert first.status == retry.status == again.status == 200
    assert json.loads(first.text) == json.loads(retry.text) == json.loads(again.text)
    assert json.loads(first.text)["choices"][0]["message"]["content"] == "all done"
    assert work.started == 1 and len(requests) == 2


async def test_a_run_whose_client_left_waits_for_its_retry() -> None:
    async with serving(retry_grace=5) as (app, manager, work, requests):
        headers = {"X-Request-Id": "req-2"}
        first, retry = Client(app, ASK, headers), Client(app, ASK, headers)
        async with anyio.create_task_group() as group:
            group.start_soon(first.run)
            await work.running.wait()
            first.gone.set()  # the SDK timed out ...
            await anyio.sleep(0.1)
            group.start_soon(retry.run)  # ... and retried
            await anyio.sleep(0.05)
            work.release.set()
    assert retry.status == 200
    assert json.loads(retry.text)["choices"][0]["message"]["content"] == "all done"
    assert (work.started, work.cancelled) == (1, 0)


async def test_without_a_retry_in_the_grace_period_the_run_is_stopped_and_a_later_retry_runs_afresh() -> None:
    async with serving(retry_grace=0.2) as (app, manager, work, requests):
        headers = {"X-Request-Id": "req-3"}
        first = Client(app, ASK, headers)
        async with anyio.create_task_group() as group:
            group.start_soon(first.run)
            await work.running.wait()
            first.gone.set()
            with anyio.fail_after(5):
                await first.done.wait()
        assert (work.started, work.cancelled) == (1, 1)
        work.release.set()
        late = Client(app, ASK, headers)
        await late.run()
    assert late.status == 200 and work.started == 2


async def test_a_streamed_retry_gets_the_answer_in_one_burst() -> None:
    async with serving() as (app, manager, work, requests):
        work.release.set()
        body = {**ASK, "stream": True, "stream_options": {"include_usage": True}}
        first = Client(app, body, {"X-Request-Id": "req-4"})
        await first.run()
        retry = Client(app, body, {"X-Request-Id": "req-4"})
        await retry.run()
    chunks = [json.loads(line[6:]) for line in retry.text.splitlines() if line.startswith("data: {")]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == "all done"
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
    assert chunks[-1]["choices"] == [] and "usage" in chunks[-1]
    assert retry.text.endswith("data: [DONE]\n\n")
    assert {c["id"] for c in chunks} == {json.loads(first.text.splitlines()[0][6:])["id"]}
    assert work.started == 1


async def test_a_key_used_for_another_request_is_refused() -> None:
    async with serving() as (app, manager, work, requests):
        work.release.set()
        await Client(app, ASK, {"X-Request-Id": "req-5"}).run()
        other = Client(app, {**ASK, "messages": [{"role": "user", "content": "other"}]}, {"X-Request-Id": "req-5"})
        await other.run()
    assert other.status == 400
    assert json.loads(other.text)["error"]["code"] == "request_id_reused"


async def test_an_answer_that_was_never_accepted_is_not_kept_for_the_retry() -> None:
    async with serving() as (app, manager, work, requests):
        work.release.set()
        manager.max_sessions = 1
        held = await manager.open("held")
        refused = Client(app, ASK, {"X-Request-Id": "req-6"})
        await refused.run()
        await manager.close(held.id)
        retry = Client(app, ASK, {"X-Request-Id": "req-6"})
        await retry.run()
    assert refused.status == 503
    assert retry.status == 200 and work.started == 1


async def test_a_run_longer_than_the_answers_time_to_live_is_still_taken_over_by_its_retry() -> None:
    async with serving(idempotency_ttl=0.2, retry_grace=5) as (app, manager, work, requests):
        headers = {"X-Request-Id": "req-7"}
        first, retry = Client(app, ASK, headers), Client(app, ASK, headers)
        async with anyio.create_task_group() as group:
            group.start_soon(first.run)
            await work.running.wait()
            await anyio.sleep(0.3)  # past the time to live: it counts from the answer, not from the request
            first.gone.set()
            group.start_soon(retry.run)
            await anyio.sleep(0.05)
            work.release.set()
    assert retry.status == 200 and work.started == 1


async def test_a_key_whose_first_attempt_failed_before_running_is_free_for_its_retry() -> None:
    refused: list[str] = []

    def access(request: Any, name: str) -> bool:
        if not refused:
            refused.append(name)
            raise RuntimeError("the access database is down")
        return True

    async with serving(session_access=access) as (app, manager, work, requests):
        work.release.set()
        headers = {"X-Request-Id": "req-8", "X-Session-Id": "s"}
        first = Client(app, ASK, headers)
        with pytest.raises(RuntimeError, match="access database"):  # the server logs it ...
            await first.run()
        retry = Client(app, ASK, headers)
        with anyio.fail_after(5):
            await retry.run()
    # ... and the client gets a 500 in OpenAI's format; its retry runs instead of waiting for a run that never began.
    assert first.status == 500 and json.loads(first.text)["error"]["code"] == "internal_error"
    assert retry.status == 200 and work.started == 1


async def test_a_key_reused_for_another_session_is_refused() -> None:
    async with serving() as (app, manager, work, requests):
        work.release.set()
        await Client(app, ASK, {"X-Request-Id": "req-9", "X-Session-Id": "a"}).run()
        other = Client(app, ASK, {"X-Request-Id": "req-9", "X-Session-Id": "b"})
        await other.run()
    assert other.status == 400 and json.loads(other.text)["error"]["code"] == "request_id_reused"


def test_the_oldest_answers_go_first_and_runs_going_on_are_never_forgotten() -> None:
    from session.openai._answer import Answer
    from session.openai._replay import Replays

    replays = Replays(ttl=600, size=2)
    answer = Answer({"role": "assistant", "content": "ok"}, "stop", {})
    running, _ = replays.take("me", "running", b"running")
    for key in ("a", "b", "c"):
        entry, new = replays.take("me", key, key.encode())
        assert new
        replays.finish(entry, answer, id=key, created=0, headers={})
    # Three answers kept and one run going on: the next request forgets the oldest answer, only it.
    assert [replays.take("me", key, key.encode())[1] for key in ("b", "c", "running")] == [False, False, False]
    assert replays.take("me", "a", b"a")[1] is True
    assert replays.take("me", "running", b"running")[0] is running


def test_one_token_cannot_push_another_tokens_answers_out() -> None:
    from session.openai._answer import Answer
    from session.openai._replay import Replays

    replays = Replays(ttl=600, size=3)
    answer = Answer({"role": "assistant", "content": "ok"}, "stop", {})
    mine, _ = replays.take("a", "retry-me", b"body")
    replays.finish(mine, answer, id="1", created=0, headers={})
    for n in range(1_001):  # token B floods the cache with keyed requests of its own
        entry, _ = replays.take("b", f"k{n}", b"x")
        replays.finish(entry, answer, id=str(n), created=0, headers={})
    again, new = replays.take("a", "retry-me", b"body")
    assert not new and again is mine, "A's retry takes its stored answer: the agent and its tool do not run again"
    assert replays.take("b", "k0", b"x")[1], "B's own oldest answers went, beyond B's own bound"


async def test_a_retry_with_a_session_header_that_names_no_session_is_refused_not_replayed() -> None:
    async with serving() as (app, manager, work, requests):
        work.release.set()
        first = Client(app, ASK, {"X-Request-Id": "req-7"})
        await first.run()
        again = Client(app, ASK, {"X-Request-Id": "req-7", "X-Session-Id": ""})  # empty: as if absent, before
        await again.run()
    assert first.status == 200
    assert again.status == 400 and json.loads(again.text)["error"]["code"] == "invalid_session_id"
    assert work.started == 1
