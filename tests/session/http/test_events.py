"""The SSE event stream over a real socket on 127.0.0.1: live streaming, resume, loss, keep-alive, stop."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from cognitive import ReAct, new_turn_processor
from loop import Delta, Finish, Request, Role, Text, TextDelta, ToolCallDelta, Turn, UsageError, tool
from provider import Function, tool_call
from session import Manager, MemoryStore, MessageFinished, step_factory
from session.http import HTTPConduit
from tests.session.http.helpers import SSE, TOKEN, Frame, in_process, key, on_socket, wait_turns
from tests.session.models import echo


@tool
def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


def calculator(gate: anyio.Event) -> Function:
    """Calls ``add`` for the user's message, then answers in two pieces with ``gate`` between them."""

    async def model(request: Request) -> AsyncIterator[Delta]:
        last = request.turns[-1]
        if last.role is Role.USER:
            a, b = (int(w) for w in last.text.split() if w.isdigit())
            yield ToolCallDelta(0, "call_1", "add", f'{{"a": {a}, ')
            yield ToolCallDelta(0, arguments_fragment=f'"b": {b}}}')
            yield Finish("tool_calls")
            return
        yield TextDelta("The sum ")
        await gate.wait()
        yield TextDelta(f"is {last.tool_results[0].content}.")
        yield Finish("stop")

    return Function(model)


async def open_session(client: httpx.AsyncClient) -> str:
    response = await client.post("/sessions")
    assert response.status_code == 201
    return response.json()["id"]


def texts(frames: list[Frame]) -> str:
    return "".join(f.data["text"] for f in frames if f.event == "text_delta")


async def test_a_run_streams_live_with_its_tool_calls_and_outcome() -> None:
    gate = anyio.Event()
    async with on_socket(calculator(gate), tools=[add]) as served:
        client = served.client()
        session_id = await open_session(client)
        async with client.stream("GET", f"/sessions/{session_id}/events") as response:
            sse = SSE(response)
            await client.post(f"/sessions/{session_id}/messages", json={"text": "add 2 and 3"})
            before = await sse.until("text_delta")  # the model is still held at the gate here
            assert not gate.is_set() and before[-1].data == {"type": "text_delta", "text": "The sum ", "path": "ReAct"}
            gate.set()
            after = await sse.until("message_finished")
    frames = before + after
    assert [f.id for f in frames] == list(range(frames[0].id, frames[0].id + len(frames)))
    assert all(f.event == f.data["type"] for f in frames)
    kinds = [f.event for f in frames]
    assert kinds[:2] == ["message_queued", "message_started"]
    assert kinds.index("tool_call_delta") < kinds.index("tool_started") < kinds.index("tool_finished")
    (finished_tool,) = [f.data for f in frames if f.event == "tool_finished"]
    assert finished_tool["call"] == {"type": "tool_call", "id": "call_1", "name": "add", "arguments": '{"a": 2, "b": 3}'}
    assert finished_tool["result"]["content"] == "5" and finished_tool["result"]["is_error"] is False
    assert isinstance(finished_tool["seconds"], float)
    assert texts(frames) == "The sum is 5."
    assert frames[-1].data["answer"] == "The sum is 5." and frames[-1].data["ok"] is True
    assert frames[-1].data["degraded"] is False
    stored = [f.data["turn"]["role"] for f in frames if f.event == "turn_stored"]
    assert stored == ["user", "assistant", "tool", "assistant"]


async def test_a_client_that_reconnects_gets_exactly_the_events_it_missed() -> None:
    gate = anyio.Event()
    async with on_socket(calculator(gate), tools=[add]) as served:
        client = served.client()
        session_id = await open_session(client)
        async with client.stream("GET", f"/sessions/{session_id}/events") as response:
            await client.post(f"/sessions/{session_id}/messages", json={"text": "add 40 and 2"})
            seen = await SSE(response).until("text_delta")
        # The client is gone; the turn goes on and its events are kept.
        with served.session(session_id).events.subscribe() as events:
            gate.set()
            with anyio.fail_after(10):
                async for event in events:
                    if isinstance(event, MessageFinished):
                        break
        resume = {"last-event-id": str(seen[-1].id)}
        async with client.stream("GET", f"/sessions/{session_id}/events", headers=resume) as response:
            missed = await SSE(response).until("message_finished")
        async with client.stream("GET", f"/sessions/{session_id}/events") as response:
            everything = await SSE(response).until("message_finished")
    assert [f.id for f in missed] == list(range(seen[-1].id + 1, seen[-1].id + 1 + len(missed)))
    assert seen + missed == everything
    assert texts(seen) == "The sum " and texts(missed) == "is 42."


async def test_the_after_query_resumes_and_the_header_wins_over_it() -> None:
    async with on_socket(Function(echo)) as served:
        client = served.client()
        session_id = await open_session(client)
        await client.post(f"/sessions/{session_id}/messages", json={"text": "hi"})
        await wait_turns(client, session_id, 2)
        async with client.stream("GET", f"/sessions/{session_id}/events") as response:
            first = (await SSE(response).frame()).id
        async with client.stream("GET", f"/sessions/{session_id}/events?after={first + 2}") as response:
            by_query = await SSE(response).frame()
        headers = {"last-event-id": str(first + 4)}
        async with client.stream("GET", f"/sessions/{session_id}/events?after={first}", headers=headers) as response:
            by_header = await SSE(response).frame()
    assert (by_query.id, by_header.id) == (first + 3, first + 5)


async def test_events_no_longer_kept_are_reported_as_lost() -> None:
    async with on_socket(Function(echo), event_log_size=4) as served:
        client = served.client()
        session_id = await open_session(client)
        async with client.stream("GET", f"/sessions/{session_id}/events") as response:
            await client.post(f"/sessions/{session_id}/messages", json={"text": "hello"})
            last = (await SSE(response).until("message_finished"))[-1].id  # a message makes 9 events or more
        async with client.stream("GET", f"/sessions/{session_id}/events?after={last - 6}") as response:
            sse = SSE(response)
            lost = await sse.frame()
            kept = await sse.until("message_finished")
    assert lost.event == "events_lost" and lost.id is None
    assert lost.data == {"type": "events_lost", "count": 2}
    assert len(kept) == 4 and [f.id for f in kept] == list(range(kept[0].id, kept[0].id + 4))


async def test_a_quiet_stream_gets_keep_alive_comments() -> None:
    async with on_socket(Function(echo), keepalive=0.05) as served:
        client = served.client()
        session_id = await open_session(client)
        async with client.stream("GET", f"/sessions/{session_id}/events") as response:
            with anyio.fail_after(10):
                comment = await SSE(response).frame(comments=True)
    assert comment.comment == "keep-alive"


async def test_a_degraded_run_is_never_shown_as_a_success() -> None:
    provider = Function(lambda r: tool_call("add", {"a": 1, "b": 1}) if r.options.tool_choice != "none" else "gave up")
    processor = new_turn_processor(lambda step: ReAct(step, max_turns=1))
    async with on_socket(provider, tools=[add], processor=processor) as served:
        client = served.client()
        session_id = await open_session(client)
        await client.post(f"/sessions/{session_id}/messages", json={"text": "loop"})
        async with client.stream("GET", f"/sessions/{session_id}/events") as response:
            finished = (await SSE(response).until("message_finished"))[-1].data
    assert finished["ok"] is False and finished["degraded"] is True
    assert "max_turns=1" in finished["reason"] and finished["answer"] == "gave up"


async def test_a_failing_model_is_reported_by_type_and_message() -> None:
    def broken(request: Request) -> str:
        raise RuntimeError("the model exploded")

    async with on_socket(Function(broken)) as served:
        client = served.client()
        session_id = await open_session(client)
        await client.post(f"/sessions/{session_id}/messages", json={"text": "go"})
        async with client.stream("GET", f"/sessions/{session_id}/events") as response:
            frames = await SSE(response).until("message_failed")
    (turn_failed,) = [f.data for f in frames if f.event == "turn_failed"]
    assert turn_failed["error"] == {"type": "RuntimeError", "message": "the model exploded"}
    assert frames[-1].data["error"] == {"type": "RuntimeError", "message": "the model exploded"}


async def test_events_go_on_with_rising_ids_when_a_closed_session_is_reopened() -> None:
    async with on_socket(Function(echo)) as served:
        client = served.client()
        session_id = await open_session(client)
        async with client.stream("GET", f"/sessions/{session_id}/events") as response:
            sse = SSE(response)
            await client.post(f"/sessions/{session_id}/messages", json={"text": "one"})
            first = await sse.until("message_finished")
            await served.manager.close(key(session_id))  # as the idle reaper does
            await client.post(f"/sessions/{session_id}/messages", json={"text": "two"})
            second = await sse.until("message_finished")
    ids = [f.id for f in first + second]
    assert ids == list(range(ids[0], ids[0] + len(ids)))
    assert second[-1].data["answer"] == "TWO"


async def test_a_reader_coming_back_after_a_reopen_misses_none_of_the_new_events() -> None:
    async with on_socket(Function(echo)) as served:
        client = served.client()
        session_id = await open_session(client)
        async with client.stream("GET", f"/sessions/{session_id}/events") as response:
            await client.post(f"/sessions/{session_id}/messages", json={"text": "one"})
            old = await SSE(response).until("message_finished")
        assert (await client.delete(f"/sessions/{session_id}")).status_code == 204  # its log goes with it
        await client.post(f"/sessions/{session_id}/messages", json={"text": "two"})  # reopened: a new log
        await wait_turns(client, session_id, 4)
        resume = {"last-event-id": str(old[-1].id)}
        async with client.stream("GET", f"/sessions/{session_id}/events", headers=resume) as response:
            new = await SSE(response).until("message_finished")
    assert new[0].event == "message_queued" and new[0].id > old[-1].id
    assert new[-1].data["answer"] == "TWO"


async def test_logs_of_closed_sessions_are_let_go_when_they_pile_up() -> None:
    async with on_socket(Function(echo), manager_options={"max_sessions": 1}) as served:
        client = served.client()
        first = await open_session(client)
        await client.post(f"/sessions/{first}/messages", json={"text": "kept"})
        await wait_turns(client, first, 2)
        async with client.stream("GET", f"/sessions/{first}/events") as response:
            sse = SSE(response)
            await sse.until("message_finished")
            await served.manager.close(key(first))  # as the idle reaper does; the log stays, numbered on
            second = await open_session(client)
            await served.manager.close(key(second))
            await open_session(client)  # two logs of closed sessions, one manager place: they go
            with anyio.fail_after(10), pytest.raises(EOFError):
                while True:
                    await sse.frame()
        turns = await wait_turns(client, first, 2)
    assert [t["parts"][0]["text"] for t in turns] == ["kept", "KEPT"]


async def test_a_message_racing_the_letting_go_of_its_log_is_still_taken_and_recorded() -> None:
    class Gated(MemoryStore):
        gate: anyio.Event | None = None
        reached = anyio.Event()

        async def load(self, session_id: str) -> Any:
            if self.gate is not None and session_id == key("a"):
                self.reached.set()
                await self.gate.wait()
            return await super().load(session_id)

    store = Gated()
    await store.append(key("stored"), 0, [Turn(Role.USER, [Text("old")])], {})
    async with on_socket(Function(echo), store=store, manager_options={"max_sessions": 1}) as served:
        client = served.client()
        await client.post("/v1/chat/completions", headers={"x-session-id": "a"},
                           json={"model": "agent", "messages": [{"role": "user", "content": "one"}]})
        assert (await client.get("/sessions/a/turns")).status_code == 200  # its log is kept from here on
        await served.manager.close(key("a"))
        second = await open_session(client)
        await served.manager.close(key(second))
        store.gate = anyio.Event()
        async with anyio.create_task_group() as group:
            posted: list[httpx.Response] = []

            async def post() -> None:
                posted.append(await client.post("/sessions/a/messages", json={"text": "two"}))

            group.start_soon(post)
            with anyio.fail_after(10):
                await store.reached.wait()  # reopening "a": its log is not attached yet
            assert (await client.get("/sessions/stored/turns")).status_code == 200  # a third log: the others go
            store.gate.set()
        assert posted[0].status_code == 202, posted[0].text
        async with client.stream("GET", "/sessions/a/events") as response:
            finished = (await SSE(response).until("message_finished"))[-1]
    assert finished.data["answer"] == "TWO"


@pytest.mark.parametrize("closed_by", ["delete", "idle"])
async def test_turns_run_through_the_openai_api_reach_a_closed_sessions_stream(closed_by: str) -> None:
    async with on_socket(Function(echo)) as served:
        client = served.client()
        session_id = await open_session(client)
        await client.post(f"/sessions/{session_id}/messages", json={"text": "hi"})
        await wait_turns(client, session_id, 2)
        if closed_by == "delete":
            await client.delete(f"/sessions/{session_id}")
        else:
            await served.manager.close(key(session_id))
        async with client.stream("GET", f"/sessions/{session_id}/events?after={10**17}") as response:
            answer = await client.post("/v1/chat/completions", headers={"x-session-id": session_id},
                                       json={"model": "agent", "messages": [{"role": "user", "content": "via openai"}]})
            frames = await SSE(response).until("message_finished")
    assert answer.json()["choices"][0]["message"]["content"] == "VIA OPENAI"
    assert frames[0].event == "message_queued" and frames[-1].data["answer"] == "VIA OPENAI"


async def test_deleting_a_session_ends_its_streams() -> None:
    async with on_socket(Function(echo)) as served:
        client = served.client()
        session_id = await open_session(client)
        async with client.stream("GET", f"/sessions/{session_id}/events") as response:
            sse = SSE(response)
            assert (await client.delete(f"/sessions/{session_id}")).status_code == 204
            last = await sse.frame()
            with anyio.fail_after(10), pytest.raises(EOFError):
                await sse.frame()
    assert last.event == "interrupted"


async def test_head_on_the_event_stream_answers_at_once() -> None:
    async with in_process(Function(echo)) as served:
        client = served.client()
        session_id = await open_session(client)
        with anyio.fail_after(5):
            response = await client.head(f"/sessions/{session_id}/events")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")


@pytest.mark.parametrize("bad", ["-1", "abc", "1.5", "9" * 30])
async def test_a_bad_event_id_is_400(bad: str) -> None:
    async with in_process(Function(echo)) as served:
        client = served.client()
        session_id = await open_session(client)
        response = await client.get(f"/sessions/{session_id}/events", headers={"last-event-id": bad})
    assert response.status_code == 400 and response.json()["error"]["type"] == "bad_event_id"


async def test_serving_a_port_in_use_is_refused_clearly() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with Manager(new_turn_processor(ReAct), provider=Function(echo)) as manager:
            with pytest.raises(UsageError, match=f"cannot listen on 127.0.0.1:{port}"):
                await HTTPConduit(port=port, token=TOKEN).serve(manager)


async def test_serve_stops_on_cancellation_and_the_turn_goes_on() -> None:
    gate = anyio.Event()
    conduit = HTTPConduit(host="127.0.0.1", port=0, token=TOKEN)
    scope = anyio.CancelScope()
    stopped = anyio.Event()

    async def serve(manager: Manager, *, task_status: anyio.abc.TaskStatus[str]) -> None:
        with scope:
            await conduit.serve(manager, task_status=task_status)
        stopped.set()

    async with Manager(new_turn_processor(ReAct), provider=calculator(gate), make_step=step_factory([add])) as manager:
        async with anyio.create_task_group() as group:
            url = await group.start(serve, manager)
            assert url.startswith("http://127.0.0.1:")
            async with httpx.AsyncClient(base_url=url, headers={"authorization": f"Bearer {TOKEN}"}) as client:
                assert (await client.get("/healthz")).json() == {"status": "ok"}
                session_id = await open_session(client)
                async with client.stream("GET", f"/sessions/{session_id}/events") as response:
                    sse = SSE(response)
                    await client.post(f"/sessions/{session_id}/messages", json={"text": "add 1 and 1"})
                    await sse.until("text_delta")
                    scope.cancel()
                    with anyio.fail_after(10), pytest.raises(EOFError):
                        while True:
                            await sse.frame()
                with anyio.fail_after(10):
                    await stopped.wait()
                with pytest.raises(httpx.ConnectError):
                    await client.get("/healthz")
        session = manager.get(key(session_id))
        assert session is not None
        gate.set()
        with anyio.fail_after(10):
            while session.state.answer is None or session.state.last.role is not Role.ASSISTANT:
                await anyio.sleep(0.01)
    assert session.state.answer == "The sum is 2."


async def test_branches_reach_only_the_readers_that_ask_for_them() -> None:
    from cognitive import ReAct, SelfConsistency

    processor = new_turn_processor(lambda step: SelfConsistency(ReAct(step), n=3))
    async with on_socket(Function(echo), processor=processor) as served:
        client = served.client()
        session_id = await open_session(client)
        url = f"/sessions/{session_id}/events"
        assert (await client.get(url, params={"branches": "yes"})).status_code == 400
        assert (await client.post(f"/sessions/{session_id}/messages", json={"text": "vote"})).status_code == 202
        async with client.stream("GET", url) as main, client.stream("GET", url, params={"branches": "true"}) as all_:
            main_frames = await SSE(main).until("message_finished")
            all_frames = await SSE(all_).until("message_finished")
    assert all(f.data.get("main", True) for f in main_frames)
    branch = [f for f in all_frames if f.data.get("main") is False]
    samples = {f.data["path"].split("/")[1] for f in branch if f.event == "turn_completed"}
    assert samples == {"sample 1", "sample 2", "sample 3"}
    assert {f.id for f in main_frames} < {f.id for f in all_frames}  # one numbering: a reader may switch views
    assert texts(main_frames) == texts([f for f in all_frames if f.data.get("main", True)])
