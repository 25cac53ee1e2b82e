"""``tasks/cancel``: a running task's message is interrupted (its slow tool really stops, its open call is answered
"cancelled" in the stored conversation) and the task ends ``canceled``, for the canceling client and on the task's
stream; a task still waiting behind another in its conversation never runs at all. A server shutting down stops
the tasks it runs, and they fail saying so."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from a2a.client import Client
from a2a.types import CancelTaskRequest, GetTaskRequest, ListTasksRequest, StreamResponse, TaskState
from a2a.utils.errors import TaskNotCancelableError

from loop import Request, Role, tool
from provider import Function, tool_call
from tests.session.a2a.helpers import collect, in_process, sdk_client, send, state_of, task_of


@pytest.fixture
def anyio_backend() -> str:
    """a2a-sdk's request handler runs each task in asyncio tasks of its own: the served side is asyncio only."""
    return "asyncio"


class Gate:
    """What the slow tool did: started, and stopped by a cancellation."""

    started: anyio.Event
    stopped: anyio.Event


gate = Gate()


@pytest.fixture(autouse=True)
def fresh_gate() -> Iterator[None]:
    gate.started, gate.stopped = anyio.Event(), anyio.Event()
    yield


@tool
async def slow(what: str) -> str:
    """Takes its time."""
    gate.started.set()
    try:
        await anyio.sleep(30)
    except anyio.get_cancelled_exc_class():
        gate.stopped.set()
        raise
    return what


def waiter(request: Request) -> Any:
    last = request.turns[-1]
    if last.role is Role.TOOL:
        return f"got {last.tool_results[0].content}"
    return tool_call("slow", {"what": last.text}, id=f"w{len(request.turns)}")


async def started(client: Client, context: str) -> str:
    """Send a message that runs the slow tool; its task's id, once the tool runs."""
    task = task_of(await collect(client, send("wait", context_id=context, return_immediately=True)))
    with anyio.fail_after(5):
        await gate.started.wait()
    return task.id


async def test_cancel_interrupts_the_run_and_the_task_ends_canceled() -> None:
    async with in_process(Function(waiter), tools=[slow]) as served:
        client = await sdk_client(served.client(), streaming=False)
        task_id = await started(client, "slow-1")
        with anyio.fail_after(5):
            canceled = await client.cancel_task(CancelTaskRequest(id=task_id))
        assert gate.stopped.is_set()  # the tool was stopped before the cancel was answered
        session = served.session("slow-1")
        got = await client.get_task(GetTaskRequest(id=task_id))
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task_id))
    assert state_of(canceled) == "TASK_STATE_CANCELED" and state_of(got) == "TASK_STATE_CANCELED"
    assert got.status.message.parts[0].text == "The task was canceled; the run was stopped."
    assert not session.busy
    [result] = session.state.turns[-1].tool_results
    assert result.is_error and "cancel" in result.content


async def test_the_stream_of_a_canceled_task_ends_with_its_canceled_status() -> None:
    async with in_process(Function(waiter), tools=[slow]) as served:
        streaming = await sdk_client(served.client(), streaming=True)
        other = await sdk_client(served.client(), streaming=False)
        responses: list[StreamResponse] = []

        async def stream() -> None:
            responses.extend(await collect(streaming, send("wait", context_id="slow-2")))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(stream)
                await gate.started.wait()
                [running] = (await other.list_tasks(ListTasksRequest())).tasks  # the stream has not said it yet
                await other.cancel_task(CancelTaskRequest(id=running.id))
    last = responses[-1].status_update
    assert last.status.state == TaskState.TASK_STATE_CANCELED
    assert [r.WhichOneof("payload") for r in responses][:2] == ["task", "status_update"]
    assert gate.stopped.is_set()


async def test_a_task_canceled_while_it_waits_for_its_conversation_never_runs() -> None:
    async with in_process(Function(waiter), tools=[slow]) as served:
        client = await sdk_client(served.client(), streaming=False)
        first = await started(client, "slow-3")
        second = task_of(await collect(client, send("later", context_id="slow-3", return_immediately=True)))
        with anyio.fail_after(5):
            canceled = await client.cancel_task(CancelTaskRequest(id=second.id))
            assert not gate.stopped.is_set()  # the first one still runs
            await client.cancel_task(CancelTaskRequest(id=first))
        users = [t.text for t in served.session("slow-3").state.turns if t.role is Role.USER]
        got = await client.get_task(GetTaskRequest(id=second.id))
    assert state_of(canceled) == "TASK_STATE_CANCELED"
    assert got.status.message.parts[0].text == "The task was canceled before its run started; nothing ran."
    assert users == ["wait"]  # "later" never reached the conversation



async def test_a_task_running_when_the_server_shuts_down_fails_saying_so() -> None:
    async with in_process(Function(waiter), tools=[slow]) as served:
        client = await sdk_client(served.client(), streaming=False)
        task_id = await started(client, "slow-4")
        await served.manager.stop()
        with anyio.fail_after(5):
            await gate.stopped.wait()
            while state_of(got := await client.get_task(GetTaskRequest(id=task_id))) == "TASK_STATE_WORKING":
                await anyio.sleep(0.01)
    assert state_of(got) == "TASK_STATE_FAILED"
    assert got.status.message.parts[0].text.startswith("The server is shutting down")
    assert got.metadata["error"]["code"] == "server_shutting_down"
