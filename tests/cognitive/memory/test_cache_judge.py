"""The semantic cache's judge: a remembered question close enough answers only when a model reading both says yes;
the judge is a charged, visible sub-run off the conversation; no, neither, a failure or a cancellation never
loses the answer."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from cognitive import ReAct, SingleShot, WithBudget
from cognitive.memory._cache_judge import JUDGE_PROMPT, SameQuestion, verdict
from cognitive.memory._semantic_cache import CACHE_JUDGED, JUDGED_THRESHOLD, THRESHOLD, SemanticCache
from loop import Budget, Request, Stamped, Step, TurnCompleted, UsageError
from provider import Function, HashingEmbedder
from tests.cognitive.memory.test_semantic_cache import QUESTION, REWORDED, Model, Notes, ask


def judged_by(says: str) -> Model:
    """A model answering the judge's request with ``says`` and any other with ``answer N``."""
    return Model(lambda request, number: says if request.path.endswith("SameQuestion") else f"answer {number}")


def judging(model: Model, notes: Notes, **settings: Any) -> SemanticCache:
    step = Step(Function(model))
    return SemanticCache(ReAct(step), step, notes, agent="helpdesk", judge=step, threshold=0.7, **settings)


@pytest.mark.parametrize("reply, said", [
    ("yes", True), ("Yes.", True), ("**YES** - same question", True), ("  no", False), ("No, they differ.", False),
    ("yesterday", None), ("maybe", None), ("", None), ("42", None), ("I think yes", None),
])
def test_a_verdict_is_the_replys_first_word(reply: str, said: bool | None) -> None:
    assert verdict(reply) is said


async def test_a_close_question_the_judge_says_yes_to_is_answered_from_the_cache() -> None:
    model, notes = judged_by("Yes"), Notes()
    cache = judging(model, notes)
    first = await cache.run(ask())
    assert first.answer == "answer 1" and len(model.requests) == 1, "nothing remembered yet: the judge is not asked"
    again = await cache.run(ask(REWORDED))
    assert again.answer == "answer 1"
    chat, judge = model.requests
    assert judge.path == "SemanticCache/SameQuestion"
    assert judge.options.tool_choice == "none" and judge.tools == ()
    assert judge.turns[0].text == JUDGE_PROMPT
    assert QUESTION in judge.turns[1].text and REWORDED in judge.turns[1].text
    assert judge.turns[1].text.index(QUESTION) < judge.turns[1].text.index(REWORDED), "remembered first"
    assert again.outcome is not None and again.outcome.data["SemanticCache"]["judged"] is True
    assert again.outcome.data["SemanticCache"]["hit"] is True


@pytest.mark.parametrize("reply, said", [("no", False), ("I cannot tell", None)])
async def test_a_close_question_the_judge_does_not_say_yes_to_asks_the_model_and_is_remembered(
        reply: str, said: bool | None, spans: Any) -> None:
    model, notes = judged_by(reply), Notes()
    cache = judging(model, notes)
    await cache.run(ask())
    again = await cache.run(ask(REWORDED))
    assert again.answer == "answer 3" and len(model.requests) == 3, "answer, judge, answer"
    assert again.outcome is not None and again.outcome.data["SemanticCache"]["hit"] is False
    assert again.outcome.data["SemanticCache"]["judged"] is said
    assert [q for _, q, _ in notes.texts()] == [QUESTION, REWORDED]
    [_, second] = [s for s in spans.get_finished_spans() if s.name == "invoke_agent SemanticCache"]
    assert second.attributes.get(CACHE_JUDGED) == (False if said is False else None)


async def test_a_question_below_the_threshold_is_never_shown_to_the_judge() -> None:
    model, notes = judged_by("yes"), Notes()
    cache = judging(model, notes, k=3)
    await cache.run(ask())
    await cache.run(ask("what is the capital of australia"))
    assert [r.path for r in model.requests] == ["SemanticCache/ReAct", "SemanticCache/ReAct"]


async def test_the_judge_is_charged_to_the_budget_and_published_as_a_branch() -> None:
    model = judged_by("yes")
    step = Step(Function(model))
    agent = WithBudget(SemanticCache(SingleShot(step), step, Notes(), agent="helpdesk", judge=step, threshold=0.7),
                       Budget(max_turns=5))
    await agent.run(ask())
    stamped = step.events.subscribe(stamped=True)
    again = await agent.run(ask(REWORDED))
    assert again.answer == "answer 1"
    assert again.outcome is not None and again.outcome.data["WithBudget"]["spent"]["turns"] == 1, "the judge's turn"
    paths = [(e.path, e.main) for e in stamped.drain() if isinstance(e, Stamped) and isinstance(e.event, TurnCompleted)]
    assert ("WithBudget/SemanticCache/SameQuestion", False) in paths
    assert [t.text for t in again] == [REWORDED, "answer 1"], "never taken for the conversation"


async def test_a_judge_that_fails_costs_a_model_call_and_misuse_is_raised() -> None:
    async def broken(remembered: str, asked: str) -> bool:
        raise OSError("judge unreachable")

    model, notes = Model(), Notes()
    step = Step(Function(model))
    cache = SemanticCache(SingleShot(step), step, notes, agent="helpdesk", judge=broken, threshold=0.7)
    await cache.run(ask())
    again = await cache.run(ask(REWORDED))
    assert again.answer == "answer 2" and again.outcome is not None
    assert again.outcome.data["SemanticCache"] == {"hit": False, "score": pytest.approx(again.outcome.data[
        "SemanticCache"]["score"]), "judged": False}

    async def misused(remembered: str, asked: str) -> bool:
        raise UsageError("a judge misconfigured")

    cache = SemanticCache(SingleShot(step), step, notes, agent="helpdesk", judge=misused, threshold=0.7)
    with pytest.raises(UsageError, match="misconfigured"):
        await cache.run(ask(REWORDED))


async def test_cancelled_while_judging_answers_nothing_and_remembers_nothing() -> None:
    started = anyio.Event()

    async def slow(request: Request) -> str:
        if request.path.endswith("SameQuestion"):
            started.set()
            await anyio.sleep_forever()
        return "answer"

    notes = Notes()
    step = Step(Function(slow))
    cache = SemanticCache(SingleShot(step), step, notes, agent="helpdesk", judge=step, threshold=0.7)
    await cache.run(ask())
    async with anyio.create_task_group() as group:
        group.start_soon(cache.run, ask(REWORDED))
        await started.wait()
        group.cancel_scope.cancel()
    assert [q for _, q, _ in notes.texts()] == [QUESTION]


async def test_a_judge_of_ones_own_is_an_async_callable() -> None:
    shown: list[tuple[str, str]] = []

    async def strict(remembered: str, asked: str) -> bool:
        shown.append((remembered, asked))
        return remembered.casefold() == asked.casefold()

    model, notes = Model(), Notes()
    step = Step(Function(model))
    cache = SemanticCache(SingleShot(step), step, notes, agent="helpdesk", judge=strict, threshold=0.7)
    await cache.run(ask())
    assert (await cache.run(ask(REWORDED))).answer == "answer 2"
    assert (await cache.run(ask(QUESTION.upper()))).answer == "answer 1"
    assert shown == [(QUESTION, REWORDED), (QUESTION, QUESTION.upper())]


def test_the_default_threshold_with_a_judge_leaves_the_choice_to_it() -> None:
    step = Step(Function(Model()))
    assert SemanticCache(SingleShot(step), step, Notes(), agent="a", judge=step).threshold == JUDGED_THRESHOLD
    assert SemanticCache(SingleShot(step), step, Notes(), agent="a").threshold == THRESHOLD
    assert JUDGED_THRESHOLD < THRESHOLD
    with_both = SemanticCache(SingleShot(step), step, Notes(), agent="a", judge=step, embedder=HashingEmbedder())
    assert "judge=SameQuestion(" in repr(with_both)


@pytest.mark.parametrize("make, message", [
    (lambda step: SemanticCache(SingleShot(step), step, Notes(), agent="a", judge="yes"),  # type: ignore[arg-type]
     "judge must be a TurnRunner"),
    (lambda step: SameQuestion(object()), "SameQuestion needs a TurnRunner"),  # type: ignore[arg-type]
    (lambda step: SameQuestion(step, prompt=""), "prompt must be a non-empty string"),
])
def test_bad_judges_are_refused(make: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        make(Step(Function(Model())))
