"""(s) Search: ``MCTS``'s own cost per rollout, and the cost of checkpointing a 1,000-node tree.

**Rollouts.** ``MCTS`` runs ``ROLLOUTS`` rollouts (three children, ``max_depth`` 10, no early stop, no
reflection) on a zero-latency ``provider.Function`` model and a scorer function, so every model call is a
typed proposal (``propose_thoughts``): one to expand, one per simulated step; then one answer turn
(``answer_from_line``). The model function never waits.

- The search's own overhead: during each timed search the two functions it asks the model through are timed
  (the benchmark wraps the names the search module calls), and

      overhead per rollout = (search wall time - time inside propose_thoughts and answer_from_line) / rollouts

  which is the search's own work: selection, the tree and its states, calling the scorer, backpropagation,
  offers, branch scopes. Target: <= 100 µs per rollout. Baseline: the time inside those calls, per rollout.
- Beside it, for scale (no target): (wall time - time inside the model function) / rollouts, everything the
  framework does per rollout, against the same number of bare ``step.turn`` calls on the very states the
  model was asked on (recorded in a first run), timed interleaved with the search. The difference between the
  two rows is what a typed proposal costs over a plain turn (its schema turn, parsing and validating).

**Checkpoint.** A tree of ``NODES`` nodes (each thought a sentence) is saved the way a search saves it
(``Tree.to_dict``, then ``FileCheckpoints.save``, which writes JSON to a new file, syncs it and renames it) and
read back (``load``, then ``Tree.from_dict``). Target: <= 50 ms for the round trip. Baseline: a JSON round trip
(``dumps`` + ``loads``) of the same data alone.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
import zlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from unittest import mock

import anyio

from cognitive import FileCheckpoints, Tree, add_thought
from cognitive.search import _mcts
from cognitive.search._mcts import MCTS
from cognitive.search._thoughts import Proposal
from loop import Options, Part, Request, Role, State, Step, Text
from provider import Function
from tests.benchmarks._harness import Figure, interleave_async

ROLLOUTS = 1_000
NODES = 1_000
ROLLOUT_TARGET_US = 100.0
CHECKPOINT_TARGET_MS = 50.0


def _hash(text: str) -> int:
    return zlib.crc32(text.encode())


class Model:
    """Three thoughts below the last one; from the third step on, each is final about one time in four. The
    time spent inside is summed."""

    def __init__(self) -> None:
        self.calls = 0
        self.seconds = 0.0

    def __call__(self, request: Request) -> str:
        started = time.perf_counter()
        self.calls += 1
        turns = request.turns
        depth = sum(t.kind == "thought" for t in turns)
        last = turns[-3].text[:40] if len(turns) >= 3 else ""
        thoughts = [{"text": f"{last} step {i} of {self.calls}",
                     "final": depth >= 2 and _hash(f"{self.calls}/{i}") % 4 == 0} for i in range(3)]
        reply = json.dumps({"thoughts": thoughts})
        self.seconds += time.perf_counter() - started
        return reply


def scorer(state: State) -> float:
    """Deterministic, never high enough to stop the search early; final thoughts score low, so that the search
    keeps going deeper rather than re-crediting answers it knows."""
    last = state.turns[-1]
    return 0.2 if last.meta.get("final") else 0.3 + (_hash(last.text) % 55) / 100


class Recorder:
    """The step, keeping every state its model is asked on (they share their turns as the tree's states do)."""

    def __init__(self, step: Step) -> None:
        self.step = step
        self.sent: list[State] = []

    async def turn(self, state: State, options: Options | None = None) -> State:
        self.sent.append(state)
        return await self.step.turn(state, options)

    async def submit(self, state: State, role: Role, *parts: Part, meta: Mapping[str, Any] | None = None,
                     name: str | None = None) -> State:
        return await self.step.submit(state, role, *parts, meta=meta, name=name)


def question() -> State:
    return State().append(Role.USER, Text("Make 24 from 4, 4, 6 and 8."))


class Asking:
    """Wraps the functions the search asks the model through, summing the time spent inside them."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started
        return timed


async def _rollouts(rollouts: int, warmup: int, repeats: int) -> tuple[dict[str, float], int]:
    model = Model()
    step = Step(Function(model))
    settings: dict[str, Any] = {"iterations": rollouts, "children": 3, "max_depth": 10, "scorer": scorer,
                                "reflect": False, "stop_at": None}
    recorder = Recorder(step)
    done = await MCTS(recorder, **settings).run(question())  # the same search as the timed one, recorded
    assert done.outcome is not None and done.outcome.data["MCTS"]["rollouts"] == rollouts, done.outcome
    calls = model.calls  # the same each run: the model and the scorer are deterministic
    assert len(recorder.sent) == calls
    search, start, asking = MCTS(step, **settings), question(), Asking()
    samples: list[tuple[float, float, float]] = []  # (wall, inside the asking functions, inside the model)

    async def searching() -> None:
        model.calls, model.seconds, asking.seconds = 0, 0.0, 0.0
        with mock.patch.object(_mcts, "propose_thoughts", asking.wrap(_mcts.propose_thoughts)), \
                mock.patch.object(_mcts, "answer_from_line", asking.wrap(_mcts.answer_from_line)):
            started = time.perf_counter()
            await search.run(start)
            wall = time.perf_counter() - started
        assert model.calls == calls
        samples.append((wall, asking.seconds, model.seconds))

    async def turning() -> None:
        for state in recorder.sent:
            await step.turn(state)

    times = await interleave_async({"search": searching, "turn": turning}, warmup=warmup, repeats=repeats)
    measured = samples[warmup:]
    return {"turn": times["turn"],
            "wall": statistics.median(s[0] for s in measured),
            "own": statistics.median(s[0] - s[1] for s in measured),
            "asking": statistics.median(s[1] for s in measured),
            "framework": statistics.median(s[0] - s[2] for s in measured)}, calls


def _tree(nodes: int) -> Tree:
    tree = Tree(question())
    for index in range(1, nodes):
        parent = tree.nodes[(index - 1) // 3]
        text = f"Thought {index}: combine the numbers another way, say {index % 7} times {index % 5}, and check it."
        final = 3 * index + 1 >= nodes and index % 2 == 0  # some leaves are answers
        node = tree.add(parent, text, add_thought(parent.state, Proposal(text, final=final)),
                        score=(index % 10) / 10, terminal=final)
        tree.backpropagate(node, node.score or 0.0)
    tree.reflections.extend(f"Lesson {i}: check the arithmetic before going on." for i in range(5))
    return tree


async def _checkpoint(nodes: int, warmup: int, repeats: int) -> tuple[dict[str, float], int]:
    tree = _tree(nodes)
    data = {"format": 1, "tree": tree.to_dict(), "iteration": nodes, "failed_proposals": 0}
    size = len(json.dumps(data, ensure_ascii=False, separators=(",", ":")))
    with tempfile.TemporaryDirectory() as directory:
        store = FileCheckpoints(directory)

        async def checkpoint() -> None:
            await store.save("bench", {"format": 1, "tree": tree.to_dict(), "iteration": nodes,
                                       "failed_proposals": 0})
            loaded = await store.load("bench")
            assert loaded is not None
            back = Tree.from_dict(loaded["tree"])
            assert len(back) == nodes

        async def plain() -> None:
            json.loads(json.dumps(data, ensure_ascii=False, separators=(",", ":")))

        times = await interleave_async({"checkpoint": checkpoint, "json": plain}, warmup=warmup, repeats=repeats)
    return times, size


def run(quick: bool = False) -> list[Figure]:
    """Measure (s); ``quick`` uses 50 rollouts, a 100-node tree and one sample (for the smoke test)."""
    rollouts, nodes, repeats = (50, 100, 1) if quick else (ROLLOUTS, NODES, 3)  # the recording run warms up
    times, calls = anyio.run(_rollouts, rollouts, 0, repeats, backend="asyncio")
    checks = 3 if quick else 7
    checked, size = anyio.run(_checkpoint, nodes, 1 if quick else 2, checks, backend="asyncio")
    per = 1e6 / rollouts
    return [
        Figure(
            "(s) search", f"MCTS own overhead per rollout ({rollouts} rollouts)", times["own"] * per, "µs",
            times["asking"] * per, "inside its proposal and answer calls", high=ROLLOUT_TARGET_US,
            target_text=f"<= {ROLLOUT_TARGET_US:g} µs",
            notes=(f"search {times['wall'] * 1e3:.1f} ms for {calls} model calls ({calls / rollouts:.2f} per "
                   f"rollout, the answer included); median of {repeats}",
                   "value = (wall - inside propose_thoughts and answer_from_line) / rollouts: selection, the tree "
                   "and its states, the scorer, backpropagation, offers, branch scopes"),
        ),
        Figure(
            "(s) search", "framework time per rollout (wall - model function)", times["framework"] * per, "µs",
            times["turn"] * per, "same bare step.turn calls",
            notes=("(wall - time inside the model function) / rollouts, beside the same number of bare step.turn "
                   "calls on the same states: the gap is the typed proposals (schema turn, parse, validation) "
                   "plus the row above",),
        ),
        Figure(
            "(s) search", f"checkpoint of a {nodes}-node tree (save + load)", checked["checkpoint"] * 1e3, "ms",
            checked["json"] * 1e3, "json dumps + loads of the same data", high=CHECKPOINT_TARGET_MS,
            target_text=f"<= {CHECKPOINT_TARGET_MS:g} ms",
            notes=(f"Tree.to_dict + FileCheckpoints.save (JSON, fsync, rename) + load + Tree.from_dict; "
                   f"{size / 1e3:.0f} kB of JSON; median of {checks}",),
        ),
    ]


if __name__ == "__main__":
    import sys

    from tests.benchmarks._harness import render_table

    print(render_table(run(quick="--quick" in sys.argv)))
