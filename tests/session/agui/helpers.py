"""Shared setup for the AG-UI route's tests: the HTTP conduit serving a manager with an offline model, in process
or on 127.0.0.1, with the route's approval policy chosen per test; a reader of the event stream that validates
every event with the protocol package's models; and the protocol's ordering rules, checked over a whole run."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pydantic
from ag_ui.core import Event, EventType

from cognitive import new_turn_processor, react_factory
from loop import Provider, Tool
from session import Manager, Store, step_factory
from session.http import HTTPConduit
from tests.session.http.helpers import OTHER, TOKEN, Served

EVENTS: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(Event)


def conduit_for(approvals: str, **options: Any) -> HTTPConduit:
    """The HTTP conduit with the AG-UI route under the approval policy a test chooses."""
    return HTTPConduit(agui_approvals=approvals, **options)


def _manager(provider: Provider, tools: Sequence[Tool], store: Store | None, processor: Any,
             options: dict[str, Any]) -> Manager:
    return Manager(processor or new_turn_processor(react_factory), provider=provider, store=store,
                   make_step=step_factory(tools), **options)


@asynccontextmanager
async def in_process(provider: Provider, *, tools: Sequence[Tool] = (), store: Store | None = None,
                     approvals: str = "ask", processor: Any = None, manager_options: dict[str, Any] | None = None,
                     **options: Any) -> AsyncIterator[Served]:
    """The conduit's app driven through ``httpx.ASGITransport`` (no socket)."""
    options.setdefault("token", [TOKEN, OTHER])
    conduit = conduit_for(approvals, **options)
    async with _manager(provider, tools, store, processor, manager_options or {}) as manager:
        async with conduit.app(manager) as app:
            served = Served(manager, httpx.ASGITransport(app=app))
            try:
                yield served
            finally:
                await served.aclose()


@asynccontextmanager
async def on_socket(provider: Provider, *, tools: Sequence[Tool] = (), approvals: str = "ask", processor: Any = None,
                    **options: Any) -> AsyncIterator[Served]:
    """The conduit served on 127.0.0.1 (a free port), stopped by cancellation at the end."""
    options.setdefault("token", [TOKEN, OTHER])
    conduit = conduit_for(approvals, host="127.0.0.1", port=0, **options)
    async with _manager(provider, tools, None, processor, {}) as manager:
        async with anyio.create_task_group() as group:
            with anyio.fail_after(10):
                url = await group.start(conduit.serve, manager)
            served = Served(manager, url)
            try:
                yield served
            finally:
                await served.aclose()
                group.cancel_scope.cancel()


def run_input(thread: str, messages: list[dict[str, Any]], *, run: str = "run-1", **more: Any) -> dict[str, Any]:
    """A ``RunAgentInput`` as a client sends it (camelCase)."""
    return {"threadId": thread, "runId": run, "messages": messages, "tools": [], "context": [], "state": {},
            "forwardedProps": {}, **more}


def user(text: str, id: str = "u1") -> dict[str, Any]:
    return {"id": id, "role": "user", "content": text}


def parse_stream(text: str) -> list[Any]:
    """The events of an AG-UI event stream, each validated with the protocol package's models (comments
    skipped)."""
    events = []
    for block in text.split("\n\n"):
        data = [line[len("data: "):] for line in block.split("\n") if line.startswith("data: ")]
        if data:
            events.append(EVENTS.validate_python(json.loads("\n".join(data))))
    return events


async def run(client: httpx.AsyncClient, body: dict[str, Any]) -> list[Any]:
    """POST ``body`` to ``/agui`` and read the whole stream: its events, validated and checked for order."""
    with anyio.fail_after(10):
        response = await client.post("/agui", json=body, headers={"accept": "text/event-stream"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = parse_stream(response.text)
    check_order(events)
    return events


def types(events: Sequence[Any]) -> list[str]:
    return [e.type.value for e in events]


def check_order(events: Sequence[Any]) -> None:
    """The protocol's ordering rules over one run (those ``@ag-ui/client``'s ``verifyEvents`` enforces): it opens
    with ``RUN_STARTED`` and ends with ``RUN_FINISHED`` or ``RUN_ERROR``, with nothing after; text messages, tool
    calls, reasoning spans and messages and steps are started before their content and end, never started twice
    while open, and none is open when the run finishes."""
    assert events, "an empty stream"
    assert events[0].type == EventType.RUN_STARTED, types(events)
    assert events[-1].type in (EventType.RUN_FINISHED, EventType.RUN_ERROR), types(events)
    assert not any(e.type in (EventType.RUN_FINISHED, EventType.RUN_ERROR, EventType.RUN_STARTED)
                   for e in events[1:-1]), types(events)
    open_: dict[str, set[str]] = {"text": set(), "tool": set(), "span": set(), "reasoning": set(), "step": set()}
    kinds = {
        EventType.TEXT_MESSAGE_START: ("text", "start", "message_id"),
        EventType.TEXT_MESSAGE_CONTENT: ("text", "in", "message_id"),
        EventType.TEXT_MESSAGE_END: ("text", "end", "message_id"),
        EventType.TOOL_CALL_START: ("tool", "start", "tool_call_id"),
        EventType.TOOL_CALL_ARGS: ("tool", "in", "tool_call_id"),
        EventType.TOOL_CALL_END: ("tool", "end", "tool_call_id"),
        EventType.REASONING_START: ("span", "start", "message_id"),
        EventType.REASONING_END: ("span", "end", "message_id"),
        EventType.REASONING_MESSAGE_START: ("reasoning", "start", "message_id"),
        EventType.REASONING_MESSAGE_CONTENT: ("reasoning", "in", "message_id"),
        EventType.REASONING_MESSAGE_END: ("reasoning", "end", "message_id"),
        EventType.STEP_STARTED: ("step", "start", "step_name"),
        EventType.STEP_FINISHED: ("step", "end", "step_name"),
    }
    for index, event in enumerate(events):
        found = kinds.get(event.type)
        if found is None:
            continue
        kind, what, field = found
        name = getattr(event, field)
        where = f"event {index} ({event.type.value} {name!r}) in {types(events)}"
        if what == "start":
            assert name not in open_[kind], f"started twice: {where}"
            open_[kind].add(name)
        else:
            assert name in open_[kind], f"not started: {where}"
            if what == "end":
                open_[kind].remove(name)
    if events[-1].type == EventType.RUN_FINISHED:
        assert not any(open_.values()), f"still open at RUN_FINISHED: {open_}"
