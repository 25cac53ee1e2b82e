"""Context views: SlidingWindow, TruncateToolResults, FitToWindow, Ledger, AutoContext, tiktoken_counter."""

from __future__ import annotations

import json
import random
import sys
import types
from collections.abc import Iterable

import pytest

from cognitive import ReAct
from cognitive.context._ledger import LEDGER_KIND, AutoContext, Ledger
from cognitive.context._summarize import FromLastCompaction
from cognitive.context._tokens import tiktoken_counter
from cognitive.context._window import FitToWindow, SlidingWindow, TruncateToolResults
from loop import Request, Role, State, Step, Text, ToolCall, ToolResult, Turn, UsageError, approx_tokens, tool
from provider import Function, Scripted, tool_call
from tests.cognitive._histories import ask, chain, exchange, random_history, sendable_problem


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def roles(state: State) -> list[str]:
    return [t.role.value for t in state]


def call_ids(state: State) -> list[str]:
    return [c.id for t in state for c in t.tool_calls]


def ledger_turn(state: State) -> Turn:
    (turn,) = [t for t in state if t.meta.get("kind") == LEDGER_KIND]
    return turn


# -- SlidingWindow ------------------------------------------------------------------------------------------


def test_sliding_window_keeps_the_task_the_answers_and_the_newest_exchanges() -> None:
    state = chain(2).append(Role.ASSISTANT, Text("first answer")).append(Role.USER, Text("more"))
    for i in range(2, 6):
        state = exchange(state, f"c{i}", "lookup", {"key": f"k{i}"}, f"value {i}")
    view = SlidingWindow(2)(state)
    assert call_ids(view) == ["c4", "c5"]
    assert [t.text for t in view if t.role in (Role.SYSTEM, Role.USER) or t.text] == [
        "You are helpful.", "Follow the chain.", "first answer", "more"]
    assert [r.call_id for t in view for r in t.tool_results] == ["c4", "c5"]
    assert len(state) == 16  # the stored history is untouched


def test_sliding_window_returns_a_short_conversation_as_it_is() -> None:
    state = chain(2)
    assert SlidingWindow(2)(state) is state
    question = ask()
    assert SlidingWindow(5)(question) is question


def test_sliding_window_keeps_every_call_of_a_turn_with_several_calls_together() -> None:
    state = ask()
    state = state.append(Role.ASSISTANT, ToolCall("a", "lookup", "{}"), ToolCall("b", "lookup", '{"key": 1}'))
    state = state.append(Role.TOOL, ToolResult("a", "lookup", "1"), ToolResult("b", "lookup", "2"))
    state = exchange(state, "c", "lookup", {"key": 3}, "3")
    assert call_ids(SlidingWindow(1)(state)) == ["c"]
    assert call_ids(SlidingWindow(2)(state)) == ["a", "b", "c"]


def test_sliding_window_leaves_out_results_whose_call_is_gone_and_calls_never_answered() -> None:
    state = ask().append(Role.TOOL, ToolResult("x", "lookup", "stray"))
    state = state.append(Role.ASSISTANT, ToolCall("lost", "lookup", "{}")).append(Role.USER, Text("hello?"))
    state = exchange(state, "c1", "lookup", {}, "ok")
    view = SlidingWindow(3)(state)
    assert call_ids(view) == ["c1"] and sendable_problem(view.turns) is None


def test_sliding_window_keeps_the_open_calls_the_model_made_last() -> None:
    state = exchange(chain(3), "open", "lookup", {"key": "z"}, "z").prefix(9)
    assert state.pending_calls
    assert call_ids(SlidingWindow(1)(state)) == ["open"]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", None])
def test_sliding_window_rejects_a_bad_keep_pairs(bad: object) -> None:
    with pytest.raises(UsageError, match="keep_pairs"):
        SlidingWindow(bad)  # type: ignore[arg-type]


# -- TruncateToolResults -----------------------------------------------------------------------------------


def test_truncate_tool_results_excerpts_long_results_only() -> None:
    long = "HEAD" + "x" * 5000 + "TAIL"
    state = exchange(exchange(ask(), "a", "read", {}, long), "b", "read", {}, "short")
    view = TruncateToolResults(300)(state)
    first, second = [r for t in view for r in t.tool_results]
    assert first.content.startswith("HEAD") and first.content.endswith("TAIL")
    assert "4,708 of 5,008 characters cut" in first.content and len(first.content) < 400
    assert (first.call_id, first.name) == ("a", "read") and second.content == "short"
    assert call_ids(view) == ["a", "b"] and roles(view) == roles(state)
    assert [r.content for t in state for r in t.tool_results] == [long, "short"]


def test_truncate_tool_results_returns_short_results_as_they_are() -> None:
    state = chain(3)
    assert TruncateToolResults(1000)(state) is state


def test_truncate_tool_results_keeps_the_error_flag() -> None:
    state = exchange(ask(), "a", "read", {}, "e" * 100, error=True)
    (result,) = [r for t in TruncateToolResults(10)(state) for r in t.tool_results]
    assert result.is_error and "cut" in result.content


@pytest.mark.parametrize("bad", [0, -5, "10", 2.0])
def test_truncate_tool_results_rejects_a_bad_max_chars(bad: object) -> None:
    with pytest.raises(UsageError, match="max_chars"):
        TruncateToolResults(bad)  # type: ignore[arg-type]


# -- FitToWindow ---------------------------------------------------------------------------------------------


def test_fit_to_window_returns_what_fits_as_it_is() -> None:
    state = chain(3)
    assert FitToWindow(10_000)(state) is state


def test_fit_to_window_drops_the_oldest_exchanges_first_and_keeps_the_task_and_newest_exchange() -> None:
    state = chain(10, result_chars=400)
    limit = approx_tokens(state.turns) // 3
    view = FitToWindow(limit)(state)
    assert approx_tokens(view.turns) <= limit
    ids = call_ids(view)
    assert ids and ids[-1] == "c9" and ids == [f"c{i}" for i in range(10 - len(ids), 10)]
    assert view[0].text == "You are helpful." and view[1].text == "Follow the chain."
    assert sendable_problem(view.turns) is None


def test_fit_to_window_drops_older_messages_after_every_older_exchange() -> None:
    state = ask("one " * 200)
    state = exchange(state, "a", "lookup", {}, "r" * 400).append(Role.ASSISTANT, Text("answer one " * 50))
    state = state.append(Role.USER, Text("two")).append(Role.ASSISTANT, Text("answer two"))
    state = state.append(Role.USER, Text("three"))
    budget = approx_tokens(state.turns) - approx_tokens([state[2], state[3]]) + 5
    view = FitToWindow(budget)(state)
    assert call_ids(view) == [] and view[1].text.startswith("one")
    tight = FitToWindow(approx_tokens([state[0], state[-1], state[-2], state[-3]]) + 5)(state)
    assert [t.text for t in tight] == ["You are helpful.", "two", "answer two", "three"]


def test_fit_to_window_raises_a_clear_error_when_even_the_essentials_do_not_fit() -> None:
    state = chain(3, system="rules " * 400)
    with pytest.raises(UsageError, match=r"FitToWindow\(max_tokens=100\).*needs \d+ tokens.*system turns take \d+"):
        FitToWindow(100)(state)


def test_fit_to_window_keeps_the_newest_exchange_it_must_answer() -> None:
    state = exchange(ask(), "big", "read", {}, "r" * 4000)
    with pytest.raises(UsageError, match="max_tokens=50"):
        FitToWindow(50)(state)
    assert call_ids(FitToWindow(50)(TruncateToolResults(60)(state))) == ["big"]


def test_fit_to_window_fits_with_a_counter_that_does_not_add_up() -> None:
    def framed(turns: Iterable[Turn]) -> int:  # a fixed cost per request, as real chat formats have
        return 50 + approx_tokens(turns)

    state = chain(12, result_chars=200)
    for limit in range(framed(state.turns[:2]) + 200, framed(state.turns), 37):
        assert framed(FitToWindow(limit, counter=framed)(state).turns) <= limit


def test_fit_to_window_rejects_bad_settings_and_a_counter_that_does_not_count() -> None:
    with pytest.raises(UsageError, match="max_tokens"):
        FitToWindow(0)
    with pytest.raises(UsageError, match="counter"):
        FitToWindow(10, counter="tiktoken")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="returned 'many'"):
        FitToWindow(10, counter=lambda turns: "many")(chain(2))  # type: ignore[arg-type,return-value]


# -- Ledger ------------------------------------------------------------------------------------------------


def test_ledger_shows_the_task_one_facts_turn_and_the_exchange_the_model_is_answering() -> None:
    state = chain(5)
    view = Ledger()(state)
    assert roles(view) == ["system", "user", "system", "assistant", "tool"]
    assert call_ids(view) == ["c4"]
    facts = ledger_turn(view).text.splitlines()[1:]
    assert facts == [f'- lookup({{"key":"k{i}"}}) = {f"value {i} ".ljust(20, ".")}' for i in range(4)]
    assert ledger_turn(view).meta["facts"] == 4


def test_ledger_keeps_one_fact_per_call_with_its_latest_result() -> None:
    state = exchange(ask(), "a", "search", '{"q": "x", "n": 1}', "old")
    state = exchange(state, "b", "search", {"q": "y"}, "why")
    state = exchange(state, "c", "search", '{"n":1,"q":"x"}', "new")
    state = exchange(state, "d", "lookup", {"key": "z"}, "zed")
    lines = ledger_turn(Ledger()(state)).text.splitlines()[1:]
    assert lines == ['- search({"n":1,"q":"x"}) = new', '- search({"q":"y"}) = why']


def test_ledger_does_not_list_a_call_the_kept_exchange_repeats() -> None:
    state = exchange(exchange(chain(2), "again", "lookup", {"key": "k0"}, "fresh"), "z", "x", {}, "1").prefix(8)
    view = Ledger()(state)
    assert "k0" not in ledger_turn(view).text and "k1" in ledger_turn(view).text
    assert call_ids(view) == ["again"]


def test_ledger_lists_failed_calls_as_failed() -> None:
    state = exchange(ask(), "a", "read", {"path": "/x"}, "error: no such file", error=True)
    state = exchange(state, "b", "read", {"path": "/y"}, "contents")
    assert '- read({"path":"/x"}) failed: no such file' in ledger_turn(Ledger()(state)).text


def test_ledger_excerpts_long_results() -> None:
    state = exchange(exchange(ask(), "a", "read", {}, "START" + "m" * 5000 + "END"), "b", "read", {"p": 1}, "x")
    text = ledger_turn(Ledger(max_result_chars=120)(state)).text
    assert "START" in text and "END" in text and "characters cut" in text and len(text) < 500


def test_ledger_caps_the_list_and_keeps_the_newest_facts() -> None:
    state = chain(40, result_chars=100)
    text = ledger_turn(Ledger(max_chars=1_000)(state)).text
    assert "k38" in text and "k0\"" not in text
    assert "older facts are not listed" in text
    assert len(text) < 1_000 + 400


def test_ledger_folds_every_exchange_when_the_model_answers_a_new_message() -> None:
    state = chain(3).append(Role.ASSISTANT, Text("done")).append(Role.USER, Text("and now?"))
    view = Ledger()(state)
    assert roles(view) == ["system", "user", "system", "assistant", "user"]
    assert "k2" in view[2].text and view[3].text == "done"


def test_ledger_puts_the_facts_where_the_newest_folded_exchange_was() -> None:
    state = chain(1).append(Role.ASSISTANT, Text("first")).append(Role.USER, Text("second question"))
    state = exchange(exchange(state, "d", "lookup", {"key": "d"}, "dd"), "e", "lookup", {"key": "e"}, "ee")
    view = Ledger()(state)
    assert roles(view) == ["system", "user", "assistant", "user", "system", "assistant", "tool"]
    assert "k0" in view[4].text and '"d"' in view[4].text


def test_ledger_returns_a_conversation_with_nothing_to_fold_as_it_is() -> None:
    question = ask()
    assert Ledger()(question) is question
    state = chain(1)
    assert Ledger()(state) is state


@pytest.mark.parametrize("settings", [{"max_result_chars": 0}, {"max_chars": 0}, {"max_result_chars": "5"}])
def test_ledger_rejects_bad_settings(settings: dict[str, object]) -> None:
    with pytest.raises(UsageError, match=next(iter(settings))):
        Ledger(**settings)  # type: ignore[arg-type]


# -- AutoContext --------------------------------------------------------------------------------------------


def test_auto_context_shows_the_full_history_until_a_threshold_passes() -> None:
    view = AutoContext(max_tool_results=3, max_tokens=None)
    short = chain(3)
    assert view(short) is short
    assert roles(view(chain(4))) == ["system", "user", "system", "assistant", "tool"]


def test_auto_context_switches_on_the_token_estimate_too() -> None:
    view = AutoContext(max_tool_results=None, max_tokens=300)
    short = chain(2, result_chars=100)
    assert view(short) is short
    assert approx_tokens(chain(6, result_chars=300).turns) > 300
    assert any(t.meta.get("kind") == LEDGER_KIND for t in view(chain(6, result_chars=300)))


def test_auto_context_takes_a_counter_and_a_ledger_of_its_own() -> None:
    seen: list[int] = []

    def counter(turns: Iterable[Turn]) -> int:
        seen.append(len(list(turns)))
        return 10**6

    view = AutoContext(max_tool_results=None, max_tokens=5, counter=counter, ledger=Ledger(max_result_chars=3))
    assert seen == [] and "..." in ledger_turn(view(chain(3, result_chars=50))).text and seen == [8]


def test_auto_context_rejects_settings_that_never_switch_or_are_bad() -> None:
    with pytest.raises(UsageError, match="max_tool_results or max_tokens"):
        AutoContext(max_tool_results=None, max_tokens=None)
    with pytest.raises(UsageError, match="max_tool_results"):
        AutoContext(max_tool_results=0)
    with pytest.raises(UsageError, match="ledger"):
        AutoContext(ledger="yes")  # type: ignore[arg-type]


# -- every view over many histories ---------------------------------------------------------------------------


VIEWS = [
    SlidingWindow(1), SlidingWindow(2), SlidingWindow(5), Ledger(), Ledger(max_result_chars=10, max_chars=200),
    AutoContext(max_tool_results=3), TruncateToolResults(20), FromLastCompaction(),
]


@pytest.mark.parametrize("view", VIEWS, ids=repr)
@pytest.mark.parametrize("broken", [False, True], ids=["valid", "broken"])
def test_views_never_orphan_a_call_or_a_result(view: object, broken: bool) -> None:
    rng = random.Random(7)
    for _ in range(300):
        state = random_history(rng, broken=broken)
        shown = view(state)  # type: ignore[operator]
        assert isinstance(shown, State)
        # Views that leave exchanges out leave out what no provider accepts too; the others change nothing there.
        repairs = isinstance(view, (SlidingWindow, Ledger)) or (isinstance(view, AutoContext) and view.passed(state))
        if not broken or repairs:
            assert sendable_problem(shown.turns) is None, (view, state.turns, shown.turns)
        assert [t for t in shown if t.role is Role.SYSTEM and "kind" not in t.meta] == [
            t for t in state if t.role is Role.SYSTEM]
        assert [t for t in shown if t.role is Role.USER] == [t for t in state if t.role is Role.USER]
        assert shown.meta == state.meta


@pytest.mark.parametrize("broken", [False, True], ids=["valid", "broken"])
def test_fit_to_window_never_passes_its_limit_and_never_orphans(broken: bool) -> None:
    rng = random.Random(11)
    fitted = refused = 0
    for _ in range(300):
        state = random_history(rng, broken=broken)
        limit = rng.randint(20, max(21, approx_tokens(state.turns)))
        try:
            view = FitToWindow(limit)(state)
        except UsageError as exc:
            refused += 1
            assert f"max_tokens={limit}" in str(exc)
            continue
        fitted += 1
        assert approx_tokens(view.turns) <= limit
        if view is not state:
            assert sendable_problem(view.turns) is None
            latest_user = [t for t in state if t.role is Role.USER][-1]
            assert latest_user in view.turns
            assert [t for t in view if t.role is Role.SYSTEM] == [t for t in state if t.role is Role.SYSTEM]
            first = next(t for t in view if t.role is not Role.SYSTEM)
            assert first.role is Role.USER  # never an answer whose question was left out
    assert fitted > 100 and refused > 5


# -- inside a step ---------------------------------------------------------------------------------------------


async def test_views_run_inside_a_step_and_only_change_what_the_model_sees() -> None:
    async def window(state: State) -> State:
        return SlidingWindow(1)(state)

    script = Scripted([tool_call("lookup", {"key": "a"}), tool_call("lookup", {"key": "b"}),
                       tool_call("lookup", {"key": "c"}), "done"])
    step = Step(script, tools=[lookup], transforms=[window, TruncateToolResults(1000)])
    state = await ReAct(step).run(ask())
    assert state.answer == "done" and len(state) == 9
    assert [len(r.turns) for r in script.requests] == [2, 4, 4, 4]
    assert [c.arguments for c in script.requests[-1].turns[2].tool_calls] == ['{"key": "c"}']


async def test_a_thirty_step_chain_keeps_the_ledger_prompt_flat() -> None:
    prompts: dict[str, list[int]] = {}

    def model(name: str) -> Function:
        sizes = prompts.setdefault(name, [])

        def reply(request: Request) -> object:
            sizes.append(approx_tokens(request.turns))
            done = sum(1 for t in request.turns for _ in t.tool_results)
            facts = ledger_count(request.turns)
            step_no = done + facts
            return tool_call("read", {"page": step_no}) if step_no < 30 else "all pages read"

        return Function(reply)

    @tool
    async def read(page: int) -> str:
        """Read a page."""
        return f"page {page}: next is {page + 1}. " + "lorem ipsum " * 300

    for name, transforms in (("full", []), ("ledger", [Ledger(max_result_chars=100, max_chars=1_500)])):
        state = await ReAct(Step(model(name), tools=[read], transforms=transforms), max_turns=40).run(
            ask("Read the pages in order."))
        assert state.answer == "all pages read" and sum(len(t.tool_results) for t in state) == 30
    ledger, full = prompts["ledger"], prompts["full"]
    assert len(ledger) == len(full) == 31
    # From the first request holding a result on, the prompt grows by at most the capped list of facts, and
    # once the list is full it does not grow at all; the full history grows by a page a turn.
    assert max(ledger[1:]) <= 1.5 * ledger[1]
    assert max(ledger[15:]) <= 1.02 * ledger[15]
    assert full[-1] > 20 * full[1] and sum(full) > 5 * sum(ledger)


def ledger_count(turns: Iterable[Turn]) -> int:
    return sum(int(t.meta.get("facts", 0)) for t in turns if t.meta.get("kind") == LEDGER_KIND)


# -- tiktoken_counter -------------------------------------------------------------------------------------------


def test_tiktoken_counter_names_the_extra_when_tiktoken_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # makes the import fail as if it were not installed
    with pytest.raises(UsageError, match=r"cognitive-loop\[tokens\]"):
        tiktoken_counter()


def test_tiktoken_counter_counts_every_part_with_the_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    class Words:
        def encode(self, text: str, disallowed_special: object = None) -> list[str]:
            assert disallowed_special == ()
            return text.split()

    def get_encoding(name: str) -> Words:
        if name != "o200k_base":
            raise ValueError(f"Unknown encoding {name}")
        return Words()

    monkeypatch.setitem(sys.modules, "tiktoken", types.SimpleNamespace(get_encoding=get_encoding))
    count = tiktoken_counter()
    state = exchange(ask("two words", system=None), "a", "read", '{"a": 1}', "three more words")
    assert count(state.turns) == 3 * 4 + 2 + 2 + 3
    with pytest.raises(UsageError, match="no encoding 'nope'"):
        tiktoken_counter("nope")
    with pytest.raises(UsageError, match="encoding"):
        tiktoken_counter("")


def test_canonical_arguments_make_equal_calls_equal() -> None:
    from cognitive.context._exchanges import call_key

    same = call_key(ToolCall("2", "s", '{"a":"é","b":[1,2]}'))
    assert call_key(ToolCall("1", "s", '{"b": [1, 2], "a": "é"}')) == same
    assert call_key(ToolCall("1", "s", " not json ")) == ("s", "not json")
    assert json.loads(call_key(ToolCall("1", "s", '{"x": 1}'))[1]) == {"x": 1}
