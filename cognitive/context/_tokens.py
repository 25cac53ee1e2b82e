"""``tiktoken_counter``: exact token counts for OpenAI's tokenizers, when the ``tokens`` extra is installed."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from loop import Reasoning, Text, TokenCounter, ToolCall, ToolResult, Turn, UsageError

_PER_TURN = 4  # the role and message framing every chat format adds around a turn, as loop.approx_tokens counts


def tiktoken_counter(encoding: str = "o200k_base") -> TokenCounter:
    """A ``loop.TokenCounter`` that counts with tiktoken's ``encoding`` (``o200k_base`` for the GPT-4o family,
    ``cl100k_base`` for GPT-4 and GPT-3.5), plus the same few tokens a turn of framing that ``approx_tokens``
    adds. Text, reasoning, tool calls (name and arguments) and tool results are counted.

    Raises ``UsageError`` when tiktoken is not installed (it comes with the extra:
    ``pip install 'cognitive-loop[tokens]'``) or does not know ``encoding``. tiktoken reads the encoding's
    file once, from its cache (``TIKTOKEN_CACHE_DIR``) or by downloading it, when this is called.
    """
    if not isinstance(encoding, str) or not encoding:
        raise UsageError(f"encoding must be the name of a tiktoken encoding, got {encoding!r}")
    try:
        tiktoken: Any = importlib.import_module("tiktoken")
    except ImportError as exc:
        raise UsageError("tiktoken_counter needs the tiktoken package, which is not installed; install the "
                         "extra with: pip install 'cognitive-loop[tokens]'") from exc
    try:
        coder = tiktoken.get_encoding(encoding)
    except (KeyError, ValueError) as exc:
        raise UsageError(f"tiktoken has no encoding {encoding!r}: {exc}") from exc

    def count(turns: Iterable[Turn]) -> int:
        total = 0
        for turn in turns:
            total += _PER_TURN
            for part in turn.parts:
                if isinstance(part, (Text, Reasoning)):
                    text = part.text
                elif isinstance(part, ToolCall):
                    text = part.name + part.arguments
                elif isinstance(part, ToolResult):
                    text = part.content
                else:
                    continue
                # Text that looks like a special token is counted as text, not refused.
                total += len(coder.encode(text, disallowed_special=()))
        return total

    count.__qualname__ = count.__name__ = f"tiktoken_counter({encoding!r})"
    return count
