"""A conversation as Chat Completions ``messages``."""

from __future__ import annotations

import json
import re
from typing import Any

from loop import Role, Turn


def _arguments(raw: str) -> str:
    """A call's arguments as sent back: as the model wrote them when they are a JSON object, else ``{}``.

    The call was answered with an error result already; servers that parse the history (vLLM, SGLang) reject
    the whole request over malformed arguments, which would make the conversation impossible to continue.
    """
    try:
        return raw if isinstance(json.loads(raw), dict) else "{}"
    except (TypeError, ValueError):
        return "{}"


def messages(turns: tuple[Turn, ...]) -> list[dict[str, Any]]:
    """``turns`` as Chat Completions messages. Reasoning and usage parts are not sent back."""
    out: list[dict[str, Any]] = []
    for turn in turns:
        role = turn.role
        if role is Role.TOOL:
            for result in turn.tool_results:
                out.append({"role": "tool", "tool_call_id": result.call_id, "content": result.content})
        elif role is Role.ASSISTANT:
            message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
            calls = turn.tool_calls
            if calls:
                message["tool_calls"] = [
                    {"id": c.id, "type": "function",
                     "function": {"name": c.name, "arguments": _arguments(c.arguments)}}
                    for c in calls
                ]
            elif message["content"] is None:
                message["content"] = ""
            if turn.name is not None:
                message["name"] = wire_name(turn.name)
            out.append(message)
        elif turn.name is not None:
            out.append({"role": role.value, "content": turn.text, "name": wire_name(turn.name)})
        else:
            out.append({"role": role.value, "content": turn.text})
    return out


_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_-]")


def wire_name(name: str) -> str:
    """``name`` as a message ``name`` the API accepts (``^[a-zA-Z0-9_-]{1,64}$``): other characters become
    ``_`` and it is cut to 64 characters."""
    if _NAME.fullmatch(name):
        return name
    return _NOT_NAME.sub("_", name)[:64] or "_"
