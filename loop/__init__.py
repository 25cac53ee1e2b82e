"""One inference turn: the conversation vocabulary, the protocols, ``Step``, tools and events.

``loop`` imports no other package of the framework; everything else builds on it.
"""

from loop._events import (
    EventBus,
    EventsDropped,
    Subscription,
    ToolFinished,
    ToolStarted,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
)
from loop._parts import Part, Reasoning, Role, Text, ToolCall, ToolResult, Usage
from loop._progress import ProgressCallback, on_progress
from loop._protocols import (
    Delta,
    Finish,
    Options,
    Provider,
    ReasoningDelta,
    Request,
    TextDelta,
    ToolCallDelta,
    ToolChoice,
    ToolSpec,
    TurnExecutor,
    TurnRunner,
    TurnSubmitter,
    UsageDelta,
    UseTool,
)
from loop._state import State
from loop._step import Step, Transform
from loop._tools import FunctionTool, Tool, tool
from loop._turn import Turn
from loop.errors import LoopError, UsageError

__all__ = [
    "Delta",
    "EventBus",
    "EventsDropped",
    "Finish",
    "FunctionTool",
    "LoopError",
    "Options",
    "Part",
    "ProgressCallback",
    "Provider",
    "Reasoning",
    "ReasoningDelta",
    "Request",
    "Role",
    "State",
    "Step",
    "Subscription",
    "Text",
    "TextDelta",
    "Tool",
    "ToolCall",
    "ToolCallDelta",
    "ToolChoice",
    "ToolFinished",
    "ToolResult",
    "ToolSpec",
    "ToolStarted",
    "Transform",
    "Turn",
    "TurnCompleted",
    "TurnExecutor",
    "TurnFailed",
    "TurnRunner",
    "TurnStarted",
    "TurnSubmitter",
    "Usage",
    "UsageDelta",
    "UsageError",
    "UseTool",
    "on_progress",
    "tool",
]
