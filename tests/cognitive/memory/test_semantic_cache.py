"""SemanticCache: a question answered again from a remembered one close in meaning, only answers that may be
reused remembered, scoped per caller and agent, marked in the turn, outcome, events and span; the answer check;
SymmetricEmbedder.
The vectors here are word-overlap ones (HashingEmbedder); the real model is in test_semantic_cache_e5.py."""

from __future__ import annotations

import array
import base64
import math
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import pytest

from cognitive import ReAct, SingleShot, WithBudget
from cognitive.memory._protocol import MemoryItem, Recalled, Scope
from cognitive.memory._semantic_cache import (ANSWER_CHECK, CACHE_FIT, CACHE_SCORE, CHECKED_THRESHOLD, SEMANTIC,
                                              THRESHOLD, SemanticCache)
from loop import (CACHE_HIT, Budget, Caller, Request, Role, State, Step, Text, ToolCall, TurnCompleted, UsageError,
                  branch, main_line, run_context, tool)
from loop.errors import BudgetExhausted
from provider import Function, tool_call
from provider._embedder import PASSAGE, QUERY, HashingEmbedder, SymmetricEmbedder, Vector, cosine

QUESTION = "how do I reset my password on the website"
REWORDED = "how do I reset my password on the web site"
ANN = Caller("ann", "acme")
BOB = Caller("bob", "acme")


def ask(text: str = QUESTION) -> State:
    return State().append(Role.USER, Text(text))


class Notes:
    """A ``Memory`` in a dict, scored by word overlap: what the cache asked of it is kept in ``recalled`` and
    ``items``. ``broken`` makes every call raise it."""

    def __init__(self, broken: BaseException | None = None) -> None:
        self.embedder = HashingEmbedder()
        self.items: dict[Scope, list[tuple[Vector, MemoryItem]]] = {}
        self.recalled: list[Scope] = []
        self.broken = broken

    async def remember(self, scope: Scope, text: str, *, source: str = "",
                       meta: Mapping[str, Any] | None = None) -> MemoryItem:
        if self.broken is not None:
            raise self.broken
        [vector] = await self.embedder.embed([text], kind=PASSAGE)
        item = MemoryItem(str(sum(map(len, self.items.values()))), scope, text, source, meta=meta)
        self.items.setdefault(scope, []).append((vector, item))
        return item

    async def recall(self, scope: Scope, query: str, *, k: int = 5) -> list[Recalled]:
        self.recalled.append(scope)
        if self.broken is not None:
            raise self.broken
        [vector] = await self.embedder.embed([query], kind=QUERY)
        found = [Recalled(item, cosine(vector, v)) for v, item in self.items.get(scope, [])]
        return sorted(found, key=lambda r: -r.score)[:k]

    def texts(self) -> list[tuple[Scope, str, str]]:
        return [(scope, item.meta.get("question", item.text), item.meta["answer"])
                for scope, kept in self.items.items() for _, item in kept]


class Model:
    """A ``Function`` provider's function counting the requests it answered: ``reply(request, number)``."""

    def __init__(self, reply: Any = None) -> None:
        self.requests: list[Request] = []
        self.reply = reply or (lambda request, number: f"answer {number}")

    def __call__(self, request: Request) -> Any:
        self.requests.append(request)
        return self.reply(request, len(self.requests))


def cached(model: Model, notes: Notes, **settings: Any) -> tuple[SemanticCache, Step]:
    step = Step(Function(model))
    settings.setdefault("agent", "helpdesk")
    return SemanticCache(ReAct(step), step, notes, **settings), step


def score(a: str, b: str) -> float:
    embedder = HashingEmbedder()
    return cosine(embedder.vector(a), embedder.vector(b))


async def test_a_miss_asks_the_model_and_remembers_then_a_close_question_is_answered_without_it() -> None:
    model, notes = Model(), Notes()
    cache, step = cached(model, notes, threshold=0.7)
    first = await cache.run(ask())
    assert first.answer == "answer 1" and len(model.requests) == 1
    assert first.outcome is not None and first.outcome.ok
    assert first.outcome.data["SemanticCache"] == {"hit": False}
    assert first.last is not None and "cache" not in first.last.meta
    assert notes.texts() == [(Scope("", "", "cache:helpdesk"), QUESTION, "answer 1")]

    with step.events.subscribe() as events:
        again = await cache.run(ask(REWORDED))
        published = events.drain()
    assert again.answer == "answer 1" and len(model.requests) == 1, "answered from the cache, no model call"
    expected = score(QUESTION.casefold(), REWORDED.casefold())
    assert again.outcome is not None and again.outcome.ok
    assert again.outcome.data["SemanticCache"] == {"hit": True, "score": expected, "question": QUESTION}
    turn = again.last
    assert turn is not None and turn.role is Role.ASSISTANT
    assert dict(turn.meta) == {"cache": SEMANTIC, "cache_score": expected, "cache_question": QUESTION,
                               "outcome": again.outcome.to_dict()}
    [completed] = [e for e in published if isinstance(e, TurnCompleted)]
    assert completed.turn.text == "answer 1" and completed.turn.meta["cache"] == SEMANTIC
    assert len(notes.texts()) == 1, "a hit remembers nothing more"


async def test_a_repeat_in_other_case_spacing_and_punctuation_scores_as_the_same_question() -> None:
    model, notes = Model(), Notes()
    cache, _ = cached(model, notes, threshold=1.0)
    await cache.run(ask("How do I reset my PASSWORD?"))
    [(_, item)] = notes.items[Scope("", "", "cache:helpdesk")]
    assert item.text == "how do i reset my password", "kept in the uniform form it is looked up by"
    again = await cache.run(ask("  how do i   reset my password "))
    assert again.outcome is not None
    assert again.outcome.data["SemanticCache"] == {"hit": True, "score": pytest.approx(1.0),
                                                   "question": "How do I reset my PASSWORD?"}
    assert again.answer == "answer 1" and len(model.requests) == 1


async def test_the_threshold_is_the_least_score_that_hits() -> None:
    exact = score(QUESTION.casefold(), REWORDED.casefold())
    for threshold, hits in ((exact, True), (math.nextafter(exact, 2.0), False)):
        model, notes = Model(), Notes()
        cache, _ = cached(model, notes, threshold=threshold)
        await cache.run(ask())
        again = await cache.run(ask(REWORDED))
        assert again.outcome is not None
        found = again.outcome.data["SemanticCache"]
        assert found["hit"] is hits and found["score"] == exact, (threshold, found)
        assert len(model.requests) == (1 if hits else 2)
        assert len(notes.texts()) == (1 if hits else 2), "a miss remembers its own answer"


async def test_an_unrelated_question_misses_and_is_remembered_apart() -> None:
    model, notes = Model(), Notes()
    cache, _ = cached(model, notes)
    await cache.run(ask())
    other = await cache.run(ask("what is the weather in Lisbon"))
    assert other.answer == "answer 2" and other.outcome is not None
    assert other.outcome.data["SemanticCache"]["hit"] is False
    assert other.outcome.data["SemanticCache"]["score"] < THRESHOLD
    assert [text for _, text, _ in notes.texts()] == [QUESTION, "what is the weather in Lisbon"]


async def test_answers_are_kept_per_user_and_per_agent() -> None:
    model, notes = Model(), Notes()
    step = Step(Function(model))
    helpdesk = SemanticCache(SingleShot(step), step, notes, agent="helpdesk")
    sales = SemanticCache(SingleShot(step), step, notes, agent="sales")
    with run_context(caller=ANN):
        assert (await helpdesk.run(ask())).answer == "answer 1"
        assert (await helpdesk.run(ask())).answer == "answer 1", "ann asks again: a hit"
        assert (await sales.run(ask())).answer == "answer 2", "another agent's answers are its own"
    with run_context(caller=BOB):
        assert (await helpdesk.run(ask())).answer == "answer 3", "another user's answers are their own"
    with run_context(caller=Caller("ann", "other")):
        assert (await helpdesk.run(ask())).answer == "answer 4", "the same id in another namespace is another user"
    assert (await helpdesk.run(ask())).answer == "answer 5", "nobody named: the anonymous scope"
    assert len(model.requests) == 5
    assert sorted((s.namespace, s.user, s.space) for s in notes.items) == [
        ("", "", "cache:helpdesk"), ("acme", "ann", "cache:helpdesk"), ("acme", "ann", "cache:sales"),
        ("acme", "bob", "cache:helpdesk"), ("other", "ann", "cache:helpdesk")]


def calling_then_answering(request: Request, number: int) -> Any:
    if request.turns[-1].role is Role.USER:
        return [tool_call("lookup", {}, id=f"c{number}")]
    return f"answer {number}"


@tool
def lookup() -> str:
    """Look the account up."""
    return "the account is fine"


@pytest.mark.parametrize("tools", [False, True])
async def test_an_answer_that_called_a_tool_is_remembered_only_when_asked(tools: bool) -> None:
    model, notes = Model(calling_then_answering), Notes()
    step = Step(Function(model), tools=[lookup])
    cache = SemanticCache(ReAct(step), step, notes, agent="helpdesk", tools=tools)
    done = await cache.run(ask())
    assert done.answer == "answer 2" and done.outcome is not None and done.outcome.ok
    assert [answer for _, _, answer in notes.texts()] == (["answer 2"] if tools else [])
    again = await cache.run(ask())
    assert again.outcome is not None and again.outcome.data["SemanticCache"]["hit"] is tools
    assert len(model.requests) == (2 if tools else 4)


async def test_a_degraded_answer_is_not_remembered() -> None:
    always_calling = Model(lambda request, number: "gave up" if request.options.tool_choice == "none"
                           else [tool_call("lookup", {}, id=f"c{number}")])
    notes = Notes()
    step = Step(Function(always_calling), tools=[lookup])
    cache = SemanticCache(ReAct(step, max_turns=1), step, notes, agent="helpdesk", tools=True)
    done = await cache.run(ask())
    assert done.answer == "gave up" and done.outcome is not None and done.outcome.degraded
    assert done.outcome.data["SemanticCache"] == {"hit": False}
    assert notes.texts() == []


class Ends:
    """A pattern whose run ends as ``finish(state)`` says."""

    def __init__(self, finish: Any) -> None:
        self.finish = finish

    async def run(self, state: State) -> State:
        result: State = self.finish(state)
        return result


@pytest.mark.parametrize("ending", ["degraded", "failed", "empty", "no answer"])
async def test_only_an_ok_run_ending_in_text_is_remembered(ending: str) -> None:
    def finish(state: State) -> State:
        if ending == "empty":
            return state.append(Role.ASSISTANT, Text("  ")).with_outcome()
        if ending == "no answer":
            return state.append(Role.ASSISTANT, Text("an answer")).append(Role.SYSTEM, Text("a note")).with_outcome()
        return state.append(Role.ASSISTANT, Text("an answer")).with_outcome(ending, "it went wrong")

    notes = Notes()
    step = Step(Function(Model()))
    done = await SemanticCache(Ends(finish), step, notes, agent="helpdesk").run(ask())
    assert done.outcome is not None and done.outcome.data["SemanticCache"] == {"hit": False}
    assert notes.texts() == []


async def test_a_run_that_raises_remembers_nothing() -> None:
    def fail(request: Request, number: int) -> Any:
        raise RuntimeError("the model is down")

    notes = Notes()
    cache, _ = cached(Model(fail), notes)
    with pytest.raises(RuntimeError, match="the model is down"):
        await cache.run(ask())
    assert notes.texts() == []


async def test_calls_left_for_the_caller_are_returned_as_they_are_and_not_remembered() -> None:
    def leave_open(state: State) -> State:
        return state.append(Role.ASSISTANT, ToolCall("c1", "approve", "{}")).with_outcome("pending", "left open")

    notes = Notes()
    done = await SemanticCache(Ends(leave_open), Step(Function(Model())), notes, agent="helpdesk").run(ask())
    assert done.outcome is not None and done.outcome.status == "pending"
    assert "SemanticCache" not in done.outcome.data and notes.texts() == []


async def test_cancelled_during_a_miss_remembers_nothing() -> None:
    started = anyio.Event()

    async def slow(request: Request) -> str:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("never reached")

    notes = Notes()
    step = Step(Function(slow))
    cache = SemanticCache(ReAct(step), step, notes, agent="helpdesk")
    async with anyio.create_task_group() as group:
        group.start_soon(cache.run, ask())
        await started.wait()
        group.cancel_scope.cancel()
    assert notes.recalled and notes.texts() == []


async def test_a_sample_or_branch_passes_the_cache_by() -> None:
    model, notes = Model(), Notes()
    cache, _ = cached(model, notes)
    await cache.run(ask())
    for name in ("sample 2", "a branch"):
        with branch(name):
            done = await cache.run(ask())
        assert done.answer != "answer 1"
        assert done.outcome is None or "SemanticCache" not in done.outcome.data, "passed by: nothing looked up"
    assert len(notes.recalled) == 1 and len(notes.texts()) == 1


async def test_a_state_not_ending_in_a_question_passes_the_cache_by() -> None:
    model, notes = Model(), Notes()
    cache, _ = cached(model, notes)
    answered = ask().append(Role.ASSISTANT, Text("earlier")).append(Role.TOOL)
    resumed = State().append(Role.USER, Text("")).append(Role.SYSTEM, Text("go on"))
    for state in (answered, resumed):
        await cache.run(state)
    assert notes.recalled == [] and notes.texts() == []


async def test_a_hit_inside_a_budget_spends_nothing_and_composes_with_its_report() -> None:
    model, notes = Model(), Notes()
    step = Step(Function(model))
    inner = SemanticCache(ReAct(step), step, notes, agent="helpdesk")
    budgeted = WithBudget(inner, Budget(max_turns=1))
    await budgeted.run(ask())
    again = await budgeted.run(ask())
    assert len(model.requests) == 1
    assert again.outcome is not None and again.outcome.ok
    assert again.outcome.data["WithBudget/SemanticCache"]["hit"] is True
    assert again.outcome.data["WithBudget"]["spent"] == {}, "nothing spent"


async def test_a_run_its_budget_stopped_is_not_remembered() -> None:
    always_calling = Model(lambda request, number: "out of budget" if request.options.tool_choice == "none"
                           else [tool_call("lookup", {}, id=f"c{number}")])
    notes = Notes()
    step = Step(Function(always_calling), tools=[lookup])
    budgeted = WithBudget(SemanticCache(ReAct(step), step, notes, agent="helpdesk", tools=True), Budget(max_turns=2))
    done = await budgeted.run(ask())
    assert done.answer == "out of budget" and done.outcome is not None and done.outcome.degraded
    assert notes.texts() == []
    with pytest.raises(BudgetExhausted):
        await WithBudget(SemanticCache(ReAct(step), step, notes, agent="helpdesk", tools=True), Budget(max_turns=2),
                         raise_on_exhausted=True).run(ask())
    assert notes.texts() == []


async def test_a_hit_is_recorded_on_the_main_line_as_any_answer() -> None:
    model, notes = Model(), Notes()
    cache, _ = cached(model, notes)
    await cache.run(ask())
    recorded: list[State] = []

    async def record(state: State) -> None:
        recorded.append(state)

    with main_line(recorder=record):
        done = await cache.run(ask())
    assert len(model.requests) == 1
    assert [s.last.meta["cache"] for s in recorded if s.last is not None] == [SEMANTIC]
    assert recorded[-1].answer == done.answer == "answer 1"


async def test_the_span_says_whether_it_hit_and_the_score(spans: Any) -> None:
    model, notes = Model(), Notes()
    cache, _ = cached(model, notes)
    await cache.run(ask())
    await cache.run(ask())
    found = [s for s in spans.get_finished_spans() if s.name == "invoke_agent SemanticCache"]
    assert [s.attributes.get(CACHE_HIT) for s in found] == [False, True]
    assert CACHE_SCORE not in found[0].attributes, "nothing remembered yet: no score"
    assert found[1].attributes[CACHE_SCORE] == pytest.approx(1.0)


async def test_a_memory_that_fails_costs_a_model_call_not_the_answer() -> None:
    model, notes = Model(), Notes(broken=OSError("disk full"))
    cache, _ = cached(model, notes)
    done = await cache.run(ask())
    assert done.answer == "answer 1" and done.outcome is not None and done.outcome.ok
    assert done.outcome.data["SemanticCache"] == {"hit": False}
    misuse = Notes(broken=UsageError("a bad scope"))
    cache, _ = cached(Model(), misuse)
    with pytest.raises(UsageError, match="a bad scope"):
        await cache.run(ask())


async def test_remembered_items_without_an_answer_are_skipped() -> None:
    model, notes = Model(), Notes()
    cache, _ = cached(model, notes)
    await notes.remember(Scope("", "", "cache:helpdesk"), QUESTION, meta={"note": "no answer here"})
    assert (await cache.run(ask())).answer == "answer 1"
    assert (await cache.run(ask())).answer == "answer 1" and len(model.requests) == 1


@pytest.mark.parametrize("settings, message", [
    ({"threshold": 0}, "threshold must be a number in \\(0, 1\\]"),
    ({"threshold": 1.01}, "threshold"),
    ({"threshold": float("nan")}, "threshold"),
    ({"threshold": True}, "threshold"),
    ({"threshold": "0.9"}, "threshold"),
    ({"agent": ""}, "agent must be a non-empty string"),
    ({"agent": "  "}, "agent must be a non-empty string"),
    ({"agent": 7}, "agent must be a non-empty string"),
    ({"tools": "yes"}, "tools must be True"),
    ({"k": 0}, "k"),
    ({"answer_check": 0.01}, "answer_check needs an embedder"),
    ({"embedder": HashingEmbedder(), "answer_check": -0.01}, "answer_check must be a number in \\[0, 1\\]"),
    ({"embedder": HashingEmbedder(), "answer_check": 1.5}, "answer_check"),
    ({"embedder": HashingEmbedder(), "answer_check": float("nan")}, "answer_check"),
    ({"embedder": HashingEmbedder(), "answer_check": True}, "answer_check"),
    ({"embedder": object()}, "needs an Embedder"),
])
def test_bad_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    step = Step(Function(Model()))
    arguments: dict[str, Any] = {"agent": "helpdesk", **settings}
    with pytest.raises(UsageError, match=message):
        SemanticCache(SingleShot(step), step, Notes(), **arguments)


def test_bad_wiring_is_refused() -> None:
    step = Step(Function(Model()))
    with pytest.raises(UsageError, match="needs a Memory"):
        SemanticCache(SingleShot(step), step, object(), agent="helpdesk")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="needs a Pattern"):
        SemanticCache(object(), step, Notes(), agent="helpdesk")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="TurnSubmitter"):
        SemanticCache(SingleShot(step), object(), Notes(), agent="helpdesk")  # type: ignore[arg-type]
    assert repr(SemanticCache(SingleShot(step), step, Notes(), agent="helpdesk", threshold=0.9)).endswith(
        "agent='helpdesk', threshold=0.9)")


class Kinds:
    """An embedder recording the kinds it was asked for."""

    def __init__(self) -> None:
        self.kinds: list[str] = []

    async def embed(self, texts: Sequence[str], *, kind: str = PASSAGE) -> list[Vector]:
        self.kinds.append(kind)
        return [[1.0, 0.0] for _ in texts]


async def test_a_symmetric_embedder_embeds_every_text_as_one_kind() -> None:
    inner = Kinds()
    symmetric = SymmetricEmbedder(inner)
    await symmetric.embed(["a stored question"])
    await symmetric.embed(["an asked question"], kind=QUERY)
    assert inner.kinds == [QUERY, QUERY]
    await SymmetricEmbedder(inner, kind=PASSAGE).embed(["x"], kind=QUERY)
    assert inner.kinds[-1] == PASSAGE
    with pytest.raises(UsageError, match="kind must be"):
        SymmetricEmbedder(inner, kind="document")
    with pytest.raises(UsageError, match="kind must be"):
        await symmetric.embed(["x"], kind="document")
    with pytest.raises(UsageError, match="needs an Embedder"):
        SymmetricEmbedder(object())  # type: ignore[arg-type]


async def test_a_follow_up_message_passes_by_unless_follow_ups_are_cached() -> None:
    model, notes = Model(), Notes()
    cache, _ = cached(model, notes, threshold=0.7)
    await cache.run(ask())  # remembered: it opens its conversation
    earlier = ask("hello").append(Role.ASSISTANT, Text("hi"))
    follow_up = earlier.append(Role.USER, Text(REWORDED))
    passed = await cache.run(follow_up)
    assert passed.answer == "answer 2" and len(model.requests) == 2, "it may lean on the exchange before it"
    assert notes.recalled == [Scope("", "", "cache:helpdesk")], "looked up once: for the opening question only"
    assert passed.outcome is None or "SemanticCache" not in passed.outcome.data
    assert len(notes.texts()) == 1, "a follow-up's answer is not remembered"

    cache, _ = cached(model, notes, threshold=0.7, follow_ups=True)
    hit = await cache.run(follow_up)
    assert hit.answer == "answer 1" and len(model.requests) == 2
    with pytest.raises(UsageError, match="follow_ups must be True"):
        cached(model, notes, follow_ups="yes")


ANSWER = "open the website, choose forgot password and reset your password from the link we email you"
FITTING = "how do I reset my password from the link you email"  # shares more words with the answer than QUESTION
UNFITTING = "how do I reset my password on the web site"  # shares fewer


def fit(asked: str, answer: str = ANSWER, original: str = QUESTION) -> float:
    """How much better ``answer`` fits ``asked`` than ``original``, by word overlap."""
    return score(asked.casefold(), answer) - score(original.casefold(), answer)


async def test_with_an_embedder_a_close_question_hits_only_when_the_answer_fits_it_as_well() -> None:
    assert fit(FITTING) > 0 > fit(UNFITTING)
    model, notes = Model(lambda request, number: ANSWER if number == 1 else f"answer {number}"), Notes()
    cache, _ = cached(model, notes, embedder=HashingEmbedder(), threshold=0.5)
    await cache.run(ask())
    hit = await cache.run(ask(FITTING))
    assert hit.answer == ANSWER and len(model.requests) == 1
    assert hit.outcome is not None and hit.outcome.data["SemanticCache"] == {
        "hit": True, "score": score(QUESTION.casefold(), FITTING.casefold()), "question": QUESTION,
        "fit": pytest.approx(fit(FITTING))}
    refused = await cache.run(ask(UNFITTING))
    assert refused.answer == "answer 2", "close enough in words, but the answer fits it less than its question"
    assert refused.outcome is not None and refused.outcome.data["SemanticCache"] == {
        "hit": False, "score": score(QUESTION.casefold(), UNFITTING.casefold()), "fit": pytest.approx(fit(UNFITTING))}
    assert cache.threshold == 0.5 and cache.answer_check == ANSWER_CHECK == 0


async def test_answer_check_is_how_much_less_the_answer_may_fit() -> None:
    short = -fit(UNFITTING)
    for answer_check, hits in ((short + 1e-9, True), (short - 1e-6, False)):
        model, notes = Model(lambda request, number: ANSWER), Notes()
        cache, _ = cached(model, notes, embedder=HashingEmbedder(), threshold=0.5, answer_check=answer_check)
        await cache.run(ask())
        again = await cache.run(ask(UNFITTING))
        assert again.outcome is not None and again.outcome.data["SemanticCache"]["hit"] is hits, answer_check
        assert len(model.requests) == (1 if hits else 2)


async def test_a_repeat_fits_its_answer_exactly_as_well() -> None:
    model, notes = Model(lambda request, number: ANSWER), Notes()
    cache, _ = cached(model, notes, embedder=HashingEmbedder(), threshold=0.99)
    await cache.run(ask())
    again = await cache.run(ask(QUESTION.upper() + "?"))
    assert again.outcome is not None and again.outcome.data["SemanticCache"]["fit"] == 0.0
    assert again.outcome.data["SemanticCache"]["hit"] is True and len(model.requests) == 1


async def test_the_next_close_question_is_checked_when_the_closest_answer_does_not_fit() -> None:
    model, notes = Model(), Notes()
    where = Scope("", "", "cache:helpdesk")
    await notes.remember(where, UNFITTING.casefold(), meta={"answer": "use the web site", "question": UNFITTING})
    await notes.remember(where, QUESTION.casefold(), meta={"answer": ANSWER, "question": QUESTION})
    asked = "how do i reset my password on the web site from the link you email"
    closest = await notes.recall(where, asked, k=2)
    assert [r.item.text for r in closest] == [UNFITTING.casefold(), QUESTION.casefold()]
    first_fit = fit(asked, "use the web site", UNFITTING)
    assert first_fit < 0 <= fit(asked)
    cache, _ = cached(model, notes, embedder=HashingEmbedder(), threshold=0.5)
    hit = await cache.run(ask(asked))
    assert hit.answer == ANSWER and not model.requests
    assert hit.outcome is not None and hit.outcome.data["SemanticCache"]["question"] == QUESTION


async def test_the_span_holds_the_fit(spans: Any) -> None:
    model, notes = Model(lambda request, number: ANSWER), Notes()
    cache, _ = cached(model, notes, embedder=HashingEmbedder(), threshold=0.5)
    await cache.run(ask())
    await cache.run(ask(UNFITTING))
    [*_, span] = [s for s in spans.get_finished_spans() if s.name == "invoke_agent SemanticCache"]
    assert span.attributes[CACHE_FIT] == pytest.approx(fit(UNFITTING)) and span.attributes[CACHE_HIT] is False


class Failing:
    """An embedder raising ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def embed(self, texts: Sequence[str], *, kind: str = PASSAGE) -> list[Vector]:
        raise self.error


async def test_an_embedder_that_fails_costs_a_model_call_and_a_wrong_one_is_reported() -> None:
    model, notes = Model(lambda request, number: ANSWER), Notes()
    cache, _ = cached(model, notes, embedder=Failing(OSError("no model here")), threshold=0.5)
    await cache.run(ask())
    missed = await cache.run(ask(FITTING))
    assert missed.outcome is not None and missed.outcome.data["SemanticCache"] == {
        "hit": False, "score": score(QUESTION.casefold(), FITTING.casefold())}
    assert len(model.requests) == 2
    cache, _ = cached(model, notes, embedder=Failing(UsageError("a bad text")), threshold=0.5)
    with pytest.raises(UsageError, match="a bad text"):
        await cache.run(ask(FITTING))


def test_the_default_threshold_depends_on_the_answer_check() -> None:
    step = Step(Function(Model()))
    plain = SemanticCache(SingleShot(step), step, Notes(), agent="helpdesk")
    checked = SemanticCache(SingleShot(step), step, Notes(), agent="helpdesk", embedder=HashingEmbedder())
    assert plain.threshold == THRESHOLD and plain.embedder is None
    assert checked.threshold == CHECKED_THRESHOLD < THRESHOLD and checked.answer_check == ANSWER_CHECK
    assert repr(checked).endswith("agent='helpdesk', embedder=HashingEmbedder(256), answer_check=0, "
                                  "threshold=0.88)")


async def test_with_an_embedder_the_answers_vector_and_score_are_kept_for_the_check() -> None:
    model, notes = Model(lambda request, number: ANSWER), Notes()
    cache, _ = cached(model, notes, embedder=HashingEmbedder(), threshold=0.5)
    await cache.run(ask())
    [(_, item)] = notes.items[Scope("", "", "cache:helpdesk")]
    assert item.meta["answer_score"] == pytest.approx(score(QUESTION.casefold(), ANSWER))
    kept = array.array("f", base64.b64decode(item.meta["answer_vector"]))
    assert list(kept) == pytest.approx(list(HashingEmbedder().vector(ANSWER)), abs=1e-7), "float32, little-endian"
    plain, _ = cached(Model(), plain_notes := Notes())
    await plain.run(ask())
    [(_, bare)] = plain_notes.items[Scope("", "", "cache:helpdesk")]
    assert set(bare.meta) == {"answer", "question"}, "no embedder: nothing more to keep"


class Counting(HashingEmbedder):
    """A HashingEmbedder counting the texts it embedded."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    async def embed(self, texts: Sequence[str], *, kind: str = PASSAGE) -> list[Vector]:
        self.texts.extend(texts)
        return await super().embed(texts, kind=kind)


@pytest.mark.parametrize("kept", [
    {},
    {"answer_vector": "not base64!", "answer_score": 0.5},
    {"answer_vector": "AAAA", "answer_score": 0.5},  # one dimension: another model's
    {"answer_vector": "AADAfw==", "answer_score": 0.5},  # a NaN
    {"answer_score": "0.5"},
])
async def test_an_item_kept_without_a_usable_vector_is_checked_by_embedding_its_answer(kept: dict[str, Any]) -> None:
    notes, embedder = Notes(), Counting()
    where = Scope("", "", "cache:helpdesk")
    await notes.remember(where, QUESTION.casefold(), meta={"answer": ANSWER, "question": QUESTION, **kept})
    cache, _ = cached(Model(), notes, embedder=embedder, threshold=0.5)
    for asked, hits in ((FITTING, True), (UNFITTING, False)):
        embedder.texts.clear()
        done = await cache.run(ask(asked))
        assert done.outcome is not None
        assert done.outcome.data["SemanticCache"]["fit"] == pytest.approx(fit(asked)), kept
        assert done.outcome.data["SemanticCache"]["hit"] is hits
        assert ANSWER in embedder.texts and asked.casefold() in embedder.texts


async def test_an_item_kept_with_its_vector_costs_the_check_one_text() -> None:
    embedder = Counting()
    cache, _ = cached(Model(lambda request, number: ANSWER), Notes(), embedder=embedder, threshold=0.5)
    await cache.run(ask())
    assert embedder.texts == [QUESTION.casefold(), ANSWER], "the answer's vector and score, made once"
    embedder.texts.clear()
    done = await cache.run(ask(FITTING))
    assert done.outcome is not None and done.outcome.data["SemanticCache"]["fit"] == pytest.approx(fit(FITTING))
    assert embedder.texts == [FITTING.casefold()]
