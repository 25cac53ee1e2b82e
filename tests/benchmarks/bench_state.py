"""(d) ``State`` append and fork: O(1) each, so totals grow linearly.

Appends: 10,000 ``state.append(Role.USER, part)`` calls on a growing state. Target: <= 50 ms in all
(5 µs per append). Baseline: building the same ``Turn`` and appending it to a Python list. Contrast: a tuple
copied on every append (the structure the design rules out), at the same size and at half of it, to show it
is quadratic. Linearity: 20,000 appends against 10,000 should take about twice as long (target 1.5-2.5x).

Forks: 1,000 branches from one 1,000-turn state, each ``base.append(...)`` of one turn, every branch kept
alive (as a tree search would). Target: <= 5 ms in all, i.e. the per-append budget per fork (the brief sets no
separate figure). Baseline: the same forks of a 1,000-turn tuple, each copying the prefix. Linearity: 2,000
forks against 1,000 (about 2x), and 1,000 forks of a 10,000-turn state against the same of a 1,000-turn one
(about 1x: a fork does not depend on the length of what it forks).

Every case builds one ``Turn`` per operation, so the comparisons isolate the structure.
"""

from __future__ import annotations

from loop import Role, State, Text, Turn
from tests.benchmarks._harness import Figure, interleave_sync

APPENDS = 10_000
APPEND_TARGET_MS = 50.0
FORKS = 1_000
FORK_PREFIX = 1_000
FORK_TARGET_MS = FORKS * APPEND_TARGET_MS / APPENDS  # the per-append budget, per fork
LINEAR = (1.5, 2.5)
PART = Text("a short message")


def state_appends(n: int) -> State:
    state = State()
    for _ in range(n):
        state = state.append(Role.USER, PART)
    return state


def list_appends(n: int) -> list[Turn]:
    turns: list[Turn] = []
    for _ in range(n):
        turns.append(Turn(Role.USER, (PART,)))
    return turns


def tuple_appends(n: int) -> tuple[Turn, ...]:
    turns: tuple[Turn, ...] = ()
    for _ in range(n):
        turns = turns + (Turn(Role.USER, (PART,)),)
    return turns


def state_forks(base: State, n: int) -> list[State]:
    return [base.append(Role.ASSISTANT, PART) for _ in range(n)]


def tuple_forks(base: tuple[Turn, ...], n: int) -> list[tuple[Turn, ...]]:
    return [base + (Turn(Role.ASSISTANT, (PART,)),) for _ in range(n)]


def _check(appends: int, forks: int, prefix: int) -> None:
    """The cases must build what they claim before anything is timed."""
    state = state_appends(appends)
    assert len(state) == appends and state.last == Turn(Role.USER, (PART,))
    assert len(list_appends(appends)) == len(tuple_appends(appends)) == appends
    base = state_appends(prefix)
    branches = state_forks(base, forks)
    assert len(branches) == forks and all(len(b) == prefix + 1 for b in branches)
    assert len(base) == prefix and branches[0].turns[:prefix] == base.turns  # forks leave the base alone


def run(quick: bool = False) -> list[Figure]:
    """Measure (d); ``quick`` uses tiny sizes (for the smoke test)."""
    scale = 10 if quick else 1
    n, forks, prefix = APPENDS // scale, FORKS // scale, FORK_PREFIX // scale
    warmup, repeats = (1, 3) if quick else (2, 7)
    _check(n, forks, prefix)

    base = state_appends(prefix)
    long_base = state_appends(10 * prefix)
    base_tuple = tuple_appends(prefix)
    t = interleave_sync(
        {
            "state": lambda: state_appends(n),
            "state2": lambda: state_appends(2 * n),
            "list": lambda: list_appends(n),
            "tuple": lambda: tuple_appends(n),
            "tuple_half": lambda: tuple_appends(n // 2),
            "fork": lambda: state_forks(base, forks),
            "fork2": lambda: state_forks(base, 2 * forks),
            "fork_long": lambda: state_forks(long_base, forks),
            "tuple_fork": lambda: tuple_forks(base_tuple, forks),
        },
        warmup=warmup, repeats=repeats,
    )
    ms = {k: v * 1e3 for k, v in t.items()}
    append_target = APPEND_TARGET_MS / scale
    fork_target = FORK_TARGET_MS / scale
    per_append = ms["state"] / n * 1e3
    per_fork = ms["fork"] / forks * 1e3
    sizes = f"median of {repeats}, garbage collector on (collected before each sample)"
    return [
        Figure(
            "(d) state", f"State.append x {n:,}", ms["state"], "ms", ms["list"], f"list.append x {n:,}",
            high=append_target, target_text=f"<= {append_target:g} ms",
            notes=(f"{per_append:.2f} µs per append (list: {ms['list'] / n * 1e3:.2f} µs, building the same Turn); "
                   f"{sizes}",),
        ),
        Figure(
            "(d) state", f"tuple copied per append x {n:,} (contrast)", ms["tuple"], "ms", ms["state"],
            f"State.append x {n:,}",
            notes=(f"tuple copy is quadratic: {n:,} vs {n // 2:,} appends took "
                   f"{ms['tuple'] / ms['tuple_half']:.2f}x (linear would be 2x)",),
        ),
        Figure(
            "(d) state", f"State.append x {2 * n:,} (linearity)", ms["state2"], "ms", ms["state"],
            f"State.append x {n:,}", low=LINEAR[0], high=LINEAR[1], on_ratio=True,
            target_text=f"ratio ~2 ({LINEAR[0]:g}-{LINEAR[1]:g}x)",
        ),
        Figure(
            "(d) state", f"{forks:,} forks of a {prefix:,}-turn State", ms["fork"], "ms", ms["tuple_fork"],
            f"{forks:,} tuple-copy forks", high=fork_target, target_text=f"<= {fork_target:g} ms",
            notes=(f"{per_fork:.2f} µs per fork (tuple copy: {ms['tuple_fork'] / forks * 1e3:.2f} µs); "
                   "target is the per-append budget, per fork",),
        ),
        Figure(
            "(d) state", f"{2 * forks:,} forks (linearity)", ms["fork2"], "ms", ms["fork"], f"{forks:,} forks",
            low=LINEAR[0], high=LINEAR[1], on_ratio=True, target_text=f"ratio ~2 ({LINEAR[0]:g}-{LINEAR[1]:g}x)",
        ),
        Figure(
            "(d) state", f"{forks:,} forks of a {10 * prefix:,}-turn State", ms["fork_long"], "ms", ms["fork"],
            f"same of a {prefix:,}-turn State", high=1.5, on_ratio=True, target_text="ratio ~1 (<= 1.5x)",
            notes=("O(1) fork: the cost must not grow with the length of the state being forked",),
        ),
    ]


if __name__ == "__main__":
    import sys

    from tests.benchmarks._harness import render_table

    print(render_table(run(quick="--quick" in sys.argv)))
