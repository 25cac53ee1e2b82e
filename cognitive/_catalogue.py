"""The built-in patterns and wrappers, registered by name for ``cognitive.build``."""

from __future__ import annotations

from cognitive._budget import WithBudget
from cognitive._chain import Chain
from cognitive._code_action import CodeAction
from cognitive._consistency import SelfConsistency
from cognitive._critic import Critic
from cognitive._managed import Managed
from cognitive._output import WithOutput
from cognitive._react import ReAct, SingleShot
from cognitive._refine import SelfRefine
from cognitive._reflexion import Reflexion
from cognitive._registry import register
from cognitive._rewoo import ReWOO
from cognitive._router import Router
from cognitive._verification import WithVerification
from cognitive._verify import Verify

for _name, _factory in {
    "react": ReAct,
    "single-shot": SingleShot,
    "verify": Verify,
    "managed": Managed,
    "code-action": CodeAction,
    "chain": Chain,
    "router": Router,
    "self-consistency": SelfConsistency,
    "self-refine": SelfRefine,
    "reflexion": Reflexion,
    "critic": Critic,
    "rewoo": ReWOO,
    "with-verification": WithVerification,
    "with-budget": WithBudget,
    "with-output": WithOutput,
}.items():
    register(_name, _factory)
