"""``State``: an immutable conversation with O(1) append and fork."""

import tracemalloc

import pytest

from loop import Reasoning, Role, State, Text, ToolCall, ToolResult, Turn, Usage, UsageError


def chat() -> State:
    return (
        State()
        .append(Role.SYSTEM, Text("be brief"))
        .append(Role.USER, Text("hi"))
        .append(Role.ASSISTANT, Text("hello"))
    )


def test_empty_state() -> None:
    state = State()
    assert len(state) == 0
    assert not state
    assert state.turns == ()
    assert list(state) == []
    assert state.last is None
    assert state.answer is None
    assert state.pending_calls == ()
    assert state.meta == {}
    assert state.usage == Usage()
    assert not state.degraded


def test_append_returns_a_new_state_and_leaves_the_old_one_alone() -> None:
    empty = State()
    one = empty.append(Role.USER, Text("hi"))
    two = one.append("assistant", Text("hello"), meta={"model": "m"})
    assert len(empty) == 0 and len(one) == 1 and len(two) == 2
    assert one.turns == (Turn(Role.USER, (Text("hi"),)),)
    assert two.last == Turn(Role.ASSISTANT, (Text("hello"),))
    assert two.last is not None and two.last.meta == {"model": "m"}
    assert two.last.role is Role.ASSISTANT


def test_append_turn_takes_a_turn_only() -> None:
    turn = Turn(Role.USER, (Text("x"),))
    assert State().append_turn(turn).last is turn
    with pytest.raises(UsageError, match="takes a Turn"):
        State().append_turn("x")  # type: ignore[arg-type]


def test_append_rejects_non_parts() -> None:
    with pytest.raises(UsageError):
        State().append(Role.USER, "not a part")  # type: ignore[arg-type]


def test_constructor_takes_turns_and_meta_and_checks_them() -> None:
    turns = [Turn(Role.USER, (Text("a"),)), Turn(Role.ASSISTANT, (Text("b"),))]
    state = State(turns, {"k": 1})
    assert state.turns == tuple(turns)
    assert state.meta == {"k": 1}
    with pytest.raises(UsageError, match="must be Turn values"):
        State([Text("a")])  # type: ignore[list-item]
    with pytest.raises(UsageError, match="meta must be a mapping"):
        State((), ["not", "a", "mapping"])  # type: ignore[arg-type]


def test_fork_gives_independent_branches_sharing_the_prefix() -> None:
    base = chat().append(Role.USER, Text("question"))
    left = base.append(Role.ASSISTANT, Text("left"))
    right = base.append(Role.ASSISTANT, Text("right"))
    assert left.answer == "left" and right.answer == "right"
    assert base.last == Turn(Role.USER, (Text("question"),))
    assert left.turns[:-1] == right.turns[:-1] == base.turns
    assert all(a is b for a, b in zip(left.turns, right.turns[:-1]))
    deeper = left.append(Role.USER, Text("more"))
    assert right.turns[-1].text == "right" and len(right) == 5
    assert deeper.turns[:5] == left.turns


def test_reading_turns() -> None:
    state = chat()
    assert len(state) == 3
    assert [t.role for t in state] == [Role.SYSTEM, Role.USER, Role.ASSISTANT]
    assert state[0].text == "be brief"
    assert state[-1] is state.last
    assert state[1:] == state.turns[1:]
    assert [t.text for t in state.reversed()] == ["hello", "hi", "be brief"]
    with pytest.raises(IndexError):
        state[3]


def test_reading_turns_of_many_branches_stays_correct() -> None:
    # turns are cached per state; reading one branch must never disturb another's view
    base = chat()
    assert len(base.turns) == 3
    branches = [base.append(Role.USER, Text(str(i))) for i in range(5)]
    for i, branch in enumerate(branches):
        assert [t.text for t in branch] == ["be brief", "hi", "hello", str(i)]
    assert [t.text for t in base] == ["be brief", "hi", "hello"]
    assert branches[0].turns[-1].text == "0"


def test_reading_turns_a_turn_or_two_past_a_state_read_before() -> None:
    # A step reads the turns it sends once per turn: a turn or two past the state it sent last. The cache moves
    # to the newer state, and the older one still reads right (it rebuilds its own).
    base = chat()
    assert len(base.turns) == 3
    one = base.append(Role.USER, Text("one"))
    assert [t.text for t in one.turns] == ["be brief", "hi", "hello", "one"]
    three = one.append(Role.ASSISTANT, Text("two")).append(Role.USER, Text("three"))
    assert [t.text for t in three.turns] == ["be brief", "hi", "hello", "one", "two", "three"]
    assert [t.text for t in one.turns] == ["be brief", "hi", "hello", "one"]
    assert [t.text for t in base.turns] == ["be brief", "hi", "hello"]
    first = State().append(Role.USER, Text("a"))
    assert first.turns == (Turn(Role.USER, (Text("a"),)),)
    two_unread = State().append(Role.USER, Text("a")).append(Role.ASSISTANT, Text("b"))
    assert [t.text for t in two_unread.turns] == ["a", "b"]


def test_added_to_names_the_one_turn_a_state_adds() -> None:
    base = chat()
    grown = base.append(Role.USER, Text("more"))
    assert grown.added_to(base) is grown.last
    assert State().append(Role.USER, Text("first")).added_to(State()) is not None
    assert base.added_to(base) is None, "nothing added"
    assert grown.append(Role.ASSISTANT, Text("and more")).added_to(base) is None, "two turns added"
    assert base.added_to(grown) is None, "a turn taken away"
    look_alike = State(base.turns)  # the same turns, not shared: not known to extend ``base``
    assert look_alike.append(Role.USER, Text("more")).added_to(base) is None


def test_answer_is_the_text_of_the_last_assistant_turn() -> None:
    state = chat().append(Role.USER, Text("and?"))
    assert state.answer == "hello"
    later = state.append(Role.ASSISTANT, Reasoning("hmm"), Text("first "), Text("second"))
    assert later.answer == "first second"


def test_answer_is_none_without_assistant_text() -> None:
    assert State().append(Role.USER, Text("hi")).answer is None
    calls_only = chat().append(Role.ASSISTANT, ToolCall("c", "t"))
    assert calls_only.answer is None  # the last assistant turn decides, not an earlier one


def test_pending_calls_are_the_unanswered_calls_of_the_last_assistant_turn() -> None:
    a, b, c = ToolCall("a", "x"), ToolCall("b", "y"), ToolCall("c", "z")
    asked = chat().append(Role.ASSISTANT, Text("let me check"), a, b, c)
    assert asked.pending_calls == (a, b, c)
    partly = asked.append(Role.TOOL, ToolResult("b", "y", "done"))
    assert partly.pending_calls == (a, c)
    answered = partly.append(Role.TOOL, ToolResult("a", "x", "1"), ToolResult("c", "z", "2", is_error=True))
    assert answered.pending_calls == ()
    assert answered.append(Role.USER, Text("ok")).pending_calls == ()


def test_pending_calls_ignore_results_before_the_last_assistant_turn() -> None:
    old = ToolCall("a", "x")
    state = State().append(Role.ASSISTANT, old).append(Role.TOOL, ToolResult("a", "x", "1"))
    again = ToolCall("a", "x")  # a provider may reuse ids across turns
    state = state.append(Role.ASSISTANT, again)
    assert state.pending_calls == (again,)
    assert State().append(Role.ASSISTANT, Text("no calls")).pending_calls == ()


def test_with_meta_merges_and_none_removes() -> None:
    state = chat().with_meta({"a": 1, "b": 2})
    updated = state.with_meta({"b": None}, c=3)
    assert updated.meta == {"a": 1, "c": 3}
    assert state.meta == {"a": 1, "b": 2}
    assert updated.turns == state.turns
    assert state.with_meta().meta == state.meta
    with pytest.raises(TypeError):
        updated.meta["x"] = 1  # type: ignore[index]


def test_append_keeps_meta() -> None:
    state = State().with_meta(run="r1").append(Role.USER, Text("x"))
    assert state.meta == {"run": "r1"}


def test_degrade_marks_the_outcome() -> None:
    state = chat().with_meta(keep=True)
    degraded = state.degrade("turn cap reached")
    assert degraded.degraded and degraded.outcome is not None
    assert (degraded.outcome.status, degraded.outcome.reason) == ("degraded", "turn cap reached")
    assert degraded.meta == {"keep": True}  # the caller's meta; the outcome is on the answer turn
    assert not state.degraded and state.outcome is None


def test_usage_sums_usage_parts_across_turns() -> None:
    state = (
        State()
        .append(Role.USER, Text("q"))
        .append(Role.ASSISTANT, ToolCall("c", "t"), Usage(10, 5))
        .append(Role.TOOL, ToolResult("c", "t", "r"))
        .append(Role.ASSISTANT, Text("a"), Usage(20, 7, cache_read_tokens=4))
    )
    assert state.usage == Usage(30, 12, 4, 0)
    assert state.usage.total_tokens == 42
    assert state.append(Role.USER, Text("x")).usage == Usage(30, 12, 4, 0)


def test_usage_adds_every_usage_part_of_a_turn_and_keeps_an_estimate_marked() -> None:
    turn = Turn(Role.ASSISTANT, (Usage(1, 2), Text("a"), Usage(3, 4, estimated=True)))
    state = State().append(Role.USER, Text("q")).append_turn(turn)
    assert state.usage == turn.usage == Usage(4, 6, estimated=True)
    assert State([turn, turn]).usage == Usage(8, 12, estimated=True)


def test_equality() -> None:
    assert State() == State()
    assert chat() == chat()
    assert chat() != chat().append(Role.USER, Text("x"))
    assert chat() != chat().with_meta(k=1)
    assert chat().with_meta(k=1) == chat().with_meta(k=1)
    left = State().append(Role.USER, Text("a"))
    assert left != State().append(Role.USER, Text("b"))
    assert left != State().append(Role.ASSISTANT, Text("a"))
    assert State() != "State()"
    with pytest.raises(TypeError):
        hash(State())


def test_repr_names_size_and_last_role() -> None:
    assert repr(chat()) == "State(turns=3, last=assistant, meta={})"


def test_append_is_o1_and_shares_the_prefix() -> None:
    big = State()
    for i in range(10_000):
        big = big.append(Role.USER if i % 2 == 0 else Role.ASSISTANT, Text(f"turn {i}"))
    assert len(big) == 10_000
    first = big.turns
    grown = big.append(Role.USER, Text("one more"))
    # Structural: the new state links to the old one's last node instead of copying the history.
    assert grown._node.prev is big._node  # type: ignore[attr-defined]
    assert big.turns == first and len(big) == 10_000 and big.last is not None
    assert big.last.text == "turn 9999"
    assert grown.turns[:-1] == first

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        forks = [big.append(Role.USER, Text(f"fork {i}")) for i in range(1_000)]
        grew = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # Copying the 10,000-turn history per fork would take ~80 MB of pointers alone; sharing takes well under 5.
    assert grew < 5_000_000
    assert all(len(f) == 10_001 for f in forks)
    assert forks[123].last is not None and forks[123].last.text == "fork 123"
    assert forks[999].turns[-2] is first[-1]
    assert big.turns == first


def test_without_outcome_takes_the_answers_outcome_off_and_keeps_what_follows() -> None:
    state = (State().append(Role.USER, Text("q"))
             .append(Role.ASSISTANT, ToolCall("c1", "f", "{}"))
             .with_outcome("pending", "left open"))
    assert state.outcome is not None and state.outcome.status == "pending"
    cleared = state.without_outcome()
    assert cleared.outcome is None and cleared.turns[1].tool_calls == state.turns[1].tool_calls
    answered = state.append(Role.TOOL, ToolResult("c1", "f", "ok")).without_outcome()
    assert answered.outcome is None and answered.last.role is Role.TOOL
    plain = State().append(Role.USER, Text("q"))
    assert plain.without_outcome() is plain
