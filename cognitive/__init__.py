"""Reasoning patterns: stateless values that turn a ``State`` into a new ``State``, and wrappers around them.

Errors, under the ``loop.errors`` tree:

    UsageError
    ├── TemplateError              a prompt template or path is malformed, or a path reads nothing
    └── RegistryError              an unknown pattern name or setting (also a ValueError)
"""

from cognitive._budget import WithBudget
from cognitive._chain import Chain, Stage
from cognitive._code_action import CodeAction
from cognitive._kinds import PatternKind
from cognitive._consistency import SelfConsistency, normalise_answer
from cognitive._critic import Critic, ToolCheckedVerifier
from cognitive._ledger import AutoContext, Ledger
from cognitive._managed import Managed
from cognitive._output import WithOutput, answer_value
from cognitive._paths import TemplateError
from cognitive._pattern import PatternFactory, Pattern, TurnProcessor, left_open, new_turn_processor
from cognitive._react import ReAct, SingleShot, react_factory
from cognitive._refine import SelfRefine
from cognitive._reflexion import Reflection, Reflexion
from cognitive._registry import RegistryError, build, names, register, settings
from cognitive._reuse import ReuseResults
from cognitive._rewoo import ReWOO
from cognitive._router import Router
from cognitive._summarize import FromLastCompaction, Summarize
from cognitive._template import Template
from cognitive._tokens import tiktoken_counter
from cognitive._verification import WithVerification
from cognitive._verify import Verify
from cognitive._window import FitToWindow, SlidingWindow, TruncateToolResults

import cognitive._catalogue  # noqa: E402,F401  (registers the built-in patterns by name)

__all__ = [
    "AutoContext",
    "Chain",
    "CodeAction",
    "Critic",
    "FitToWindow",
    "FromLastCompaction",
    "Ledger",
    "Managed",
    "Pattern",
    "PatternFactory",
    "PatternKind",
    "ReAct",
    "ReWOO",
    "Reflection",
    "Reflexion",
    "RegistryError",
    "ReuseResults",
    "Router",
    "SelfConsistency",
    "SelfRefine",
    "SingleShot",
    "SlidingWindow",
    "Stage",
    "Summarize",
    "Template",
    "TemplateError",
    "ToolCheckedVerifier",
    "TruncateToolResults",
    "TurnProcessor",
    "Verify",
    "WithBudget",
    "WithOutput",
    "WithVerification",
    "answer_value",
    "build",
    "names",
    "left_open",
    "new_turn_processor",
    "normalise_answer",
    "react_factory",
    "register",
    "settings",
    "tiktoken_counter",
]
