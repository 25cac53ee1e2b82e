"""``EventBus.hold``, the bus's part of a guardrail's hold-back: kept events go out later, in order, stamped as
published, through the holds around them; dropped ones never do."""

from __future__ import annotations

from typing import Any

import pytest

from loop import EventBus, EventsDropped, Stamped, TextDelta, ToolCallDelta, UsageError, branch, scope


def kept_text(stamped: Stamped) -> bool:
    return isinstance(stamped.event, TextDelta)


def test_kept_events_go_out_on_release_in_order_and_the_rest_at_once() -> None:
    bus = EventBus()
    with bus.subscribe(buffer=None) as sub:
        hold = bus.hold(kept_text)
        bus.publish(TextDelta("a"))
        bus.publish("other")
        bus.publish(TextDelta("b"))
        assert sub.drain() == ["other"] and hold.kept == 2
        hold.release()
        assert sub.drain() == [TextDelta("a"), TextDelta("b")] and hold.kept == 0
        hold.close()
        bus.publish(TextDelta("c"))
        assert sub.drain() == [TextDelta("c")] and not bus._holds


def test_release_with_drop_leaves_those_out_for_good() -> None:
    bus = EventBus()
    with bus.subscribe(buffer=None) as sub, bus.hold(lambda s: True) as hold:
        bus.publish(TextDelta("secret"))
        bus.publish("finish")
        hold.release(lambda e: isinstance(e, TextDelta))
        assert sub.drain() == ["finish"] and hold.dropped == 1


def test_close_releases_what_is_still_kept() -> None:
    bus = EventBus()
    with bus.subscribe(buffer=None) as sub:
        with bus.hold(lambda s: True):
            bus.publish(1)
            assert sub.drain() == []
        assert sub.drain() == [1]


def test_released_events_keep_the_stamp_of_where_they_were_published() -> None:
    bus = EventBus()
    with bus.subscribe(buffer=None, stamped=True) as stamped, bus.subscribe(buffer=None, main_line=True) as main:
        hold = bus.hold(lambda s: True)
        with scope("Pattern"):
            bus.publish(TextDelta("main"))
            with branch("sample 1"):
                bus.publish(TextDelta("branch"))
        hold.close()
        assert [(s.event.text, s.path, s.main) for s in stamped.drain()] == [
            ("main", "Pattern", True), ("branch", "Pattern/sample 1", False)]
        assert main.drain() == [TextDelta("main")]  # a branch's text never reaches the main line's readers


def test_a_nested_hold_releases_into_the_one_around_it() -> None:
    bus = EventBus()
    with bus.subscribe(buffer=None) as sub:
        outer = bus.hold(lambda s: True)
        inner = bus.hold(lambda s: True)
        bus.publish(1)
        assert outer.kept == 0 and inner.kept == 1  # the newest hold is asked first
        inner.close()
        assert sub.drain() == [] and outer.kept == 1
        bus.publish(2)
        outer.release(lambda e: e == 1)
        assert sub.drain() == [2]
        outer.close()


def test_keeps_may_release_and_the_event_it_decides_on_goes_out_after() -> None:
    bus = EventBus()
    def keeps(stamped: Stamped) -> bool:
        if isinstance(stamped.event, ToolCallDelta):
            hold.release()
            return False
        return True

    with bus.subscribe(buffer=None) as sub, bus.hold(keeps) as hold:
        bus.publish(TextDelta("calling"))
        bus.publish(ToolCallDelta(0, "c1", "search", "{}"))
        assert sub.drain() == [TextDelta("calling"), ToolCallDelta(0, "c1", "search", "{}")]


def test_a_bounded_subscriber_still_loses_what_it_has_no_room_for() -> None:
    bus = EventBus()
    with bus.subscribe(buffer=2) as sub, bus.hold(lambda s: True) as hold:
        for n in range(4):
            bus.publish(n)
        hold.release()
        events: list[Any] = sub.drain()
    assert events == [0, 1, EventsDropped(2)]


def test_hold_takes_a_function() -> None:
    with pytest.raises(UsageError, match="EventBus.hold takes a function"):
        EventBus().hold("text")  # type: ignore[arg-type]
