"""One tool call as a model makes it: a scripted model calls the tool once, in one ``Step`` turn."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loop import Role, State, Step, Text, ToolResult
from provider import Scripted, tool_call

START = State().append(Role.USER, Text("go"))


async def run_one(t: Any, arguments: Mapping[str, Any] | None = None) -> ToolResult:
    """What the call of tool ``t`` with ``arguments`` (none by default) came back as."""
    state = await Step(Scripted([[tool_call(t.spec.name, arguments or {}, id="x")]]), tools=[t]).turn(START)
    (result,) = state[-1].tool_results
    return result
