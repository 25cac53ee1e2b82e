"""The vocabulary of a conversation: roles and the parts a turn is made of."""

from __future__ import annotations

import enum
from typing import Union

import attrs


class Role(enum.StrEnum):
    """Who spoke a turn."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@attrs.frozen
class Text:
    """Plain text written by anyone."""

    text: str


@attrs.frozen
class Reasoning:
    """A model's visible reasoning. ``signature`` lets the provider that made it verify it on the way back."""

    text: str
    signature: str | None = None


@attrs.frozen
class ToolCall:
    """A model's request to run a tool. ``arguments`` is the raw JSON text the model wrote, possibly malformed."""

    id: str
    name: str
    arguments: str = "{}"


@attrs.frozen
class ToolResult:
    """The answer to one ``ToolCall``; ``is_error`` tells the model the call failed and why (in ``content``)."""

    call_id: str
    name: str
    content: str
    is_error: bool = False


@attrs.frozen
class Usage:
    """Tokens a provider call consumed. Usages add up with ``+``. ``estimated``: the counts are an estimate
    (the server reported none), and so is any sum they are part of."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    estimated: bool = False

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.estimated or other.estimated,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


Part = Union[Text, Reasoning, ToolCall, ToolResult, Usage]
PART_TYPES: tuple[type, ...] = (Text, Reasoning, ToolCall, ToolResult, Usage)
