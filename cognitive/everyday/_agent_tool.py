"""Any pattern as a tool of another agent: a question in, the agent's answer out, on a conversation of its own."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from loop import Role, State, Text, ToolSpec, UsageError, require
from loop.checks import positive_number

from cognitive._pattern import Pattern

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what OpenAI and Anthropic accept as a tool name
_NOTE = "\n\n(The agent's answer is incomplete: {reason}.)"


class AgentTool:
    """``agent`` as a ``loop.Tool`` named ``name``: the model calls it with ``{"question": "..."}`` and reads the
    agent's answer.

    Each call runs the agent on a new conversation holding only the question, in a branch of the caller's run
    (a step runs every tool call as one): its turns are never stored or streamed as the caller's conversation,
    its model and tool calls are charged to every budget around the caller, and the caller's run context
    (``loop.RunContext``) reaches its tools. An agent that raises is an error result the calling model reads; a
    degraded answer (a cap or budget stopped the inner run) comes back with a note saying so, so the caller
    never takes it for a finished one. ``timeout`` is the call's own time limit (``loop.TimedTool``), longer by
    default than a step's limit for ordinary tools, as an agent makes several model calls.
    """

    def __init__(self, agent: Pattern, name: str, description: str, *, timeout: float = 600.0) -> None:
        require(agent, Pattern, "AgentTool", "a Pattern to ask (something with run(state))")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise UsageError(f"AgentTool name must be 1 to 64 letters, digits, '_' or '-', got {name!r}")
        if not isinstance(description, str) or not description.strip():
            raise UsageError(f"AgentTool {name!r} needs a description saying what to ask it, got {description!r}")
        positive_number("AgentTool timeout", timeout, unit="seconds")
        self.agent, self.timeout = agent, timeout
        self.spec = ToolSpec(name, description, {
            "type": "object", "required": ["question"], "additionalProperties": False,
            "properties": {"question": {"type": "string", "description": "what to ask, with all it needs to know"}}})

    async def call(self, arguments: Mapping[str, Any]) -> str:
        state = await self.agent.run(State().append(Role.USER, Text(arguments["question"])))
        answer = state.answer or "(the agent wrote no answer)"
        if state.degraded and state.outcome is not None:
            answer += _NOTE.format(reason=state.outcome.reason or "it was stopped early")
        return answer

    def __repr__(self) -> str:
        return f"AgentTool({self.spec.name!r}, {self.agent!r})"
