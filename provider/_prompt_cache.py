"""Anthropic prompt caching: where the ``cache_control`` breakpoints of a Messages API body go.

The API caches the prompt up to a block marked ``"cache_control": {"type": "ephemeral"}`` (tools, then system,
then messages, in that order) and reads it back, at a tenth of the input price, for a later request that
starts with the same blocks; writing the cache costs 1.25 times the input price (the 5-minute cache). A request
may carry at most four marks, and a prefix shorter than the model's minimum is not cached at all (the request
still succeeds). See ``place_breakpoints`` for where the marks go.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

MAX_BREAKPOINTS = 4
DEFAULT_MINIMUM = 1024
# Anthropic's minimum cacheable prompt lengths, by model family; every other model: DEFAULT_MINIMUM.
MINIMUMS: Mapping[str, int] = {
    "claude-3-haiku": 2048,
    "claude-3-5-haiku": 2048,
    "claude-haiku-4-5": 4096,
    "claude-opus-4-5": 4096,
    "claude-opus-4-6": 4096,
}
# A generous estimate (JSON text of each block, three characters a token): a mark placed below the real minimum
# is ignored by the API at no cost, while a mark left out loses the discount.
_CHARS_PER_TOKEN = 3
_UNMARKABLE = ("thinking", "redacted_thinking")  # the API refuses cache_control on thinking blocks


def minimum_tokens(model: str) -> int:
    """The shortest prompt prefix, in tokens, that ``model`` caches (its family's, found anywhere in the name,
    so ``claude-3-5-haiku-20241022`` and a router's ``anthropic/claude-haiku-4-5`` are found)."""
    for family, tokens in MINIMUMS.items():
        if family in model:
            return tokens
    return DEFAULT_MINIMUM


def place_breakpoints(body: dict[str, Any], minimum: int, *, room: int = MAX_BREAKPOINTS) -> None:
    """Mark cache breakpoints in ``body``, a Messages API request, where a later request will start the same.

    In order of preference, each placed only if the prompt up to it is estimated at ``minimum`` tokens or more,
    and at most ``room`` of them (the API allows four in all: pass four less the marks the body already carries,
    ``marks(body)``, when some may have come with ``Options.extra``):

    1. the last block of the last message: this request writes the whole conversation so far, and the next
       turn, which repeats it, reads it back;
    2. the last block of the user message before it, where the previous request of a tool loop ended (and
       placed its mark 1): read back even when the newest turn added more blocks than the API looks back over
       (about 20) to find an earlier cached prefix;
    3. the end of ``system``: tools and instructions, shared by every conversation of the same agent;
    4. the last tool: the tool definitions alone, still shared when the instructions change.

    Marked blocks are replaced by marked copies (a ``system`` string becomes one text block), so nothing the
    body shares with the caller's data is changed.
    """
    if room <= 0:
        return
    tools = body.get("tools")
    system = body.get("system")
    messages = body.get("messages")
    tools = tools if isinstance(tools, list) else []
    messages = messages if isinstance(messages, list) else []
    need = minimum * _CHARS_PER_TOKEN
    chars = 0
    for tool in tools:
        chars += _size(tool)
        if chars >= need:
            break
    tools_long = chars >= need
    if system and not tools_long:
        chars += _size(system)
    system_long = bool(system) and chars >= need
    first_long = 0 if chars >= need else len(messages)  # the first message whose prefix is long enough
    if chars < need:
        for index, message in enumerate(messages):
            chars += _size(message)
            if chars >= need:
                first_long = index
                break

    chosen: list[tuple[int, int]] = []  # (message, block) to mark
    last = len(messages) - 1
    for at in (last, _previous_user(messages, last)):
        if at is not None and first_long <= at and len(chosen) < room:
            block = _last_markable(messages[at])
            if block is not None:
                chosen.append((at, block))
    for index, block in chosen:
        messages[index] = _marked_message(messages[index], block)
    room -= len(chosen)
    if room and system_long:
        body["system"] = _marked_system(system)
        room -= 1
    if room and tools_long and isinstance(tools[-1], dict):
        tools[-1] = {**tools[-1], "cache_control": {"type": "ephemeral"}}


def _size(value: Any) -> int:
    """The estimate's measure of a block: the length of its JSON text."""
    return len(value) if isinstance(value, str) else len(json.dumps(value, ensure_ascii=False))


def marks(body: Mapping[str, Any]) -> int:
    """The ``cache_control`` marks already in ``body``."""
    count = 0
    for key in ("tools", "system"):
        blocks = body.get(key)
        if isinstance(blocks, list):
            count += sum(1 for block in blocks if isinstance(block, dict) and "cache_control" in block)
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            count += sum(1 for block in content if isinstance(block, dict) and "cache_control" in block)
    return count


def _previous_user(messages: list[Any], last: int) -> int | None:
    """The index of the last user message before ``messages[last]``."""
    for index in range(last - 1, -1, -1):
        message = messages[index]
        if isinstance(message, dict) and message.get("role") == "user":
            return index
    return None


def _last_markable(message: Any) -> int | None:
    """The index of the last block of ``message`` that may carry a mark (text, tool use, tool result; not
    thinking), or ``None``. Content given as a string counts as one text block."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return 0 if content else None
    if not isinstance(content, list):
        return None
    for index in range(len(content) - 1, -1, -1):
        block = content[index]
        if isinstance(block, dict) and block.get("type") not in _UNMARKABLE:
            return index
    return None


def _marked_message(message: dict[str, Any], index: int) -> dict[str, Any]:
    content = message["content"]
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    marked = {**content[index], "cache_control": {"type": "ephemeral"}}
    return {**message, "content": [*content[:index], marked, *content[index + 1:]]}


def _marked_system(system: Any) -> Any:
    if isinstance(system, str):
        return [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
    index = _last_markable({"content": system})
    if index is None:
        return system
    return [*system[:index], {**system[index], "cache_control": {"type": "ephemeral"}}, *system[index + 1:]]
