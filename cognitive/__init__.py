"""Reasoning patterns: stateless values that turn a ``State`` into a new ``State``, and wrappers around them."""

from cognitive._budget import WithBudget
from cognitive._chain import Chain, Stage
from cognitive._code_action import CodeAction
from cognitive._consistency import SelfConsistency, normalise_answer
from cognitive._critic import Critic, ToolCheckedVerifier
from cognitive._output import WithOutput, answer_value
from cognitive._pattern import PatternFactory, Pattern, TurnProcessor, new_turn_processor
from cognitive._paths import TemplateError
from cognitive._react import ReAct, SingleShot, react_factory
from cognitive._refine import SelfRefine
from cognitive._reflexion import Reflection, Reflexion
from cognitive._router import Router
from cognitive._template import Template
from cognitive._verification import WithVerification
from cognitive._verify import Verify

__all__ = [
    "Chain",
    "CodeAction",
    "Critic",
    "Pattern",
    "PatternFactory",
    "ReAct",
    "Reflection",
    "Reflexion",
    "Router",
    "SelfConsistency",
    "SelfRefine",
    "SingleShot",
    "Stage",
    "Template",
    "TemplateError",
    "ToolCheckedVerifier",
    "TurnProcessor",
    "Verify",
    "WithBudget",
    "WithOutput",
    "WithVerification",
    "answer_value",
    "new_turn_processor",
    "normalise_answer",
    "react_factory",
]
