"""How a message's run ended, as sessions store it and every conduit reports it.

A degraded run is never reported as a success; a wrapper that ran its inner pattern again and got a clean answer
is one, and a later message starts clean. A run that raises is stored as ``failed`` on a valid conversation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import openai
import pytest
from mcp import Client

from cognitive import ReAct, WithVerification, new_turn_processor, react_factory
from loop import Request, Role, State, TurnExecutor, tool
from loop.errors import ServerError, VerificationFailed
from provider import Function, tool_call
from session import (
    Manager,
    MemoryStore,
    MessageFailed,
    MessageFinished,
    Store,
    StoreError,
    TurnProcessor,
    step_factory,
)
from session.mcp import MCPConduit
from session.openai import openai_app
from tests.session.store_kinds import opened_store
from verifier import FunctionVerifier, Result, failed, passed

CAPPED = "capped answer"
CLEAN = "clean answer"


@tool
def lookup() -> str:
    """Look something up."""
    return "found"


def capped_then_clean(request: Request) -> Any:
    """Calls a tool until the cap asks for a tool-free answer; answers cleanly after a verification report, and
    at once to a message starting with 'plain'."""
    last = request.turns[-1]
    if request.options.tool_choice == "none":
        return CAPPED
    if last.role is Role.SYSTEM:
        return CLEAN
    if last.role is Role.USER and last.text.startswith("plain"):
        return f"answer to {last.text}"
    return tool_call("lookup", {})


def rejects_capped(state: State) -> Result:
    return failed("The answer was written after the run was cut short; answer properly.") \
        if state.answer == CAPPED else passed()


def accepts_anything(state: State) -> Result:
    return passed()


def verified(check: Any) -> TurnProcessor:
    """``WithVerification(ReAct(step, max_turns=1), ...)`` for each message, but a plain ``ReAct`` (which
    records no outcome of its own on a clean answer) for one starting with 'plain'."""
    verifier = FunctionVerifier(check, name="check")

    def process(executor: TurnExecutor, state: State) -> Awaitable[State]:
        if state.last.text.startswith("plain"):
            return ReAct(executor).run(state)
        return WithVerification(ReAct(executor, max_turns=1), executor, verifiers=[verifier],
                                max_retries=2).run(state)

    return process


async def finished_events(session: Any, *messages: str) -> tuple[list[State], list[MessageFinished]]:
    states = []
    with session.events.subscribe(buffer=None) as events:
        for message in messages:
            states.append(await session.ask(message))
        events.close()
        seen = [e async for e in events]
    return states, [e for e in seen if isinstance(e, MessageFinished)]


# -- sessions -------------------------------------------------------------------------------------------------


async def test_a_retry_that_answers_cleanly_is_ok_and_so_is_the_next_message() -> None:
    store = MemoryStore()
    async with Manager(verified(rejects_capped), provider=Function(capped_then_clean), store=store,
                       make_step=step_factory([lookup])) as manager:
        session = await manager.open("s")
        (state, later), finished = await finished_events(session, "go", "plain question")
    assert state.answer == CLEAN
    assert state.outcome is not None and state.outcome.ok and state.outcome.reason == ""
    assert state.outcome.data["WithVerification"] == {"retries": 1, "results": {"check": "pass"}}
    # The capped draft keeps its own degraded outcome in the history: the retry is what made the run ok.
    (draft,) = [t for t in state if t.role is Role.ASSISTANT and t.text == CAPPED]
    assert draft.meta["outcome"]["status"] == "degraded"
    assert [(f.answer, f.ok, f.status, f.degraded) for f in finished] == [
        (CLEAN, True, "ok", False), ("answer to plain question", True, "ok", False)]
    assert later.outcome is None and not later.degraded
    stored = await store.load("s")
    assert stored is not None and stored.to_json() == later.to_json()


async def test_a_run_that_stays_degraded_is_reported_so_and_the_next_message_starts_clean() -> None:
    store = MemoryStore()
    async with Manager(verified(accepts_anything), provider=Function(capped_then_clean), store=store,
                       make_step=step_factory([lookup])) as manager:
        session = await manager.open("s")
        (state, later), finished = await finished_events(session, "go", "plain question")
    # The verifier passed, but a wrapper never reports better than the run it wraps.
    assert state.answer == CAPPED and state.degraded
    assert state.outcome is not None and "max_turns=1" in state.outcome.reason
    first, second = finished
    assert not first.ok and first.status == "degraded" and first.degraded and "max_turns=1" in first.reason
    assert second.ok and second.status == "ok" and not second.degraded and second.reason == ""
    assert later.outcome is None and not later.degraded  # no outcome written: a clean answer
    stored = await store.load("s")
    assert stored is not None and stored.to_json() == later.to_json()
    assert [t.meta.get("outcome", {}).get("status") for t in stored if t.role is Role.ASSISTANT] == [
        None, "degraded", None]


# -- the OpenAI-compatible endpoint ---------------------------------------------------------------------------


@asynccontextmanager
async def openai_client(processor: TurnProcessor) -> AsyncIterator[openai.AsyncOpenAI]:
    manager = Manager(processor, provider=Function(capped_then_clean), make_step=step_factory([lookup]))
    app = openai_app(manager, enter_manager=False)
    async with manager, httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as http:
        yield openai.AsyncOpenAI(base_url="http://test/v1", api_key="key", http_client=http, max_retries=0)


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def streamed_finish(client: openai.AsyncOpenAI, text: str, **options: Any) -> tuple[str, list[str]]:
    stream = await client.chat.completions.create(model="agent", messages=ask(text), stream=True, **options)
    chunks = [c async for c in stream]
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return content, [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the HTTP suites run on asyncio (see tests/session/http)
async def test_the_openai_endpoint_finishes_a_clean_retry_with_stop() -> None:
    async with openai_client(verified(rejects_capped)) as client:
        reply = await client.chat.completions.create(model="agent", messages=ask("go"))
        content, finishes = await streamed_finish(client, "go")
    (choice,) = reply.choices
    assert choice.message.content == CLEAN and choice.finish_reason == "stop"
    assert "degraded" not in (getattr(choice.message, "reasoning_content", None) or "")
    assert content.endswith(CLEAN) and finishes == ["stop"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the HTTP suites run on asyncio (see tests/session/http)
async def test_the_openai_endpoint_finishes_a_degraded_run_with_length_and_a_later_message_with_stop() -> None:
    async with openai_client(verified(accepts_anything)) as client:
        reply = await client.chat.completions.create(model="agent", messages=ask("go"))
        content, finishes = await streamed_finish(client, "go")
        named = {"X-Session-Id": "kept"}
        first = await client.chat.completions.create(model="agent", messages=ask("go"), extra_headers=named)
        later = await client.chat.completions.create(model="agent", messages=ask("plain question"),
                                                     extra_headers=named)
    (choice,) = reply.choices
    assert choice.message.content == CAPPED and choice.finish_reason == "length"
    assert "degraded: ReAct reached max_turns=1" in (getattr(choice.message, "reasoning_content", None) or "")
    assert content == CAPPED and finishes == ["length"]
    assert first.choices[0].finish_reason == "length"
    assert later.choices[0].message.content == "answer to plain question"
    assert later.choices[0].finish_reason == "stop"  # the same conversation, a fresh run


# -- the MCP conduit ------------------------------------------------------------------------------------------


def text_of(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def test_the_mcp_tool_reports_a_clean_retry_as_a_success_and_a_degraded_run_as_an_error() -> None:
    results = {}
    for name, check in (("clean", rejects_capped), ("degraded", accepts_anything)):
        async with Manager(verified(check), provider=Function(capped_then_clean),
                           make_step=step_factory([lookup])) as manager:
            async with Client(MCPConduit().server(manager)) as client:
                results[name] = await client.call_tool("ask", {"message": "go"})
    assert not results["clean"].is_error and text_of(results["clean"]) == CLEAN
    degraded = text_of(results["degraded"])
    assert results["degraded"].is_error
    assert degraded.startswith(CAPPED) and "(degraded)" in degraded and "max_turns=1" in degraded


# -- runs that raise ------------------------------------------------------------------------------------------


def fails_on_request(request: Request) -> Any:
    last = request.turns[-1]
    if last.role is Role.USER and last.text == "fail":
        return ServerError("the model is down", status=503)
    return last.text.upper()


async def failed_then_next(store: Store, manager: Manager, message: str, error: type[Exception],
                           match: str) -> tuple[State, State, MessageFailed]:
    """Send ``message`` (which fails with ``error``), then 'next'; the stored conversation after the failure,
    the next message's state, and the failure's event."""
    session = await manager.open("s")
    await session.ask("before")
    with session.events.subscribe(buffer=None) as events:
        with pytest.raises(error, match=match):
            await session.ask(message)
        events.close()
        (failure,) = [e async for e in events if isinstance(e, MessageFailed)]
    stored = await store.load("s")
    assert stored is not None
    return stored, await session.ask("next"), failure


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
async def test_a_provider_error_is_stored_as_failed_and_the_next_message_starts_clean(
        store_kind: str, tmp_path: Path) -> None:
    async with opened_store(store_kind, tmp_path) as store:
        async with Manager(new_turn_processor(react_factory), provider=Function(fails_on_request),
                           store=store) as manager:
            stored, state, failure = await failed_then_next(store, manager, "fail", ServerError, "the model is down")
        final = await store.load("s")
    assert failure.kind == "ServerError" and "the model is down" in failure.error
    assert [t.role.value for t in stored] == ["user", "assistant", "user", "assistant"]
    assert [t.text for t in stored][:3] == ["before", "BEFORE", "fail"]
    assert stored[3].meta.get("kind") == "failure" and "the model is down" in stored[3].text
    assert stored.outcome is not None and stored.outcome.status == "failed"
    assert "ServerError" in stored.outcome.reason and "the model is down" in stored.outcome.reason
    assert stored.pending_calls == ()
    assert stored[1].meta.get("outcome") is None  # the earlier answer is untouched
    assert state.outcome is None and state.answer == "NEXT"
    assert final is not None and final.to_json() == state.to_json()


def answers_bad(request: Request) -> str:
    last = request.turns[-1]
    if last.role is Role.SYSTEM:
        return "BAD AGAIN"
    return last.text.upper()


def rejects_bad(state: State) -> Result:
    return failed("Never answer BAD.") if (state.answer or "").startswith("BAD") else passed()


async def test_a_verification_that_never_passes_is_stored_as_failed_and_the_next_message_starts_clean() -> None:
    verifier = FunctionVerifier(rejects_bad, name="no_bad")
    processor = new_turn_processor(
        lambda step: WithVerification(ReAct(step), step, verifiers=[verifier], max_retries=1))
    store = MemoryStore()
    async with Manager(processor, provider=Function(answers_bad), store=store) as manager:
        stored, state, failure = await failed_then_next(store, manager, "bad", VerificationFailed,
                                                        "still failing after 1 retry")
    assert failure.kind == "VerificationFailed"
    assert [t.role.value for t in stored][2:] == ["user", "assistant", "system", "assistant"]
    assert stored.answer == "BAD AGAIN" and stored.pending_calls == ()
    outcome = stored.outcome
    assert outcome is not None and outcome.status == "failed"
    assert "VerificationFailed" in outcome.reason and "no_bad still failing" in outcome.reason
    assert outcome.data["WithVerification"] == {"retries": 1, "results": {"no_bad": "fail"}}
    assert state.answer == "NEXT" and state.outcome is not None and state.outcome.ok
    assert state.outcome.reason == ""


async def test_a_processor_that_raises_before_its_run_answers_is_stored_as_failed() -> None:
    async def broken(executor: TurnExecutor, state: State) -> State:
        if state.last.text == "break":
            raise RuntimeError("pattern bug")
        return await executor.turn(state)

    store = MemoryStore()
    async with Manager(broken, provider=Function(fails_on_request), store=store) as manager:
        stored, state, failure = await failed_then_next(store, manager, "break", RuntimeError, "pattern bug")
    assert failure.kind == "RuntimeError"
    assert stored.outcome is not None and stored.outcome.status == "failed"
    assert stored.outcome.reason == "RuntimeError: pattern bug" and stored.last.role is Role.ASSISTANT
    assert state.outcome is None and [t.text for t in state][-2:] == ["next", "NEXT"]


def tool_then_fail(request: Request) -> Any:
    last = request.turns[-1]
    if last.role is Role.USER and last.text == "fail":
        return ["Let me look that up.", tool_call("lookup", {})]
    if last.role is Role.TOOL:
        return ServerError("the model is down", status=503)
    return last.text.upper()


async def test_a_provider_error_after_a_tool_round_is_stored_on_a_failure_note() -> None:
    store = MemoryStore()
    async with Manager(new_turn_processor(react_factory), provider=Function(tool_then_fail), store=store,
                       make_step=step_factory([lookup])) as manager:
        stored, state, _ = await failed_then_next(store, manager, "fail", ServerError, "the model is down")
    # What does hold today: the conversation is valid and reads as failed, and the next message is clean.
    assert stored.pending_calls == () and stored.outcome is not None and stored.outcome.status == "failed"
    assert state.outcome is None and state.answer == "NEXT"
    # What does not: the run wrote no answer, so a failure note should carry the outcome.
    assert [t.role.value for t in stored][2:] == ["user", "assistant", "tool", "assistant"]
    assert stored.last.meta.get("kind") == "failure" and stored.answer != "Let me look that up."
    assert stored[3].meta.get("outcome") is None


class FailsOnce(MemoryStore):
    """A store whose next append fails once (a transient disk error)."""

    fail_next = False

    async def append(self, session_id: str, start: int, turns: Any, meta: Any) -> None:
        if self.fail_next:
            self.fail_next = False
            raise StoreError("disk hiccup")
        await super().append(session_id, start, turns, meta)


async def test_a_message_that_fails_before_it_is_stored_leaves_the_previous_answer_ok() -> None:
    """The store refuses the failed message's own user turn: the failure has no turn of its own to go on, and
    must not be written on the previous message's answer."""
    store = FailsOnce()
    async with Manager(new_turn_processor(react_factory), provider=Function(fails_on_request),
                       store=store) as manager:
        session = await manager.open("s")
        first = await session.ask("one")
        assert first.outcome is None
        store.fail_next = True
        with pytest.raises(StoreError, match="disk hiccup"):
            await session.ask("two")
        stored = await store.load("s")
    assert stored is not None and [t.text for t in stored] == ["one", "ONE"]
    assert stored.outcome is None or stored.outcome.ok, stored.outcome


async def test_an_interrupted_message_records_no_outcome() -> None:
    """An interrupt is not a failure: the completed turns stay, with no outcome written on them."""
    started = anyio.Event()

    async def stalls(request: Request) -> Any:
        if request.turns[-1].text == "stall":
            started.set()
            await anyio.sleep_forever()
        return request.turns[-1].text.upper()

    store = MemoryStore()
    async with Manager(new_turn_processor(react_factory), provider=Function(stalls), store=store) as manager:
        session = await manager.open("s")
        await session.ask("before")
        session.send("stall")
        with anyio.fail_after(5):
            await started.wait()
        session.interrupt()
        state = await session.ask("after")
    assert [t.text for t in state] == ["before", "BEFORE", "stall", "after", "AFTER"]
    assert all("outcome" not in t.meta for t in state)
    stored = await store.load("s")
    assert stored is not None and stored.to_json() == state.to_json()
