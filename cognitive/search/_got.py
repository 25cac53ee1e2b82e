"""``GraphOfThoughts``: thoughts generated, scored, pruned, merged and refined by a graph of operations the user
declares, then the answer written from the best thought found."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs

from cognitive._kinds import PatternKind
from cognitive._pattern import check_prompt, check_start
from cognitive.search._checkpoint import Checkpoints, checkpoint_key
from cognitive.search._got_ops import (Aggregate, Generate, GraphNode, KeepBest, Operation, Refine, Score,
                                       ThoughtGraph, check_operations, max_calls)
from cognitive.search._thoughts import (ANSWER, PROPOSE, SCORE, Proposal, Scorer, add_thought, answer_from_line,
                                        check_scorer, propose_thoughts, score_line)
from loop import (BranchResult, Role, State, Text, TurnRunner, UsageError, add_turn, current_scope, fan_out, offer,
                  require, scope, tracing)
from loop.checks import positive_int
from loop.errors import BudgetExhausted

MERGED = """\
Lines of reasoning found so far, to be merged:

{thoughts}"""
AGGREGATE = """\
Merge the lines of reasoning listed above into up to {k} new steps of reasoning toward the answer to the latest \
request. Each new step combines what the lines got right, settles where they disagree, and stands on its own: \
whoever reads it must not need the lines. Mark a step final only when it states the complete final answer."""
REFINE = """\
Improve the latest step of reasoning above: correct its mistakes, add what it misses, keep what is right. Give \
the improved step as one thought that replaces it; mark it final only when it states the complete final answer."""

_FORMAT = 1
_SHORT = 160  # characters of a thought kept in the outcome data


@attrs.define
class _Work:
    """One run's progress: the graph, the ids of the current thoughts, how many operations are ``done``, what
    each did (``log``), the operation a resumed run went on from, and why the current thoughts ran out."""

    graph: ThoughtGraph
    current: list[int]
    done: int = 0
    log: list[dict[str, Any]] = attrs.Factory(list)
    resumed_from: int | None = None
    emptied: str | None = None

    def nodes(self) -> list[GraphNode]:
        return [self.graph.nodes[i] for i in self.current]

    def to_dict(self) -> dict[str, Any]:
        return {"format": _FORMAT, "graph": self.graph.to_dict(), "done": self.done, "current": self.current,
                "log": self.log, "emptied": self.emptied}

    @classmethod
    def from_dict(cls, data: Any, start: State, operations: int) -> _Work:
        problem = "it is not an object with format 1"
        if isinstance(data, Mapping) and data.get("format") == _FORMAT:
            try:
                graph = ThoughtGraph.from_dict(data.get("graph"), start)
            except UsageError as exc:
                raise UsageError(f"the GraphOfThoughts checkpoint cannot be read: {exc}; drop it to start "
                                 "afresh") from None
            done, current, log = data.get("done"), data.get("current"), data.get("log")
            emptied = data.get("emptied")
            if not isinstance(done, int) or isinstance(done, bool) or not 0 <= done <= operations:
                problem = f"'done' must count finished operations (0 to {operations}), got {done!r}"
            elif not isinstance(current, list) or not all(isinstance(i, int) and 0 <= i < len(graph)
                                                          for i in current):
                problem = f"'current' must list ids of its nodes, got {current!r}"
            elif not isinstance(log, list) or not (emptied is None or isinstance(emptied, str)):
                problem = "'log' must be a list and 'emptied' a string or null"
            else:
                return cls(graph, list(current), done, list(log), done, emptied)
        raise UsageError(f"the GraphOfThoughts checkpoint cannot be read: {problem}; drop it to start afresh")


class GraphOfThoughts:
    """A graph of thoughts (Besta et al.): the ``operations`` the user declares run in order over the current
    thoughts, starting from the question.

    **Operations** (values from ``cognitive``): ``Generate(k)`` proposes up to ``k`` thoughts going on from each
    current thought (``propose_thoughts``); ``Score()`` rates each one not rated yet (the ``scorer`` function, or a
    typed model turn, ``score_line``), a scoring that raises marks that thought failed (with the reason) and the graph
    goes on without it; ``KeepBest(n)`` keeps the ``n`` best; ``Aggregate(k)`` merges the current thoughts into up
    to ``k`` thoughts whose parents are all of them; ``Refine(rounds)`` improves each current thought, each
    improved version a child of the one before. ``operations=None`` runs ``[Generate(3), Score(), KeepBest(2),
    Aggregate(1), Refine(1), Score()]``. The list is checked when the pattern is made (it starts with a
    ``Generate``, a ``Score()`` precedes each ``KeepBest`` and follows the last thought-making operation, an
    ``Aggregate`` can see two thoughts, at most 64 current thoughts at once).

    **States.** A thought is an assistant turn (kind ``"thought"``) on a fork of the conversation: a generated or
    refined thought's state is its parent's plus the thought; a merged thought's state is the question, one
    system turn (kind ``"merged"``, ``meta["parents"]``) listing each merged line of thought, and the merged
    thought, so every later step sees what it was made from. Proposing and scoring run in branches (``fan_out``,
    at most ``limit`` at once; ``None``: no limit) and never enter the conversation.

    **Answer.** From the best scored thought that did not fail (the later among equals): its line of thought as
    one system turn, then the answer (``answer_from_line``), so the conversation only gets those two turns.
    After each ``Score()`` the best thought so far is offered to enclosing budgets (``loop.offer``): a
    ``WithBudget`` that runs out answers from it. When no thought could be scored the answer is written from the
    question alone; when an operation left no current thought the answer comes from the best scored before;
    both are ``degraded``, saying why.

    **Cost.** ``max_calls`` model calls at most, the answer included (1 per current thought for ``Generate``,
    ``Refine`` per round, and a model ``Score``; 1 per ``Aggregate``; a typed answer may be asked once more when
    invalid): 8 for the default graph with model scoring, 4 with a ``scorer`` function.

    **Checkpoints.** With ``checkpoints`` (``MemoryCheckpoints``, ``FileCheckpoints``), the graph and the
    operations done are saved after each operation under ``checkpoint_key`` of the search's settings and the
    conversation; a run on the same conversation with the same settings resumes at the next operation, and the
    checkpoint is dropped once the answer is written.

    **Outcome data** (under this pattern's run path): ``operations`` (what each did: thoughts made, scores,
    failures, pruned, the ``current`` ids after it), ``nodes`` (each thought's ``id``, ``parents``, the
    ``operation`` index that made it, its ``thought`` shortened, ``score``, and ``failed`` when it failed; node
    0 is the question), ``best`` and ``score`` (the chosen thought), ``provenance`` (the ids of every thought it
    descends from) and ``resumed_from`` (the index, from 0, of the operation a resumed run went on from; ``None``
    for a fresh run).
    """

    __slots__ = ("step", "operations", "scorer", "limit", "checkpoints", "propose_prompt", "score_prompt",
                 "merged_prompt", "aggregate_prompt", "refine_prompt", "answer_prompt", "max_calls", "_identity")

    def __init__(self, step: TurnRunner, *, operations: Sequence[Operation] | None = None,
                 scorer: Scorer | None = None, limit: int | None = None, checkpoints: Checkpoints | None = None,
                 propose_prompt: str = PROPOSE, score_prompt: str = SCORE, merged_prompt: str = MERGED,
                 aggregate_prompt: str = AGGREGATE, refine_prompt: str = REFINE, answer_prompt: str = ANSWER) -> None:
        require(step, TurnRunner, "GraphOfThoughts", "a TurnRunner (something with turn(state)), such as a loop.Step")
        if checkpoints is not None:
            require(checkpoints, Checkpoints, "GraphOfThoughts's checkpoints",
                    "a Checkpoints store (save, load, drop) such as MemoryCheckpoints(), or None")
        self.step = step
        self.operations = check_operations(operations)
        self.scorer = check_scorer(scorer)
        self.limit = positive_int("limit", limit, optional=True)
        self.checkpoints = checkpoints
        self.propose_prompt = check_prompt("propose_prompt", propose_prompt, "k")
        self.score_prompt = check_prompt("score_prompt", score_prompt)
        self.merged_prompt = check_prompt("merged_prompt", merged_prompt, "thoughts")
        self.aggregate_prompt = check_prompt("aggregate_prompt", aggregate_prompt, "k")
        self.refine_prompt = check_prompt("refine_prompt", refine_prompt)
        self.answer_prompt = check_prompt("answer_prompt", answer_prompt)
        self.max_calls = max_calls(self.operations, model_scores=scorer is None)
        prompts = (self.propose_prompt, self.score_prompt, self.merged_prompt, self.aggregate_prompt,
                   self.refine_prompt, self.answer_prompt)
        custom = prompts != (PROPOSE, SCORE, MERGED, AGGREGATE, REFINE, ANSWER)
        # What the search depends on, and so the checkpoint key; the step is left out (its repr is an address).
        self._identity = (f"GraphOfThoughts(operations=[{', '.join(map(repr, self.operations))}]"
                          + (f", scorer={_name(scorer)}" if scorer is not None else "")
                          + (f", prompts={hashlib.sha256(chr(0).join(prompts).encode()).hexdigest()[:8]}"
                             if custom else "") + ")")

    async def run(self, state: State) -> State:
        check_start(state, "GraphOfThoughts")
        with scope("GraphOfThoughts"), tracing.span("invoke_agent GraphOfThoughts", {
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "GraphOfThoughts"}) as span:
            start = state
            key = None if self.checkpoints is None else checkpoint_key(self._identity, start)
            work = await self._load(key, start)
            self._offer(work)
            for index in range(work.done, len(self.operations)):
                await self._operate(work, start, index)
                work.done = index + 1
                if self.checkpoints is not None and key is not None:
                    await self.checkpoints.save(key, work.to_dict())
            span.set_attribute("graph_of_thoughts.nodes", len(work.graph))
            best = work.graph.best()
            answer = await answer_from_line(self.step, start, start if best is None else best.state,
                                            prompt=self.answer_prompt)
            if self.checkpoints is not None and key is not None:
                await self.checkpoints.drop(key)
            data = _data(work, best)
            if best is None:
                return answer.with_outcome("degraded", f"GraphOfThoughts scored no thought "
                                           f"({work.emptied or 'none was made'}); the answer was written from the "
                                           "question alone", data=data)
            if work.emptied is not None:
                return answer.with_outcome("degraded", f"GraphOfThoughts ran out of thoughts ({work.emptied}); the "
                                           "answer is from the best thought scored before", data=data)
            return answer.with_outcome(data=data)

    async def _load(self, key: str | None, start: State) -> _Work:
        loaded = None if self.checkpoints is None or key is None else await self.checkpoints.load(key)
        if loaded is None:
            return _Work(ThoughtGraph(start), [0])
        return _Work.from_dict(loaded, start, len(self.operations))

    def _offer(self, work: _Work) -> None:
        best = work.graph.best()
        if best is not None:
            offer(best.state, best.score)  # ends in the thought: a budget running out answers from it

    async def _operate(self, work: _Work, start: State, index: int) -> None:
        op = self.operations[index]
        record: dict[str, Any] = {"operation": repr(op)}
        current = work.nodes()
        if not current:
            record["skipped"] = "no current thought"
        elif isinstance(op, Generate):
            await self._generate(work, index, op, current, record)
        elif isinstance(op, Score):
            await self._score(work, current, record)
        elif isinstance(op, KeepBest):
            ranked = sorted(current, key=lambda n: (-(n.score if n.score is not None else -1.0), n.id))
            work.current = [n.id for n in ranked[:op.n]]
            record["pruned"] = [n.id for n in ranked[op.n:]]
        elif isinstance(op, Aggregate):
            await self._aggregate(work, start, index, op, current, record)
        elif isinstance(op, Refine):
            await self._refine(work, index, op, current, record)
        record["current"] = list(work.current)
        work.log.append(record)
        if current and not work.current and work.emptied is None:
            errors = record.get("errors") or record.get("failed") or ["the model proposed none"]
            work.emptied = f"operation {index + 1}, {op!r}, left no thought: {errors[0]}"

    async def _each(self, name: str, job: Callable[[GraphNode], Awaitable[State]],
                    nodes: list[GraphNode]) -> list[Exception | None]:
        """``job`` on each node, concurrently in branches named ``name``; what each raised (``None``: nothing). A
        budget of the caller that ran out is raised: the run cannot go on."""
        results = await fan_out([functools.partial(job, node) for node in nodes], limit=self.limit, name=name)
        _reraise_budget(results)
        return [result.error for result in results]

    async def _generate(self, work: _Work, index: int, op: Generate, current: list[GraphNode],
                        record: dict[str, Any]) -> None:
        made: dict[int, tuple[Proposal, ...]] = {}

        async def one(node: GraphNode) -> State:
            made[node.id] = await propose_thoughts(self.step, node.state, op.k, prompt=self.propose_prompt)
            return node.state

        errors = await self._each("generate", one, current)
        new: list[int] = []
        problems: list[str] = []
        for node, error in zip(current, errors):
            if error is not None or not made.get(node.id):
                problems.append(f"thought {node.id}: {_why(error) if error else 'the model proposed none'}")
                continue
            for proposal in made[node.id]:
                new.append(work.graph.add((node.id,), index, proposal.text, add_thought(node.state, proposal)).id)
        work.current = new
        record["made"] = new
        if problems:
            record["errors"] = problems

    async def _score(self, work: _Work, current: list[GraphNode], record: dict[str, Any]) -> None:
        todo = [node for node in current if node.score is None]
        scores: dict[int, float] = {}

        async def one(node: GraphNode) -> State:
            scores[node.id] = await score_line(self.step, self.scorer, node.state, prompt=self.score_prompt)
            return node.state

        errors = await self._each("score", one, todo)
        for node, error in zip(todo, errors):
            if error is None:
                node.score = scores[node.id]
            else:
                node.failed = f"scoring it failed: {_why(error)}"
        work.current = [node.id for node in current if node.failed is None]
        record["scores"] = [[node.id, node.score] for node in todo if node.failed is None]
        failed = [f"thought {node.id}: {node.failed}" for node in todo if node.failed is not None]
        if failed:
            record["failed"] = failed
        self._offer(work)

    async def _aggregate(self, work: _Work, start: State, index: int, op: Aggregate, current: list[GraphNode],
                         record: dict[str, Any]) -> None:
        if len(current) < 2:
            record["skipped"] = "fewer than two thoughts: nothing to merge"
            return
        ids = [node.id for node in current]
        lines = "\n\n".join(f"Line {number}:\n" + "\n".join(f"- {text}" for text in _line(start, node.state))
                            for number, node in enumerate(current, 1))
        merged: dict[str, Any] = {}

        async def one(_: GraphNode) -> State:  # one merge, of them all
            merged["base"] = base = await add_turn(self.step, start, Role.SYSTEM,
                                                   Text(self.merged_prompt.format(thoughts=lines)),
                                                   meta={"kind": PatternKind.MERGED, "parents": ids})
            merged["proposals"] = await propose_thoughts(self.step, base, op.k, prompt=self.aggregate_prompt)
            return base

        (error,) = await self._each("aggregate", one, current[:1])
        record["merged"] = ids
        if error is not None or not merged.get("proposals"):
            why = _why(error) if error else "the model proposed none"
            record["errors"] = [f"the merge gave nothing ({why}); the thoughts stay as they were"]
            return
        work.current = [work.graph.add(ids, index, p.text, add_thought(merged["base"], p)).id
                        for p in merged["proposals"]]
        record["made"] = list(work.current)

    async def _refine(self, work: _Work, index: int, op: Refine, current: list[GraphNode],
                      record: dict[str, Any]) -> None:
        prompt = self.refine_prompt.replace("{", "{{").replace("}", "}}")  # sent as written, never formatted
        chains: dict[int, list[Proposal]] = {}

        async def one(node: GraphNode) -> State:
            line = node.state
            chain = chains[node.id] = []
            for _ in range(op.rounds):
                proposals = await propose_thoughts(self.step, line, 1, prompt=prompt)
                if not proposals:
                    break
                chain.append(proposals[0])
                line = add_thought(line, proposals[0])
            return line

        errors = await self._each("refine", one, current)
        after: list[int] = []
        new: list[int] = []
        problems: list[str] = []
        for node, error in zip(current, errors):
            last = node
            for proposal in chains.get(node.id, []):
                last = work.graph.add((last.id,), index, proposal.text, add_thought(last.state, proposal))
                new.append(last.id)
            if error is not None or len(chains.get(node.id, [])) < op.rounds:
                problems.append(f"thought {last.id} was kept as it was: "
                                f"{_why(error) if error else 'the model gave no improved thought'}")
            after.append(last.id)
        work.current = after
        record["made"] = new
        if problems:
            record["errors"] = problems

    def __repr__(self) -> str:
        limit = "" if self.limit is None else f", limit={self.limit}"
        return f"{self._identity[:-1]}{limit})"


def _reraise_budget(results: tuple[BranchResult, ...]) -> None:
    budgets = current_scope().budgets
    for result in results:
        error = result.error
        if isinstance(error, BudgetExhausted) and any(error.spend is spend for spend in budgets):
            raise error


def _line(start: State, state: State) -> list[str]:
    """The thoughts ``state`` adds to ``start``, oldest first."""
    return [t.text for t in state.turns[len(start):] if t.kind == PatternKind.THOUGHT and t.text.strip()]


def _why(error: BaseException | None) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= 300 else text[:300] + "…"


def _name(scorer: Any) -> str:
    """A name for ``scorer`` that is the same in every process (no address)."""
    named = getattr(scorer, "__qualname__", None)
    return str(named) if named else type(scorer).__qualname__


def _data(work: _Work, best: GraphNode | None) -> dict[str, Any]:
    nodes = []
    for node in work.graph.nodes[1:]:
        text = node.thought if len(node.thought) <= _SHORT else node.thought[:_SHORT] + "…"
        item: dict[str, Any] = {"id": node.id, "parents": list(node.parents), "operation": node.operation,
                                "thought": text, "score": node.score}
        if node.failed is not None:
            item["failed"] = node.failed
        nodes.append(item)
    return {"operations": list(work.log), "nodes": nodes, "best": None if best is None else best.id,
            "score": None if best is None else best.score,
            "provenance": [] if best is None else work.graph.ancestors(best), "resumed_from": work.resumed_from}
