"""Reasoning patterns: stateless values that turn a ``State`` into a new ``State``, and wrappers around them."""

from cognitive._budget import WithBudget
from cognitive._chain import Chain, Stage
from cognitive._code_action import CodeAction
from cognitive._output import WithOutput, answer_value
from cognitive._pattern import PatternFactory, Pattern, TurnProcessor, new_turn_processor
from cognitive._paths import TemplateError
from cognitive._react import ReAct, SingleShot, react_factory
from cognitive._router import Router
from cognitive._template import Template
from cognitive._verification import WithVerification
from cognitive._verify import Verify

__all__ = [
    "Chain",
    "CodeAction",
    "Pattern",
    "PatternFactory",
    "ReAct",
    "Router",
    "SingleShot",
    "Stage",
    "Template",
    "TemplateError",
    "TurnProcessor",
    "Verify",
    "WithBudget",
    "WithOutput",
    "WithVerification",
    "answer_value",
    "new_turn_processor",
    "react_factory",
]
