"""What a task says while its run goes on: the main line's tool activity as ``working`` status messages.

A model turn that calls tools becomes "Calling name(arguments)" (after whatever text the turn wrote), and each
result "name finished" or "name failed: ..."; the status message's metadata says the same as data (``progress``:
``tool_calls`` with the calls, or ``tool_result`` with the call's id, name and whether it failed). The answer itself is not
streamed here: it is the task's ``answer`` artifact once the run ends, so a turn that only thinks aloud before
calling a tool never reads as part of it. Branches (samples, judges, a tool's own agent) are not reported.
"""

from __future__ import annotations

from typing import Any

import attrs

from loop import Role, Stamped, ToolFinished, TurnCompleted

MAX_SHOWN = 500  # characters of a call's arguments or a failed result shown in a status message


@attrs.frozen
class Progress:
    """One ``working`` status update: its ``text`` and ``metadata``."""

    text: str
    metadata: dict[str, Any]


def _short(text: str) -> str:
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "…"


def progress(stamped: Stamped) -> Progress | None:
    """The status update ``stamped`` (an event the session published while the task's message ran) makes, if
    any."""
    if not stamped.main:
        return None
    event = stamped.event
    if isinstance(event, TurnCompleted) and event.turn.role is Role.ASSISTANT and event.turn.tool_calls:
        turn = event.turn
        calling = ", ".join(f"{c.name}({_short(c.arguments)})" for c in turn.tool_calls)
        text = f"{turn.text}\n\nCalling {calling}" if turn.text else f"Calling {calling}"
        listed = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in turn.tool_calls]
        return Progress(text, {"progress": "tool_calls", "toolCalls": listed})
    if isinstance(event, ToolFinished):
        result = event.result
        text = f"{event.call.name} failed: {_short(result.content)}" if result.is_error else \
            f"{event.call.name} finished"
        return Progress(text, {"progress": "tool_result", "toolCallId": event.call.id, "name": event.call.name,
                               "isError": result.is_error})
    return None
