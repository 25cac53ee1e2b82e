"""Reading a ``RunAgentInput``: the JSON body checked as the HTTP conduit checks every body, validated with the
protocol package's own model (AG-UI 0.x ``binary`` parts upgraded first), and turned into what a run needs: the
conversation (``_messages``: text, images and files), the frontend tools as ``ToolSpec`` values, and the approval
decisions its ``resume`` entries give.

Every rejection is a ``Problem``: 400 for a body that is not JSON in UTF-8 (or nests too deep, or holds a lone
surrogate), 422 for JSON that is not a valid input, naming the field (``messages[2].content``, ``tools[0].name``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import attrs
import pydantic
from ag_ui.core import ResumeEntry, RunAgentInput

from loop import Decision, ToolCall, ToolSpec, UsageError, external_tools
from session._serving import MAX_JSON_DEPTH, json_depth, lone_surrogate, utf8_json
from session._problem import Problem
from session.agui._errors import invalid
from session.agui._messages import Conversation, read_messages, upgrade_parts

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_EMPTY_PARAMETERS = {"type": "object", "properties": {}}
_ROLES = frozenset({"developer", "system", "assistant", "user", "tool", "activity", "reasoning"})
MAX_THREAD_ID = 200  # as the session routes' ids: the thread is the session of that name
CANCELLED = "the user cancelled the approval request"


@attrs.frozen
class RunRequest:
    """A valid ``RunAgentInput`` as a run uses it."""

    input: RunAgentInput
    conversation: Conversation
    tools: tuple[ToolSpec, ...]

    @property
    def thread_id(self) -> str:
        return self.input.thread_id

    @property
    def run_id(self) -> str:
        return self.input.run_id

    @property
    def resume(self) -> tuple[ResumeEntry, ...]:
        return tuple(self.input.resume or ())


def parse_input(body: bytes, *, agent_tools: frozenset[str] = frozenset()) -> RunRequest:
    """The run ``body`` asks for; ``Problem`` naming the first thing wrong with it. A frontend tool named like one
    of ``agent_tools`` (the agent's own) is refused: the model could not tell them apart."""
    try:
        text = utf8_json(body)
    except ValueError as exc:
        raise Problem(400, "bad_json", f"the request body must be JSON in UTF-8 (RFC 8259), and {exc}") from None
    if not text.strip(" \t\n\r"):
        raise Problem(400, "bad_json", "the request body is empty; send a RunAgentInput")
    if json_depth(body) > MAX_JSON_DEPTH:
        raise Problem(400, "bad_json", f"the request body nests arrays and objects more than {MAX_JSON_DEPTH} deep")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise Problem(400, "bad_json", f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise invalid(f"the request body must be a RunAgentInput object, not {type(data).__name__}")
    where = lone_surrogate(data, text=body)
    if where is not None:
        raise Problem(400, "bad_unicode", f"{where!r} holds a lone UTF-16 surrogate (an escape such as \\ud800 "
                                          "without its pair), which is not text; send valid Unicode")
    upgrade_parts(data)  # 0.x binary parts upgraded, parts of unknown types named
    try:
        run_input = RunAgentInput.model_validate(data)
    except pydantic.ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise invalid(f"invalid RunAgentInput: {_where(first['loc'])}: {first['msg']}"[:1000]) from None
    thread = run_input.thread_id
    if not thread.strip() or len(thread) > MAX_THREAD_ID:
        raise invalid(f"threadId must name a thread in 1 to {MAX_THREAD_ID} characters")
    tools = _tools(run_input, agent_tools)
    conversation = read_messages(run_input.messages)
    if conversation.message is None and not run_input.resume:
        raise invalid("the last message must be the user's, or tool messages answering the calls the last "
                      "assistant message left for the client (or send 'resume' entries to answer interrupts)")
    return RunRequest(run_input, conversation, tools)


def _where(loc: Sequence[Any]) -> str:
    """A pydantic error location as the field's path in the JSON body; the message's role tag is left out."""
    out = ""
    previous: Any = None
    for item in loc:
        if isinstance(item, int):
            out += f"[{item}]"
        elif not (isinstance(previous, int) and item in _ROLES):
            out += f".{item}" if out else str(item)
        previous = item
    return out or "body"


def _tools(run_input: RunAgentInput, agent_tools: frozenset[str]) -> tuple[ToolSpec, ...]:
    specs: list[ToolSpec] = []
    for i, tool in enumerate(run_input.tools or ()):
        at = f"tools[{i}]"
        if not _NAME.fullmatch(tool.name):
            raise invalid(f"{at}.name: a tool's name is 1 to 64 letters, digits, '_' or '-', got {tool.name!r}")
        if tool.name in agent_tools:
            raise invalid(f"{at}.name: {tool.name!r} is the name of one of the agent's own tools; rename the "
                          "frontend tool")
        if any(spec.name == tool.name for spec in specs):
            raise invalid(f"{at}.name: the name {tool.name!r} is given twice; tool names must be unique")
        parameters = _EMPTY_PARAMETERS if tool.parameters is None else tool.parameters
        if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
            raise invalid(f"{at}.parameters: a tool's parameters are a JSON schema of type 'object'")
        specs.append(ToolSpec(tool.name, tool.description, parameters))
    try:
        with external_tools(specs):  # checked now, as the run will take them
            pass
    except UsageError as exc:
        raise invalid(f"tools: {exc}") from None
    return tuple(specs)


def decisions(entries: Sequence[ResumeEntry], waiting: Sequence[ToolCall]) -> list[Decision]:
    """The decisions ``entries`` give on the calls ``waiting`` for approval: one entry per call, its interrupt id
    the call's id. ``"resolved"`` with the payload ``{"approved": bool, "reason"?: str}`` (or just ``true`` /
    ``false``) decides it; ``"cancelled"`` denies it. ``Problem`` (409 when nothing waits, else 422) when they
    do not answer exactly the calls that wait."""
    if not waiting:
        raise Problem(409, "not_waiting", "resume answers interrupts, and no tool call of this thread waits for "
                                          "approval")
    ids = [c.id for c in waiting]
    given = [e.interrupt_id for e in entries]
    if sorted(given) != sorted(ids):
        raise invalid(f"resume: the entries answer {', '.join(given) or 'nothing'}, but the interrupts waiting are "
                      f"{', '.join(ids)}; answer each of them once")
    out = []
    for i, entry in enumerate(entries):
        if entry.status == "cancelled":
            out.append(Decision.deny(entry.interrupt_id, CANCELLED))
            continue
        payload = entry.payload
        if isinstance(payload, bool):
            approved, reason = payload, ""
        elif isinstance(payload, dict) and isinstance(payload.get("approved"), bool):
            approved, reason = payload["approved"], payload.get("reason", "")
            if not isinstance(reason, str) or len(reason) > 2000:
                raise invalid(f"resume[{i}].payload.reason must be a string of at most 2000 characters")
        else:
            raise invalid(f"resume[{i}].payload: a resolved approval is {{\"approved\": true or false, \"reason\": "
                          "\"...\"}, or just true or false")
        out.append(Decision(entry.interrupt_id, approved, reason))
    return out
