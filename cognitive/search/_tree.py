"""``Tree``: the search runtime the search patterns share, public so users write their own topology.

A tree of thoughts whose nodes hold conversation states. A child's state extends its parent's (a fork of a
``State`` shares its turns, so it costs one append, not a copy), so a node's state is the whole line of thought
from the question to it. Nodes keep visit statistics for Monte Carlo search (visits, total reward) and a score
for beam search; the tree keeps the reflections written on failed rollouts and counts finished rollouts.

A tree is written as JSON (``to_dict``/``from_dict``) with each node's turns stored once, as what it added to
its parent's state, so a checkpoint grows with the tree, not with the tree times the conversation.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from loop import State, Turn, UsageError

FORMAT = 1


@attrs.define(eq=False)
class Node:
    """One thought: its ``id`` (its index in the tree), its ``parent`` id (``None`` at the root), ``depth`` (0 at
    the root), the ``thought`` text it added, the ``state`` ending in it, the ``score`` a scorer gave it (0 to 1;
    ``None`` when not scored), whether it is ``terminal`` (a final answer: it is never expanded), ``failed`` (why
    proposing or scoring it failed, or ``None``), its ``children`` ids, and the statistics Monte Carlo search
    backs up: ``visits`` and ``value`` (the sum of the rewards of the rollouts through it)."""

    id: int
    parent: int | None
    depth: int
    thought: str
    state: State
    score: float | None = None
    terminal: bool = False
    failed: str | None = None
    children: list[int] = attrs.Factory(list)
    visits: int = 0
    value: float = 0.0

    @property
    def mean(self) -> float:
        """The mean reward of the rollouts through this node (``Q``); 0 before any."""
        return self.value / self.visits if self.visits else 0.0

    @property
    def expanded(self) -> bool:
        return bool(self.children)


class Tree:
    """A search tree rooted at ``root_state`` (the conversation the search starts from).

    Not shared between runs: a pattern makes one per run (or reads one back from a checkpoint). Methods never
    call a model; the patterns decide what to propose and how to score, and record it here.
    """

    __slots__ = ("nodes", "reflections", "rollouts")

    def __init__(self, root_state: State) -> None:
        if not isinstance(root_state, State):
            raise UsageError(f"Tree starts from a loop.State, got {type(root_state).__name__}")
        self.nodes: list[Node] = [Node(0, None, 0, "", root_state)]
        self.reflections: list[str] = []
        self.rollouts = 0

    @property
    def root(self) -> Node:
        return self.nodes[0]

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def add(self, parent: Node, thought: str, state: State, *, score: float | None = None, terminal: bool = False,
            failed: str | None = None) -> Node:
        """A new child of ``parent`` holding ``state``, which must extend ``parent.state``."""
        if parent.terminal:
            raise UsageError(f"node {parent.id} is terminal (an answer); it has no children")
        if len(state) < len(parent.state) or state.common_prefix(parent.state, meta=False) < len(parent.state):
            raise UsageError(f"a child's state must extend its parent's (node {parent.id}); fork it from "
                             "parent.state with append")
        node = Node(len(self.nodes), parent.id, parent.depth + 1, thought, state, _score(score), terminal, failed)
        self.nodes.append(node)
        parent.children.append(node.id)
        return node

    def path(self, node: Node) -> list[Node]:
        """The nodes from the root to ``node``, both included."""
        line = [node]
        while line[-1].parent is not None:
            line.append(self.nodes[line[-1].parent])
        return line[::-1]

    def backpropagate(self, node: Node, reward: float) -> None:
        """Credit one finished rollout that ended at ``node`` with ``reward``: every node on the path from the
        root, ``node`` included, gains a visit and the reward; the tree counts the rollout."""
        reward = float(reward)
        if not math.isfinite(reward):
            raise UsageError(f"a reward is a finite number, got {reward!r}")
        for step in self.path(node):
            step.visits += 1
            step.value += reward
        self.rollouts += 1

    def uct(self, node: Node, c: float) -> float:
        """``Q + c·sqrt(ln N / n)``: the node's mean reward plus an exploration bonus, ``N`` its parent's visits
        and ``n`` its own; infinite for a node never visited, so every child is tried once."""
        if node.visits == 0:
            return math.inf
        parent = self.nodes[node.parent] if node.parent is not None else node
        return node.mean + c * math.sqrt(math.log(max(parent.visits, 1)) / node.visits)

    def select(self, c: float) -> Node:
        """From the root, the child with the highest UCT at each level (the first among equals), down to a node
        that is not expanded, is terminal, or has only failed children: where the next rollout expands."""
        node = self.root
        while node.children and not node.terminal:
            alive = [self.nodes[i] for i in node.children if self.nodes[i].failed is None]
            if not alive:
                break  # every child failed: expand here again
            node = max(alive, key=lambda child: self.uct(child, c))
        return node

    def frontier(self, depth: int) -> list[Node]:
        """The nodes at ``depth`` that can still be expanded (not terminal, not failed)."""
        return [n for n in self.nodes if n.depth == depth and not n.terminal and n.failed is None]

    def best(self) -> Node | None:
        """The best answer found: the terminal node with the highest score (then mean reward), else the scored
        node with the highest score; ``None`` when nothing was scored."""
        answers = [n for n in self.nodes if n.terminal and n.failed is None]
        pool = answers or [n for n in self.nodes if n.score is not None and n.failed is None and n.id != 0]
        if not pool:
            return None
        return max(pool, key=lambda n: (n.score if n.score is not None else -1.0, n.mean, -n.id))

    # -- JSON -----------------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The tree as JSON data: the root's state whole, every other node's state as the turns it added to its
        parent's (and its state meta)."""
        nodes = []
        for node in self.nodes:
            base = 0 if node.parent is None else len(self.nodes[node.parent].state)
            nodes.append({"parent": node.parent, "thought": node.thought, "score": node.score,
                          "terminal": node.terminal, "failed": node.failed, "visits": node.visits,
                          "value": node.value, "meta": dict(node.state.meta),
                          "turns": [t.to_dict() for t in node.state.turns[base:]]})
        return {"format": FORMAT, "rollouts": self.rollouts, "reflections": list(self.reflections), "nodes": nodes}

    @classmethod
    def from_dict(cls, data: Any) -> Tree:
        """Read back what ``to_dict`` wrote; raises ``UsageError`` naming what is wrong with bad input."""
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise UsageError(f"a search tree is an object with format {FORMAT}, got "
                             f"{data.get('format') if isinstance(data, Mapping) else type(data).__name__!r}")
        raw = data.get("nodes")
        if not isinstance(raw, list) or not raw:
            raise UsageError("a search tree needs a non-empty 'nodes' list")
        tree: Tree | None = None
        for index, item in enumerate(raw):
            where = f"search tree node {index}"
            if not isinstance(item, Mapping):
                raise UsageError(f"{where}: expected an object")
            turns = [Turn.from_dict(t, where=f"{where} turn {i}") for i, t in enumerate(item.get("turns", []))]
            parent = item.get("parent")
            if index == 0:
                if parent is not None:
                    raise UsageError(f"{where}: the root has no parent")
                tree = cls(State(turns, item.get("meta") or {}))
                node = tree.root
            else:
                assert tree is not None
                if not isinstance(parent, int) or isinstance(parent, bool) or not 0 <= parent < index:
                    raise UsageError(f"{where}: parent must be the id of an earlier node, got {parent!r}")
                above = tree.nodes[parent]
                state = above.state
                for turn in turns:
                    state = state.append_turn(turn)
                meta = dict(item.get("meta") or {})
                state = state.with_meta({**{k: None for k in state.meta if k not in meta}, **meta})
                node = Node(index, parent, above.depth + 1, str(item.get("thought", "")), state)
                tree.nodes.append(node)
                above.children.append(index)
            node.thought = str(item.get("thought", ""))
            node.score = _score(item.get("score"))
            node.terminal = bool(item.get("terminal", False))
            failed = item.get("failed")
            node.failed = None if failed is None else str(failed)
            node.visits = int(item.get("visits", 0))
            node.value = float(item.get("value", 0.0))
        assert tree is not None
        tree.rollouts = int(data.get("rollouts", 0))
        tree.reflections = [str(r) for r in data.get("reflections", [])]
        return tree

    def __repr__(self) -> str:
        return f"Tree({len(self.nodes)} nodes, {self.rollouts} rollouts)"


def _score(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise UsageError(f"a score is a number from 0 to 1, or None; got {value!r}")
    return float(value)
