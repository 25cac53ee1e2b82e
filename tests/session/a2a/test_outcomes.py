"""How a run's end becomes a task's state: a degraded answer is ``failed`` (its answer still attached, its metadata
saying degraded), a provider error ``failed``, a tripped guardrail ``rejected``; calls that need approval end the
task ``input-required`` until its client answers in it, unless the server's policy decides them."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.client import Client
from a2a.helpers import new_data_part
from a2a.types import CancelTaskRequest, Task
from a2a.utils.errors import A2AError

from cognitive import ReAct, SingleShot, WithGuardrails, new_turn_processor
from loop import Decision, Request, Role, TurnExecutor, tool
from loop.errors import ServerError
from provider import Function, tool_call
from tests.session.a2a.helpers import collect, in_process, sdk_client, send, state_of, task_of
from verifier import NoSecrets


@pytest.fixture
def anyio_backend() -> str:
    """a2a-sdk's request handler runs each task in asyncio tasks of its own: the served side is asyncio only."""
    return "asyncio"


paid: list[str] = []


@tool
async def search(query: str) -> str:
    """Search."""
    return f"found {query}"


@tool(needs_approval=True)
async def pay(to: str) -> str:
    """Pay someone."""
    paid.append(to)
    return f"paid {to}"


def searcher(request: Request) -> Any:
    """Searches once, then answers with what it found."""
    last = request.turns[-1]
    if last.role is Role.TOOL:
        return f"best guess: {last.tool_results[0].content}"
    return tool_call("search", {"query": "moon"}, id="s1")


def payer(request: Request) -> Any:
    last = request.turns[-1]
    if last.role is Role.TOOL:
        return f"done: {last.tool_results[0].content}"
    return tool_call("pay", {"to": "Ada"}, id="p1")


def capped(step: TurnExecutor) -> ReAct:
    return ReAct(step, max_turns=1)  # the search uses the one turn: the answer is written at the cap, degraded


async def blocking(served: Any) -> Client:
    return await sdk_client(served.client(), streaming=False)


async def ask(client: Client, text: str, **options: Any) -> Task:
    return task_of(await collect(client, send(text, **options)))


async def test_a_degraded_run_fails_the_task_with_its_answer_attached_and_the_reason() -> None:
    async with in_process(Function(searcher), tools=[search], processor=new_turn_processor(capped)) as served:
        task = await ask(await blocking(served), "where is the moon?")
    assert state_of(task) == "TASK_STATE_FAILED"
    said = task.status.message.parts[0].text
    assert said.startswith("The agent did not finish (degraded): ") and "max_turns" in said
    assert task.metadata["outcome"]["status"] == "degraded"
    [answer] = task.artifacts
    assert answer.parts[0].text == "best guess: found moon"
    assert answer.metadata["outcome"]["status"] == "degraded"


async def test_a_provider_error_fails_the_task_saying_what_failed() -> None:
    def broken(request: Request) -> Any:
        raise ServerError("upstream exploded", status=500)

    async with in_process(Function(broken)) as served:
        task = await ask(await blocking(served), "hello")
    assert state_of(task) == "TASK_STATE_FAILED"
    assert task.status.message.parts[0].text.startswith("The model provider failed: ")
    assert "upstream exploded" in task.status.message.parts[0].text
    assert task.metadata["error"]["code"] == "provider_error" and not task.artifacts


async def test_a_tripped_guardrail_rejects_the_task_with_its_reason() -> None:
    def guarded(step: TurnExecutor) -> WithGuardrails:
        return WithGuardrails(SingleShot(step), step, input=[NoSecrets()])

    key = "AKIA" + "IOSFODNN7" + "EXAMPLE"
    async with in_process(Function(lambda r: "fine"), processor=new_turn_processor(guarded)) as served:
        task = await ask(await blocking(served), f"my key is {key}")
    assert state_of(task) == "TASK_STATE_REJECTED"
    said = task.status.message.parts[0].text
    assert said.startswith("blocked by guardrail") and key not in said
    assert task.metadata["guardrail"]["stage"] == "input"


async def test_a_call_needing_approval_asks_for_input_and_the_reply_in_the_task_approves_it() -> None:
    paid.clear()
    async with in_process(Function(payer), tools=[pay]) as served:
        client = await blocking(served)
        asked = await ask(client, "pay Ada", context_id="pay-1")
        assert state_of(asked) == "TASK_STATE_INPUT_REQUIRED" and paid == []
        assert "pay" in asked.status.message.parts[0].text and "approve" in asked.status.message.parts[0].text
        assert asked.metadata["approvals"][0]["id"] == "p1"
        done = await ask(client, "approve", context_id="pay-1", task_id=asked.id)
    assert paid == ["Ada"]
    assert done.id == asked.id and state_of(done) == "TASK_STATE_COMPLETED"
    assert done.artifacts[0].parts[0].text == "done: paid Ada"


async def test_a_data_reply_denies_the_call_and_the_model_reads_why() -> None:
    paid.clear()
    async with in_process(Function(payer), tools=[pay]) as served:
        client = await blocking(served)
        asked = await ask(client, "pay Ada", context_id="pay-2")
        reply = send(context_id="pay-2", task_id=asked.id,
                     parts=[new_data_part({"approved": False, "reason": "not this month"})])
        done = task_of(await collect(client, reply))
    assert paid == []
    assert state_of(done) == "TASK_STATE_COMPLETED"
    answer = done.artifacts[0].parts[0].text
    assert answer.startswith("done: error:") and "not this month" in answer


@pytest.mark.parametrize(("policy", "ran"), [("deny", []), ("allow", ["Ada"])])
async def test_a_server_policy_decides_calls_without_asking(policy: str, ran: list[str]) -> None:
    paid.clear()
    async with in_process(Function(payer), tools=[pay], approvals=policy) as served:
        task = await ask(await blocking(served), "pay Ada")
    assert state_of(task) == "TASK_STATE_COMPLETED"
    assert paid == ran
    assert ("policy" in task.artifacts[0].parts[0].text) is (policy == "deny")


async def test_a_task_waiting_for_approval_can_be_canceled_and_the_call_never_runs() -> None:
    paid.clear()
    async with in_process(Function(payer), tools=[pay]) as served:
        client = await blocking(served)
        asked = await ask(client, "pay Ada", context_id="pay-3")
        canceled = await client.cancel_task(CancelTaskRequest(id=asked.id))
        with pytest.raises(A2AError):  # a canceled task takes no more messages
            await ask(client, "approve", context_id="pay-3", task_id=asked.id)
    assert state_of(canceled) == "TASK_STATE_CANCELED" and paid == []


async def test_a_reply_for_calls_answered_elsewhere_fails_the_task_saying_so() -> None:
    paid.clear()
    async with in_process(Function(payer), tools=[pay]) as served:
        client = await blocking(served)
        asked = await ask(client, "pay Ada", context_id="pay-4")
        await served.session("pay-4").decide(Decision.deny("p1", "no"))  # through the session routes, say
        late = await ask(client, "approve", context_id="pay-4", task_id=asked.id)
    assert paid == [] and state_of(late) == "TASK_STATE_FAILED"
    assert late.status.message.parts[0].text.startswith("The tool calls this task waited on no longer wait")
    assert late.metadata["error"]["code"] == "approval_gone"
