"""Runs that stop for the client: a tool call that needs approval ends the run with an interrupt that the next
input's ``resume`` answers; a call to a frontend tool ends it with the call pending, answered by the next input's
tool messages."""

from __future__ import annotations

from typing import Any

from ag_ui.core import EventType

from loop import Request, Role, tool
from provider import Function, tool_call
from tests.session.agui.helpers import in_process, run, run_input, types, user

paid: list[tuple[str, int]] = []


@tool(needs_approval=True)
async def pay(to: str, amount: int) -> str:
    """Pay someone."""
    paid.append((to, amount))
    return f"paid {to} {amount}"


def payer(request: Request) -> Any:
    last = request.turns[-1]
    if last.role is Role.TOOL:
        return f"done: {last.tool_results[0].content}"
    return tool_call("pay", {"to": "Ada", "amount": 250}, id="p1")


def history(events: list[Any]) -> list[dict[str, Any]]:
    """The conversation a client holds after a run: the snapshot's messages, as it sends them back."""
    return [m.model_dump(by_alias=True, mode="json") for m in events[-2].messages]


async def test_a_call_that_needs_approval_interrupts_the_run_and_resume_goes_on() -> None:
    paid.clear()
    async with in_process(Function(payer), tools=[pay]) as served:
        client = served.client()
        first = await run(client, run_input("pay-1", [user("pay Ada")]))
        finished = first[-1]
        assert finished.type == EventType.RUN_FINISHED and finished.outcome.type == "interrupt"
        [interrupt] = finished.outcome.interrupts
        assert (interrupt.id, interrupt.tool_call_id, interrupt.reason) == ("p1", "p1", "tool_approval")
        assert interrupt.expires_at and "pay" in interrupt.message and paid == []
        assert "TOOL_CALL_START" in types(first) and "TOOL_CALL_RESULT" not in types(first)
        # The session routes see the same call waiting.
        waiting = (await client.get("/sessions/pay-1/approvals")).json()["approvals"]
        assert [c["id"] for c in waiting[0]["calls"]] == ["p1"]
        resume = [{"interruptId": "p1", "status": "resolved", "payload": {"approved": True}}]
        second = await run(client, run_input("pay-1", history(first), run="run-2", resume=resume))
    assert paid == [("Ada", 250)]
    result = [e for e in second if e.type == EventType.TOOL_CALL_RESULT]
    assert [(r.tool_call_id, r.content) for r in result] == [("p1", "paid Ada 250")]
    assert second[-1].outcome.type == "success" and second[-1].result["answer"] == "done: paid Ada 250"


async def test_a_cancelled_interrupt_denies_the_call() -> None:
    paid.clear()
    async with in_process(Function(payer), tools=[pay]) as served:
        client = served.client()
        first = await run(client, run_input("pay-2", [user("pay Ada")]))
        resume = [{"interruptId": "p1", "status": "cancelled"}]
        second = await run(client, run_input("pay-2", history(first), run="run-2", resume=resume))
        again = await client.post("/agui", json=run_input("pay-2", history(second), run="run-3", resume=resume))
    assert paid == []
    assert second[-1].result["answer"].startswith("done: error: the user denied this call")
    assert again.status_code == 409 and again.json()["error"]["type"] == "not_waiting"


async def test_resume_must_answer_the_interrupts_that_wait() -> None:
    async with in_process(Function(payer), tools=[pay]) as served:
        client = served.client()
        first = await run(client, run_input("pay-3", [user("pay Ada")]))
        wrong = await client.post("/agui", json=run_input("pay-3", history(first), resume=[
            {"interruptId": "other", "status": "resolved", "payload": True}]))
        bad = await client.post("/agui", json=run_input("pay-3", history(first), resume=[
            {"interruptId": "p1", "status": "resolved", "payload": "yes please"}]))
    assert wrong.status_code == 422 and "p1" in wrong.json()["error"]["message"]
    assert bad.status_code == 422 and "resume[0].payload" in bad.json()["error"]["message"]


async def test_the_deny_policy_decides_without_asking() -> None:
    paid.clear()
    async with in_process(Function(payer), tools=[pay], approvals="deny") as served:
        events = await run(served.client(), run_input("pay-4", [user("pay Ada")]))
    assert events[-1].outcome.type == "success" and paid == []
    assert "denied" in events[-1].result["answer"]


def navigator(request: Request) -> Any:
    last = request.turns[-1]
    if last.role is Role.TOOL:
        return f"the page says {last.tool_results[0].content}"
    assert [t.name for t in request.tools] == ["open_page"]
    return tool_call("open_page", {"url": "/home"}, id="f1")


FRONTEND = [{"name": "open_page", "description": "Open a page in the app.",
             "parameters": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}}]


async def test_a_frontend_tool_call_ends_the_run_and_its_result_continues_it() -> None:
    async with in_process(Function(navigator)) as served:
        client = served.client()
        first = await run(client, run_input("nav-1", [user("open home")], tools=FRONTEND))
        assert first[-1].outcome.type == "success" and first[-1].outcome.pending_tool_call_ids == ["f1"]
        assert first[-1].result["status"] == "pending"
        start = next(e for e in first if e.type == EventType.TOOL_CALL_START)
        assert (start.tool_call_id, start.tool_call_name) == ("f1", "open_page")
        answer = {"id": "r1", "role": "tool", "toolCallId": "f1", "content": "Welcome"}
        second = await run(client, run_input("nav-1", [*history(first), answer], run="run-2", tools=FRONTEND))
        wrong = await client.post("/agui", json=run_input("nav-1", [*history(second), {
            "id": "r2", "role": "tool", "toolCallId": "f1", "content": "again"}], tools=FRONTEND))
    assert second[-1].result == {"status": "ok", "answer": "the page says Welcome"}
    assert [(m.role, getattr(m, "tool_call_id", None)) for m in second[-2].messages] == [
        ("user", None), ("assistant", None), ("tool", "f1"), ("assistant", None)]
    assert wrong.status_code == 422


async def test_a_new_thread_can_start_from_frontend_tool_results() -> None:
    messages = [user("open home", "a"), {"id": "b", "role": "assistant", "toolCalls": [
        {"id": "f9", "type": "function", "function": {"name": "open_page", "arguments": "{\"url\": \"/home\"}"}}]},
        {"id": "c", "role": "tool", "toolCallId": "f9", "content": "Hi there"}]
    async with in_process(Function(navigator)) as served:
        events = await run(served.client(), run_input("nav-2", messages, tools=FRONTEND))
    assert events[-1].result == {"status": "ok", "answer": "the page says Hi there"}
