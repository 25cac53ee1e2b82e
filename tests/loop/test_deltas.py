"""Deltas: what a provider streams, each tagged with the choice it belongs to."""

from typing import Any

import attrs
import pytest

from loop import Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage, UsageDelta

DEFAULTS = [TextDelta("x"), ReasoningDelta("r"), ToolCallDelta(0), UsageDelta(Usage(1, 2)), Finish("stop")]


@pytest.mark.parametrize("delta", DEFAULTS, ids=lambda d: type(d).__name__)
def test_every_delta_belongs_to_choice_0_unless_told_and_choice_is_its_last_field(delta: Any) -> None:
    assert delta.choice == 0
    assert attrs.fields(type(delta))[-1].name == "choice"
    assert attrs.evolve(delta, choice=2) != delta


@pytest.mark.parametrize("cls", [TextDelta, ReasoningDelta, ToolCallDelta, UsageDelta, Finish])
def test_deltas_stay_frozen_and_slotted(cls: type) -> None:
    delta = DEFAULTS[[type(d) for d in DEFAULTS].index(cls)]
    assert not hasattr(delta, "__dict__")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        delta.choice = 1  # type: ignore[misc]


def test_positional_construction_of_the_existing_fields_still_works() -> None:
    assert TextDelta("x") == TextDelta(text="x", choice=0)
    assert ReasoningDelta("r", "sig") == ReasoningDelta(text="r", signature="sig", choice=0)
    assert ToolCallDelta(1, "id", "f", "{}") == ToolCallDelta(index=1, id="id", name="f", arguments_fragment="{}")
    assert UsageDelta(Usage(1, 2)) == UsageDelta(usage=Usage(1, 2), model=None, choice=0)
    assert Finish("stop") == Finish(reason="stop", choice=0)


def test_a_usage_may_name_the_model_that_answered() -> None:
    usage = UsageDelta(Usage(1, 2), "gpt-4o-mini-2024-07-18", 1)
    assert (usage.model, usage.choice) == ("gpt-4o-mini-2024-07-18", 1)
    assert [f.name for f in attrs.fields(UsageDelta)] == ["usage", "model", "choice"]
    assert usage != UsageDelta(Usage(1, 2), None, 1)


def test_the_choice_is_documented_on_every_delta() -> None:
    for cls in (TextDelta, ReasoningDelta, ToolCallDelta, UsageDelta, Finish):
        assert "0 unless n > 1 was asked" in (cls.__doc__ or "").replace("\n    ", " ")
