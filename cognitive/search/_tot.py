"""``TreeOfThoughts``: propose several next thoughts, score them, and search the best lines breadth- or
depth-first; the answer is written from the best line found."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from typing import Any

import attrs

from cognitive._pattern import check_prompt, check_start
from cognitive.search._checkpoint import Checkpoints, checkpoint_key
from cognitive.search._thoughts import (ANSWER, PROPOSE, SCORE, Proposal, Scorer, add_thought, answer_from_line,
                                        check_scorer, propose_thoughts, score_line)
from cognitive.search._tree import Node, Tree
from loop import (BranchResult, State, TurnRunner, UsageError, current_scope, fan_out, offer, require, scope,
                  tracing)
from loop.checks import positive_int
from loop.errors import BudgetExhausted

SEARCHES = ("bfs", "dfs")
WIDTH = 8
"""The most nodes a breadth-first level keeps (the usual width of a tree-of-thoughts frontier)."""
GOAL = 0.9
"""The score at which a final thought ends the search when no ``threshold`` is set."""
PRUNE = 0.5
"""The score below which depth-first search abandons a thought when no ``threshold`` is set."""
FORMAT = 1


@attrs.define
class _Progress:
    """Where a search stands: what a checkpoint holds, and what the outcome reports."""

    tree: Tree
    todo: list[int]  # breadth-first: the next level's frontier; depth-first: the stack (its top last)
    levels: int = 0
    expansions: int = 0
    failures: list[str] = attrs.Factory(list)  # proposing that failed (a node keeps its score)
    stopped: str | None = None
    offered: float | None = None
    resumed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "tree": self.tree.to_dict(), "todo": self.todo, "levels": self.levels,
                "expansions": self.expansions, "failures": self.failures, "stopped": self.stopped}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> _Progress:
        if data.get("format") != FORMAT:
            raise UsageError(f"a TreeOfThoughts checkpoint has format {FORMAT}, got {data.get('format')!r}; "
                             "drop it to start afresh")
        tree = Tree.from_dict(data.get("tree"))
        todo = data.get("todo")
        if not isinstance(todo, list) or not all(isinstance(i, int) and 0 <= i < len(tree) for i in todo):
            raise UsageError(f"a TreeOfThoughts checkpoint's 'todo' lists node ids, got {todo!r}")
        stopped = data.get("stopped")
        return cls(tree, list(todo), int(data.get("levels", 0)), int(data.get("expansions", 0)),
                   [str(f) for f in data.get("failures", [])], None if stopped is None else str(stopped),
                   resumed=True)


class TreeOfThoughts:
    """Tree of thoughts: the model proposes ``breadth`` next thoughts for a line of reasoning, each new line is
    scored from 0 to 1, and a search keeps the promising lines; the answer is written from the best one.

    **Search.** ``search="bfs"`` goes level by level: every node of the frontier proposes at once, every new
    thought is scored at once (``loop.fan_out``, at most ``limit`` branches at a time), and the next frontier
    is the best ``beam`` of the new thoughts that are not final (or, with ``threshold``, all of them scoring at
    least ``threshold``, at most ``WIDTH``). ``search="dfs"`` expands the best thought first, abandons a
    thought scoring below ``threshold`` (``PRUNE`` when unset) and backtracks to the best one left, at most
    ``max_expansions`` times. Either way no line is longer than ``depth`` thoughts, a final thought (one that
    states the answer) is never expanded, and the search stops as soon as a final thought scores at least
    ``threshold`` (``GOAL`` when unset).

    **Scoring.** ``scorer``: a function of the line's state returning 0 to 1 (sync or async), or ``None`` for
    a typed model turn (``cognitive.score_line``). A scorer that raises, or a model that never gives a valid
    rating, fails that thought (``Node.failed``) and the search goes on; proposals that fail are noted and
    that node is not expanded, but keeps its score.

    **Answer.** From the best node (``Tree.best``: the best-scored final thought, else the best-scored
    thought): one system turn with its line of thought (kind ``"search_line"``) and one tool-free answer turn
    (``cognitive.answer_from_line``), so the conversation gains those two turns only; the search itself runs
    in branches. A line that never reached a final thought still answers from the best reasoning found, its
    outcome ``degraded``: the search did not find an answer. When no thought could be scored at all (every
    proposal or score failed, or none was proposed) the answer is written from the question alone, ``degraded``
    too, with the reason. Each time the
    best final thought improves it is offered (``loop.offer``) to an enclosing ``WithBudget``, which answers
    from it if the budget runs out.

    **Checkpoints.** With ``checkpoints``, the search is saved after each level (bfs) or expansion (dfs) under
    ``checkpoint_key(repr(self), state)``; a run on the same conversation picks it up where it stopped, and
    the checkpoint is dropped once the run answers.

    Costs, per expanded node, one proposing call and, with a model scorer, one scoring call per thought it
    proposed, then one answering call. The outcome data holds ``search``, ``levels`` (bfs), ``expansions``,
    ``nodes`` (thoughts proposed), ``failed_nodes`` (thoughts whose scoring failed), ``failed_proposals``,
    ``best_score``, ``confidence`` (the best final thought's score; 0 when no line reached one, read by
    ``Escalation``), ``final`` (whether the answer's line ends in a final thought), ``line`` (its thoughts),
    ``stopped`` (``"goal"``, ``"depth"``, ``"exhausted"``: nothing left to expand, or ``"max_expansions"``) and
    ``resumed`` (whether it went on from a checkpoint).
    """

    __slots__ = ("step", "breadth", "beam", "depth", "search", "scorer", "threshold", "limit", "max_expansions",
                 "checkpoints", "propose_prompt", "score_prompt", "answer_prompt")

    def __init__(self, step: TurnRunner, *, breadth: int = 3, beam: int = 2, depth: int = 3, search: str = "bfs",
                 scorer: Scorer | None = None, threshold: float | None = None, limit: int | None = None,
                 max_expansions: int = 10, checkpoints: Checkpoints | None = None, propose_prompt: str = PROPOSE,
                 score_prompt: str = SCORE, answer_prompt: str = ANSWER) -> None:
        require(step, TurnRunner, "TreeOfThoughts", "a TurnRunner (something with turn(state)), such as a loop.Step")
        self.step = step
        self.breadth = positive_int("breadth", breadth)
        self.beam = positive_int("beam", beam)
        if beam > WIDTH:
            raise UsageError(f"beam is at most {WIDTH} (the widest frontier a level keeps), got {beam}")
        self.depth = positive_int("depth", depth)
        if search not in SEARCHES:
            raise UsageError(f"search must be one of {', '.join(map(repr, SEARCHES))}, got {search!r}")
        self.search = search
        self.scorer = check_scorer(scorer)
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                      or not 0 <= threshold <= 1):
            raise UsageError(f"threshold is a score from 0 to 1, or None; got {threshold!r}")
        self.threshold = None if threshold is None else float(threshold)
        self.limit = positive_int("limit", limit, optional=True)
        self.max_expansions = positive_int("max_expansions", max_expansions)
        if checkpoints is not None:
            require(checkpoints, Checkpoints, "TreeOfThoughts' checkpoints", "a Checkpoints store (save, load, "
                    "drop), such as cognitive.MemoryCheckpoints, or None")
        self.checkpoints = checkpoints
        self.propose_prompt = check_prompt("propose_prompt", propose_prompt, "k")
        self.score_prompt = check_prompt("score_prompt", score_prompt)
        self.answer_prompt = check_prompt("answer_prompt", answer_prompt)

    async def run(self, state: State) -> State:
        check_start(state, "TreeOfThoughts")
        with scope("TreeOfThoughts"), tracing.span("invoke_agent TreeOfThoughts", {
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "TreeOfThoughts",
                "tree_of_thoughts.search": self.search}) as span:
            key = None if self.checkpoints is None else checkpoint_key(repr(self), state)
            progress = await self._load(key, state)
            self._offer(progress)
            if self.search == "bfs":
                await self._bfs(progress, key)
            else:
                await self._dfs(progress, key)
            tree = progress.tree
            best = tree.best()
            span.set_attribute("tree_of_thoughts.nodes", len(tree) - 1)
            line = [] if best is None else [n.thought for n in tree.path(best)[1:]]
            data = {"search": self.search, **({"levels": progress.levels} if self.search == "bfs" else {}),
                    "expansions": progress.expansions, "nodes": len(tree) - 1,
                    "failed_nodes": sum(n.failed is not None for n in tree), "failed_proposals": len(progress.failures),
                    "best_score": None if best is None else best.score, "final": best is not None and best.terminal,
                    "line": line, "stopped": progress.stopped, "resumed": progress.resumed,
                    "confidence": best.score if best is not None and best.terminal and best.score is not None else 0.0}
            if best is not None and best.score is not None:
                span.set_attribute("tree_of_thoughts.best_score", best.score)
            answered = await answer_from_line(self.step, state, state if best is None else best.state,
                                              prompt=self.answer_prompt)
            if self.checkpoints is not None and key is not None:
                await self.checkpoints.drop(key)
            if best is None:
                return answered.with_outcome("degraded", f"no thought could be scored ({_why(progress)}); the "
                                             "answer was written from the question alone", data=data)
            if not best.terminal:
                return answered.with_outcome("degraded", f"no line of thought reached a final answer (stopped: "
                                             f"{progress.stopped}); the answer was written from the best line",
                                             data=data)
            return answered.with_outcome(data=data)

    # -- the searches -----------------------------------------------------------------------------------------

    async def _bfs(self, progress: _Progress, key: str | None) -> None:
        tree = progress.tree
        goal = GOAL if self.threshold is None else self.threshold
        while progress.stopped is None:
            children = await self._expand(progress, [tree.nodes[i] for i in progress.todo])
            progress.levels += 1
            alive = sorted((c for c in children if _alive(c) and not c.terminal), key=_rank)
            if self.threshold is None:
                progress.todo = [c.id for c in alive[:self.beam]]
            else:
                progress.todo = [c.id for c in alive if c.score is not None and c.score >= self.threshold][:WIDTH]
            if any(c.terminal and _alive(c) and c.score is not None and c.score >= goal for c in children):
                progress.stopped = "goal"
            elif progress.levels >= self.depth:
                progress.stopped = "depth"
            elif not progress.todo:
                progress.stopped = "exhausted"
            await self._finished_unit(progress, key)

    async def _dfs(self, progress: _Progress, key: str | None) -> None:
        tree = progress.tree
        goal = GOAL if self.threshold is None else self.threshold
        prune = PRUNE if self.threshold is None else self.threshold
        while progress.stopped is None:
            if not progress.todo:
                progress.stopped = "exhausted"
                break
            if progress.expansions >= self.max_expansions:
                progress.stopped = "max_expansions"
                break
            children = await self._expand(progress, [tree.nodes[progress.todo[-1]]])
            progress.todo.pop()
            if any(c.terminal and _alive(c) and c.score is not None and c.score >= goal for c in children):
                progress.stopped = "goal"
            else:
                kept = [c for c in children if _alive(c) and not c.terminal and c.depth < self.depth
                        and c.score is not None and c.score >= prune]
                progress.todo.extend(c.id for c in sorted(kept, key=_rank, reverse=True))  # the best on top
            await self._finished_unit(progress, key)

    async def _expand(self, progress: _Progress, nodes: list[Node]) -> list[Node]:
        """Each of ``nodes`` proposes its next thoughts, then every new thought is scored, all concurrently;
        the new nodes, in the order they were proposed."""
        proposed: dict[int, tuple[Proposal, ...]] = {}

        async def propose(node: Node) -> State:
            proposed[node.id] = await propose_thoughts(self.step, node.state, self.breadth,
                                                       prompt=self.propose_prompt)
            return node.state

        results = await fan_out([functools.partial(propose, n) for n in nodes], limit=self.limit, name="propose")
        _reraise(results)
        progress.expansions += len(nodes)
        tree = progress.tree
        children: list[Node] = []
        for node, result in zip(nodes, results):
            if result.error is not None:
                progress.failures.append(f"proposing from node {node.id} failed: {_error(result.error)}")
            elif not proposed.get(node.id):
                progress.failures.append(f"node {node.id}: the model proposed no thought")
            for proposal in proposed.get(node.id, ()):
                state = add_thought(node.state, proposal)
                children.append(tree.add(node, proposal.text, state, terminal=proposal.final))
        scores: dict[int, float] = {}

        async def score(node: Node) -> State:
            scores[node.id] = await score_line(self.step, self.scorer, node.state, prompt=self.score_prompt)
            return node.state

        results = await fan_out([functools.partial(score, c) for c in children], limit=self.limit, name="score")
        _reraise(results)
        for child, result in zip(children, results):
            if result.error is not None:
                child.failed = f"scoring failed: {_error(result.error)}"
            else:
                child.score = scores[child.id]
        return children

    async def _finished_unit(self, progress: _Progress, key: str | None) -> None:
        self._offer(progress)
        if self.checkpoints is not None and key is not None:
            await self.checkpoints.save(key, progress.to_dict())

    def _offer(self, progress: _Progress) -> None:
        """Offer the best final thought to the budgets around the run, when it beats the one offered before."""
        best = progress.tree.best()
        if best is None or not best.terminal or best.score is None:
            return
        if progress.offered is None or best.score > progress.offered:
            offer(best.state, best.score)
            progress.offered = best.score

    async def _load(self, key: str | None, state: State) -> _Progress:
        if self.checkpoints is not None and key is not None:
            saved = await self.checkpoints.load(key)
            if saved is not None:
                return _Progress.from_dict(saved)
        return _Progress(Tree(state), [0])

    def __repr__(self) -> str:
        # No step and no store: a checkpoint key is made from this, so another process's run of the same
        # search on the same conversation must find it.
        settings = [f"search={self.search!r}", f"breadth={self.breadth}", f"beam={self.beam}", f"depth={self.depth}"]
        if self.threshold is not None:
            settings.append(f"threshold={self.threshold:g}")
        if self.search == "dfs":
            settings.append(f"max_expansions={self.max_expansions}")
        if self.scorer is not None:
            settings.append(f"scorer={getattr(self.scorer, '__qualname__', type(self.scorer).__name__)}")
        prompts = (self.propose_prompt, self.score_prompt, self.answer_prompt)
        if prompts != (PROPOSE, SCORE, ANSWER):
            settings.append(f"prompts={hashlib.sha256(chr(0).join(prompts).encode()).hexdigest()[:8]}")
        return f"TreeOfThoughts({', '.join(settings)})"


def _alive(node: Node) -> bool:
    return node.failed is None and node.score is not None


def _rank(node: Node) -> tuple[float, int]:
    """Best first: the higher score, then the earlier node."""
    return (-(node.score or 0.0), node.id)


def _error(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"


def _why(progress: _Progress) -> str:
    failed = [n.failed for n in progress.tree if n.failed is not None]
    if failed:
        return f"{len(failed)} thought{'s' if len(failed) > 1 else ''} failed, the first: {failed[0]}"
    if progress.failures:
        return progress.failures[0]
    return "no thought was proposed"


def _reraise(results: tuple[BranchResult, ...]) -> None:
    """Raise what the search cannot go on from: a budget of the caller running out, or misuse (a scorer that
    returned something other than a score)."""
    budgets = current_scope().budgets
    for result in results:
        error = result.error
        if isinstance(error, BudgetExhausted) and any(error.spend is spend for spend in budgets):
            raise error
        if isinstance(error, UsageError):
            raise error
