"""Reasoning patterns: stateless values that turn a ``State`` into a new ``State``, and wrappers around them.

Errors, under the ``loop.errors`` tree:

    LoopError
    ├── GuardrailTripped           a guardrail's tripwire stopped the run; names the check, stage and reason
    ├── MemoryStoreError           a SQLiteMemory's database failed (the file is unreadable, the disk full)
    └── UsageError
        ├── TemplateError          a prompt template or path is malformed, or a path reads nothing
        └── RegistryError          an unknown pattern name or setting (also a ValueError)
"""

from cognitive._kinds import PatternKind
from cognitive._pattern import PatternFactory, Pattern, TurnProcessor, left_open, new_turn_processor
from cognitive._registry import RegistryError, build, names, register, settings
from cognitive.context._ledger import AutoContext, Ledger
from cognitive.context._reuse import ReuseResults
from cognitive.context._summarize import FromLastCompaction, Summarize
from cognitive.context._tokens import tiktoken_counter
from cognitive.context._window import FitToWindow, SlidingWindow, TruncateToolResults
from cognitive.everyday._agent_tool import AgentTool
from cognitive.everyday._chain import Chain, Stage
from cognitive.everyday._code_action import CodeAction
from cognitive.everyday._consistency import SelfConsistency, normalise_answer
from cognitive.everyday._critic import Critic, ToolCheckedVerifier
from cognitive.everyday._managed import Managed
from cognitive.everyday._react import ReAct, SingleShot, react_factory
from cognitive.everyday._refine import SelfRefine
from cognitive.everyday._reflexion import Reflection, Reflexion
from cognitive.everyday._router import Router
from cognitive.everyday._verify import Verify
from cognitive.memory._protocol import Forgetting, Memory, MemoryItem, Recalled, Scope
from cognitive.memory._recall import RecallMemory
from cognitive.memory._remember import ExtractFacts, Remembering, remember_messages
from cognitive.memory._cache_judge import SameQuestion
from cognitive.memory._semantic_cache import SemanticCache
from cognitive.memory._sqlite import MemoryStoreError, SQLiteMemory
from cognitive.memory._tools import memory_tools
from cognitive.planning._autonomous import Autonomous, PoolStep
from cognitive.planning._debate import Debate
from cognitive.planning._peoatr import Deliberate, PEOATR
from cognitive.planning._plan_execute import PlanAndExecute
from cognitive.planning._research import Research
from cognitive.planning._rewoo import ReWOO
from cognitive.planning._stages import (Act, CheckSources, Critique, Criticize, Decided, Judge, Next, Plan, Reflect,
                                        SourceCheck, Steps, Synthesize, Think, work_notes, write_notes)
from cognitive.prompts._paths import TemplateError
from cognitive.prompts._template import Template
from cognitive.search._checkpoint import Checkpoints, FileCheckpoints, MemoryCheckpoints, checkpoint_key
from cognitive.search._cot import ChainOfThought, reasoning_model
from cognitive.search._got import GraphOfThoughts
from cognitive.search._got_ops import Aggregate, Generate, KeepBest, Operation, Refine, Score
from cognitive.search._mcts import MCTS
from cognitive.search._thoughts import (Proposal, Proposals, Rating, Scorer, add_thought, answer_from_line,
                                         propose_thoughts, score_line)
from cognitive.search._tot import TreeOfThoughts
from cognitive.search._tree import Node, Tree
from cognitive.wrappers._budget import WithBudget
from cognitive.wrappers._escalation import Escalation, confidence_of
from cognitive.wrappers._guardrails import GuardrailTripped, ToolOutputGuard, WithGuardrails
from cognitive.wrappers._output import WithOutput, answer_value
from cognitive.wrappers._verification import WithVerification

import cognitive._catalogue  # noqa: E402,F401  (registers the built-in patterns by name)

__all__ = [
    "Act",
    "AgentTool",
    "Aggregate",
    "AutoContext",
    "Autonomous",
    "Chain",
    "ChainOfThought",
    "CheckSources",
    "Checkpoints",
    "CodeAction",
    "Critic",
    "Criticize",
    "Critique",
    "Debate",
    "Decided",
    "Deliberate",
    "Escalation",
    "ExtractFacts",
    "FileCheckpoints",
    "FitToWindow",
    "Forgetting",
    "FromLastCompaction",
    "Generate",
    "GraphOfThoughts",
    "GuardrailTripped",
    "Judge",
    "KeepBest",
    "Ledger",
    "MCTS",
    "Managed",
    "Memory",
    "MemoryCheckpoints",
    "MemoryItem",
    "MemoryStoreError",
    "Next",
    "Node",
    "Operation",
    "PEOATR",
    "Pattern",
    "PatternFactory",
    "PatternKind",
    "Plan",
    "PlanAndExecute",
    "PoolStep",
    "Proposal",
    "Proposals",
    "Rating",
    "ReAct",
    "ReWOO",
    "RecallMemory",
    "Recalled",
    "Refine",
    "Reflect",
    "Reflection",
    "Reflexion",
    "RegistryError",
    "Remembering",
    "Research",
    "ReuseResults",
    "Router",
    "SQLiteMemory",
    "SameQuestion",
    "Scope",
    "Score",
    "Scorer",
    "SelfConsistency",
    "SelfRefine",
    "SemanticCache",
    "SingleShot",
    "SlidingWindow",
    "SourceCheck",
    "Stage",
    "Steps",
    "Summarize",
    "Synthesize",
    "Template",
    "TemplateError",
    "Think",
    "ToolCheckedVerifier",
    "ToolOutputGuard",
    "Tree",
    "TreeOfThoughts",
    "TruncateToolResults",
    "TurnProcessor",
    "Verify",
    "WithBudget",
    "WithGuardrails",
    "WithOutput",
    "WithVerification",
    "add_thought",
    "answer_from_line",
    "answer_value",
    "build",
    "checkpoint_key",
    "confidence_of",
    "left_open",
    "memory_tools",
    "names",
    "new_turn_processor",
    "normalise_answer",
    "propose_thoughts",
    "react_factory",
    "reasoning_model",
    "register",
    "remember_messages",
    "score_line",
    "settings",
    "tiktoken_counter",
    "work_notes",
    "write_notes",
]
