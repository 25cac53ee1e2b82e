"""The garbage collector set up for a process that holds many sessions."""

from __future__ import annotations

import gc

from loop.checks import positive_int

YOUNG_THRESHOLD = 20_000
"""Net allocations between two collections of the youngest generation once ``tune_collector`` ran (Python's
default is 700)."""


def tune_collector(young: int = YOUNG_THRESHOLD) -> None:
    """Set up the garbage collector for a long-running process with many sessions, once start-up is done, as
    ``python -m session serve`` does. Call it from the process's own start-up (it changes the whole process).

    It collects, then freezes everything alive (``gc.freeze``): objects made at start-up live as long as the
    process and are never rescanned. It then collects the youngest generation every ``young`` net allocations
    instead of every 700: with a thousand conversations in flight, each of Python's frequent collections
    rescans what every one of them holds, and those pauses, not the work, dominated (1,000 sessions x 5
    messages: see ``python -m tests.benchmarks --only session``). Cyclic garbage waits a little longer to be
    freed; memory that reference counting frees is not affected."""
    positive_int("young", young)
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, old)
