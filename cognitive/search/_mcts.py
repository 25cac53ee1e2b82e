"""``MCTS``: Monte Carlo tree search over thoughts, as in LATS (Zhou et al.) and RAP (Hao et al.): select a
line by UCT, expand it, simulate it to an answer, back the reward up the whole path, and learn from the rollouts
that failed."""

from __future__ import annotations

import hashlib
import inspect
import math
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from cognitive._kinds import PatternKind
from cognitive._pattern import check_prompt, check_start
from cognitive.everyday._reflexion import Reflection
from cognitive.search._checkpoint import Checkpoints, checkpoint_key
from cognitive.search._thoughts import (ANSWER, PROPOSE, SCORE, Proposal, Scorer, add_thought, answer_from_line,
                                        check_scorer, propose_thoughts, score_line)
from cognitive.search._tree import Node, Tree
from loop import (Role, State, Text, TurnRunner, UsageError, add_turn, ask, branch, fan_out, offer, require, scope,
                  tracing)
from loop.checks import positive_int
from loop.errors import BudgetExhausted, VerificationFailed

REFLECT = """\
The line of reasoning above was rated {score} out of 1: it is unlikely to reach a correct answer. In one \
sentence, say what went wrong and what to try instead, as a lesson for the next attempt."""

_FORMAT = 1
_MAX_LESSON = 300
_MAX_REASON = 200


class MCTS:
    """Monte Carlo tree search over lines of thought, for ``iterations`` rollouts. Each rollout:

    **Select.** From the root, the child with the highest UCT (``Q + c·sqrt(ln N / n)``; an unvisited child
    first) at each level, down to a node that is not expanded (``Tree.select``). **Expand.** One proposal turn
    asks for ``children`` next thoughts (``propose_thoughts``, shown the lessons of failed rollouts); each
    becomes a child and is scored (``score_line``: ``scorer(state)`` when given, else a typed rating turn),
    concurrently, at most ``limit`` at once (``None``: all), when the model or an ``async`` scorer scores (a
    plain function scores them one after another: it holds the event loop anyway). **Simulate.** From the
    best-scored new child, one proposal turn per step down to a final thought or ``max_depth``, going on from
    the first thought proposed. The simulation's thoughts join the tree, all of each step's proposals (only
    the leaf is scored), so every node is either unexpanded or fully expanded and a later rollout can branch
    anywhere along the line; its leaf is scored. A node that cannot grow (a final thought, or at
    ``max_depth``) is scored if it is not yet and counts as a rollout of its own. **Backpropagate.** The
    leaf's score is the reward, and every node from the leaf to the root gains a visit and the reward.
    **Reflect.** When ``reflect`` and a rollout's new score is below ``reflect_below`` (default 0.5: the
    rollout failed), one typed turn writes a one-sentence lesson (``Reflection``); the newest ``memory_size``
    lessons are shown to every later proposal. A node that failed to be scored gets no lesson: it says
    nothing about the reasoning.

    A scorer that raises (or a model that never gives a valid rating) marks that node failed, with reward 0;
    selection passes failed nodes over, and the search goes on. A proposal turn that never gives valid
    thoughts ends that expansion with reward 0 (or the simulation where it is). The search stops early once a
    final thought scores at least ``stop_at`` (default 0.9; ``None``: never). Whenever the best final thought
    improves, its line is offered to the enclosing budgets (``loop.offer``), so a ``WithBudget`` that runs out
    answers from it.

    All search work runs in branches (``rollout 1``, ``rollout 2``...); the conversation gets one system turn
    with the chosen line of thought (the best final thought by score, else the best-scored thought) and the
    answer (``answer_from_line``), so it only extends the state the run was given. With ``checkpoints``, the
    tree and the rollout count are saved after every finished rollout under ``checkpoint_key(repr(self),
    state)``; a run on the same conversation with the same settings (in this process or another) goes on at
    the next rollout, and a run that answers drops its checkpoint.

    Cost in model calls, per rollout: one proposal to expand, one rating per new child (none with a
    ``scorer``), one proposal per simulated step (at most ``max_depth`` in all), one rating of the simulated
    leaf, and one reflection when it failed; a rejected typed answer is asked once more. Then one answer.

    The outcome data (under the run path): ``rollouts``, ``nodes``, ``best_score``, ``confidence`` (the best
    final thought's score; 0 when no line reached one, read by ``Escalation``), ``final`` (whether the
    answer line ends in a final thought), ``line`` (its thoughts), ``stopped`` (``"score"`` or
    ``"iterations"``), ``resumed_at`` (when a checkpoint was loaded, the rollout the run went on from; else
    ``None``), ``failed_nodes``, ``failed_proposals`` and ``reflections``. The outcome is ``degraded`` when
    every line failed (the answer is written from the question alone) or no final thought was found.
    """

    __slots__ = ("step", "iterations", "children", "c", "max_depth", "scorer", "reflect", "memory_size", "stop_at",
                 "reflect_below", "limit", "checkpoints", "propose_prompt", "score_prompt", "reflect_prompt",
                 "answer_prompt", "concurrent")

    def __init__(self, step: TurnRunner, *, iterations: int = 16, children: int = 3, c: float = 1.4,
                 max_depth: int = 4, scorer: Scorer | None = None, reflect: bool = True, memory_size: int = 5,
                 stop_at: float | None = 0.9, reflect_below: float = 0.5, limit: int | None = None,
                 checkpoints: Checkpoints | None = None, propose_prompt: str = PROPOSE, score_prompt: str = SCORE,
                 reflect_prompt: str = REFLECT, answer_prompt: str = ANSWER) -> None:
        require(step, TurnRunner, "MCTS", "a TurnRunner (something with turn(state)), such as a loop.Step")
        self.step = step
        self.iterations = positive_int("iterations", iterations)
        self.children = positive_int("children", children)
        self.c = _number("c", c, 0.0, math.inf)
        self.max_depth = positive_int("max_depth", max_depth)
        self.scorer = check_scorer(scorer)
        self.concurrent = scorer is None or inspect.iscoroutinefunction(scorer) or not (
            inspect.isfunction(scorer) or inspect.ismethod(scorer) or inspect.isbuiltin(scorer))
        if not isinstance(reflect, bool):
            raise UsageError(f"reflect must be True or False, got {reflect!r}")
        self.reflect = reflect
        self.memory_size = positive_int("memory_size", memory_size)
        self.stop_at = None if stop_at is None else _number("stop_at", stop_at, 0.0, 1.0, low_open=True)
        self.reflect_below = _number("reflect_below", reflect_below, 0.0, 1.0)
        self.limit = positive_int("limit", limit, optional=True)
        if checkpoints is not None:
            require(checkpoints, Checkpoints, "MCTS's checkpoints", "a Checkpoints store (save, load, drop) or None")
        self.checkpoints = checkpoints
        self.propose_prompt = check_prompt("propose_prompt", propose_prompt, "k")
        self.score_prompt = check_prompt("score_prompt", score_prompt)
        self.reflect_prompt = check_prompt("reflect_prompt", reflect_prompt, "score")
        self.answer_prompt = check_prompt("answer_prompt", answer_prompt)

    async def run(self, state: State) -> State:
        check_start(state, "MCTS")
        with scope("MCTS"), tracing.span("invoke_agent MCTS", {"gen_ai.operation.name": "invoke_agent",
                                                               "gen_ai.agent.name": "MCTS"}) as span:
            checkpoints = self.checkpoints
            key = "" if checkpoints is None else checkpoint_key(repr(self), state)
            search, done = (_Search(self, Tree(state)), 0) if checkpoints is None else \
                await self._open(checkpoints, key, state)
            resumed_at = done + 1 if done else None  # a checkpoint is saved after a rollout: done > 0 when loaded
            for number in range(done + 1, self.iterations + 1):
                if search.solved:
                    break
                with branch(f"rollout {number}"):
                    await search.rollout()
                if checkpoints is not None:
                    await checkpoints.save(key, search.saved(number))
            tree = search.tree
            best = tree.best()
            answer = await answer_from_line(self.step, state, state if best is None else best.state,
                                            prompt=self.answer_prompt)
            if checkpoints is not None:
                await checkpoints.drop(key)
            span.set_attribute("mcts.rollouts", tree.rollouts)
            span.set_attribute("mcts.nodes", len(tree))
            data = search.report(best, resumed_at)
            if best is None:
                failed = [n.failed for n in tree if n.failed is not None]
                why = f"; the first failure: {failed[0]}" if failed else ""
                return answer.with_outcome("degraded", f"MCTS: every line failed in {tree.rollouts} rollouts "
                                           f"({len(failed)} thoughts could not be scored, {search.failed_proposals} "
                                           f"proposals gave no valid thought){why}; the answer was written "
                                           "without a line of thought", data=data)
            if not best.terminal:
                return answer.with_outcome("degraded", f"MCTS found no final thought in {tree.rollouts} rollouts "
                                           f"(max_depth={self.max_depth}); the answer was written from the best "
                                           f"line found, scored {best.score:.2f}", data=data)
            return answer.with_outcome(data=data)

    async def _open(self, checkpoints: Checkpoints, key: str, start: State) -> tuple[_Search, int]:
        """The search to go on with and how many rollouts it has finished: a checkpoint's, or a new one."""
        saved = await checkpoints.load(key)
        if saved is None:
            return _Search(self, Tree(start)), 0
        where = f"the MCTS checkpoint {key!r}"
        plain = saved if isinstance(saved, Mapping) else {}
        done, failed = plain.get("iteration"), plain.get("failed_proposals")
        if (plain.get("format") != _FORMAT or not isinstance(done, int) or not isinstance(failed, int)
                or not 0 <= done <= self.iterations or failed < 0):
            raise UsageError(f"{where} is not one this search wrote (format {_FORMAT}, iteration 0 to "
                             f"{self.iterations}, failed_proposals); drop it to start afresh")
        try:
            tree = Tree.from_dict(saved.get("tree"))
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}; drop it to start afresh") from None
        if len(tree.root.state) != len(start):
            raise UsageError(f"{where} holds a search of another conversation; drop it to start afresh")
        return _Search(self, tree, failed), done

    def __repr__(self) -> str:
        # The checkpoint key: the settings that change the search, nothing that differs between processes.
        prompts = (self.propose_prompt, self.score_prompt, self.reflect_prompt, self.answer_prompt)
        custom = "" if prompts == (PROPOSE, SCORE, REFLECT, ANSWER) else \
            f", prompts={hashlib.sha256(chr(0).join(prompts).encode()).hexdigest()[:12]}"
        return (f"MCTS(iterations={self.iterations}, children={self.children}, c={self.c:g}, "
                f"max_depth={self.max_depth}, scorer={_name(self.scorer)}, reflect={self.reflect}, "
                f"memory_size={self.memory_size}, stop_at={self.stop_at}, reflect_below={self.reflect_below:g}"
                f"{custom})")


class _Search:
    """One run's search: its tree, the best final thought so far, the failed proposals. Made per run."""

    __slots__ = ("mcts", "tree", "failed_proposals", "best")

    def __init__(self, mcts: MCTS, tree: Tree, failed_proposals: int = 0) -> None:
        self.mcts = mcts
        self.tree = tree
        self.failed_proposals = failed_proposals
        self.best: Node | None = None
        for node in tree:  # a tree read back from a checkpoint: offer what it had found
            self._consider(node)

    @property
    def solved(self) -> bool:
        """Whether a final thought scored at least ``stop_at``."""
        stop_at, best = self.mcts.stop_at, self.best
        return stop_at is not None and best is not None and best.score is not None and best.score >= stop_at

    async def rollout(self) -> None:
        """One rollout: select, expand and simulate (or score a node that cannot grow), back the reward up the
        whole path, and reflect when it failed."""
        mcts, tree = self.mcts, self.tree
        node = tree.select(mcts.c)
        if node.terminal or node.depth >= mcts.max_depth:
            leaf: Node | None = node
            fresh = node.score is None
            if fresh:
                await self._rate([node])
        else:
            leaf = await self._expand(node)
            fresh = True
        if leaf is None:  # nothing to go on from: the expansion failed
            tree.backpropagate(node, 0.0)
            return
        reward = 0.0 if leaf.failed is not None or leaf.score is None else leaf.score
        tree.backpropagate(leaf, reward)
        if fresh and mcts.reflect and leaf.failed is None and reward < mcts.reflect_below:
            await self._reflect(leaf)

    async def _expand(self, node: Node) -> Node | None:
        """``node``'s new children, scored, and a simulation from the best of them: the leaf it reached
        (scored, or failed), or ``None`` when no child could be proposed or scored."""
        mcts = self.mcts
        added = await self._grow(node)
        if not added:
            return None
        await self._rate(added)
        alive = [n for n in added if n.failed is None]
        if not alive:
            return None
        line = max(alive, key=lambda n: n.score or 0.0)  # the first among equals
        while not line.terminal and line.depth < mcts.max_depth:
            grown = await self._grow(line)
            if not grown:
                break
            line = grown[0]
        if line.score is None:
            await self._rate([line])
        return line

    async def _grow(self, node: Node) -> list[Node]:
        """``node``'s children as one proposal turn gives them; none when it gives no valid thought."""
        mcts = self.mcts
        try:
            proposals: Sequence[Proposal] = await propose_thoughts(
                mcts.step, node.state, mcts.children, prompt=mcts.propose_prompt,
                reflections=tuple(self.tree.reflections))
        except VerificationFailed:
            proposals = ()
        if not proposals:
            self.failed_proposals += 1
        add = self.tree.add
        return [add(node, p.text, add_thought(node.state, p), terminal=p.final) for p in proposals]

    async def _rate(self, nodes: Sequence[Node]) -> None:
        """Score each node, or mark it failed with the reason: concurrently when the model or an async scorer
        scores several; one after another for a plain function, which holds the event loop while it runs."""
        if len(nodes) == 1 or not self.mcts.concurrent:
            for node in nodes:
                self._scored(node, await self._score(node.state))
            return
        scores: dict[int, float | str] = {}

        async def job(index: int, node: Node) -> State:
            scores[index] = await self._score(node.state)
            return node.state

        results = await fan_out([partial(job, i, n) for i, n in enumerate(nodes)], limit=self.mcts.limit,
                                name="score")
        for result in results:
            if result.error is not None:
                raise result.error
        for index, node in enumerate(nodes):  # in order, so the best offered does not depend on timing
            self._scored(node, scores[index])

    async def _score(self, state: State) -> float | str:
        """The line's score, or why it could not be scored. A user's scorer that raises, and a model that never
        gives a valid rating, fail the node; a budget running out, or the model itself failing, is raised."""
        mcts = self.mcts
        try:
            return await score_line(mcts.step, mcts.scorer, state, prompt=mcts.score_prompt)
        except BudgetExhausted:
            raise
        except VerificationFailed as exc:
            return _clip(f"no valid rating: {exc}")
        except Exception as exc:
            if mcts.scorer is None:
                raise
            return _clip(f"the scorer raised {type(exc).__name__}: {exc}")

    def _scored(self, node: Node, score: float | str) -> None:
        if isinstance(score, str):
            node.failed = score
        else:
            node.score = score
            self._consider(node)

    def _consider(self, node: Node) -> None:
        """Keep ``node`` as the best final thought, and offer its line, when it beats the best so far."""
        score = node.score
        if node.terminal and node.failed is None and score is not None and (
                self.best is None or self.best.score is None or score > self.best.score):
            self.best = node
            offer(node.state, score)

    async def _reflect(self, leaf: Node) -> None:
        """Add a lesson from the failed line ``leaf`` ends to the tree's reflections (none when the model gives
        none in the form asked for)."""
        mcts, reflections = self.mcts, self.tree.reflections
        text = mcts.reflect_prompt.format(score=f"{leaf.score or 0.0:.2f}")
        asking = await add_turn(mcts.step, leaf.state, Role.SYSTEM, Text(text), meta={"kind": PatternKind.REFLECT})
        try:
            asked = await ask(mcts.step, asking, Reflection, max_retries=1)
        except VerificationFailed:
            return
        lesson = " ".join(asked.value.lesson.split())
        if lesson:
            lesson = lesson if len(lesson) <= _MAX_LESSON else lesson[:_MAX_LESSON] + "…"
            if lesson in reflections:  # a lesson learned again is kept once, as the newest
                reflections.remove(lesson)
            reflections.append(lesson)
            del reflections[:-mcts.memory_size]

    def saved(self, iteration: int) -> dict[str, Any]:
        """The checkpoint after ``iteration`` finished rollouts."""
        return {"format": _FORMAT, "tree": self.tree.to_dict(), "iteration": iteration,
                "failed_proposals": self.failed_proposals}

    def report(self, best: Node | None, resumed_at: int | None) -> dict[str, Any]:
        tree = self.tree
        line = [] if best is None else [n.thought for n in tree.path(best)[1:]]
        return {"rollouts": tree.rollouts, "nodes": len(tree), "best_score": None if best is None else best.score,
                "final": best is not None and best.terminal, "line": line,
                "stopped": "score" if self.solved else "iterations", "resumed_at": resumed_at,
                "failed_nodes": sum(n.failed is not None for n in tree), "failed_proposals": self.failed_proposals,
                "reflections": list(tree.reflections),
                "confidence": best.score if best is not None and best.terminal and best.score is not None else 0.0}


def _number(name: str, value: Any, low: float, high: float, *, low_open: bool = False) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value > high
            or value < low or (low_open and value == low) or math.isinf(value)):
        bounds = f"{'above' if low_open else 'from'} {low:g}" + ("" if math.isinf(high) else f" to {high:g}")
        raise UsageError(f"{name} must be a finite number {bounds}, got {value!r}")
    return float(value)


def _name(scorer: Any) -> str:
    """A scorer's name that is the same in every process (its repr may hold an address)."""
    if scorer is None:
        return "None"
    name = getattr(scorer, "__qualname__", None) or type(scorer).__qualname__
    return f"{getattr(scorer, '__module__', None) or type(scorer).__module__}.{name}"


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_REASON else text[:_MAX_REASON] + "…"
