"""MCTS: select by UCT, expand, simulate, back the reward up the whole path, reflect on failed rollouts."""

import json
import pathlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio
import pytest

from cognitive import (FileCheckpoints, MemoryCheckpoints, SelfConsistency, Tree, WithBudget, WithOutput,
                       answer_value, checkpoint_key)
from cognitive.search._mcts import MCTS
from cognitive.testing import check_pattern
from loop import Budget, Request, Role, State, Step, Text, UsageError
from provider import Function

Line = Sequence[str]


def branches(k: int = 3, final_at: int | None = None) -> Callable[[Line], list[tuple[str, bool]]]:
    """Proposals named by their place in the tree: below "a.b" come "a.b.a", "a.b.b"...; final from depth
    ``final_at`` on."""
    def propose(line: Line) -> list[tuple[str, bool]]:
        prefix = f"{line[-1]}." if line else ""
        final = final_at is not None and len(line) + 1 >= final_at
        return [(prefix + "abcdefg"[i], final) for i in range(k)]
    return propose


class Model:
    """Proposes with ``propose(line)``, rates with ``rate(line)``, gives ``lesson``; answers "Answer: X" with X
    the last thought of the line of thought it is shown (a typed {"answer": X} when asked for one)."""

    def __init__(self, propose: Callable[[Line], list[tuple[str, bool]]] | None = None,
                 rate: Callable[[Line], float] = lambda line: 0.5, lesson: str = "Try another way.") -> None:
        self.propose = propose or branches()
        self.rate = rate
        self.lesson = lesson
        self.requests: list[Request] = []

    def __call__(self, request: Request) -> str:
        self.requests.append(request)
        schema = request.options.output_schema or {}
        wanted = schema.get("properties", {})
        line = [t.text for t in request.turns if t.kind == "thought"]
        if "thoughts" in wanted:
            return json.dumps({"thoughts": [{"text": t, "final": f} for t, f in self.propose(line)]})
        if "score" in wanted:
            return json.dumps({"score": self.rate(line), "reason": "because"})
        if "lesson" in wanted:
            return json.dumps({"lesson": self.lesson})
        last = request.turns[-1].text.splitlines()[-1]
        found = last.split(". ", 1)[1] if re.match(r"\d+\. ", last) else "none"
        return json.dumps({"answer": found}) if "answer" in wanted else f"Answer: {found}"

    def asked(self, kind: str) -> list[Request]:
        return [r for r in self.requests if kind in (r.options.output_schema or {}).get("properties", {})]


class Recording(MemoryCheckpoints):
    """Keeps a copy of every checkpoint saved: the tree after each rollout."""

    def __init__(self) -> None:
        super().__init__()
        self.saves: list[dict[str, Any]] = []

    async def save(self, key: str, data: Mapping[str, Any]) -> None:
        self.saves.append(json.loads(json.dumps(data)))
        await super().save(key, data)

    def tree(self, index: int = -1) -> Tree:
        return Tree.from_dict(self.saves[index]["tree"])


def thoughts(state: State) -> list[str]:
    return [t.text for t in state if t.kind == "thought"]


def scored(table: Mapping[str, float], default: float = 0.3) -> Callable[[State], float]:
    """A scorer: the score of the line's last thought by the longest prefix the table has."""
    def scorer(state: State) -> float:
        last = (thoughts(state) or [""])[-1]
        keys = [k for k in table if last.startswith(k)]
        return table[max(keys, key=len)] if keys else default
    return scorer


def make(model: Model, **settings: Any) -> MCTS:
    return MCTS(Step(Function(model)), **settings)


def ask(text: str = "Make 24 from 4 4 6 8.") -> State:
    return State().append(Role.USER, Text(text))


def rollout_of(request: Request) -> int:
    found = re.search(r"rollout (\d+)", request.path)
    assert found, request.path
    return int(found[1])


async def test_it_answers_from_the_best_final_line_and_only_extends_the_conversation() -> None:
    model = Model(branches(final_at=2))
    scorer = scored({"b": 0.6, "b.b": 0.8})
    state = await make(model, iterations=6, scorer=scorer).run(ask())
    assert state.answer == "Answer: b.b" and state.outcome is not None and state.outcome.ok
    data = state.outcome.data["MCTS"]
    assert data["line"] == ["b", "b.b"] and data["best_score"] == 0.8 and data["final"] is True
    assert data["rollouts"] == 6 and data["stopped"] == "iterations" and data["resumed_at"] is None
    # The conversation: the question, the chosen line, the answer; the search stayed in branches.
    assert [t.role for t in state] == [Role.USER, Role.SYSTEM, Role.ASSISTANT]
    assert state[1].kind == "search_line" and "1. b\n2. b.b" in state[1].text
    assert not model.asked("score")  # the scorer function rated every line: no rating turn
    assert all(r.path.startswith("MCTS/rollout ") for r in model.requests[:-1])
    assert model.requests[-1].path == "MCTS" and model.requests[-1].options.tool_choice == "none"


async def test_one_rollout_on_a_three_level_chain_credits_all_four_nodes() -> None:
    store = Recording()
    model = Model(branches(k=1))  # one thought a step, never final: the simulation goes down to max_depth
    state = await make(model, iterations=1, children=1, max_depth=3, scorer=lambda s: 0.25,
                       reflect=False, checkpoints=store).run(ask())
    tree = store.tree()
    assert [(n.depth, n.thought) for n in tree] == [(0, ""), (1, "a"), (2, "a.a"), (3, "a.a.a")]
    # Expanded at the root, simulated down to the leaf, the leaf's reward backed up the whole path.
    assert [(n.visits, n.value) for n in tree] == [(1, 0.25)] * 4
    assert tree.rollouts == 1 and state.outcome.data["MCTS"]["nodes"] == 4
    # No final thought was found within max_depth: answered from the best line, degraded.
    assert state.degraded and "no final thought in 1 rollouts (max_depth=3)" in state.outcome.reason


async def test_uct_then_prefers_the_deep_high_value_line_at_the_root() -> None:
    store = Recording()
    model = Model(branches(final_at=4))
    scorer = scored({"a": 0.1, "b": 0.8, "c": 0.1})  # only the line under "b" scores high, none reaches 0.9
    await make(model, iterations=12, scorer=scorer, reflect=False, checkpoints=store).run(ask())
    assert [saved["iteration"] for saved in store.saves] == list(range(1, 13))  # saved after every rollout
    tree = store.tree()
    root = tree.root
    by = {tree.nodes[i].thought: tree.nodes[i] for i in root.children}
    # Rewards from deep in the "b" line reach the root, so UCT sends most rollouts there (c=1.4 still explores).
    assert by["b"].visits > by["a"].visits + by["c"].visits
    assert by["b"].mean > max(by["a"].mean, by["c"].mean)
    assert root.visits == 12 and root.value == pytest.approx(sum(tree.nodes[i].value for i in root.children))
    assert tree.select(0.5).thought.startswith("b.")
    expanded = {k: sum(bool(n.children) for n in tree if n.thought.startswith(k)) for k in "abc"}
    assert expanded["b"] > max(expanded["a"], expanded["c"])


async def test_a_failed_rollout_writes_a_lesson_the_next_proposals_are_shown() -> None:
    model = Model(branches(final_at=2), rate=lambda line: 0.2, lesson="Multiply before you add.")
    state = await make(model, iterations=3, memory_size=2).run(ask())
    proposing = model.asked("thoughts")
    assert all("Multiply" not in t.text for r in proposing if rollout_of(r) == 1 for t in r.turns)
    second = next(r for r in proposing if rollout_of(r) == 2)
    shown = [t.text for t in second.turns if "Lessons from earlier attempts" in t.text]
    assert shown and "- Multiply before you add." in shown[0]
    assert [rollout_of(r) for r in model.asked("lesson")] == [1, 2, 3]
    assert "rated 0.20 out of 1" in model.asked("lesson")[0].turns[-2].text
    # The same lesson learned again is kept once.
    assert state.outcome.data["MCTS"]["reflections"] == ["Multiply before you add."]


async def test_lessons_are_kept_newest_first_up_to_memory_size_and_none_when_off() -> None:
    lessons = iter(f"Lesson {i}." for i in range(1, 10))
    model = Model(branches(final_at=3), rate=lambda line: 0.2)

    def reply(request: Request) -> str:
        if "lesson" in (request.options.output_schema or {}).get("properties", {}):
            model.lesson = next(lessons)
        return model(request)

    state = await MCTS(Step(Function(reply)), iterations=4, memory_size=2).run(ask())
    assert state.outcome.data["MCTS"]["reflections"] == ["Lesson 3.", "Lesson 4."]
    last = model.asked("thoughts")[-1]
    shown = " ".join(t.text for t in last.turns)
    assert rollout_of(last) == 4 and "Lesson 2." in shown and "Lesson 3." in shown and "Lesson 1." not in shown

    model = Model(branches(final_at=1), rate=lambda line: 0.2)
    await make(model, iterations=2, reflect=False).run(ask())
    assert not model.asked("lesson")


async def test_a_scorer_that_raises_fails_that_node_and_the_search_goes_on() -> None:
    def scorer(state: State) -> float:
        if thoughts(state)[-1].startswith("a"):
            raise RuntimeError("cannot judge this")
        return 0.7

    store = Recording()
    model = Model(branches(final_at=1))
    state = await make(model, iterations=3, scorer=scorer, checkpoints=store).run(ask())
    assert state.answer == "Answer: b" and not state.degraded
    data = state.outcome.data["MCTS"]
    assert data["failed_nodes"] == 1 and data["line"] == ["b"]
    failed = [n for n in store.tree() if n.failed]
    assert [n.thought for n in failed] == ["a"] and "RuntimeError: cannot judge this" in failed[0].failed


async def test_a_model_that_never_rates_fails_the_node_with_reward_zero() -> None:
    model = Model(branches(k=1, final_at=1))
    model.rate = lambda line: 7.0  # out of range: the rating never validates
    state = await make(model, iterations=1).run(ask())
    assert state.degraded and "every line failed" in state.outcome.reason and "no valid rating" in state.outcome.reason
    assert len(model.asked("score")) == 2  # asked again once


async def test_every_line_failed_gives_a_degraded_answer_from_the_question() -> None:
    def scorer(state: State) -> float:
        raise ValueError("no judge today")

    model = Model(branches(final_at=2))
    state = await make(model, iterations=4, scorer=scorer).run(ask())
    assert state.degraded and "every line failed in 4 rollouts" in state.outcome.reason
    assert "ValueError: no judge today" in state.outcome.reason
    assert state.answer == "Answer: none" and "(no step of reasoning was found)" in state[1].text
    assert state.outcome.data["MCTS"]["failed_nodes"] == 12  # every rollout expanded the root again
    assert not model.asked("lesson")  # a failed scorer is not a lesson about the reasoning


async def test_proposals_that_never_validate_end_each_expansion_degraded() -> None:
    model = Model()
    model.propose = lambda line: [("", False)]  # blank thoughts only
    state = await make(model, iterations=3).run(ask())
    assert state.degraded and "3 proposals gave no valid thought" in state.outcome.reason
    assert state.outcome.data["MCTS"]["failed_proposals"] == 3 and state.outcome.data["MCTS"]["nodes"] == 1


async def test_it_stops_early_once_a_final_thought_scores_high_enough() -> None:
    model = Model(branches(final_at=2))
    state = await make(model, iterations=16, scorer=scored({"a.a": 0.95})).run(ask())
    data = state.outcome.data["MCTS"]
    assert data["stopped"] == "score" and data["rollouts"] == 1 and state.answer == "Answer: a.a"
    model = Model(branches(final_at=2))
    state = await make(model, iterations=3, scorer=scored({"a.a": 0.95}), stop_at=None).run(ask())
    assert state.outcome.data["MCTS"]["rollouts"] == 3 and state.outcome.data["MCTS"]["stopped"] == "iterations"


async def test_a_budget_running_out_mid_search_answers_from_the_best_candidate() -> None:
    model = Model(branches(final_at=2))
    pattern = make(model, iterations=8, scorer=scored({"a": 0.5, "a.a": 0.6}))
    state = await WithBudget(pattern, Budget(max_turns=3)).run(ask())
    assert state.degraded and "max_turns=3" in state.outcome.reason and "best candidate" in state.outcome.reason
    assert state.answer == "a.a"  # the best final thought found before the budget ran out, offered as it improved
    assert thoughts(state) == ["a", "a.a"]
    assert max(rollout_of(r) for r in model.requests) == 2
    # The same with the model rating the children concurrently: the refusal ends the fan-out too.
    model = Model(branches(final_at=2), rate=lambda line: 0.6 if line == ["a", "a.a"] else 0.3)
    state = await WithBudget(make(model, iterations=8), Budget(max_turns=7)).run(ask())
    assert state.degraded and "best candidate" in state.outcome.reason and state.answer == "a.a"
    assert any("score 3" in r.path for r in model.requests)


async def test_scoring_the_children_runs_concurrently_within_limit() -> None:
    async def slow(state: State) -> float:
        await anyio.sleep(0.1)
        return 0.5

    async def timed(limit: int | None) -> float:
        started = anyio.current_time()
        await make(Model(), iterations=1, max_depth=1, scorer=slow, limit=limit).run(ask())
        return anyio.current_time() - started

    assert await timed(None) < 0.25
    assert await timed(1) >= 0.3


@pytest.mark.parametrize("kind", ["memory", "file"])
async def test_a_stopped_search_resumes_from_its_checkpoint_without_repeating_a_rollout(
        kind: str, tmp_path: pathlib.Path) -> None:
    store = MemoryCheckpoints() if kind == "memory" else FileCheckpoints(tmp_path / "ck")
    settings: dict[str, Any] = {"iterations": 4}
    fresh = Model(branches(final_at=3), rate=lambda line: 0.3)
    whole = await make(fresh, **settings).run(ask())

    first = Model(branches(final_at=3), rate=lambda line: 0.3)
    stopped = await WithBudget(make(first, checkpoints=store, **settings), Budget(max_turns=25)).run(ask())
    assert stopped.degraded
    key = checkpoint_key(repr(make(first, **settings)), ask())
    saved = await store.load(key)
    assert saved is not None
    finished = saved["iteration"]
    assert 1 <= finished < max(rollout_of(r) for r in first.requests)  # stopped inside a later rollout

    again = Model(branches(final_at=3), rate=lambda line: 0.3)
    state = await make(again, checkpoints=store, **settings).run(ask())
    assert min(rollout_of(r) for r in again.requests[:-1]) == finished + 1  # no finished rollout ran again
    # What it asked is exactly what an uninterrupted search asked from that rollout on.
    later = [r for r in fresh.requests[:-1] if rollout_of(r) > finished]
    assert sorted((r.path, [t.text for t in r.turns]) for r in again.requests[:-1]) == \
        sorted((r.path, [t.text for t in r.turns]) for r in later)
    assert state.answer == whole.answer
    data = state.outcome.data["MCTS"]
    assert data["resumed_at"] == finished + 1 and data["rollouts"] == 4
    assert {k: v for k, v in data.items() if k != "resumed_at"} == \
        {k: v for k, v in whole.outcome.data["MCTS"].items() if k != "resumed_at"}
    assert await store.load(key) is None  # dropped on answering


async def test_an_interrupt_mid_search_propagates_and_leaves_a_checkpoint() -> None:
    store = MemoryCheckpoints()
    blocked = anyio.Event()
    inner = Model(branches(final_at=3))

    async def reply(request: Request) -> str:
        if rollout_of(request) == 3:
            blocked.set()
            await anyio.sleep_forever()
        return inner(request)

    returned = False

    async def run() -> None:
        nonlocal returned
        await MCTS(Step(Function(reply)), iterations=5, checkpoints=store).run(ask())
        returned = True

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await blocked.wait()
            group.cancel_scope.cancel()
    assert not returned
    saved = await store.load(checkpoint_key(repr(MCTS(Step(Function(reply)), iterations=5)), ask()))
    assert saved is not None and saved["iteration"] == 2  # the two finished rollouts, ready to resume


async def test_a_broken_or_foreign_checkpoint_is_refused_naming_the_fix() -> None:
    store = MemoryCheckpoints()
    pattern = make(Model(), iterations=2, checkpoints=store)
    key = checkpoint_key(repr(pattern), ask())
    await store.save(key, {"format": 1, "iteration": 9, "failed_proposals": 0, "tree": {}})
    with pytest.raises(UsageError, match="drop it to start afresh"):
        await pattern.run(ask())
    await store.save(key, {"format": 1, "iteration": 1, "failed_proposals": 0, "tree": {"format": 1}})
    with pytest.raises(UsageError, match="non-empty 'nodes'.*drop it"):
        await pattern.run(ask())


async def test_settings_are_checked_and_the_repr_is_the_same_in_every_process() -> None:
    step = Step(Function(Model()))
    for bad, match in [({"iterations": 0}, "iterations"), ({"children": 0}, "children"), ({"c": -1}, "c must"),
                       ({"c": float("nan")}, "c must"), ({"max_depth": 0}, "max_depth"), ({"scorer": 3}, "scorer"),
                       ({"reflect": 1}, "reflect"), ({"stop_at": 0}, "stop_at"), ({"reflect_below": 2}, "reflect_"),
                       ({"limit": 0}, "limit"), ({"memory_size": 0}, "memory_size"),
                       ({"checkpoints": object()}, "Checkpoints"), ({"propose_prompt": "no k"}, "{k}"),
                       ({"reflect_prompt": "no score"}, "{score}")]:
        with pytest.raises(UsageError, match=match):
            MCTS(step, **bad)
    with pytest.raises(UsageError, match="TurnRunner"):
        MCTS(object())  # type: ignore[arg-type]
    shown = repr(MCTS(step, scorer=thoughts, checkpoints=MemoryCheckpoints(), limit=2))
    assert shown == ("MCTS(iterations=16, children=3, c=1.4, max_depth=4, scorer=tests.cognitive.test_mcts.thoughts, "
                     "reflect=True, memory_size=5, stop_at=0.9, reflect_below=0.5)")
    assert "0x" not in repr(MCTS(step, scorer=lambda s: 0.5))
    assert repr(MCTS(step, propose_prompt="Give {k} steps.")).endswith(")") and \
        repr(MCTS(step, propose_prompt="Give {k} steps.")) != repr(MCTS(step))


async def test_it_passes_the_pattern_conformance_check() -> None:
    model = Model(branches(final_at=2))
    await check_pattern(lambda step: MCTS(step, iterations=3), reply=model)
    assert model.asked("thoughts") and model.asked("score")


async def test_it_nests_in_self_consistency_and_writes_a_typed_answer() -> None:
    model = Model(branches(final_at=2))
    state = await SelfConsistency(make(model, iterations=3, scorer=scored({"a.a": 0.8})), n=3).run(ask())
    assert state.answer == "Answer: a.a" and state.outcome.data["SelfConsistency"]["confidence"] == 1

    model = Model(branches(final_at=2))
    step = Step(Function(model))
    shape = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    state = await WithOutput(MCTS(step, iterations=3, scorer=scored({"a.a": 0.8})), step, shape).run(ask())
    assert answer_value(state, shape) == {"answer": "a.a"}
    assert "answer" in (model.requests[-1].options.output_schema or {}).get("properties", {})
