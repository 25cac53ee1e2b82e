"""Reasoning patterns: stateless values that turn a ``State`` into a new ``State``, and wrappers around them."""

from cognitive._budget import WithBudget
from cognitive._code_action import CodeAction
from cognitive._output import WithOutput, answer_value
from cognitive._pattern import PatternFactory, Pattern, TurnProcessor, new_turn_processor
from cognitive._react import ReAct, SingleShot, react_factory
from cognitive._verification import WithVerification

__all__ = [
    "CodeAction",
    "Pattern",
    "PatternFactory",
    "ReAct",
    "SingleShot",
    "TurnProcessor",
    "WithBudget",
    "WithOutput",
    "WithVerification",
    "answer_value",
    "new_turn_processor",
    "react_factory",
]
