"""Over a real socket: the agent served by uvicorn on 127.0.0.1 (in a thread with its own asyncio loop), reached
by a2a-sdk's client and by the A2A tool from a test running on asyncio or on trio. A real SSE stream canceled
mid-run; a local ReAct whose model calls the remote agent through the tool and answers with what it said; and
the tool's errors: a remote failure or degraded answer, a wrong token, a timeout and a cancelled call, the last
two canceling the remote task."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from a2a.types import CancelTaskRequest, ListTasksRequest, TaskState

from cognitive import ReAct, new_turn_processor
from loop import Request, Role, State, Step, Text, TurnExecutor, tool
from loop.errors import ServerError
from provider import Function, tool_call
from session.a2a import A2AToolError, a2a_tool
from tests.session.a2a.helpers import OTHER, TOKEN, client_for, remote, remote_app, sdk_client, send


class Slow:
    """What the remote agent's slow tool did (it runs on the server's thread)."""

    started = threading.Event()
    stopped = threading.Event()


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    Slow.started, Slow.stopped = threading.Event(), threading.Event()
    yield


@tool
async def slow(what: str) -> str:
    """Takes its time."""
    Slow.started.set()
    try:
        await anyio.sleep(30)
    except anyio.get_cancelled_exc_class():
        Slow.stopped.set()
        raise
    return what


def waiter(request: Request) -> Any:
    last = request.turns[-1]
    if last.role is Role.TOOL:
        return f"got {last.tool_results[0].content}"
    return tool_call("slow", {"what": last.text}, id="w1")


def geographer(request: Request) -> Any:
    return "The capital of France is Paris."


async def happened(event: threading.Event, seconds: float = 5.0) -> bool:
    return await anyio.to_thread.run_sync(event.wait, seconds)


async def test_a_real_stream_canceled_mid_run_ends_canceled_and_the_run_stops() -> None:
    with remote(remote_app(Function(waiter), tools=[slow])) as url:
        async with client_for(url) as http, client_for(url) as other_http:
            client, other = await sdk_client(http), await sdk_client(other_http)
            states: list[int] = []
            said: list[str] = []
            with anyio.fail_after(10):
                async for response in client.send_message(send("wait for it", context_id="live")):
                    if response.HasField("task"):
                        task_id = response.task.id
                    elif response.HasField("status_update"):
                        status = response.status_update.status
                        states.append(status.state)
                        said.append(status.message.parts[0].text if status.message.parts else "")
                        if said[-1].startswith("Calling slow") and await happened(Slow.started):
                            await other.cancel_task(CancelTaskRequest(id=task_id))
            assert await happened(Slow.stopped)
    assert states[0] == TaskState.TASK_STATE_WORKING and states[-1] == TaskState.TASK_STATE_CANCELED
    assert said[-1] == "The task was canceled; the run was stopped."


async def test_a_local_react_asks_the_remote_agent_through_the_tool_and_uses_its_answer() -> None:
    with remote(remote_app(Function(geographer), name="geographer", description="Knows capitals.")) as url:
        remote_tool = await a2a_tool(url, token=TOKEN)
        assert remote_tool.spec.name == "geographer" and "Knows capitals." in remote_tool.spec.description

        def local(request: Request) -> Any:
            last = request.turns[-1]
            if last.role is Role.TOOL:
                return f"According to the geographer: {last.tool_results[0].content}"
            return tool_call("geographer", {"message": "What is the capital of France?"}, id="g1")

        agent = ReAct(Step(Function(local), tools=[remote_tool]))
        with anyio.fail_after(10):
            state = await agent.run(State().append(Role.USER, Text("Capital of France?")))
    [result] = state.turns[2].tool_results
    assert not result.is_error and result.content == "The capital of France is Paris."
    assert state.answer == "According to the geographer: The capital of France is Paris."
    assert state.outcome is None or state.outcome.ok


async def test_a_remote_failure_is_an_error_result_saying_the_state_and_why() -> None:
    def broken(request: Request) -> Any:
        raise ServerError("upstream exploded", status=500)

    with remote(remote_app(Function(broken), name="flaky")) as url:
        remote_tool = await a2a_tool(url, token=TOKEN)
        step = Step(Function(lambda r: tool_call("flaky", {"message": "hi"}, id="f1")), tools=[remote_tool])
        with anyio.fail_after(10):
            state = await step.turn(State().append(Role.USER, Text("go")))
    [result] = state.turns[-1].tool_results
    assert result.is_error
    assert "A2AToolError: the remote agent 'flaky' ended its task failed: The model provider failed" in result.content
    assert "upstream exploded" in result.content


async def test_a_degraded_remote_answer_is_an_error_that_says_so_and_shows_it() -> None:
    def capped(step: TurnExecutor) -> ReAct:
        return ReAct(step, max_turns=1)

    def searcher(request: Request) -> Any:
        if request.turns[-1].role is Role.TOOL:
            return "a half answer"
        return tool_call("slow_free", {}, id="s1")

    @tool
    async def slow_free() -> str:
        """Returns at once."""
        return "nothing"

    with remote(remote_app(Function(searcher), tools=[slow_free], processor=new_turn_processor(capped))) as url:
        remote_tool = await a2a_tool(url, token=TOKEN)
        with anyio.fail_after(10), pytest.raises(A2AToolError) as raised:
            await remote_tool.call({"message": "answer fully"})
    text = str(raised.value)
    assert "ended its task failed (degraded): The agent did not finish (degraded)" in text
    assert text.endswith("What it wrote (not a complete answer):\na half answer")


async def test_a_wrong_token_is_an_error_naming_the_refusal() -> None:
    with remote(remote_app(Function(geographer))) as url:
        remote_tool = await a2a_tool(url, token="not-a-token")  # the card is public
        with anyio.fail_after(10), pytest.raises(A2AToolError, match="could not be reached or refused.*401"):
            await remote_tool.call({"message": "hi"})


async def test_a_call_that_outlasts_its_timeout_fails_and_cancels_the_remote_task() -> None:
    with remote(remote_app(Function(waiter), tools=[slow])) as url:
        remote_tool = await a2a_tool(url, token=OTHER, timeout=1.5)
        with anyio.fail_after(10), pytest.raises(A2AToolError, match="did not finish within 1.5 seconds"):
            await remote_tool.call({"message": "slowly"})
        assert await happened(Slow.stopped)
        async with client_for(url, OTHER) as http:
            [task] = (await (await sdk_client(http)).list_tasks(ListTasksRequest())).tasks
    assert task.status.state == TaskState.TASK_STATE_CANCELED


async def test_a_cancelled_call_cancels_the_remote_task() -> None:
    with remote(remote_app(Function(waiter), tools=[slow])) as url:
        remote_tool = await a2a_tool(url, token=TOKEN)
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(remote_tool.call, {"message": "slowly"})
                assert await happened(Slow.started)
                group.cancel_scope.cancel()
            assert await happened(Slow.stopped)
        async with client_for(url) as http:
            [task] = (await (await sdk_client(http)).list_tasks(ListTasksRequest())).tasks
    assert task.status.state == TaskState.TASK_STATE_CANCELED
