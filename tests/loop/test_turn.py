"""The conversation vocabulary: roles, parts and ``Turn``."""

import enum
import json

import attrs
import pytest

from loop import Reasoning, Role, Text, ToolCall, ToolResult, Turn, TurnKind, Usage, UsageError

ALL_PARTS = (
    Text("hi"),
    Reasoning("think", signature="sig"),
    ToolCall("c1", "add", '{"a": 1}'),
    ToolResult("c1", "add", "2"),
    Usage(3, 4),
)


def test_role_is_a_str_enum_with_the_four_speakers() -> None:
    assert issubclass(Role, enum.StrEnum)
    assert [r.value for r in Role] == ["system", "user", "assistant", "tool"]
    assert Role.USER == "user"
    assert f"{Role.ASSISTANT}" == "assistant"


@pytest.mark.parametrize("part", ALL_PARTS, ids=lambda p: type(p).__name__)
def test_parts_are_frozen(part: object) -> None:
    field = attrs.fields(type(part))[0].name
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(part, field, "changed")
    assert getattr(part, field) != "changed"


def test_part_defaults() -> None:
    assert Reasoning("r").signature is None
    assert ToolCall("id", "name").arguments == "{}"
    assert ToolResult("id", "name", "out").is_error is False
    assert Usage() == Usage(0, 0, 0, 0)


def test_usages_add_up() -> None:
    total = Usage(1, 2, 3, 4) + Usage(10, 20, 30, 40)
    assert total == Usage(11, 22, 33, 44)
    assert total.total_tokens == 33


def test_usage_does_not_add_to_other_types() -> None:
    with pytest.raises(TypeError):
        Usage(1, 2) + 3  # type: ignore[operator]


def test_turn_is_frozen_and_holds_a_tuple() -> None:
    turn = Turn(Role.USER, [Text("a")])
    assert turn.parts == (Text("a"),)
    assert isinstance(turn.parts, tuple)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        turn.role = Role.ASSISTANT  # type: ignore[misc]
    with pytest.raises(TypeError):
        turn.meta["k"] = "v"  # type: ignore[index]


def test_turn_meta_is_a_read_only_copy() -> None:
    source = {"k": 1}
    turn = Turn(Role.USER, (), source)
    source["k"] = 2
    assert turn.meta == {"k": 1}


def test_turn_converts_role_strings() -> None:
    turn = Turn("assistant", ())
    assert turn.role is Role.ASSISTANT


def test_turn_rejects_an_unknown_role_with_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown role 'wizard'"):
        Turn("wizard", ())


@pytest.mark.parametrize("bad", ["plain string", 42, {"type": "text", "text": "x"}, None])
def test_turn_rejects_values_that_are_not_parts(bad: object) -> None:
    with pytest.raises(UsageError, match="must be loop parts"):
        Turn(Role.USER, (Text("ok"), bad))


@pytest.mark.parametrize("bad", ["hello", Text("not wrapped in a sequence"), 7])
def test_turn_parts_must_be_a_sequence(bad: object) -> None:
    with pytest.raises(UsageError, match="must be a sequence of loop parts"):
        Turn(Role.USER, bad)  # type: ignore[arg-type]


def test_turn_meta_must_be_a_mapping() -> None:
    with pytest.raises(UsageError, match="meta must be a mapping, got list"):
        Turn(Role.USER, (), [("k", "v")])  # type: ignore[arg-type]


def test_turn_text_joins_text_parts_only() -> None:
    turn = Turn(Role.ASSISTANT, (Reasoning("hidden"), Text("Hello, "), ToolCall("c", "t"), Text("world")))
    assert turn.text == "Hello, world"
    assert Turn(Role.ASSISTANT, (ToolCall("c", "t"),)).text == ""


def test_turn_tool_calls_and_results_in_order() -> None:
    calls = (ToolCall("a", "x"), ToolCall("b", "y"))
    turn = Turn(Role.ASSISTANT, (Text("t"), calls[0], Usage(1, 1), calls[1]))
    assert turn.tool_calls == calls
    assert turn.tool_results == ()
    results = (ToolResult("a", "x", "1"), ToolResult("b", "y", "2", is_error=True))
    assert Turn(Role.TOOL, results).tool_results == results


def test_turn_usage_sums_usage_parts_or_is_none() -> None:
    assert Turn(Role.ASSISTANT, (Text("x"),)).usage is None
    turn = Turn(Role.ASSISTANT, (Usage(1, 2), Text("x"), Usage(10, 20, cache_read_tokens=5)))
    assert turn.usage == Usage(11, 22, 5, 0)


def test_turn_dict_round_trip_keeps_every_part_and_meta() -> None:
    turn = Turn(Role.ASSISTANT, ALL_PARTS, {"finish_reason": "stop"})
    data = turn.to_dict()
    assert data["role"] == "assistant"
    assert [p["type"] for p in data["parts"]] == ["text", "reasoning", "tool_call", "tool_result", "usage"]
    back = Turn.from_dict(data)
    assert back == turn
    assert back.meta == {"finish_reason": "stop"}


def test_turn_without_meta_writes_no_meta_key() -> None:
    assert "meta" not in Turn(Role.USER, (Text("x"),)).to_dict()


# -- speaker names ---------------------------------------------------------------------------------------------


def test_a_turn_has_no_name_unless_given_and_meta_stays_the_third_argument() -> None:
    turn = Turn(Role.USER, (Text("hi"),), {"at": 1})
    assert turn.name is None and turn.meta == {"at": 1}
    named = Turn(Role.USER, (Text("hi"),), {"at": 1}, "alice")
    assert named.name == "alice" and named == Turn(Role.USER, (Text("hi"),), name="alice")


def test_the_name_takes_part_in_equality_and_hashing_but_meta_does_not() -> None:
    alice = Turn(Role.USER, (Text("hi"),), name="alice")
    assert alice != Turn(Role.USER, (Text("hi"),), name="bob")
    assert alice != Turn(Role.USER, (Text("hi"),))
    assert alice == Turn(Role.USER, (Text("hi"),), {"different": "meta"}, "alice")
    assert hash(alice) == hash(Turn(Role.USER, (Text("hi"),), name="alice"))
    assert attrs.evolve(alice, name=None) == Turn(Role.USER, (Text("hi"),))


@pytest.mark.parametrize("bad", ["", 7, b"alice", ["alice"]])
def test_a_name_must_be_a_non_empty_string(bad: object) -> None:
    with pytest.raises(UsageError, match="name must be a non-empty string"):
        Turn(Role.USER, (), name=bad)  # type: ignore[arg-type]


def test_the_name_round_trips_and_is_written_only_when_set() -> None:
    named = Turn(Role.ASSISTANT, (Text("Noted."),), {"finish_reason": "stop"}, "critic")
    data = named.to_dict()
    assert data["name"] == "critic"
    assert Turn.from_dict(data) == named and Turn.from_dict(data).name == "critic"
    assert "name" not in Turn(Role.USER, (Text("x"),)).to_dict()
    assert Turn.from_dict({"role": "user", "parts": []}).name is None


@pytest.mark.parametrize("bad", [3, "", ["a"], {"n": 1}])
def test_from_dict_type_checks_the_name(bad: object) -> None:
    with pytest.raises(UsageError, match=r"turn 4: 'name' must be a non-empty string"):
        Turn.from_dict({"role": "user", "parts": [], "name": bad}, where="turn 4")


def test_a_turns_kind_is_read_from_its_meta_and_kinds_are_open_strings() -> None:
    report = Turn(Role.SYSTEM, (Text("# Verification"),), {"kind": TurnKind.VERIFICATION, "attempt": 1})
    assert report.kind == TurnKind.VERIFICATION
    assert Turn(Role.USER, (Text("hi"),)).kind is None
    assert Turn(Role.SYSTEM, (), {"kind": "my_note"}).kind == "my_note"  # a kind of the writer's own
    for not_a_kind in (3, ["verification"]):
        assert Turn(Role.SYSTEM, (), {"kind": not_a_kind}).kind is None


def test_a_kind_is_stored_as_its_plain_string_and_old_stored_turns_are_recognised() -> None:
    report = Turn(Role.SYSTEM, (Text("# Verification"),), {"kind": TurnKind.VERIFICATION})
    stored = json.loads(json.dumps(report.to_dict()))
    assert stored["meta"] == {"kind": "verification"}
    assert Turn.from_dict(stored).kind == TurnKind.VERIFICATION
    old = {"role": "system", "parts": [{"type": "text", "text": "r"}], "meta": {"kind": "verification"}}
    assert Turn.from_dict(old).kind == TurnKind.VERIFICATION


def test_loop_names_only_the_kinds_it_writes_and_each_package_its_own() -> None:
    from cognitive import PatternKind
    from session._mainline import FAILURE

    assert issubclass(TurnKind, enum.StrEnum) and issubclass(PatternKind, enum.StrEnum)
    assert {k.value for k in TurnKind} == {"verification", "output_format"}  # loop.ask's
    assert {k.value for k in PatternKind} == {"budget", "code_action", "code_action_answer", "code_action_error",
                                             "compaction", "verify_answer", "route", "stage", "loop_note", "rewoo_plan",
                                             "rewoo_replan", "rewoo_evidence", "work_notes", "thought", "propose",
                                             "score", "search_line", "merged", "cot", "cot_answer", "reflect", "memory"}
    assert FAILURE == "failure"
