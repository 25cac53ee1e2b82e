"""The operations a ``GraphOfThoughts`` runs, as small values the user declares, and the graph of thoughts they
build.

An operation works on the *current thoughts* (at first, the question alone) and leaves the next current ones:
``Generate`` grows new thoughts from each, ``Score`` rates them, ``KeepBest`` prunes, ``Aggregate`` merges them
into thoughts with several parents, ``Refine`` improves each. The graph keeps every thought ever made, with its
parents' ids, so the thought a run answers from has its whole provenance.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

import attrs

from loop import State, Turn, UsageError
from loop.checks import field_check, positive_int

FORMAT = 1
MAX_WIDTH = 64
"""The most current thoughts an operation list may lead to: a wider graph pays a call per thought per step."""
MAX_OPERATIONS = 32

_count = field_check(positive_int)


class Operation:
    """One step of a graph of thoughts: ``Generate``, ``Score``, ``KeepBest``, ``Aggregate`` or ``Refine``."""

    __slots__ = ()


@attrs.frozen
class Generate(Operation):
    """From each current thought, up to ``k`` new thoughts that go on from it (one typed proposal call per
    current thought); the new thoughts are the current ones after it."""

    k: int = attrs.field(default=3, validator=_count)


@attrs.frozen
class Score(Operation):
    """Scores each current thought not scored yet (the ``scorer`` function, or one typed rating call each). A
    thought whose scoring raises is marked failed, with the reason, and leaves the current thoughts."""


@attrs.frozen
class KeepBest(Operation):
    """Keeps the ``n`` current thoughts with the highest scores (ties: the earlier thought); needs them scored,
    so a ``Score()`` comes before it."""

    n: int = attrs.field(default=1, validator=_count)


@attrs.frozen
class Aggregate(Operation):
    """Merges the current thoughts into up to ``k`` new thoughts, each with every merged thought as a parent
    (one typed proposal call). With fewer than two current thoughts there is nothing to merge: they stay."""

    k: int = attrs.field(default=1, validator=_count)


@attrs.frozen
class Refine(Operation):
    """Improves each current thought ``rounds`` times; each improved version is a child of the one before and
    takes its place among the current thoughts (one typed proposal call per thought per round). A round that
    gives nothing leaves the thought as it was."""

    rounds: int = attrs.field(default=1, validator=_count)


OPERATIONS: tuple[type, ...] = (Generate, Score, KeepBest, Aggregate, Refine)
DEFAULT_OPERATIONS: tuple[Operation, ...] = (Generate(3), Score(), KeepBest(2), Aggregate(1), Refine(1), Score())


def check_operations(operations: Any) -> tuple[Operation, ...]:
    """``operations`` as a tuple, if they make a graph that can run: ``DEFAULT_OPERATIONS`` for ``None``.

    The first operation is a ``Generate`` (the question is no thought to score, merge or refine), each
    ``KeepBest`` follows a ``Score()`` with no new thoughts between, each ``Aggregate`` can see two thoughts or
    more, a ``Score()`` follows the last operation that makes thoughts (the answer is chosen by score), and no
    operation may leave more than ``MAX_WIDTH`` current thoughts. Raises ``UsageError`` naming the first problem
    and its fix."""
    if operations is None:
        return DEFAULT_OPERATIONS
    if isinstance(operations, (str, bytes, Mapping)) or not isinstance(operations, Iterable):
        raise UsageError(f"operations must be a list of operations such as [Generate(3), Score(), KeepBest(1)], "
                         f"got {operations!r}")
    ops = tuple(operations)
    if not ops:
        raise UsageError("operations must not be empty: a graph needs at least [Generate(k), Score()]")
    if len(ops) > MAX_OPERATIONS:
        raise UsageError(f"operations holds {len(ops)} operations; at most {MAX_OPERATIONS} are allowed")
    for index, op in enumerate(ops):
        if isinstance(op, type) and op in OPERATIONS:
            raise UsageError(f"operation {index + 1} is the class {op.__name__}; give a value: {op.__name__}()")
        if not isinstance(op, OPERATIONS):  # the five kinds only: each runs its own way
            raise UsageError(f"operation {index + 1} is {op!r}, not one of Generate, Score, KeepBest, Aggregate, "
                             "Refine")
    if not isinstance(ops[0], Generate):
        raise UsageError(f"the first operation must be Generate(k), got {ops[0]!r}: the graph starts from the "
                         "question, which is no thought to score, merge or refine")
    scored = False
    width = 1
    for index, op in enumerate(ops):
        where = f"operation {index + 1} ({op!r})"
        if isinstance(op, KeepBest) and not scored:
            raise UsageError(f"{where} keeps the best of thoughts that are not scored: put Score() before it")
        if isinstance(op, Aggregate) and width < 2:
            raise UsageError(f"{where} can only ever see one thought, so it has nothing to merge: generate more "
                             "thoughts before it (or keep more with KeepBest)")
        scored = isinstance(op, (Score, KeepBest))
        width = _width(op, width)
        if width > MAX_WIDTH:
            raise UsageError(f"{where} could leave {width} current thoughts (at most {MAX_WIDTH}): prune with "
                             "KeepBest(n) before it, or generate fewer")
    if not scored:
        raise UsageError(f"the thoughts the operations end with are never scored, so none could be chosen: end "
                         f"them with Score(), as in [..., {ops[-1]!r}, Score()]")
    return ops


def _width(op: Operation, width: int) -> int:
    """The most current thoughts ``op`` can leave from ``width``."""
    if isinstance(op, Generate):
        return width * op.k
    if isinstance(op, KeepBest):
        return min(width, op.n)
    if isinstance(op, Aggregate):
        return op.k if width >= 2 else width
    return width


def max_calls(operations: Sequence[Operation], *, model_scores: bool) -> int:
    """The most model calls ``operations`` can make, the answer included (each typed answer may be asked once
    more when the model's first is invalid)."""
    calls, width = 1, 1
    for op in operations:
        if isinstance(op, Generate):
            calls += width
        elif isinstance(op, Score) and model_scores:
            calls += width
        elif isinstance(op, Aggregate) and width >= 2:
            calls += 1
        elif isinstance(op, Refine):
            calls += width * op.rounds
        width = _width(op, width)
    return calls


@attrs.define(eq=False)
class GraphNode:
    """One node of a graph of thoughts: its ``id`` (its index; 0 is the question), its ``parents``' ids (several
    for a merged thought), the index of the ``operation`` that made it (``None`` for the question), its
    ``thought`` text, the ``state`` ending in it, its ``score`` (0 to 1, ``None`` when not scored) and why it
    ``failed`` (``None`` when it did not)."""

    id: int
    parents: tuple[int, ...]
    operation: int | None
    thought: str
    state: State
    score: float | None = None
    failed: str | None = None


class ThoughtGraph:
    """The thoughts of one run, made by operations; each thought's state extends its first parent's, or (a
    merged thought's) the question's. Written as JSON with each thought's turns stored once."""

    __slots__ = ("nodes",)

    def __init__(self, root_state: State) -> None:
        self.nodes: list[GraphNode] = [GraphNode(0, (), None, "", root_state)]

    @property
    def root(self) -> GraphNode:
        return self.nodes[0]

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[GraphNode]:
        return iter(self.nodes)

    def add(self, parents: Sequence[int], operation: int, thought: str, state: State) -> GraphNode:
        node = GraphNode(len(self.nodes), tuple(parents), operation, thought, state)
        self.nodes.append(node)
        return node

    def ancestors(self, node: GraphNode) -> list[int]:
        """The ids of every thought ``node`` descends from through any parent (the question, 0, left out)."""
        seen: set[int] = set()
        todo = list(node.parents)
        while todo:
            found = todo.pop()
            if found not in seen and found != 0:
                seen.add(found)
                todo.extend(self.nodes[found].parents)
        return sorted(seen)

    def best(self) -> GraphNode | None:
        """The scored thought with the highest score that did not fail (among equals the later one: it builds on
        more work); ``None`` when no thought was scored."""
        pool = [n for n in self.nodes if n.score is not None and n.failed is None and n.id != 0]
        return max(pool, key=lambda n: (n.score, n.id)) if pool else None

    def _base(self, node: GraphNode) -> GraphNode:
        """The thought whose state ``node``'s extends, as stored: its first parent, else the question."""
        if node.parents:
            first = self.nodes[node.parents[0]]
            if node.state.common_prefix(first.state) == len(first.state):
                return first
        return self.root

    def to_dict(self) -> dict[str, Any]:
        """The graph as JSON data. The question's state is not kept (a run reads it back onto the conversation
        it resumes); every other thought keeps the turns its state adds to its base's (``from``), and its state
        meta where that differs."""
        nodes: list[dict[str, Any]] = []
        for node in self.nodes[1:]:
            base = self._base(node)
            item: dict[str, Any] = {"parents": list(node.parents), "operation": node.operation,
                                    "thought": node.thought, "score": node.score, "failed": node.failed,
                                    "from": base.id, "turns": [t.to_dict() for t in node.state.turns[len(base.state):]]}
            if node.state.meta != base.state.meta:
                item["meta"] = dict(node.state.meta)
            nodes.append(item)
        return {"format": FORMAT, "nodes": nodes}

    @classmethod
    def from_dict(cls, data: Any, root_state: State) -> ThoughtGraph:
        """Read back what ``to_dict`` wrote, on ``root_state``; raises ``UsageError`` naming what is wrong."""
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise UsageError(f"a graph of thoughts is an object with format {FORMAT}, got "
                             f"{data.get('format') if isinstance(data, Mapping) else type(data).__name__!r}")
        raw = data.get("nodes")
        if not isinstance(raw, list):
            raise UsageError("a graph of thoughts needs a 'nodes' list")
        graph = cls(root_state)
        for index, item in enumerate(raw, 1):
            where = f"graph node {index}"
            if not isinstance(item, Mapping):
                raise UsageError(f"{where}: expected an object")
            parents = item.get("parents")
            base = item.get("from")
            if (not isinstance(parents, list) or not parents or not all(_earlier(p, index) for p in parents)
                    or not _earlier(base, index)):
                raise UsageError(f"{where}: 'parents' and 'from' must be ids of earlier nodes, got {parents!r} and "
                                 f"{base!r}")
            operation = item.get("operation")
            if not isinstance(operation, int) or isinstance(operation, bool) or operation < 0:
                raise UsageError(f"{where}: 'operation' must be an operation's index, got {operation!r}")
            turns = item.get("turns")
            if not isinstance(turns, list):
                raise UsageError(f"{where}: 'turns' must be a list")
            state = graph.nodes[cast(int, base)].state
            for number, turn in enumerate(turns):
                state = state.append_turn(Turn.from_dict(turn, where=f"{where} turn {number}"))
            meta = item.get("meta")
            if isinstance(meta, Mapping):
                state = state.with_meta({**{k: None for k in state.meta if k not in meta}, **meta})
            node = graph.add(parents, operation, str(item.get("thought", "")), state)
            node.score = _score(item.get("score"), where)
            failed = item.get("failed")
            node.failed = None if failed is None else str(failed)
        return graph

    def __repr__(self) -> str:
        return f"ThoughtGraph({len(self.nodes)} nodes)"


def _earlier(value: Any, index: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < index


def _score(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise UsageError(f"{where}: a score is a number from 0 to 1, or None; got {value!r}")
    return float(value)
