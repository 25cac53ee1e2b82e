"""``Outcome`` and ``State.with_outcome``: how a run ended, kept on the answer turn that ends it."""

import pytest

import loop
from loop import Outcome, Role, State, Text, ToolCall, ToolResult, UsageError

ASKED = State().append(Role.USER, Text("question"))
ANSWERED = ASKED.append(Role.ASSISTANT, Text("answer"))


# -- Outcome ------------------------------------------------------------------------------------------------


def test_statuses_and_flags() -> None:
    assert Outcome().status == "ok" and Outcome().ok and not Outcome().degraded
    assert Outcome("degraded", "cap").degraded and not Outcome("degraded").ok
    for status in ("ok", "pending", "degraded", "failed"):
        assert Outcome(status).status == status
    assert not Outcome("pending").ok and not Outcome("failed").ok


@pytest.mark.parametrize("status", ["OK", "bad", "", None, 1])
def test_unknown_status_is_refused(status: object) -> None:
    with pytest.raises(UsageError, match="status"):
        Outcome(status)  # type: ignore[arg-type]


def test_data_must_be_a_mapping_and_is_kept_read_only() -> None:
    with pytest.raises(UsageError, match="mapping"):
        Outcome("ok", "", [("a", 1)])  # type: ignore[arg-type]
    source = {"A": 1}
    outcome = Outcome("ok", "", source)
    source["B"] = 2
    assert dict(outcome.data) == {"A": 1}
    with pytest.raises(TypeError):
        outcome.data["C"] = 3  # type: ignore[index]


def test_from_dict_validates() -> None:
    with pytest.raises(UsageError, match="object"):
        Outcome.from_dict(["degraded"])
    with pytest.raises(UsageError, match="reason"):
        Outcome.from_dict({"status": "degraded", "reason": 3})
    with pytest.raises(UsageError, match="status"):
        Outcome.from_dict({"status": "meh"})
    assert Outcome.from_dict({"status": "failed", "reason": "r", "data": {"P": 1}}) == Outcome("failed", "r", {"P": 1})


def test_to_dict_round_trip_leaves_out_empty_fields() -> None:
    assert Outcome().to_dict() == {"status": "ok"}
    full = Outcome("degraded", "why", {"A/B": {"n": 1}})
    assert full.to_dict() == {"status": "degraded", "reason": "why", "data": {"A/B": {"n": 1}}}
    assert Outcome.from_dict(full.to_dict()) == full


RANKED = ["ok", "pending", "degraded", "failed"]


@pytest.mark.parametrize("inner", RANKED)
@pytest.mark.parametrize("outer", RANKED)
def test_worse_takes_the_worse_status_either_way(inner: str, outer: str) -> None:
    expected = RANKED[max(RANKED.index(inner), RANKED.index(outer))]
    assert Outcome(inner).worse(Outcome(outer)).status == expected
    assert Outcome(outer).worse(Outcome(inner)).status == expected


def test_worse_joins_the_reasons_of_runs_that_were_not_ok() -> None:
    inner = Outcome("degraded", "cap reached")
    assert inner.worse(Outcome("failed", "verifier failed")).reason == "cap reached; verifier failed"
    # An ok wrapper's reason adds nothing, and a repeated reason is said once.
    assert inner.worse(Outcome("ok", "fine")).reason == "cap reached"
    assert inner.worse(Outcome("degraded", "cap reached")).reason == "cap reached"
    # Two ok outcomes compose to ok with no reason.
    assert Outcome("ok", "a").worse(Outcome("ok", "b")) == Outcome("ok", "", {})


def test_worse_merges_data_and_the_wrapper_wins_a_shared_path() -> None:
    inner = Outcome("ok", "", {"A/ReAct": 1, "A": "inner"})
    outer = Outcome("ok", "", {"A": "outer", "B": 2})
    assert dict(inner.worse(outer).data) == {"A/ReAct": 1, "A": "outer", "B": 2}


# -- State.with_outcome ---------------------------------------------------------------------------------------


def test_data_is_keyed_by_the_current_run_path() -> None:
    with loop.scope("Outer"), loop.scope("Inner"):
        state = ANSWERED.with_outcome(data={"votes": 3})
    assert state.outcome == Outcome("ok", "", {"Outer/Inner": {"votes": 3}})
    # At the root the path is empty; an explicit path wins over the scope's.
    assert ANSWERED.with_outcome(data=1).outcome.data == {"": 1}  # type: ignore[union-attr]
    with loop.scope("Here"):
        assert ANSWERED.with_outcome(data=1, path="There").outcome.data == {"There": 1}  # type: ignore[union-attr]


def test_no_data_records_no_path() -> None:
    assert ANSWERED.with_outcome("degraded", "why").outcome == Outcome("degraded", "why")


def test_with_outcome_composes_with_the_outcome_already_there() -> None:
    with loop.scope("Wrapper"):
        with loop.scope("ReAct"):
            inner = ANSWERED.with_outcome("degraded", "max_turns", data={"turns": 12})
        outer = inner.with_outcome("ok", data={"verified": True})
    outcome = outer.outcome
    assert outcome is not None
    assert outcome.status == "degraded", "a wrapper never reports better than its inner run"
    assert outcome.reason == "max_turns"
    assert dict(outcome.data) == {"Wrapper/ReAct": {"turns": 12}, "Wrapper": {"verified": True}}
    assert outer.degraded and not ANSWERED.degraded
    assert ANSWERED.outcome is None, "states are immutable"


def test_degrade_is_with_outcome_degraded() -> None:
    state = ANSWERED.degrade("cap")
    assert state.degraded and state.outcome == Outcome("degraded", "cap")


def test_with_outcome_replaces_the_last_assistant_turn_when_tool_and_system_turns_follow() -> None:
    call = ToolCall("c1", "look", "{}")
    state = (ASKED.append(Role.ASSISTANT, Text("first"))
             .append(Role.ASSISTANT, Text("calling"), call)
             .append(Role.TOOL, ToolResult("c1", "look", "seen"))
             .append(Role.SYSTEM, Text("note")))
    marked = state.with_outcome("pending", "approval")
    assert len(marked) == len(state)
    assert marked.turns == state.turns  # same content; meta is not part of a turn's equality
    assert [t.role for t in marked] == [Role.USER, Role.ASSISTANT, Role.ASSISTANT, Role.TOOL, Role.SYSTEM]
    assert marked[2].meta["outcome"] == {"status": "pending", "reason": "approval"}
    assert "outcome" not in marked[1].meta, "only the last assistant turn carries it"
    assert marked[3] is state[3] and marked[4] is state[4], "the turns after it are kept as they were"
    assert marked.outcome == Outcome("pending", "approval")


def test_with_outcome_keeps_the_turns_other_meta() -> None:
    state = ASKED.append(Role.ASSISTANT, Text("a"), meta={"model": "m"}).with_outcome("failed", "x")
    assert state.last.meta["model"] == "m"  # type: ignore[union-attr]
    assert state.last.meta["outcome"]["status"] == "failed"  # type: ignore[union-attr]


def test_with_outcome_is_refused_when_a_user_turn_follows_the_answer() -> None:
    with pytest.raises(UsageError, match="user turn"):
        ANSWERED.append(Role.USER, Text("next")).with_outcome("ok")
    with pytest.raises(UsageError, match="user turn"):
        ASKED.with_outcome("ok")


def test_with_outcome_is_refused_without_an_assistant_turn() -> None:
    with pytest.raises(UsageError, match="no assistant turn"):
        State().with_outcome("ok")
    with pytest.raises(UsageError, match="no assistant turn"):
        State().append(Role.SYSTEM, Text("sys")).with_outcome("ok")


def test_with_outcome_refuses_a_bad_status() -> None:
    with pytest.raises(UsageError):
        ANSWERED.with_outcome("great")


# -- reading it back --------------------------------------------------------------------------------------------


def test_outcome_is_none_when_a_user_turn_follows_the_last_answer() -> None:
    degraded = ANSWERED.degrade("cap")
    assert degraded.outcome is not None
    asked_again = degraded.append(Role.USER, Text("and now?"))
    assert asked_again.outcome is None and not asked_again.degraded


def test_a_later_message_starts_clean() -> None:
    degraded = ANSWERED.degrade("cap")
    later = degraded.append(Role.USER, Text("next")).append(Role.ASSISTANT, Text("fresh answer"))
    assert later.outcome is None and not later.degraded
    # The earlier answer keeps its own outcome.
    assert later[1].meta["outcome"]["status"] == "degraded"


def test_outcome_reads_through_tool_and_system_turns() -> None:
    state = ANSWERED.with_outcome("failed", "boom").append(Role.SYSTEM, Text("note"))
    assert state.outcome == Outcome("failed", "boom")
    assert State().outcome is None and ASKED.outcome is None and ANSWERED.outcome is None


def test_json_round_trip_keeps_the_outcome() -> None:
    with loop.scope("WithVerification"):
        state = ANSWERED.with_outcome("degraded", "retries", data={"results": [{"name": "v", "ok": False}]})
    state = state.append(Role.SYSTEM, Text("after"))
    again = State.from_json(state.to_json())
    assert again == state
    assert again.outcome == state.outcome == Outcome(
        "degraded", "retries", {"WithVerification": {"results": [{"name": "v", "ok": False}]}})
    assert again.degraded
