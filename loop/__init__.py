"""One inference turn: the conversation vocabulary, the protocols, ``Step``, tools and events.

``loop`` imports no other package of the framework; everything else builds on it.
"""

from loop._events import (
    BudgetReport,
    EventBus,
    EventsDropped,
    Stamped,
    Subscription,
    ToolFinished,
    ToolStarted,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
)
from loop._argcheck import ArgumentChecker
from loop._ask import Asked, ask
from loop._budget import PRICES, Budget, Price, Spent
from loop._context import Caller, RunContext, current_run_context, run_context
from loop._spend import Spend, charge, offer
from loop._executor import (Closable, Deriver, Described, Executor, Publisher, Sampler, ToolRunner, Transform, Viewer,
                            add_turn, has, provider_info, require)
from loop._middleware import TurnMiddleware
from loop._fanout import BranchResult, as_completed, fan_out
from loop._outcome import Outcome
from loop._output import OutputType
from loop._parts import Part, Reasoning, Role, Text, ToolCall, ToolResult, Usage
from loop._protocols import (
    Delta,
    DeltaStream,
    Finish,
    Options,
    Provider,
    ProviderInfo,
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
from loop._pipeline import CANCELLED, ToolPipeline
from loop._scope import (Carried, Recorder, RunScope, branch, carry, charging, current_scope, external_tools,
                         main_line, recording, run_path, scope, turn_options, typed_answer)
from loop._state import State
from loop._step import Step
from loop._tokens import TokenCounter, approx_tokens
from loop._tools import FunctionTool, TimedTool, Tool, index_tools, json_default, tool, tool_timeout
from loop._turn import Turn, TurnKind
from loop._wake import Wake
from loop.errors import LoopError, UsageError

__all__ = [
    "ArgumentChecker",
    "Asked",
    "BranchResult",
    "Budget",
    "BudgetReport",
    "CANCELLED",
    "Caller",
    "Carried",
    "Closable",
    "Delta",
    "DeltaStream",
    "Deriver",
    "Described",
    "EventBus",
    "EventsDropped",
    "Executor",
    "Finish",
    "FunctionTool",
    "LoopError",
    "Options",
    "Outcome",
    "OutputType",
    "PRICES",
    "Part",
    "Price",
    "Provider",
    "ProviderInfo",
    "Publisher",
    "Reasoning",
    "ReasoningDelta",
    "Recorder",
    "Request",
    "Role",
    "RunContext",
    "RunScope",
    "Sampler",
    "Spend",
    "Spent",
    "Stamped",
    "State",
    "Step",
    "Subscription",
    "Text",
    "TextDelta",
    "TimedTool",
    "TokenCounter",
    "Tool",
    "ToolCall",
    "ToolCallDelta",
    "ToolChoice",
    "ToolFinished",
    "ToolPipeline",
    "ToolResult",
    "ToolRunner",
    "ToolSpec",
    "ToolStarted",
    "Transform",
    "Turn",
    "TurnCompleted",
    "TurnExecutor",
    "TurnFailed",
    "TurnKind",
    "TurnMiddleware",
    "TurnRunner",
    "TurnStarted",
    "TurnSubmitter",
    "Usage",
    "UsageDelta",
    "UsageError",
    "UseTool",
    "Viewer",
    "Wake",
    "add_turn",
    "approx_tokens",
    "as_completed",
    "ask",
    "branch",
    "carry",
    "charge",
    "charging",
    "current_run_context",
    "current_scope",
    "external_tools",
    "fan_out",
    "has",
    "index_tools",
    "json_default",
    "main_line",
    "offer",
    "provider_info",
    "recording",
    "require",
    "run_context",
    "run_path",
    "scope",
    "tool",
    "tool_timeout",
    "turn_options",
    "typed_answer",
]
