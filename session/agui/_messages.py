"""AG-UI messages and a session's turns, both ways: the conversation a ``RunAgentInput`` holds, as turns to seed a
new thread with and the message to run; and a stored conversation as the messages of a ``MESSAGES_SNAPSHOT``.

Message ids. A turn seeded from the client's messages keeps the client's id (in its ``meta``, under
``"agui_id"``); a user turn the client sent later keeps the id the client gives that message in the input (matched
from the end, by text: see ``client_ids``), so the client's list keeps its order; any other turn is
``turn-<index>``, its place in the conversation, which is also the id its text and calls are streamed under while
it is written, so a snapshot names the messages the stream built. A turn's reasoning is the message
``turn-<index>-reasoning``; a tool result is ``result-<call id>``.

Mapping. System and developer messages are system turns; user and assistant messages are user and assistant
turns (text only: a user message's other parts, images and the like, are refused, named); consecutive tool
messages are one tool turn answering the calls of the assistant message before them (a tool message's ``error``
makes an error result). Activity and reasoning messages are the client's display, not conversation, and are left
out. An assistant message whose calls the conversation goes on without answering gets "not answered" results, as a
session gives them, so the seeded history is one a model accepts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Union

import attrs
from ag_ui.core import (AssistantMessage, FunctionCall, ReasoningMessage, SystemMessage, TextPart, ToolMessage,
                        UserMessage)
from ag_ui.core import ToolCall as AGUIToolCall
from ag_ui.core import Message as AGUIMessage

from loop import Reasoning, Role, Text, ToolCall, ToolResult, Turn
from session._message import UNANSWERED
from session._problem import Problem
from session.agui._errors import invalid

ID_KEY = "agui_id"  # where a seeded turn keeps the id its client gave the message
LEFT_OPEN = {"status": "pending", "reason": "left for the client to answer"}


@attrs.frozen
class Conversation:
    """What a ``RunAgentInput``'s messages hold: the turns before its new message (``history``), and that message:
    the user's text, the results of the calls the last assistant message left for the client, or ``None`` when the
    input ends with neither (a run that only resumes interrupts)."""

    history: tuple[Turn, ...]
    message: Union[str, tuple[ToolResult, ...], None]


def message_id(turn: Turn, index: int, client: Mapping[int, str] | None = None) -> str:
    """The id of the message ``turn``, the ``index``-th of its conversation, goes by (``client``: the ids the
    client gives its user messages, by turn index, from ``client_ids``)."""
    given = turn.meta.get(ID_KEY)
    if isinstance(given, str) and given:
        return given
    if client is not None and index in client:
        return client[index]
    return f"turn-{index}"


def client_ids(turns: Sequence[Turn], messages: Sequence[Any]) -> dict[int, str]:
    """The ids the client's input ``messages`` give the user turns of ``turns``, by turn index: the last user
    message is the last user turn, and so on back, as long as their texts agree. The input holds the client's view
    of the conversation (the last snapshot and its new message): with these ids a snapshot names the client's own
    messages as it does, so its list keeps them where they are."""
    users = [(i, t.text) for i, t in enumerate(turns) if t.role is Role.USER and ID_KEY not in t.meta]
    given: list[tuple[str, str | None]] = []
    for message in messages:
        if message.role == "user":
            try:
                given.append((message.id, _text(message.content, "")))
            except Problem:
                given.append((message.id, None))
    out = {}
    for (index, text), (mid, said) in zip(reversed(users), reversed(given)):
        if text != said:
            break
        out[index] = mid
    return out


def reasoning_id(message: str) -> str:
    return f"{message}-reasoning"


def result_id(call_id: str) -> str:
    return f"result-{call_id}"


def read_messages(messages: Sequence[Any]) -> Conversation:
    """The conversation ``messages`` (validated ``ag_ui.core`` messages) hold; ``Problem`` (422) naming the first
    message that cannot be read."""
    turns: list[Turn] = []
    open_calls: dict[str, ToolCall] = {}  # calls of the last assistant message not answered yet
    results: list[ToolResult] = []
    last_role: str | None = None
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        role = message.role
        if role in ("activity", "reasoning"):
            continue
        if role == "tool":
            call = open_calls.pop(message.tool_call_id, None)
            if call is None:
                raise invalid(f"{where}.toolCallId: {message.tool_call_id!r} answers no open tool call of the "
                              "assistant message before it")
            content = _text(message.content, f"{where}.content")
            error = message.error
            results.append(ToolResult(call.id, call.name, content or (error or ""), is_error=error is not None))
            last_role = role
            continue
        if results or open_calls:  # the calls before this message are answered, or were never going to be
            results += [ToolResult(c.id, c.name, UNANSWERED, is_error=True) for c in open_calls.values()]
            turns.append(Turn(Role.TOOL, results))
            results, open_calls = [], {}
        meta = {ID_KEY: message.id}
        if role in ("system", "developer"):
            turns.append(Turn(Role.SYSTEM, [Text(message.content)], meta))
        elif role == "user":
            turns.append(Turn(Role.USER, [Text(_text(message.content, f"{where}.content"))], meta))
        else:  # assistant
            calls = [ToolCall(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or ()]
            text = message.content or ""
            if not text and not calls:
                continue  # an empty message says nothing a model could read
            turns.append(Turn(Role.ASSISTANT, ([Text(text)] if text else []) + calls, meta))
            open_calls = {c.id: c for c in calls}
        last_role = role
    if last_role == "tool":
        if open_calls:
            raise invalid(f"the tool messages answer some of the calls of the assistant message before them, not "
                          f"{', '.join(open_calls)}; send one tool message for each call")
        earlier = list(turns)
        earlier[-1] = _left_for_client(earlier[-1])
        return Conversation(tuple(earlier), tuple(results))
    if results or open_calls:
        results += [ToolResult(c.id, c.name, UNANSWERED, is_error=True) for c in open_calls.values()]
        turns.append(Turn(Role.TOOL, results))
    if last_role == "user":
        text = turns[-1].text
        if not text.strip():
            raise invalid(f"messages[{len(messages) - 1}].content: the last user message is empty")
        return Conversation(tuple(turns[:-1]), text)
    return Conversation(tuple(turns), None)


def _left_for_client(turn: Turn) -> Turn:
    """The assistant turn whose calls the input's last messages answer, marked as having left them for the client
    (outcome ``pending``), so that a thread seeded with it keeps them open for those results."""
    return Turn(turn.role, turn.parts, {**turn.meta, "outcome": LEFT_OPEN}, turn.name)


def _text(content: Any, where: str) -> str:
    """A message's text: a string, or its text parts joined by newlines; other parts are refused."""
    if isinstance(content, str):
        return content
    pieces = []
    for j, part in enumerate(content):
        if not isinstance(part, TextPart):
            raise invalid(f"{where}[{j}]: parts of type {getattr(part, 'type', type(part).__name__)!r} are not "
                          "supported; this agent reads text only")
        pieces.append(part.text)
    return "\n".join(pieces)


def snapshot_messages(turns: Sequence[Turn], messages: Sequence[Any] = ()) -> list[AGUIMessage]:
    """The conversation ``turns`` as AG-UI messages, for a ``MESSAGES_SNAPSHOT`` answering an input that held
    ``messages``."""
    client = client_ids(turns, messages)
    out: list[AGUIMessage] = []
    for index, turn in enumerate(turns):
        mid = message_id(turn, index, client)
        if turn.role is Role.SYSTEM:
            out.append(SystemMessage(id=mid, content=turn.text))
        elif turn.role is Role.USER:
            out.append(UserMessage(id=mid, content=turn.text))
        elif turn.role is Role.ASSISTANT:
            reasoning = "".join(p.text for p in turn.parts if isinstance(p, Reasoning))
            if reasoning:
                out.append(ReasoningMessage(id=reasoning_id(mid), content=reasoning))
            calls = [AGUIToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
                     for c in turn.tool_calls]
            out.append(AssistantMessage(id=mid, content=turn.text or None, tool_calls=calls or None))
        else:
            for result in turn.tool_results:
                out.append(ToolMessage(id=result_id(result.call_id), tool_call_id=result.call_id,
                                       content=result.content, error=result.content if result.is_error else None))
    return out
