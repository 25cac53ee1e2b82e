"""The built-in patterns and wrappers, registered by name for ``cognitive.build``."""

from __future__ import annotations

from cognitive._registry import register
from cognitive.wrappers._escalation import escalation
from cognitive.search._mcts import MCTS
from cognitive.planning._peoatr import Deliberate, PEOATR
from cognitive.search._tot import TreeOfThoughts
from cognitive.search._cot import ChainOfThought
from cognitive.search._got import GraphOfThoughts
from cognitive.planning._plan_execute import PlanAndExecute
from cognitive.planning._autonomous import Autonomous
from cognitive.planning._research import Research
from cognitive.planning._debate import Debate
from cognitive.everyday._chain import Chain
from cognitive.everyday._code_action import CodeAction
from cognitive.everyday._consistency import SelfConsistency
from cognitive.everyday._critic import Critic
from cognitive.everyday._managed import Managed
from cognitive.everyday._react import ReAct, SingleShot
from cognitive.everyday._refine import SelfRefine
from cognitive.everyday._reflexion import Reflexion
from cognitive.everyday._router import Router
from cognitive.everyday._verify import Verify
from cognitive.planning._rewoo import ReWOO
from cognitive.wrappers._budget import WithBudget
from cognitive.wrappers._output import WithOutput
from cognitive.wrappers._verification import WithVerification

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
    "debate": Debate,
    "research": Research,
    "autonomous": Autonomous,
    "plan-and-execute": PlanAndExecute,
    "graph-of-thoughts": GraphOfThoughts,
    "chain-of-thought": ChainOfThought,
    "tree-of-thoughts": TreeOfThoughts,
    "deliberate": Deliberate,
    "peoatr": PEOATR,
    "mcts": MCTS,
    "escalation": escalation,
    "with-verification": WithVerification,
    "with-budget": WithBudget,
    "with-output": WithOutput,
}.items():
    register(_name, _factory)
