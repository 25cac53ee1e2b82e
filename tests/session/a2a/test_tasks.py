"""Tasks over A2A with a2a-sdk's own client, in process: a blocking send, a streamed run with its tool activity,
``tasks/get``, a conversation kept across the messages of one ``contextId``, two tokens that never share one, the
0.3 wire methods, a message this agent cannot read, and the token's quota of open conversations."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from a2a.helpers import new_data_part
from a2a.types import GetTaskRequest, Part, StreamResponse, TaskState
from a2a.utils.errors import TaskNotFoundError

from loop import Request, Role, Text, tool
from provider import Function, tool_call
from session._bearer import TokenQuota
from session.a2a import A2AEndpoint
from tests.session.a2a.helpers import (OTHER, TOKEN, Served, app_for, collect, in_process, manager_for, sdk_client,
                                       send, state_of, task_of)


@pytest.fixture
def anyio_backend() -> str:
    """a2a-sdk's request handler runs each task in asyncio tasks of its own: the served side is asyncio only."""
    return "asyncio"


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def adder(request: Request) -> Any:
    last = request.turns[-1]
    if last.role is Role.TOOL:
        return [Text(f"sum is {last.tool_results[0].content}")]
    return [Text("Let me add."), tool_call("add", {"a": 2, "b": 3}, id="c1")]


def counter(request: Request) -> Any:
    """Answers with how many user messages the conversation holds, and the last one."""
    users = [t for t in request.turns if t.role is Role.USER]
    return [Text(f"{len(users)}: {users[-1].text}")]


def kinds(responses: list[StreamResponse]) -> list[str]:
    out = []
    for r in responses:
        kind = r.WhichOneof("payload")
        if kind == "status_update":
            kind = TaskState.Name(r.status_update.status.state).removeprefix("TASK_STATE_").lower()
        out.append(str(kind))
    return out


async def test_a_blocking_send_answers_with_the_completed_task() -> None:
    async with in_process(Function(adder), tools=[add]) as served:
        client = await sdk_client(served.client(), streaming=False)
        task = task_of(await collect(client, send("add 2 and 3", context_id="ctx-1")))
        again = await client.get_task(GetTaskRequest(id=task.id))
        stored = served.session("ctx-1").state
    assert state_of(task) == "TASK_STATE_COMPLETED"
    assert task.context_id == "ctx-1"
    [answer] = task.artifacts
    assert (answer.name, answer.parts[0].text) == ("answer", "sum is 5")
    assert task.metadata["outcome"]["status"] == "ok" and "progress" not in task.metadata
    assert again.id == task.id and state_of(again) == "TASK_STATE_COMPLETED"
    assert again.history[0].parts[0].text == "add 2 and 3"
    assert [t.role for t in stored.turns] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert stored.answer == "sum is 5"


async def test_a_streamed_run_reports_its_tool_activity_then_its_answer() -> None:
    async with in_process(Function(adder), tools=[add]) as served:
        client = await sdk_client(served.client())
        responses = await collect(client, send("add 2 and 3"))
    assert kinds(responses) == ["task", "working", "working", "working", "artifact_update", "completed"]
    calling, finished = (r.status_update for r in responses[2:4])
    assert calling.status.message.parts[0].text == 'Let me add.\n\nCalling add({"a": 2, "b": 3})'
    details = calling.status.message.metadata
    assert details["progress"] == "tool_calls" and details["toolCalls"][0]["name"] == "add"
    assert finished.status.message.parts[0].text == "add finished"
    assert finished.status.message.metadata["isError"] is False
    assert "progress" not in responses[-1].status_update.metadata
    assert responses[4].artifact_update.artifact.parts[0].text == "sum is 5"
    assert responses[0].task.status.state == TaskState.TASK_STATE_SUBMITTED
    assert responses[-1].status_update.task_id == responses[0].task.id


async def test_one_context_is_one_conversation_and_each_message_a_task() -> None:
    async with in_process(Function(counter)) as served:
        client = await sdk_client(served.client(), streaming=False)
        first = task_of(await collect(client, send("one", context_id="chat")))
        second = task_of(await collect(client, send("two", context_id="chat")))
        fresh = task_of(await collect(client, send("three")))  # no contextId: a new conversation
    assert first.id != second.id
    assert [t.artifacts[0].parts[0].text for t in (first, second, fresh)] == ["1: one", "2: two", "1: three"]
    assert fresh.context_id and fresh.context_id != "chat"


async def test_two_tokens_never_share_a_context_or_see_each_others_tasks() -> None:
    async with in_process(Function(counter)) as served:
        mine = await sdk_client(served.client(TOKEN), streaming=False)
        theirs = await sdk_client(served.client(OTHER), streaming=False)
        task_of(await collect(mine, send("mine 1", context_id="shared")))
        task = task_of(await collect(mine, send("mine 2", context_id="shared")))
        other = task_of(await collect(theirs, send("theirs", context_id="shared")))
        with pytest.raises(TaskNotFoundError):
            await theirs.get_task(GetTaskRequest(id=task.id))
        conversations = [served.session("shared", token).state for token in (TOKEN, OTHER)]
    assert task.artifacts[0].parts[0].text == "2: mine 2"
    assert other.artifacts[0].parts[0].text == "1: theirs"
    assert [[t.text for t in c.turns if t.role is Role.USER] for c in conversations] == [
        ["mine 1", "mine 2"], ["theirs"]]


async def test_the_0_3_methods_answer_on_the_same_endpoint() -> None:
    async with in_process(Function(counter)) as served:
        client = served.client()
        message = {"kind": "message", "messageId": "m1", "role": "user", "contextId": "old-client",
                   "parts": [{"kind": "text", "text": "hello"}]}
        sent = await client.post("/a2a", json={"jsonrpc": "2.0", "id": 7, "method": "message/send",
                                               "params": {"message": message}})
        task = sent.json()["result"]
        got = await client.post("/a2a", json={"jsonrpc": "2.0", "id": 8, "method": "tasks/get",
                                              "params": {"id": task["id"]}})
    assert (task["kind"], task["status"]["state"], task["contextId"]) == ("task", "completed", "old-client")
    assert task["artifacts"][0]["parts"][0]["text"] == "1: hello"
    assert got.json()["result"]["status"]["state"] == "completed"


async def test_a_message_with_parts_it_cannot_read_is_rejected_before_anything_runs() -> None:
    async with in_process(Function(counter)) as served:
        client = await sdk_client(served.client(), streaming=False)
        task = task_of(await collect(client, send(parts=[Part(text="see"), new_data_part({"size": 3})],
                                                  context_id="pic")))
        opened = served.session("pic")
    assert state_of(task) == "TASK_STATE_REJECTED"
    assert task.status.message.parts[0].text == ("This agent reads text parts and files (raw bytes or a URL); "
                                                 "parts[1] is a data part.")
    assert opened is None  # its conversation was not even opened


async def test_conversations_are_opened_within_the_tokens_quota() -> None:
    async with manager_for(Function(counter)) as manager:
        endpoint = A2AEndpoint(manager, quota=TokenQuota(manager, per_token=1))
        served = Served(manager, httpx.ASGITransport(app=app_for(endpoint)))
        try:
            client = await sdk_client(served.client(), streaming=False)
            first = task_of(await collect(client, send("one", context_id="a")))
            again = task_of(await collect(client, send("two", context_id="a")))  # the open one: no new place
            refused = task_of(await collect(client, send("three", context_id="b")))
            other = await sdk_client(served.client(OTHER), streaming=False)
            theirs = task_of(await collect(other, send("four", context_id="b")))
        finally:
            await served.aclose()
            await endpoint.close()
    assert [state_of(t) for t in (first, again, theirs)] == ["TASK_STATE_COMPLETED"] * 3
    assert state_of(refused) == "TASK_STATE_FAILED"
    assert "already holds 1 open sessions" in refused.status.message.parts[0].text
    assert refused.metadata["error"]["code"] == "session_limit"
