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

Question against question, a model this small scores "enable" and "disable two-factor authentication" as close
as two wordings of one question. What it was trained for, a question against the passage answering it, tells
more: given the plain ``embedder``, a remembered question close enough is also asked whether its answer fits the
new question (embedded as a query, the answer as a passage) at least as well as it fits the question it was
written for. The answer to "enable" fits "disable" a little worse; the answer to a rewording, as well or better.
Surest of all, given a ``judge``, a model reads both questions together before the cache answers
(``SameQuestion``): a short model call, made only for a question close enough to a remembered one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from cognitive._pattern import Pattern, check_start, left_open
from cognitive.memory._answer_check import answer_fits, answer_scores, encoded
from cognitive.memory._cache_judge import SameQuestion
from cognitive.memory._protocol import Memory, Recalled, Scope
from cognitive.memory.checks import check_embedder
from loop import (CACHE_HIT, Role, State, Text, TurnRunner, TurnSubmitter, UsageError, current_scope, has, in_sample,
                  require, scope, tracing)
from loop.checks import positive_int
from loop.errors import BudgetExhausted
from provider import Embedder

__all__ = ["ANSWER_CHECK", "CACHE_FIT", "CACHE_JUDGED", "CACHE_SCORE", "CHECKED_THRESHOLD", "JUDGED_THRESHOLD",
           "SEMANTIC", "THRESHOLD", "CacheJudge", "SemanticCache"]

CacheJudge = Callable[[str, str], Awaitable["bool | None"]]
"""A ``SemanticCache`` judge: ``await judge(remembered, asked)`` says whether the answer to the remembered
question serves the question asked (``None``: it could not tell, taken for no). ``SameQuestion`` asks a model."""

THRESHOLD = 0.97
"""The default score a remembered question needs to answer a new one without the answer check (no
``embedder``), chosen for few wrong answers over many hits: with multilingual-e5-small (``provider.LocalE5``)
through ``SymmetricEmbedder``, different questions sharing most of their words ("enable" or "disable two-factor
authentication") score up to about 0.97, and reworded questions 0.89-0.99, so about a quarter of reworded
questions hit, and under 2% of different ones (those differing only in word order, "Celsius to Fahrenheit" and
back, score 0.999: no threshold tells them apart). Nor does a second look at the words that differ: this model
scores single words of one kind ("install", "uninstall"; "Canada", "Mexico") closer than a reworded question's
("bought", "ordered"). The answer check does better (``CHECKED_THRESHOLD``). See
``tests/benchmarks/bench_semantic_cache.py``. A wrong answer costs more than a model call."""
CHECKED_THRESHOLD = 0.88
"""The default score a remembered question needs to be checked against its answer (with an ``embedder``): just
below the reworded questions' scores (0.89 and up), leaving the choice to the answer check. With
multilingual-e5-small and ``ANSWER_CHECK``, half the reworded questions hit (twice as many as at ``THRESHOLD``
alone) and none of the different ones measured, the word-order pair included: a rewording fits the remembered
answer better than the question it was written for about as often as worse, while every different question
measured fitted it worse, though by as little as 0.001 ("Fahrenheit to Celsius" against the answer to
"Celsius to Fahrenheit"; 0.002 for "disable" against "enable two-factor authentication")."""
JUDGED_THRESHOLD = 0.88
"""The default score a remembered question needs to go to the ``judge`` (with one): just below the reworded
questions' scores with multilingual-e5-small (0.89 and up), leaving the choice to the judge."""
ANSWER_CHECK = 0.0
"""The default ``answer_check`` (with an ``embedder``): how much less a remembered answer may fit a new question
than the question it was written for (cosine, query against passage). Allowing 0.01 answers about three
quarters of reworded questions, and about 5% of different ones (those sharing most of their words)."""
SEMANTIC = "semantic"
"""``meta["cache"]`` of an answer a ``SemanticCache`` gave from a remembered question."""
CACHE_SCORE = "cognitive_loop.cache.score"
"""The span attribute holding the score of the closest remembered question (absent when there was none)."""
CACHE_FIT = "cognitive_loop.cache.fit"
"""The span attribute holding the answer check's ``fit`` of the answer given, or of the closest one refused."""
CACHE_JUDGED = "cognitive_loop.cache.judged"
"""The span attribute holding the judge's verdict on the remembered question it was shown (absent when none was
shown, or when its reply was neither yes nor no)."""

_log = tracing.logger("cognitive.memory.semantic_cache")


class SemanticCache:
    """Answers the latest user message from ``memory`` when a question close enough in meaning was answered
    before; otherwise runs ``inner`` and remembers its answer.

    Once per user message, the message's text (its case, spacing and closing punctuation made uniform, so that
    a repeat scores 1) is recalled, the ``k`` closest items, in the caller's scope, space ``cache:<agent>``
    (``Scope.current``). Without ``embedder``, the best item holding an answer hits when it scores at least
    ``threshold`` (``THRESHOLD`` unless told). With it, each item holding an answer and scoring at least
    ``threshold`` (``CHECKED_THRESHOLD`` unless told), best first, is checked, and the first whose answer's
    ``fit`` is at least ``-answer_check`` hits: the answer's score (as a passage) against the message less its
    score against the item's question (both as queries). ``embedder`` is the plain model the memory's
    ``SymmetricEmbedder`` wraps (``LocalE5()``, the same instance), since a question against an answer is the
    query-passage task it was trained for. So that a check embeds only the message, a remembered answer keeps
    its vector and its score against its question in the item's meta (``answer_vector``, base64 float32;
    ``answer_score``), embedded when remembered (a miss embeds the answer too); an item without them, or with
    another model's, has them embedded when checked.

    With a ``judge`` (a step, asked through ``SameQuestion``, or any ``CacheJudge``), the item chosen is shown
    to it with the message before it hits, and hits only when the judge says yes; the default ``threshold`` is then
    ``JUDGED_THRESHOLD``. A judge that raises (but for ``UsageError``, ``BudgetExhausted`` and cancellation) costs
    a model call, as one that says no or neither.

    On a hit ``inner`` does not run: the remembered answer is submitted through ``executor`` as an
    assistant turn (so it is published, stored by a session and sent by its conduits like any answer), its
    meta ``{"cache": "semantic", "cache_score": score, "cache_question": question}``; its ``TurnCompleted``
    event is the hit's event. Otherwise ``inner`` runs. Either way the answer's outcome holds, under this
    wrapper's run path, ``{"hit": True, "score": ..., "question": ...}`` or ``{"hit": False}`` (with the best
    ``score``, when there was one), with the ``fit`` of the answer given or of the best one refused when
    checked, and ``judged`` (the verdict, ``None`` for neither yes nor no) when judged; the span
    ``invoke_agent SemanticCache`` has ``cognitive_loop.cache.hit``, ``cognitive_loop.cache.score``,
    ``cognitive_loop.cache.fit`` and ``cognitive_loop.cache.judged``. An embedder that fails costs a model call.

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

    ``memory`` should compare questions symmetrically (see ``SymmetricEmbedder``); the default thresholds and
    ``answer_check`` are measured for multilingual-e5-small embedded that way.
    """

    __slots__ = ("inner", "executor", "memory", "agent", "embedder", "threshold", "answer_check", "tools",
                 "follow_ups", "k", "judge", "space")

    def __init__(self, inner: Pattern, executor: TurnSubmitter, memory: Memory, *, agent: str,
                 embedder: Embedder | None = None, threshold: float | None = None,
                 answer_check: float | None = None, judge: TurnRunner | CacheJudge | None = None,
                 tools: bool = False, follow_ups: bool = False, k: int = 3) -> None:
        require(inner, Pattern, "SemanticCache", "a Pattern to wrap (something with run(state))")
        require(executor, TurnSubmitter, "SemanticCache", "a TurnSubmitter (the step) to submit a remembered answer")
        if not has(memory, Memory):
            raise UsageError(f"SemanticCache needs a Memory (async remember(scope, text, ...) and recall(scope, "
                             f"query, k=...)), such as SQLiteMemory(path, SymmetricEmbedder(LocalE5())); "
                             f"got {memory!r}")
        if not isinstance(agent, str) or not agent.strip():
            raise UsageError(f"SemanticCache agent must be a non-empty string naming the agent whose answers it "
                             f"keeps, got {agent!r}")
        if threshold is None:
            threshold = CHECKED_THRESHOLD if embedder is not None else JUDGED_THRESHOLD if judge is not None \
                else THRESHOLD
        if not _number(threshold) or not 0 < threshold <= 1:
            raise UsageError(f"SemanticCache threshold must be a number in (0, 1], the least cosine similarity "
                             f"that answers from the cache; got {threshold!r}")
        if answer_check is None:
            answer_check = ANSWER_CHECK
        elif embedder is None:
            raise UsageError("SemanticCache answer_check needs an embedder (the plain one, such as LocalE5()) "
                             "to check answers with")
        if not _number(answer_check) or not 0 <= answer_check <= 1:
            raise UsageError(f"SemanticCache answer_check must be a number in [0, 1], how much less a remembered "
                             f"answer may fit a new question than its own; got {answer_check!r}")
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
        self.embedder = None if embedder is None else check_embedder("SemanticCache", embedder)
        self.threshold = float(threshold)
        self.answer_check = float(answer_check)
        self.tools = tools
        self.follow_ups = follow_ups
        self.k = positive_int("SemanticCache k", k)
        self.judge = None if judge is None else _judge(judge)
        self.space = f"cache:{agent}"

    async def run(self, state: State) -> State:
        check_start(state, "SemanticCache")
        question = _question(state, self.follow_ups)
        here = current_scope()
        if question is None or not here.on_main_line or in_sample(here.path):
            return await self.inner.run(state)
        with scope("SemanticCache"), tracing.span("invoke_agent SemanticCache", {
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "SemanticCache"}) as span:
            where = Scope.current(space=self.space)
            uniform = _uniform(question)
            found = await self._recall(where, uniform)
            if found:
                span.set_attribute(CACHE_SCORE, found[0].score)
            hit, fit = await self._choose(uniform, [r for r in found if r.score >= self.threshold])
            if fit is not None:
                span.set_attribute(CACHE_FIT, fit)
            checked: dict[str, Any] = {} if fit is None else {"fit": fit}
            if hit is not None and self.judge is not None:
                said = await self._judged(self.judge, _asked(hit), question)
                checked["judged"] = said
                if said is not None:
                    span.set_attribute(CACHE_JUDGED, said)
                hit = hit if said else None
            if hit is not None:
                span.set_attribute(CACHE_HIT, True)
                matched = _asked(hit)
                answered = await self.executor.submit(
                    state, Role.ASSISTANT, Text(hit.item.meta["answer"]),
                    meta={"cache": SEMANTIC, "cache_score": hit.score, "cache_question": matched})
                return answered.with_outcome(data={"hit": True, "score": hit.score, "question": matched, **checked})
            span.set_attribute(CACHE_HIT, False)
            start = len(state)
            state = await self.inner.run(state)
            if left_open(state):  # calls left for the caller: no answer yet, nothing to remember
                return state
            missed: dict[str, Any] = {"hit": False} if not found else {"hit": False, "score": found[0].score}
            state = state.with_outcome(data={**missed, **checked})
            if self._keeps(state, start):
                await self._remember(where, question, state.answer or "")
            return state

    async def _recall(self, where: Scope, question: str) -> list[Recalled]:
        """The closest remembered questions that hold an answer, best first."""
        try:
            found = await self.memory.recall(where, question, k=self.k)
        except UsageError:
            raise
        except Exception as exc:  # a memory that cannot be read costs a model call, never the answer
            _log.warning("the semantic cache could not recall; asking the model", memory=repr(self.memory),
                         error=repr(exc))
            return []
        return [r for r in found if _answer_of(r.item.meta) is not None]

    async def _choose(self, question: str, close: list[Recalled]) -> tuple[Recalled | None, float | None]:
        """The item of ``close`` (best first) that answers ``question``, or ``None``; and the ``fit`` of its
        answer, or of the best one refused (``None`` unchecked)."""
        if self.embedder is None or not close:
            return (close[0] if close else None), None
        try:
            fits = await answer_fits(self.embedder, question, close)
        except UsageError:
            raise
        except Exception as exc:  # an embedder that fails costs a model call, never the answer
            _log.warning("the semantic cache could not check an answer; asking the model",
                         embedder=repr(self.embedder), error=repr(exc))
            return None, None
        chosen = next((i for i, fit in enumerate(fits) if fit >= -self.answer_check), None)
        return (None, fits[0]) if chosen is None else (close[chosen], fits[chosen])

    async def _judged(self, judge: CacheJudge, remembered: str, asked: str) -> bool | None:
        """The judge's verdict, ``False`` when it failed."""
        try:
            return await judge(remembered, asked)
        except (UsageError, BudgetExhausted):
            raise
        except Exception as exc:  # a judge that fails costs a model call, never the answer
            _log.warning("the semantic cache's judge failed; asking the model", judge=repr(judge), error=repr(exc))
            return False

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
        meta: dict[str, Any] = {"answer": answer, "question": question}
        if self.embedder is not None:  # what the answer check needs, so that a hit embeds only the new question
            try:
                [(vector, score)] = await answer_scores(self.embedder, [(_uniform(question), answer)])
                meta.update(answer_vector=encoded(vector), answer_score=score)
            except UsageError:
                raise
            except Exception as exc:  # kept without them, the check embeds them when asked
                _log.warning("the semantic cache could not embed an answer", embedder=repr(self.embedder),
                             error=repr(exc))
        try:
            await self.memory.remember(where, _uniform(question), meta=meta)
        except UsageError:
            raise
        except Exception as exc:  # the answer stands; a memory that cannot keep it costs only the next hit
            _log.warning("the semantic cache could not remember an answer", memory=repr(self.memory),
                         error=repr(exc))

    def __repr__(self) -> str:
        checked = "" if self.embedder is None else f", embedder={self.embedder!r}, answer_check={self.answer_check:g}"
        tools = ", tools=True" if self.tools else ""
        follow_ups = ", follow_ups=True" if self.follow_ups else ""
        judged = "" if self.judge is None else f", judge={self.judge!r}"
        return (f"SemanticCache({self.inner!r}, memory={self.memory!r}, agent={self.agent!r}{checked}{judged}, "
                f"threshold={self.threshold:g}{tools}{follow_ups})")


def _judge(judge: Any) -> CacheJudge:
    """A step asks through ``SameQuestion``; a callable is a ``CacheJudge`` as it is."""
    if has(judge, TurnRunner):
        return SameQuestion(judge)
    if callable(judge):
        return cast(CacheJudge, judge)
    raise UsageError(f"SemanticCache judge must be a TurnRunner (the step, asked through SameQuestion) or an async "
                     f"callable (remembered, asked) -> bool | None; got {judge!r}")


def _asked(found: Recalled) -> str:
    """The remembered question as it was asked (its uniform text for an item kept without it)."""
    asked = found.item.meta.get("question")
    return asked if isinstance(asked, str) else found.item.text


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


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _answer_of(meta: Mapping[str, Any]) -> str | None:
    answer = meta.get("answer")
    return answer if isinstance(answer, str) and answer else None
