"""Summarize (compaction boundaries made by a model) and FromLastCompaction."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from cognitive import PatternKind
from cognitive import ReAct
from cognitive.context._summarize import FromLastCompaction, Summarize
from cognitive.context._window import TruncateToolResults
from loop import Options, Request, Role, State, Step, Text, ToolCall, Turn, TurnCompleted, UsageError, tool
from loop.errors import BudgetExhausted
from provider import Function, Scripted, tool_call
from tests.cognitive._histories import ask, chain, exchange, sendable_problem


def turn_count(turns: Iterable[Turn]) -> int:
    """A counter that counts turns, so thresholds are easy to read."""
    return len(list(turns))


def boundaries(state: State) -> list[Turn]:
    return [t for t in state if t.kind == PatternKind.COMPACTION]


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


async def test_a_short_conversation_is_not_summarized() -> None:
    model, summarizer = Scripted(["answer"]), Scripted([])
    state = await Summarize(Step(model), Step(summarizer), max_tokens=100, counter=turn_count).turn(chain(3))
    assert state.answer == "answer" and not boundaries(state) and summarizer.used == 0
    assert len(model.requests[0].turns) == 8


async def test_a_long_conversation_gets_a_stored_boundary_and_the_model_sees_from_it_on() -> None:
    model, summarizer = Scripted(["answer"]), Scripted(["k0 and k1 were looked up"])
    wrapper = Summarize(Step(model), Step(summarizer), max_tokens=6, keep_last=2, counter=turn_count)
    start = chain(4)
    state = await wrapper.turn(start)

    assert state.turns[:10] == start.turns  # nothing stored was dropped
    (boundary,) = boundaries(state)
    assert state[10] is boundary and boundary.role is Role.SYSTEM
    assert boundary.meta["kind"] == "compaction" and boundary.meta["kept"] == 4 and boundary.meta["summarized"] == 4
    assert "k0 and k1 were looked up" in boundary.text
    assert state.answer == "answer" and len(state) == 12

    seen = model.requests[0].turns
    assert [t.text for t in seen[:2]] == ["You are helpful.", "Follow the chain."]
    assert [c.id for t in seen for c in t.tool_calls] == ["c2", "c3"]
    assert seen[-1] == boundary and sendable_problem(seen) is None

    (asked,) = summarizer.requests
    assert asked.options.tool_choice == "none" and asked.path.endswith("summarize")
    assert asked.turns[0].role is Role.SYSTEM and "summar" in asked.turns[0].text.lower()
    transcript = asked.turns[1].text
    assert 'lookup({"key":"k0"})' in transcript and "value 1" in transcript and "k2" not in transcript
    assert "Follow the chain." in transcript  # given as context, and kept as it is


async def test_by_default_the_newest_four_messages_stay_word_for_word() -> None:
    model, summarizer = Scripted(["answer"]), Scripted(["the gist"])
    state = await Summarize(Step(model), Step(summarizer), max_tokens=6, counter=turn_count).turn(chain(8))
    assert boundaries(state)[0].meta["kept"] == 8 and boundaries(state)[0].meta["summarized"] == 8
    assert [c.id for t in model.requests[0].turns for c in t.tool_calls] == ["c4", "c5", "c6", "c7"]


async def test_the_boundary_is_published_on_the_steps_events() -> None:
    step = Step(Scripted(["answer"]))
    with step.events.subscribe(buffer=None) as events:
        await Summarize(step, Step(Scripted(["short"])), max_tokens=3, keep_last=1, counter=turn_count).turn(chain(2))
        completed = [e.turn for e in events.drain() if isinstance(e, TurnCompleted)]
    assert [t.kind for t in completed] == [PatternKind.COMPACTION, None]


async def test_later_turns_see_the_conversation_from_the_newest_boundary() -> None:
    model = Scripted(["first", "second"])
    step = Step(model)
    state = await Summarize(step, Step(Scripted(["gist"])), max_tokens=6, keep_last=1, counter=turn_count).turn(
        chain(4))
    state = state.append(Role.USER, Text("next?"))
    state = await Summarize(step, Step(Scripted([])), max_tokens=100, counter=turn_count).turn(state)
    assert state.answer == "second"
    assert [t.text for t in model.requests[1].turns if t.role is not Role.TOOL] == [
        "You are helpful.", "Follow the chain.", "", boundaries(state)[0].text, "first", "next?"]


async def test_a_second_boundary_summarizes_the_first_and_replaces_it_in_view() -> None:
    def summarize(request: Request) -> str:
        return f"summary {len(summarizer_requests) + 1}"

    summarizer_requests: list[Request] = []

    def recording(request: Request) -> str:
        reply = summarize(request)
        summarizer_requests.append(request)
        return reply

    model = Function(lambda request: tool_call("lookup", {"key": f"n{len(request.turns)}"}))
    wrapper = Summarize(Step(model, tools=[lookup]), Step(Function(recording)), max_tokens=8, keep_last=2,
                        counter=turn_count)
    state = chain(4)
    seen: list[tuple[Turn, ...]] = []
    for _ in range(6):
        state = await wrapper.turn(state)
        seen.append(FromLastCompaction()(state).turns)
    assert len(boundaries(state)) >= 2 and len(summarizer_requests) == len(boundaries(state))
    assert "summary 1" in summarizer_requests[1].turns[1].text  # the first summary is summarized again
    view = FromLastCompaction()(state)
    assert [t.text for t in view if t.kind == PatternKind.COMPACTION] == [boundaries(state)[-1].text]
    assert all(sendable_problem(v) is None and len(v) <= 10 for v in seen)
    assert len(state) > 20


async def test_a_failing_summarizer_loses_nothing_and_the_turn_still_runs() -> None:
    model = Scripted(["answer anyway"])
    wrapper = Summarize(Step(model), Step(Scripted([RuntimeError("model down")])), max_tokens=3,
                        keep_last=1, counter=turn_count)
    start = chain(3)
    state = await wrapper.turn(start)
    assert state.turns[:8] == start.turns and not boundaries(state) and state.answer == "answer anyway"
    assert len(model.requests[0].turns) == 8  # the history it would have seen without the compaction
    assert state.outcome is not None and state.outcome.ok
    assert "model down" in state.outcome.data["Summarize"]["compaction_failed"]


async def test_an_empty_summary_counts_as_a_failure_and_is_marked_under_the_run_path() -> None:
    wrapper = Summarize(Step(Scripted(["done"])), Step(Scripted([""])), max_tokens=3, keep_last=1,
                        counter=turn_count)
    state = await ReAct(wrapper).run(chain(3))
    assert not boundaries(state)
    assert "no text" in state.outcome.data["ReAct/Summarize"]["compaction_failed"]


class Raising:
    def __init__(self, error: Exception) -> None:
        self.error = error

    async def turn(self, state: State, options: Options | None = None) -> State:
        raise self.error


@pytest.mark.parametrize("error", [UsageError("misconfigured"), BudgetExhausted("out", budget="b")])
async def test_misuse_and_a_spent_budget_are_raised_not_hidden(error: Exception) -> None:
    model = Scripted(["never asked"])
    wrapper = Summarize(Step(model), Raising(error), max_tokens=3, keep_last=1, counter=turn_count)
    with pytest.raises(type(error)):
        await wrapper.turn(chain(3))
    assert model.used == 0


async def test_no_boundary_is_made_between_calls_and_their_results() -> None:
    state = chain(3).append(Role.ASSISTANT, ToolCall("open", "lookup", '{"key": "x"}'))
    model, summarizer = Scripted(["reply"]), Scripted(["never"])
    wrapper = Summarize(Step(model), Step(summarizer), max_tokens=3, keep_last=1, counter=turn_count)
    with pytest.raises(UsageError, match="wait for their results"):
        await wrapper.compact(state)
    state = await wrapper.turn(state)
    assert summarizer.used == 0 and model.used == 1 and not boundaries(state)


async def test_the_steps_own_views_apply_after_the_boundary_view() -> None:
    model = Scripted(["ok"])
    step = Step(model, transforms=[TruncateToolResults(30)])
    await Summarize(step, Step(Scripted(["gist"])), max_tokens=4, keep_last=1, counter=turn_count).turn(
        chain(3, result_chars=500))
    seen = model.requests[0].turns
    assert any(t.kind == PatternKind.COMPACTION for t in seen)
    assert all(len(r.content) < 100 for t in seen for r in t.tool_results)


async def test_summarize_stands_in_for_the_step_as_a_turn_executor() -> None:
    step = Step(Scripted([]))
    wrapper = Summarize(step, step)
    state = await wrapper.submit(ask(), Role.SYSTEM, Text("note"))
    assert state.last is not None and state.last.text == "note"


def test_summarize_rejects_what_it_cannot_use() -> None:
    step = Step(Scripted([]))

    class Bare:
        async def turn(self, state: State, options: Options | None = None) -> State:
            return state

    with pytest.raises(UsageError, match="derive"):
        Summarize(Bare(), step)
    with pytest.raises(UsageError, match="summarizer"):
        Summarize(step, object())  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="loop.Executor"):
        Summarize(object(), step)  # type: ignore[arg-type]
    for setting in ({"max_tokens": 0}, {"keep_last": 0}, {"counter": 3}, {"prompt": " "}):
        with pytest.raises(UsageError, match=next(iter(setting))):
            Summarize(step, step, **setting)  # type: ignore[arg-type]


# -- FromLastCompaction --------------------------------------------------------------------------------------


def compacted(kept: object) -> State:
    state = chain(4).append(Role.SYSTEM, Text("the gist"), meta={"kind": "compaction", "kept": kept})
    return exchange(state, "after", "lookup", {"key": "z"}, "zz")


def test_from_last_compaction_reads_a_stored_conversation_back_the_same_way() -> None:
    state = compacted(2)
    view = FromLastCompaction()(state)
    assert [t.text or t.role.value for t in view] == [
        "You are helpful.", "Follow the chain.", "assistant", "tool", "the gist", "assistant", "tool"]
    again = State.from_json(state.to_json())
    assert FromLastCompaction()(again).turns == view.turns
    assert FromLastCompaction()(view).turns == view.turns  # a view of a view changes nothing


@pytest.mark.parametrize("kept", [1, -3, "two", 99, True])
def test_from_last_compaction_never_starts_between_a_call_and_its_results(kept: object) -> None:
    view = FromLastCompaction()(compacted(kept))
    assert sendable_problem(view.turns) is None
    assert view[0].text == "You are helpful." and view[1].text == "Follow the chain."


def test_from_last_compaction_returns_a_conversation_without_a_boundary_as_it_is() -> None:
    state = chain(3)
    assert FromLastCompaction()(state) is state


def test_from_last_compaction_pins_the_first_user_message_only() -> None:
    state = chain(1).append(Role.ASSISTANT, Text("a1")).append(Role.USER, Text("second"))
    state = state.append(Role.ASSISTANT, Text("a2")).append(Role.SYSTEM, Text("gist"), meta={"kind": "compaction"})
    assert [t.text for t in FromLastCompaction()(state)] == ["You are helpful.", "Follow the chain.", "gist"]
