"""Counting tokens for transforms that trim a conversation to fit: a pluggable counter and a default one."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from loop._parts import Reasoning, Text, ToolCall, ToolResult
from loop._turn import Turn

TokenCounter = Callable[[Iterable[Turn]], int]
"""How many tokens ``turns`` take in a model's context. Plug in the model's own tokenizer for exact counts
(e.g. ``lambda turns: sum(len(enc.encode(t.text)) for t in turns)``); ``approx_tokens`` is the default."""

_PER_TURN = 4  # the role and message framing every chat format adds around a turn
_CHARS_PER_TOKEN = 4  # English prose and code average about four characters a token with common tokenizers


def approx_tokens(turns: Iterable[Turn]) -> int:
    """An estimate of the tokens ``turns`` take: about four characters a token, plus a few a turn.

    Good for budgeting a context window with some margin, not for billing: use the model's tokenizer for
    exact counts.
    """
    chars = 0
    count = 0
    for turn in turns:
        count += 1
        for part in turn.parts:
            if isinstance(part, (Text, Reasoning)):
                chars += len(part.text)
            elif isinstance(part, ToolCall):
                chars += len(part.name) + len(part.arguments)
            elif isinstance(part, ToolResult):
                chars += len(part.content)
    return count * _PER_TURN + -(-chars // _CHARS_PER_TOKEN)
