"""The search runtime: a tree of thoughts over forked states, Monte Carlo statistics, and checkpoints."""

import json
import math
import os
import pathlib

import pytest

from cognitive import FileCheckpoints, MemoryCheckpoints, checkpoint_key
from cognitive import Tree
from loop import Role, State, Text, UsageError


def start() -> State:
    return State().append(Role.USER, Text("Make 24 from 4 4 6 8."))


def grow(tree: Tree, parent_id: int, thought: str, **kw: object) -> int:
    parent = tree.nodes[parent_id]
    return tree.add(parent, thought, parent.state.append(Role.ASSISTANT, Text(thought)), **kw).id  # type: ignore[arg-type]


def test_a_reward_is_backed_up_through_every_ancestor_of_the_leaf() -> None:
    tree = Tree(start())
    a = grow(tree, 0, "4 + 8 = 12")
    b = grow(tree, a, "12 - 6 = 6")
    c = grow(tree, b, "6 * 4 = 24", terminal=True)
    tree.backpropagate(tree.nodes[c], 1.0)
    assert [(n.id, n.visits, n.value) for n in tree] == [(0, 1, 1.0), (a, 1, 1.0), (b, 1, 1.0), (c, 1, 1.0)]
    assert tree.rollouts == 1


def test_uct_prefers_the_deep_high_value_line_at_the_root_once_both_are_visited() -> None:
    tree = Tree(start())
    good = grow(tree, 0, "good")
    bad = grow(tree, 0, "bad")
    deep = grow(tree, grow(tree, good, "deeper"), "deepest", terminal=True)
    # Unvisited children score infinity, the first among equals wins: it descends the first line to its leaf.
    assert tree.select(1.4).id == deep
    tree.backpropagate(tree.nodes[bad], 0.0)
    assert tree.select(1.4).id == deep  # the unvisited good line still comes first
    for _ in range(3):
        tree.backpropagate(tree.nodes[deep], 1.0)
    assert tree.uct(tree.nodes[good], 1.4) > tree.uct(tree.nodes[bad], 1.4)
    assert tree.select(1.4).id == deep
    # With exploration alone the rarely visited line wins: the bonus is what c weighs.
    assert tree.uct(tree.nodes[bad], 100.0) > tree.uct(tree.nodes[good], 100.0)
    assert math.isinf(Tree(start()).uct(tree.add(Tree(start()).root, "x", start().append(Role.ASSISTANT, Text("x"))),
                                        1.4))


def test_select_passes_over_failed_children_and_stops_where_all_failed() -> None:
    tree = Tree(start())
    failed = grow(tree, 0, "broken", failed="the scorer raised")
    alive = grow(tree, 0, "fine")
    assert tree.select(1.4).id == alive
    tree.nodes[alive].failed = "no"
    assert tree.select(1.4).id == 0
    assert tree.frontier(1) == []
    assert failed in tree.root.children


def test_best_is_the_top_scored_answer_else_the_top_scored_thought() -> None:
    tree = Tree(start())
    assert tree.best() is None
    low = grow(tree, 0, "low", score=0.2)
    high = grow(tree, 0, "high", score=0.9)
    assert tree.best().id == high  # type: ignore[union-attr]
    answer = grow(tree, low, "24", score=0.5, terminal=True)
    assert tree.best().id == answer  # type: ignore[union-attr]


def test_a_child_must_extend_its_parent_and_scores_stay_in_range() -> None:
    tree = Tree(start())
    with pytest.raises(UsageError, match="extend its parent"):
        tree.add(tree.root, "elsewhere", State().append(Role.USER, Text("another question")))
    with pytest.raises(UsageError, match="from 0 to 1"):
        grow(tree, 0, "x", score=1.5)
    answer = grow(tree, 0, "24", terminal=True)
    with pytest.raises(UsageError, match="terminal"):
        grow(tree, answer, "more")
    with pytest.raises(UsageError, match="finite"):
        tree.backpropagate(tree.nodes[answer], math.nan)


def test_a_tree_round_trips_through_json_with_each_turn_stored_once() -> None:
    tree = Tree(start().with_meta(topic="24"))
    a = grow(tree, 0, "4 + 8 = 12", score=0.7)
    b = grow(tree, a, "24", terminal=True, score=1.0)
    grow(tree, 0, "dead end", failed="scorer raised")
    tree.backpropagate(tree.nodes[b], 1.0)
    tree.reflections.append("Try multiplication first.")
    data = json.loads(json.dumps(tree.to_dict()))
    assert [len(n["turns"]) for n in data["nodes"]] == [1, 1, 1, 1]
    back = Tree.from_dict(data)
    assert [(n.id, n.parent, n.depth, n.thought, n.score, n.terminal, n.failed, n.visits, n.value, n.children)
            for n in back] == [(n.id, n.parent, n.depth, n.thought, n.score, n.terminal, n.failed, n.visits,
                                n.value, n.children) for n in tree]
    assert all(x.state == y.state for x, y in zip(back, tree))
    assert back.rollouts == 1 and back.reflections == ["Try multiplication first."]


@pytest.mark.parametrize("data, problem", [
    ({"format": 9, "nodes": []}, "format 1"),
    ({"format": 1, "nodes": []}, "non-empty"),
    ({"format": 1, "nodes": [{"turns": []}, {"parent": 5, "turns": []}]}, "earlier node"),
    ({"format": 1, "nodes": [{"parent": 0}]}, "root has no parent"),
])
def test_a_broken_tree_is_refused_naming_the_problem(data: dict, problem: str) -> None:
    with pytest.raises(UsageError, match=problem):
        Tree.from_dict(data)


async def test_file_checkpoints_save_load_and_drop_privately(tmp_path: pathlib.Path) -> None:
    store = FileCheckpoints(tmp_path / "ck")
    key = checkpoint_key("TreeOfThoughts(breadth=3)", start())
    assert await store.load(key) is None
    await store.save(key, {"format": 1, "n": 1})
    await store.save(key, {"format": 1, "n": 2})
    assert await store.load(key) == {"format": 1, "n": 2}
    assert oct(os.stat(tmp_path / "ck" / f"{key}.json").st_mode & 0o777) == "0o600"
    assert not list((tmp_path / "ck").glob("*.partial"))
    await store.drop(key)
    assert await store.load(key) is None
    (tmp_path / "ck" / f"{key}.json").write_text("{not json")
    with pytest.raises(UsageError, match="delete it"):
        await store.load(key)
    with pytest.raises(UsageError, match="checkpoint key"):
        await store.load("../etc/passwd")


async def test_the_key_belongs_to_one_pattern_on_one_conversation() -> None:
    memory = MemoryCheckpoints()
    one = checkpoint_key("MCTS(iterations=8)", start())
    assert one == checkpoint_key("MCTS(iterations=8)", start())
    assert one != checkpoint_key("MCTS(iterations=9)", start())
    assert one != checkpoint_key("MCTS(iterations=8)", start().append(Role.USER, Text("and?")))
    await memory.save(one, {"x": 1})
    assert await memory.load(one) == {"x": 1} and len(memory) == 1
