"""``session.tune_collector``: the garbage collector set up for a process with many sessions."""

import gc
from collections.abc import Iterator

import pytest

import session
from loop import UsageError
from session._collector import YOUNG_THRESHOLD


@pytest.fixture
def restored() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_it_freezes_what_is_alive_and_collects_the_young_generation_less_often(restored: None) -> None:
    alive = [object()]  # a container: tracked by the collector, so frozen with the rest
    before = gc.get_freeze_count()
    session.tune_collector()
    assert gc.get_freeze_count() > before and gc.is_tracked(alive)
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD
    session.tune_collector(5_000)
    assert gc.get_threshold()[0] == 5_000


@pytest.mark.parametrize("young", [0, -1, 2.5, "many"])
def test_a_threshold_that_is_not_a_positive_count_is_refused(restored: None, young: object) -> None:
    threshold = gc.get_threshold()
    with pytest.raises(UsageError, match="young"):
        session.tune_collector(young)  # type: ignore[arg-type]
    assert gc.get_threshold() == threshold, "nothing changed"
