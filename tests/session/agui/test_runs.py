"""Runs over ``POST /agui``: a tool-calling run streamed as valid AG-UI events in the protocol's order, a run that
fails, a degraded run, nested pattern runs as steps, and a second run on the same thread."""

from __future__ import annotations

from typing import Any

from ag_ui.core import EventType

from cognitive import ReAct, WithVerification, new_turn_processor
from loop import Reasoning, Request, Role, Text, Usage, tool
from loop.errors import ProviderError
from provider import Function, tool_call
from tests.session.agui.helpers import in_process, run, run_input, types, user
from verifier import FunctionVerifier, failed, passed


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def adder(request: Request) -> Any:
    last = request.turns[-1]
    if last.role is Role.TOOL:
        result = last.tool_results[0].content
        return [Reasoning(f"the tool said {result}"), Text(f"sum is {result}"), Usage(input_tokens=7, output_tokens=3)]
    return [tool_call("add", {"a": 2, "b": 3}, id="c1"), Usage(input_tokens=5, output_tokens=2)]


def of(events: list[Any], kind: EventType) -> list[Any]:
    return [e for e in events if e.type == kind]


async def test_a_tool_calling_run_is_streamed_as_agui_events_in_order() -> None:
    async with in_process(Function(adder), tools=[add]) as served:
        client = served.client()
        events = await run(client, run_input("thread-1", [user("add 2 and 3")]))
        stored = (await client.get("/sessions/thread-1/turns")).json()["turns"]
    assert types(events) == [
        "RUN_STARTED", "STEP_STARTED",
        "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT",
        "REASONING_START", "REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_END",
        "REASONING_END", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "STEP_FINISHED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    started = events[0]
    assert (started.thread_id, started.run_id, started.protocol_version) == ("thread-1", "run-1", "1.0")
    start, args = of(events, EventType.TOOL_CALL_START)[0], of(events, EventType.TOOL_CALL_ARGS)[0]
    assert (start.tool_call_id, start.tool_call_name, start.parent_message_id) == ("c1", "add", "turn-1")
    assert args.delta == '{"a": 2, "b": 3}'
    result = of(events, EventType.TOOL_CALL_RESULT)[0]
    assert (result.tool_call_id, result.content) == ("c1", "5")
    text = "".join(e.delta for e in of(events, EventType.TEXT_MESSAGE_CONTENT))
    assert text == "sum is 5"
    assert "".join(e.delta for e in of(events, EventType.REASONING_MESSAGE_CONTENT)) == "the tool said 5"
    snapshot = of(events, EventType.MESSAGES_SNAPSHOT)[0].messages
    assert [(m.role, m.id) for m in snapshot] == [("user", "u1"), ("assistant", "turn-1"), ("tool", "result-c1"),
                                                  ("reasoning", "turn-3-reasoning"), ("assistant", "turn-3")]
    assert snapshot[1].tool_calls[0].function.name == "add" and snapshot[4].content == "sum is 5"
    # The client's own message keeps its id; the streamed messages are the snapshot's: the same ids.
    assert of(events, EventType.TEXT_MESSAGE_START)[0].message_id == "turn-3"
    finished = events[-1]
    assert finished.outcome.type == "success" and not finished.outcome.pending_tool_call_ids
    assert finished.result == {"status": "ok", "answer": "sum is 5"}
    assert [(u.input_tokens, u.output_tokens, u.total_tokens) for u in finished.usage] == [(12, 5, 17)]
    # The thread is the session of the same id on the session routes.
    assert [t["role"] for t in stored] == ["user", "assistant", "tool", "assistant"]


async def test_a_second_run_on_the_thread_keeps_its_history_without_duplicates() -> None:
    seen: list[list[str]] = []

    def model(request: Request) -> str:
        seen.append([t.text for t in request.turns])
        return f"answer {len(seen)}"

    async with in_process(Function(model)) as served:
        client = served.client()
        first = await run(client, run_input("thread-2", [user("one", "a")]))
        # As a client does: the conversation it has (the snapshot), and its new message.
        history = [m.model_dump(by_alias=True, mode="json") for m in first[-2].messages]
        second = await run(client, run_input("thread-2", [*history, user("two", "b")], run="run-2"))
        stored = (await client.get("/sessions/thread-2/turns")).json()["turns"]
    assert seen == [["one"], ["one", "answer 1", "two"]]
    assert [t["parts"][0]["text"] for t in stored] == ["one", "answer 1", "two", "answer 2"]
    snapshot = second[-2].messages
    assert [(m.role, m.content) for m in snapshot] == [("user", "one"), ("assistant", "answer 1"), ("user", "two"),
                                                       ("assistant", "answer 2")]
    assert len({m.id for m in snapshot}) == 4
    assert second[-1].result == {"status": "ok", "answer": "answer 2"}
    assert "".join(e.delta for e in of(second, EventType.TEXT_MESSAGE_CONTENT)) == "answer 2"


async def test_a_new_thread_starts_from_the_earlier_messages_of_the_input() -> None:
    seen: list[list[tuple[str, str]]] = []

    def model(request: Request) -> str:
        seen.append([(t.role.value, t.text) for t in request.turns])
        return "ok"

    messages = [{"id": "s", "role": "system", "content": "be brief"}, user("hi", "a"),
                {"id": "b", "role": "assistant", "content": "hello"}, user("again", "c")]
    async with in_process(Function(model)) as served:
        events = await run(served.client(), run_input("thread-3", messages))
    assert seen == [[("system", "be brief"), ("user", "hi"), ("assistant", "hello"), ("user", "again")]]
    # The seeded messages keep the client's ids.
    assert [m.id for m in events[-2].messages][:3] == ["s", "a", "b"]


async def test_a_failed_run_ends_with_run_error_and_its_message() -> None:
    def broken(request: Request) -> str:
        raise ProviderError("the model is unreachable", status=503)

    async with in_process(Function(broken)) as served:
        events = await run(served.client(), run_input("thread-4", [user("hello")]))
    assert types(events)[0] == "RUN_STARTED" and types(events)[-2:] == ["MESSAGES_SNAPSHOT", "RUN_ERROR"]
    error = events[-1]
    assert error.code == "provider_error"
    assert "the model is unreachable" in error.message and "Traceback" not in error.message
    snapshot = events[-2].messages  # the conversation as stored: the session notes the failure in it
    assert snapshot[0].content == "hello" and "ProviderError" in snapshot[-1].content


async def test_a_degraded_run_is_never_a_plain_success() -> None:
    def stubborn(request: Request) -> Any:
        return "gave up" if request.options.tool_choice == "none" else tool_call("add", {"a": 1, "b": 1})

    processor = new_turn_processor(lambda step: ReAct(step, max_turns=1))
    async with in_process(Function(stubborn), tools=[add], processor=processor) as served:
        events = await run(served.client(), run_input("thread-5", [user("add")]))
    finished = events[-1]
    assert finished.type == EventType.RUN_FINISHED
    assert finished.result["status"] == "degraded" and finished.result["answer"] == "gave up"
    assert "max_turns=1" in finished.result["reason"]


async def test_nested_pattern_runs_are_steps() -> None:
    attempts: list[str] = []

    def check(state: Any) -> Any:
        attempts.append(state.answer)
        return passed("fine") if len(attempts) > 1 else failed("say it again")

    def model(request: Request) -> str:
        return f"try {sum(t.role is Role.ASSISTANT for t in request.turns) + 1}"

    processor = new_turn_processor(lambda step: WithVerification(ReAct(step), step, verifiers=FunctionVerifier(check),
                                                                       max_retries=2))
    async with in_process(Function(model), processor=processor) as served:
        events = await run(served.client(), run_input("thread-6", [user("go")]))
    steps = [(e.type.value, e.step_name) for e in events if e.type in (EventType.STEP_STARTED, EventType.STEP_FINISHED)]
    assert steps[0] == ("STEP_STARTED", "WithVerification")
    assert ("STEP_STARTED", "WithVerification/ReAct") in steps
    assert steps[-1] == ("STEP_FINISHED", "WithVerification")
    assert steps.count(("STEP_STARTED", "WithVerification/ReAct")) == 2, "a step again for the retry"
    assert events[-1].result["answer"] == "try 2"
