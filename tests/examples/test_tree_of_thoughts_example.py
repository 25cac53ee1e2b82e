"""The Game of 24 example: a one-pass chain of thought against a tree-of-thoughts search on the same simulated
model, every answer's arithmetic checked without evaluating model text."""

import json
import re
import subprocess
import sys
from fractions import Fraction

import pytest

from loop import Options, Request, Role, State, Text
from tests.examples import ROOT, load_example

example = load_example("tree_of_thoughts")


def test_it_runs_offline_and_the_search_solves_more_puzzles_than_one_pass() -> None:
    done = subprocess.run([sys.executable, "examples/tree_of_thoughts.py"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("Running on the offline demo model") and not done.stderr
    assert "puzzle: 3 5 8 9\n  1. " in out and "(right;" in out and "stopped: goal" in out
    rows = {m[1]: [int(n) for n in m.groups()[1:]]
            for m in re.finditer(r"^(\S+) +(\d+)/20 +(\d+) +(\d+) +(\d+)$", out, re.M)}
    assert set(rows) == {"chain-of-thought", "self-consistency", "tree-of-thoughts", "mcts"}
    cot, tot = rows["chain-of-thought"], rows["tree-of-thoughts"]
    assert cot[1] == 20, "one call a puzzle"
    assert rows["self-consistency"][1] == 100, "five samples a puzzle"
    assert cot[0] <= 4, "one pass of this model is rarely right"
    assert tot[0] >= 3 * cot[0] and tot[0] > cot[0] + 5, out
    assert rows["mcts"][0] >= 3 * cot[0], out
    assert tot[1] > 10 * cot[1] and tot[2] > 10 * cot[2], "the search pays for it in calls and tokens"


@pytest.mark.parametrize(("answer", "right"), [
    ("(5 - 8) + (3 * 9) = 24", True),
    ("9 * 8 / 3 * 1", False),  # the wrong numbers
    ("(9 - 5) * 8 - 3 * 3 = 24", False),  # a number used twice
    ("(5 + 8) + (3 * 9) = 24", False),  # the claim is false
    ("8 / (3 - 3) * 5 * 9", False),
    ("__import__('os').system('true')", False),
    ("I found no way to make 24.", False),
    ("9 ** 5 - 8 - 3", False),
])
def test_the_checker_works_the_arithmetic_out_itself(answer: str, right: bool) -> None:
    assert example.solves(answer, "3 5 8 9") is right


def test_the_checker_parses_only_numbers_operators_and_brackets() -> None:
    used: list[int] = []
    tree = __import__("ast").parse("(8 / 3) * 9", mode="eval").body
    assert example.value_of(tree, used) == 24 and used == [8, 3, 9]
    with pytest.raises(ValueError, match="not allowed"):
        example.value_of(__import__("ast").parse("abs(-24)", mode="eval").body, [])


def propose(puzzle: str, thoughts: list[str]) -> list[dict[str, object]]:
    state = State().append(Role.USER, Text(example.QUESTION.format(puzzle)))
    for thought in thoughts:
        state = state.append(Role.ASSISTANT, Text(thought), meta={"kind": "thought"})
    schema = {"type": "object", "properties": {"thoughts": {"type": "array"}}}
    request = Request(state.turns, (), Options(output_schema=schema))
    reply = example.demo_model(request)
    return json.loads(reply[0].text)["thoughts"]  # type: ignore[no-any-return]


def test_the_simulated_model_proposes_legal_moves_of_the_numbers_left() -> None:
    first = propose("3 5 8 9", [])
    assert len(first) == 3 and first == propose("3 5 8 9", []), "deterministic"
    items = [(Fraction(n), str(n)) for n in (3, 5, 8, 9)]
    legal = {text for text, _ in example.moves(items)}
    assert {t["text"] for t in first} <= legal
    after = propose("3 5 8 9", ["5 - 8 = -3 (left: 3 9 -3)", "3 * 9 = 27 (left: -3 27)"])
    assert all(t["final"] for t in after)
    assert {t["text"] for t in after} <= {text for text, _ in example.moves(
        [(Fraction(-3), "(5 - 8)"), (Fraction(27), "(3 * 9)")])}
