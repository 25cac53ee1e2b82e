"""The exported names of every package, so the public surface changes only on purpose.

When this test fails because a name was added or removed deliberately, update the list here in the same change.
"""

import importlib
import subprocess
import sys

import pytest

from loop import LoopError

PUBLIC = {
    "loop": [
        "ApprovalMismatch", "Approver", "ArgumentChecker", "Asked", "BranchResult", "Budget", "BudgetReport",
        "CACHE_HIT", "CANCELLED", "CacheStats", "CacheStore", "Caller", "Carried", "Closable", "Decision", "Delta",
        "DeltaStream", "Deriver", "Described", "EventBus", "EventsDropped", "Executor", "File", "Finish",
        "FunctionTool", "GatedTool", "Hold", "Image", "LoopError", "MemoryCache", "Options", "Outcome", "OutputType",
        "PRICES", "Part", "Price", "Provider", "ProviderInfo", "Publisher", "Reasoning", "ReasoningDelta", "Recorder",
        "Request", "ResponseCache", "Role", "RunContext", "RunScope", "SQLiteCache", "Sampler", "Spend", "Spent",
        "Stamped", "State", "Step", "Subscription", "Text", "TextDelta", "TimedTool", "TokenCounter", "Tool",
        "ToolCall", "ToolCallDelta", "ToolChoice", "ToolDenied", "ToolFinished", "ToolPipeline", "ToolResult",
        "ToolRunner", "ToolSpec", "ToolStarted", "Transform", "Turn", "TurnCompleted", "TurnExecutor", "TurnFailed",
        "TurnKind", "TurnMiddleware", "TurnRunner", "TurnStarted", "TurnSubmitter", "Usage", "UsageDelta", "UsageError",
        "UseTool", "Viewer", "Wake", "add_turn", "answer_approvals", "approval_asked_at", "approving", "approx_tokens",
        "as_completed", "ask", "awaiting_approval", "branch", "carry", "charge", "charging", "current_approver",
        "current_run_context", "current_scope", "external_tools", "fan_out", "has", "in_sample", "index_tools",
        "json_default", "main_line", "offer", "provider_info", "recording", "require", "require_approval", "run_context",
        "run_path", "scope", "tool", "tool_timeout", "turn_options", "typed_answer"
    ],
    "loop.checks": [
        "field_check", "int_at_least", "non_negative_int", "positive_int", "positive_number"
    ],
    "loop.codec": [
        "Blobs", "blob_key", "delta_from_dict", "delta_to_dict", "json_depth", "part_from_dict", "part_to_dict"
    ],
    "loop.files": ["create_private"],
    "loop.errors": [
        "ApprovalMismatch", "AuthenticationError", "BadRequestError", "BudgetExhausted", "ConformanceError",
        "LoopError", "OverloadedError", "ProviderError", "ProviderTimeout", "ProviderUnreachable", "RateLimitError",
        "ScriptExhausted", "ServerError", "StreamError", "ToolDenied", "UsageError", "VerificationError",
        "VerificationFailed"
    ],
    "loop.tracing": [
        "NOOP_SPAN", "configure", "configure_logging", "current_tracer", "enabled", "logger", "span", "start",
        "usage_attributes"
    ],
    "provider": [
        "Anthropic", "CassetteMismatch", "Embedder", "Function", "HashingEmbedder", "LocalE5", "OpenAICompatible",
        "OpenAIEmbeddings", "OpenAIResponses", "PASSAGE", "QUERY", "Recording", "Replay", "Reply", "ReplyFunction",
        "Retry", "Scripted", "SymmetricEmbedder", "Vector", "cosine", "from_environment", "from_spec", "is_loopback",
        "tool_call"
    ],
    "verifier": [
        "Check", "CommandVerifier", "FunctionVerifier", "Guard", "INJECTION_PATTERNS", "JudgeVerifier", "MaxLength",
        "NoInjection", "NoPII", "NoSecrets", "Passage", "Result", "SECRET_PATTERNS", "SchemaVerifier", "Status",
        "TextCheck", "Verdict", "Verifier", "Where", "build_report", "check_verifiers", "failed", "mask", "passages",
        "passed", "run_all"
    ],
    "cognitive": [
        "Act", "AgentTool", "Aggregate", "AutoContext", "Autonomous", "Chain", "ChainOfThought", "CheckSources",
        "Checkpoints", "CodeAction", "Critic", "Criticize", "Critique", "Debate", "Decided", "Deliberate", "Escalation",
        "ExtractFacts", "FileCheckpoints", "FitToWindow", "Forgetting", "FromLastCompaction", "Generate",
        "GraphOfThoughts", "GuardrailTripped", "Judge", "KeepBest", "Ledger", "MCTS", "Managed", "Memory",
        "MemoryCheckpoints", "MemoryItem", "MemoryStoreError", "Next", "Node", "Operation", "PEOATR", "Pattern",
        "PatternFactory", "PatternKind", "Plan", "PlanAndExecute", "PoolStep", "Proposal", "Proposals", "Rating",
        "ReAct", "ReWOO", "RecallMemory", "Recalled", "Refine", "Reflect", "Reflection", "Reflexion", "RegistryError",
        "Remembering", "Research", "ReuseResults", "Router", "SQLiteMemory", "SameQuestion", "Scope", "Score", "Scorer",
        "SelfConsistency", "SelfRefine", "SemanticCache", "SingleShot", "SlidingWindow", "SourceCheck", "Stage",
        "Steps", "Summarize", "Synthesize", "Template", "TemplateError", "Think", "ToolCheckedVerifier",
        "ToolOutputGuard", "Tree", "TreeOfThoughts", "TruncateToolResults", "TurnProcessor", "Verify", "WithBudget",
        "WithGuardrails", "WithOutput", "WithVerification", "add_thought", "answer_from_line", "answer_value", "build",
        "checkpoint_key", "confidence_of", "left_open", "memory_tools", "names", "new_turn_processor",
        "normalise_answer", "propose_thoughts", "react_factory", "reasoning_model", "register", "remember_messages",
        "score_line", "settings", "tiktoken_counter", "work_notes", "write_notes"
    ],
    "cognitive.bench": [
        "CHECKERS", "Checker", "Contender", "EscalationCheck", "PLOT_EXTRA", "PatternResult", "Progress", "Report",
        "SimulatedModel", "Task", "TaskRun", "builtin_tasks", "check_contains", "check_exact", "check_game24",
        "check_number", "compare_escalation", "default_budget", "load_tasks", "lookup", "reliability",
        "reliability_by_kind", "render_table", "report_json", "run_bench", "run_task", "simulated_provider",
        "write_json", "write_png", "write_reliability"
    ],
    "session": [
        "A2AEndpoint", "A2ATool", "A2AToolError", "ApprovalAnswered", "ApprovalRequested", "CheckpointStore", "Conduit",
        "DeletingStore", "EventLog", "EventReader", "EventsLost", "HTTPConduit", "InboxStore", "Interrupted", "Lease",
        "LeaseLost", "LeaseStore", "ListingStore", "LoggedEvent", "MCPConduit", "MCPConnectionError", "MCPHTTPServer",
        "MCPServer", "MCPStdioServer", "MCPTool", "MCPToolError", "MCPTools", "Manager", "MemoryStore", "Message",
        "MessageFailed", "MessageFinished", "MessageQueued", "MessageStarted", "PostgresStore", "RateLimit",
        "SQLiteStore", "Session", "SessionBusy", "SessionClosed", "SessionElsewhere", "SessionLimit", "ShuttingDown",
        "StdioConduit", "StepFactory", "Store", "StoreCheckpoints", "StoreConflict", "StoreError", "StorePaused",
        "StoredSession", "ToolResultsMismatch", "TurnProcessor", "TurnStored", "TurnUpdated", "a2a_routes", "a2a_tool",
        "agui_routes", "current_checkpoints", "event_to_json", "open_store", "openai_app", "openai_routes",
        "register_store", "step_factory", "tune_collector",
    ],
    "session.stores": [
        "CheckpointStore", "DeletingStore", "EventFeed", "FeedStore", "HandOffStore", "HandOffs", "InboxStore", "Lease",
        "LeaseLost", "LeaseStore", "ListingStore", "MemoryStore", "PostgresMemory", "PostgresStore", "SQLiteStore",
        "Store", "StoreCheckpoints", "StoreConflict", "StoreError", "StoredSession", "known_schemes", "open_store",
        "register_store"
    ],
    "session.testing": [
        "ConformanceError", "check_lease_store", "check_store"
    ],
    "session.a2a": [
        "A2AEndpoint", "A2ATool", "A2AToolError", "CARD_PATHS", "a2a_routes", "a2a_tool"
    ],
    "session.agui": [
        "agui_routes"
    ],
    "session.http": [
        "EventLog", "EventReader", "EventsLost", "HTTPConduit", "LoggedEvent", "RateLimit", "event_to_json"
    ],
    "session.openai": [
        "openai_app", "openai_routes"
    ],
    "session.mcp": [
        "MCPConduit", "MCPConnectionError", "MCPHTTPServer", "MCPServer", "MCPStdioServer", "MCPTool", "MCPToolError",
        "MCPTools"
    ],
    "sandbox": [
        "BuiltImage", "DockerSandbox", "ExecResult", "FunctionSandbox", "ImageRecipe", "Sandbox", "SandboxConfig",
        "SandboxError", "ToolBridge", "ToolSandbox", "UnsafeLocalSandbox", "accepts_tools", "build_image", "reap"
    ],
    "sandbox.testing": [
        "ConformanceError", "check_sandbox"
    ],
}


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_exported_names(name: str) -> None:
    module = importlib.import_module(name)
    assert sorted(module.__all__) == sorted(PUBLIC[name])
    assert len(set(module.__all__)) == len(module.__all__), "a name is exported twice"


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_exported_name_exists(name: str) -> None:
    module = importlib.import_module(name)
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert missing == []


@pytest.mark.parametrize("name", [n for n in PUBLIC if "." not in n])
def test_star_import_gives_exactly_the_exported_names(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {name} import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(PUBLIC[name])


def test_loop_imports_no_other_project_package() -> None:
    code = (
        "import sys, loop, loop.tracing, loop.errors\n"
        "others = {'provider', 'verifier', 'cognitive', 'session', 'sandbox'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in others))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_exported_exception_derives_from_loop_error(name: str) -> None:
    module = importlib.import_module(name)
    exported = [getattr(module, n) for n in module.__all__]
    strays = [e.__name__ for e in exported
              if isinstance(e, type) and issubclass(e, BaseException) and not issubclass(e, LoopError)]
    assert strays == []
