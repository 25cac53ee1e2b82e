"""A run's events as AG-UI events: what a session publishes while it runs a message, turned into ``ag_ui.core``
events, and the events that end the run.

Only the conversation's main line is streamed (a branch's samples, a judge's turns, a tool's own agent never
interleave with the answer). Each model turn is one assistant message, ``turn-<index>`` (see ``_messages``): its
reasoning deltas as a ``REASONING_*`` span and message, its text deltas as ``TEXT_MESSAGE_*`` (a turn that was not
streamed, such as an answer a pattern picked from a branch, is sent whole when it completes), and its tool calls
as ``TOOL_CALL_START``/``ARGS``/``END`` once the turn is complete (the arguments whole, as the model wrote them).
Each tool result the run stores is a ``TOOL_CALL_RESULT``. Every run path the main line publishes from is a step:
``STEP_STARTED`` when it is first seen, ``STEP_FINISHED`` when an event comes from outside it (the pattern
returned to its caller) or the run ends; so ``WithVerification/ReAct`` opens inside ``WithVerification``.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from ag_ui.core import (BaseEvent, Interrupt, MessagesSnapshotEvent, PROTOCOL_VERSION, ReasoningEndEvent,
                        ReasoningMessageContentEvent, ReasoningMessageEndEvent, ReasoningMessageStartEvent,
                        ReasoningStartEvent, RunErrorEvent, RunFinishedEvent, RunFinishedInterruptOutcome,
                        RunFinishedSuccessOutcome, RunStartedEvent, StepFinishedEvent, StepStartedEvent,
                        TextMessageContentEvent, TextMessageEndEvent, TextMessageStartEvent, TokenUsage,
                        ToolCallArgsEvent, ToolCallEndEvent, ToolCallResultEvent, ToolCallStartEvent)

from loop import (Reasoning, ReasoningDelta, Role, Stamped, TextDelta, ToolCall, Turn, TurnCompleted, TurnFailed,
                  TurnStarted, Usage)
from session._events import TurnStored
from session.agui._messages import message_id, reasoning_id, result_id, snapshot_messages

APPROVAL_REASON = "tool_approval"
APPROVAL_SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
                   "required": ["approved"]}


class Translator:
    """One run's AG-UI events, made from the session's events as they come (``on``) and at the end."""

    def __init__(self, thread_id: str, run_id: str, messages: Sequence[Any] = ()) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.messages = messages  # the input's, whose user messages' ids the snapshot keeps
        self.index: int | None = None  # the turn being written (its ``TurnStarted``), if any
        self.next_index = 0  # where the next stored turn goes (from ``TurnStored``)
        self.text: str | None = None  # the text message open now
        self.reasoning: str | None = None  # the reasoning message open now
        self.streamed_text = False  # the turn being written streamed its text
        self.streamed_reasoning = False
        self.steps: list[str] = []  # the steps open now, outermost first
        self.usage = Usage()

    def started(self) -> list[BaseEvent]:
        return [RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id, protocol_version=PROTOCOL_VERSION)]

    def on(self, stamped: Stamped) -> list[BaseEvent]:
        """The AG-UI events ``stamped`` (published while the run's message ran) makes."""
        event = stamped.event
        if isinstance(event, TurnCompleted) and event.turn.role is Role.ASSISTANT and event.turn.usage is not None:
            self.usage += event.turn.usage  # every model call of the run, its branches' too
        if not stamped.main:
            return []
        out = self._step(stamped.path) if stamped.path else []
        if isinstance(event, TurnStarted):
            out += self._close_messages()
            self.index, self.streamed_text, self.streamed_reasoning = event.index, False, False
        elif isinstance(event, TextDelta) and event.text and event.choice == 0:
            out += self._close_reasoning()
            if self.text is None:
                self.text = self._current()
                out.append(TextMessageStartEvent(message_id=self.text, role="assistant"))
            self.streamed_text = True
            out.append(TextMessageContentEvent(message_id=self.text, delta=event.text))
        elif isinstance(event, ReasoningDelta) and event.text and event.choice == 0:
            out += self._close_text()
            if self.reasoning is None:
                self.reasoning = reasoning_id(self._current())
                out += [ReasoningStartEvent(message_id=self.reasoning),
                        ReasoningMessageStartEvent(message_id=self.reasoning, role="reasoning")]
            self.streamed_reasoning = True
            out.append(ReasoningMessageContentEvent(message_id=self.reasoning, delta=event.text))
        elif isinstance(event, TurnCompleted):
            out += self._completed(event.turn)
        elif isinstance(event, TurnFailed):
            out += self._close_messages()
            self.index = None
        elif isinstance(event, TurnStored):
            self.next_index = event.index + 1
        return out

    def _current(self) -> str:
        return f"turn-{self.index if self.index is not None else self.next_index}"

    def _completed(self, turn: Turn) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        if turn.role is Role.TOOL and "message_id" not in turn.meta:  # not the client's own results
            out += [ToolCallResultEvent(message_id=result_id(r.call_id), tool_call_id=r.call_id, content=r.content,
                                        role="tool") for r in turn.tool_results]
        if turn.role is not Role.ASSISTANT:
            return out
        mid = message_id(turn, self.index if self.index is not None else self.next_index)
        reasoning = "".join(p.text for p in turn.parts if isinstance(p, Reasoning))
        if reasoning and not self.streamed_reasoning:
            rid = reasoning_id(mid)
            out += [ReasoningStartEvent(message_id=rid), ReasoningMessageStartEvent(message_id=rid, role="reasoning"),
                    ReasoningMessageContentEvent(message_id=rid, delta=reasoning),
                    ReasoningMessageEndEvent(message_id=rid), ReasoningEndEvent(message_id=rid)]
        out += self._close_reasoning()
        if turn.text and not self.streamed_text:
            out += [TextMessageStartEvent(message_id=mid, role="assistant"),
                    TextMessageContentEvent(message_id=mid, delta=turn.text), TextMessageEndEvent(message_id=mid)]
        out += self._close_text()
        for call in turn.tool_calls:
            out += [ToolCallStartEvent(tool_call_id=call.id, tool_call_name=call.name, parent_message_id=mid),
                    ToolCallArgsEvent(tool_call_id=call.id, delta=call.arguments),
                    ToolCallEndEvent(tool_call_id=call.id)]
        self.index, self.streamed_text, self.streamed_reasoning = None, False, False
        return out

    def _close_text(self) -> list[BaseEvent]:
        if self.text is None:
            return []
        text, self.text = self.text, None
        return [TextMessageEndEvent(message_id=text)]

    def _close_reasoning(self) -> list[BaseEvent]:
        if self.reasoning is None:
            return []
        reasoning, self.reasoning = self.reasoning, None
        return [ReasoningMessageEndEvent(message_id=reasoning), ReasoningEndEvent(message_id=reasoning)]

    def _close_messages(self) -> list[BaseEvent]:
        return self._close_reasoning() + self._close_text()

    def _step(self, path: str) -> list[BaseEvent]:
        """Finish the open steps ``path`` is not part of, and start those it is in that are not open."""
        out: list[BaseEvent] = []
        while self.steps and not (path == self.steps[-1] or path.startswith(self.steps[-1] + "/")):
            out.append(StepFinishedEvent(step_name=self.steps.pop()))
        names = path.split("/")
        for depth in range(len(self.steps), len(names)):
            step = "/".join(names[:depth + 1])
            self.steps.append(step)
            out.append(StepStartedEvent(step_name=step))
        return out

    def close(self) -> list[BaseEvent]:
        """Close whatever is open: messages, then steps, innermost first."""
        out = self._close_messages()
        while self.steps:
            out.append(StepFinishedEvent(step_name=self.steps.pop()))
        return out

    def snapshot(self, turns: Sequence[Turn]) -> list[BaseEvent]:
        return [MessagesSnapshotEvent(messages=snapshot_messages(turns, self.messages))]

    def _usage(self) -> list[TokenUsage] | None:
        used = self.usage
        if not (used.input_tokens or used.output_tokens):
            return None
        return [TokenUsage(input_tokens=used.input_tokens, output_tokens=used.output_tokens,
                           total_tokens=used.input_tokens + used.output_tokens,
                           cached_input_tokens=used.cache_read_tokens or None)]

    def finished(self, result: dict[str, Any], *, pending: Sequence[str] = ()) -> list[BaseEvent]:
        """``RUN_FINISHED`` for a run that completed: its ``result`` (with its ``status``), and the calls it left
        for the client (``pending``)."""
        outcome = RunFinishedSuccessOutcome(pending_tool_call_ids=list(pending) or None)
        return [RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, result=result, outcome=outcome,
                                 usage=self._usage())]

    def interrupted(self, calls: Sequence[ToolCall], deadline: float | None, result: dict[str, Any]
                    ) -> list[BaseEvent]:
        """``RUN_FINISHED`` for a run that stopped for ``calls`` to be approved: an interrupt per call, answered
        by the next input's ``resume`` entry with the same id (the call's)."""
        expires = None if deadline is None else datetime.datetime.fromtimestamp(
            deadline, datetime.timezone.utc).isoformat().replace("+00:00", "Z")
        interrupts = [Interrupt(id=c.id, reason=APPROVAL_REASON, tool_call_id=c.id, response_schema=APPROVAL_SCHEMA,
                                expires_at=expires, message=f"The agent asks to call {c.name} with "
                                                            f"{c.arguments}: approve or deny it.")
                      for c in calls]
        return [RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, result=result,
                                 outcome=RunFinishedInterruptOutcome(interrupts=interrupts), usage=self._usage())]

    def error(self, message: str, code: str) -> list[BaseEvent]:
        return [RunErrorEvent(message=message, code=code, usage=self._usage())]
