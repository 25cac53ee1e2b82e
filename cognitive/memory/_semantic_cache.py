"""``SemanticCache``: a question asked before in other words is answered with the answer it got, without the model.

An exact-match cache (``loop.ResponseCache``) hits only when the model would see the very same request. People
rarely ask twice in the same words, so this one looks the question up by meaning: each answered question is
remembered in a ``Memory`` (question -> answer, in the item's meta), and a new question whose closest remembered
one scores at least ``threshold`` gets that one's answer.

Its entries live in the caller's scope, space ``cache:<agent>``: never shared between users or agents, and
erased with the rest of a user's memory (``Forgetting.erase``).

Questions are compared with questions, a symmetric task, while a ``Memory`` embeds what it stores as a passage
and what it is asked as a query. E5 scores a question against itself as a passage only about 0.95-0.97, no
higher than it scores two different questions that share their words, so no threshold keeps repeats and
refuses those. ``SymmetricEmbedder`` (in ``provider``) embeds both sides alike: build the cache's store on it
(``SQLiteMemory(path, SymmetricEmbedder(LocalE5()))``; another ``SQLiteMemory`` on the same file may serve an
agent's own memory with the plain embedder, and erasing a user through either erases both).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from typing import Any

from cognitive._pattern import Pattern, check_start, left_open
from cognitive.memory._protocol import Memory, Recalled, Scope
from loop import (CACHE_HIT, Role, State, Text, TurnSubmitter, UsageError, current_scope, has, require, scope,
                  tracing)
from loop.checks import positive_int

__all__ = ["CACHE_SCORE", "SEMANTIC", "THRESHOLD", "SemanticCache"]

THRESHOLD = 0.97
"""The default score a remembered question needs to answer a new one, chosen for few wrong answers over many
hits: with multilingual-e5-small (``provider.LocalE5``) through ``SymmetricEmbedder``, different questions
sharing most of their words ("enable" or "disable two-factor authentication") score up to about 0.97, and
reworded questions 0.89-0.99, so about a quarter of reworded questions hit, and under 2% of different ones
(those differing only in word order, "Celsius to Fahrenheit" and back, score 0.999: no threshold tells them
apart). Nor does a second look at the words that differ: this model scores single words of one kind
("install", "uninstall"; "Canada", "Mexico") closer than a reworded question's ("bought", "ordered"). See
``tests/benchmarks/bench_semantic_cache.py``. A wrong answer costs more than a model call."""
SEMANTIC = "semantic"
"""``meta["cache"]`` of an answer a ``SemanticCache`` gave from a remembered question."""
CACHE_SCORE = "cognitive_loop.cache.score"
"""The span attribute holding the score of the closest remembered question (absent when there was none)."""

_log = tracing.logger("cognitive.memory.semantic_cache")
_SAMPLE = re.compile(r"(?:^|/)(?:sample \d+|samples)(?:/|$)")  # the branches Step.sample and fan-outs name


class SemanticCache:
    """Answers the latest user message from ``memory`` when a question close enough in meaning was answered
    before; otherwise runs ``inner`` and remembers its answer.

    Once per user message, the message's text (its case, spacing and closing punctuation made uniform, so that
    a repeat scores 1) is recalled, the ``k`` closest items, in the caller's scope, space ``cache:<agent>``
    (``Scope.current``). When the best item holding an answer scores at least
    ``threshold``, ``inner`` does not run: the remembered answer is submitted through ``executor`` as an
    assistant turn (so it is published, stored by a session and sent by its conduits like any answer), its
    meta ``{"cache": "semantic", "cache_score": score, "cache_question": question}``; its ``TurnCompleted``
    event is the hit's event. Otherwise ``inner`` runs. Either way the answer's outcome holds, under this
    wrapper's run path, ``{"hit": True, "score": ..., "question": ...}`` or ``{"hit": False}`` (with the best
    ``score`` below the threshold, when there was one), and the span ``invoke_agent SemanticCache`` has
    ``cognitive_loop.cache.hit`` and ``cognitive_loop.cache.score``.

    An answer is remembered (the uniform question as the item's text; the answer and the question as asked in
    its meta) only when the run is ``ok``, ends in a text answer, and, unless ``tools=True``, called no tool
    since the message: an answer
    built on what a tool returned then may be stale when asked again. A degraded, failed (raised), cancelled or
    pending run is never remembered. Off the main line (a sample, a branch, a tool's own agent) and for a
    state that does not end in an unanswered user message with text (a run resumed from tool results), the
    cache is passed by: ``inner`` runs, nothing is looked up or remembered. A memory that fails to recall
    costs a model call, one that fails to remember costs the next hit; both are logged.

    A message that follows earlier exchanges may lean on them ("and in Paris?"), and the cache sees only the
    message; so by default only a message that opens its conversation (no assistant turn before it) is looked
    up and remembered, and later ones pass by. ``follow_ups=True`` caches them too, for agents whose messages
    stand alone.

    ``memory`` should compare questions symmetrically (see ``SymmetricEmbedder``); the default ``threshold``
    (``THRESHOLD``) is measured for multilingual-e5-small embedded that way.
    """

    __slots__ = ("inner", "executor", "memory", "agent", "threshold", "tools", "follow_ups", "k", "space")

    def __init__(self, inner: Pattern, executor: TurnSubmitter, memory: Memory, *, agent: str,
                 threshold: float = THRESHOLD, tools: bool = False, follow_ups: bool = False, k: int = 3) -> None:
        require(inner, Pattern, "SemanticCache", "a Pattern to wrap (something with run(state))")
        require(executor, TurnSubmitter, "SemanticCache", "a TurnSubmitter (the step) to submit a remembered answer")
        if not has(memory, Memory):
            raise UsageError(f"SemanticCache needs a Memory (async remember(scope, text, ...) and recall(scope, "
                             f"query, k=...)), such as SQLiteMemory(path, SymmetricEmbedder(LocalE5())); "
                             f"got {memory!r}")
        if not isinstance(agent, str) or not agent.strip():
            raise UsageError(f"SemanticCache agent must be a non-empty string naming the agent whose answers it "
                             f"keeps, got {agent!r}")
        if (isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold)
                or not 0 < threshold <= 1):
            raise UsageError(f"SemanticCache threshold must be a number in (0, 1], the least cosine similarity "
                             f"that answers from the cache; got {threshold!r}")
        if not isinstance(tools, bool):
            raise UsageError(f"SemanticCache tools must be True (remember answers that called tools) or False, "
                             f"got {tools!r}")
        if not isinstance(follow_ups, bool):
            raise UsageError(f"SemanticCache follow_ups must be True (cache messages after earlier exchanges too) "
                             f"or False, got {follow_ups!r}")
        self.inner = inner
        self.executor = executor
        self.memory = memory
        self.agent = agent
        self.threshold = float(threshold)
        self.tools = tools
        self.follow_ups = follow_ups
        self.k = positive_int("SemanticCache k", k)
        self.space = f"cache:{agent}"

    async def run(self, state: State) -> State:
        check_start(state, "SemanticCache")
        question = _question(state, self.follow_ups)
        here = current_scope()
        if question is None or not here.on_main_line or _SAMPLE.search(here.path):
            return await self.inner.run(state)
        with scope("SemanticCache"), tracing.span("invoke_agent SemanticCache", {
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "SemanticCache"}) as span:
            where = Scope.current(space=self.space)
            best = await self._best(where, _uniform(question))
            if best is not None:
                span.set_attribute(CACHE_SCORE, best.score)
            if best is not None and best.score >= self.threshold:
                span.set_attribute(CACHE_HIT, True)
                asked = best.item.meta.get("question")
                matched = asked if isinstance(asked, str) else best.item.text
                found = {"hit": True, "score": best.score, "question": matched}
                answered = await self.executor.submit(
                    state, Role.ASSISTANT, Text(best.item.meta["answer"]),
                    meta={"cache": SEMANTIC, "cache_score": best.score, "cache_question": matched})
                return answered.with_outcome(data=found)
            span.set_attribute(CACHE_HIT, False)
            start = len(state)
            state = await self.inner.run(state)
            if left_open(state):  # calls left for the caller: no answer yet, nothing to remember
                return state
            missed: dict[str, Any] = {"hit": False} if best is None else {"hit": False, "score": best.score}
            state = state.with_outcome(data=missed)
            if self._keeps(state, start):
                await self._remember(where, question, state.answer or "")
            return state

    async def _best(self, where: Scope, question: str) -> Recalled | None:
        """The closest remembered question that holds an answer, or ``None``."""
        try:
            found = await self.memory.recall(where, question, k=self.k)
        except UsageError:
            raise
        except Exception as exc:  # a memory that cannot be read costs a model call, never the answer
            _log.warning("the semantic cache could not recall; asking the model", memory=repr(self.memory),
                         error=repr(exc))
            return None
        return next((r for r in found if _answer_of(r.item.meta) is not None), None)

    def _keeps(self, state: State, start: int) -> bool:
        """Whether the answer ``state`` ends in may answer the question again: an ``ok`` run ending in text,
        that called no tool after the question (unless ``tools``)."""
        outcome = state.outcome
        last = state.last
        if outcome is None or not outcome.ok or last is None or last.role is not Role.ASSISTANT:
            return False
        if not (state.answer or "").strip():
            return False
        if self.tools:
            return True
        added = itertools.islice(state.reversed(), len(state) - start)
        return not any(t.role is Role.TOOL or t.tool_calls for t in added)

    async def _remember(self, where: Scope, question: str, answer: str) -> None:
        try:
            await self.memory.remember(where, _uniform(question), meta={"answer": answer, "question": question})
        except UsageError:
            raise
        except Exception as exc:  # the answer stands; a memory that cannot keep it costs only the next hit
            _log.warning("the semantic cache could not remember an answer", memory=repr(self.memory),
                         error=repr(exc))

    def __repr__(self) -> str:
        tools = ", tools=True" if self.tools else ""
        follow_ups = ", follow_ups=True" if self.follow_ups else ""
        return (f"SemanticCache({self.inner!r}, memory={self.memory!r}, agent={self.agent!r}, "
                f"threshold={self.threshold:g}{tools}{follow_ups})")


def _question(state: State, follow_ups: bool) -> str | None:
    """The text of the user message ``state`` waits an answer for: the last user turn, when no assistant turn
    follows it and, unless ``follow_ups``, none comes before it; ``None`` otherwise or when it holds no text."""
    turns = state.reversed()
    for turn in turns:
        if turn.role is Role.USER:
            text = turn.text.strip()
            if not follow_ups and any(t.role is Role.ASSISTANT for t in turns):
                return None
            return text or None
        if turn.role is Role.ASSISTANT:
            return None
    return None


def _uniform(question: str) -> str:
    """``question`` in one case, its spaces single and its closing punctuation dropped: E5 reads "How do I...?"
    and "how do i..." as different texts (about 0.97 apart), which a cache must not."""
    return " ".join(question.split()).rstrip("?!.;:？！。 ").casefold()


def _answer_of(meta: Mapping[str, Any]) -> str | None:
    answer = meta.get("answer")
    return answer if isinstance(answer, str) and answer else None
