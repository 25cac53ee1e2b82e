"""The built-in patterns and wrappers, registered by name for ``cognitive.build``, family by family."""

from __future__ import annotations

from cognitive._registry import Factory, register
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
from cognitive.planning._autonomous import Autonomous
from cognitive.planning._debate import Debate
from cognitive.planning._peoatr import PEOATR, Deliberate
from cognitive.planning._plan_execute import PlanAndExecute
from cognitive.planning._research import Research
from cognitive.planning._rewoo import ReWOO
from cognitive.search._cot import ChainOfThought
from cognitive.search._got import GraphOfThoughts
from cognitive.search._mcts import MCTS
from cognitive.search._tot import TreeOfThoughts
from cognitive.wrappers._budget import WithBudget
from cognitive.wrappers._escalation import escalation
from cognitive.wrappers._guardrails import WithGuardrails
from cognitive.wrappers._output import WithOutput
from cognitive.wrappers._verification import WithVerification

EVERYDAY: dict[str, Factory] = {
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
}
PLANNING: dict[str, Factory] = {
    "rewoo": ReWOO,
    "plan-and-execute": PlanAndExecute,
    "peoatr": PEOATR,
    "deliberate": Deliberate,
    "debate": Debate,
    "research": Research,
    "autonomous": Autonomous,
}
SEARCH: dict[str, Factory] = {
    "chain-of-thought": ChainOfThought,
    "tree-of-thoughts": TreeOfThoughts,
    "mcts": MCTS,
    "graph-of-thoughts": GraphOfThoughts,
}
WRAPPERS: dict[str, Factory] = {
    "with-verification": WithVerification,
    "with-budget": WithBudget,
    "with-output": WithOutput,
    "with-guardrails": WithGuardrails,
    "escalation": escalation,
}

for _family in (EVERYDAY, PLANNING, SEARCH, WRAPPERS):
    for _name, _factory in _family.items():
        register(_name, _factory)
