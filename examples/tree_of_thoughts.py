"""Game of 24: one pass of chain-of-thought against self-consistency, a tree-of-thoughts search and MCTS, on the
same model.

Each puzzle is four numbers to combine with + - * / (each used once) into 24. ``ChainOfThought`` asks the model
to work the puzzle out step by step in one reply; ``SelfConsistency`` votes over five such replies sampled hot.
``TreeOfThoughts`` asks it for five candidate next steps at a time, has it rate how promising each remaining set
of numbers is, keeps the best five lines per level (the settings the ToT paper used for this game) and answers
from the best line after at most three steps. ``MCTS`` runs sixteen rollouts of three children each. A checker
parses each answer's expression (with ``ast`` and a whitelist: model text is never evaluated), checks that it
uses exactly the puzzle's numbers, and works it out with exact fractions. The table shows each pattern's solve
rate, model calls and tokens.

Runs offline on a deterministic simulated model (``provider.Function``). It is not told the answers: for each
step it enumerates every move, works out by an exhaustive search which moves still lead to 24, and then
chooses with noise (the move it takes is a good one only about three times in ten, else any move), and its
rating of a set of numbers is right four times in five. The same noisy policy writes the one-pass working, so
one pass solves few puzzles. A request sampled hot (temperature above 0) gets a reply of its own per sample.
Its replies carry token usage as a hosted model bills it (about four characters a token).

    python examples/tree_of_thoughts.py

With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` (or ``ANTHROPIC_API_KEY``) set, it runs on that real model.
Serve the search as an agent with ``python -m session serve examples.tree_of_thoughts:make_agent``.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import random
import re
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache

import anyio

import loop
import provider
from cognitive import MCTS, ChainOfThought, Pattern, SelfConsistency, TreeOfThoughts
from loop import Request, Role, Spend, State, Step, Text, Usage, charging

PUZZLES = ["1 1 4 8", "1 2 2 12", "1 4 4 12", "1 5 6 11", "1 8 8 8", "2 2 2 3", "2 2 2 7", "2 2 2 8", "2 2 5 5",
           "2 2 8 12", "2 3 7 7", "2 6 8 13", "3 5 8 9", "4 4 4 8", "4 4 5 6", "4 5 7 7", "4 6 10 12",
           "4 9 10 12", "6 6 9 10", "8 8 10 12"]
QUESTION = "Use the numbers {} once each, with + - * / and brackets, to make 24."
SEES_A_GOOD_MOVE = 0.3  # how often the model's move is one that still leads to 24 (else it takes any move)
JUDGES_RIGHT = 0.8  # how often its rating of a set of numbers is right

# The patterns compared: name -> how to build it on a step. Add an entry to compare another pattern.
PATTERNS: dict[str, Callable[[Step], Pattern]] = {
    "chain-of-thought": lambda step: ChainOfThought(step),
    "self-consistency": lambda step: SelfConsistency(ChainOfThought(step), n=5),
    "tree-of-thoughts": lambda step: TreeOfThoughts(step, breadth=5, beam=5, depth=3),
    "mcts": lambda step: MCTS(step, iterations=16, children=3, max_depth=3),
}

# -- the simulated model --------------------------------------------------------------------------------------

Item = tuple[Fraction, str]  # a number left, and the expression that made it
_STEP = re.compile(r"^(\S+) ([-+*/]) (\S+) = (\S+)")


def moves(items: list[Item]) -> list[tuple[str, list[Item]]]:
    """Every move (combine two numbers left), as its thought's text and the numbers left after it."""
    found: dict[tuple[Fraction, ...], tuple[str, list[Item]]] = {}
    for i, j in itertools.permutations(range(len(items)), 2):
        (a, ea), (b, eb) = items[i], items[j]
        rest = [items[k] for k in range(len(items)) if k not in (i, j)]
        for op, value in (("+", a + b), ("-", a - b), ("*", a * b), ("/", a / b if b else None)):
            if value is None or (op in "+*" and i > j):
                continue
            left = [*rest, (value, f"({ea} {op} {eb})")]
            if len(left) == 1:
                text = f"{left[0][1][1:-1]} = {value}"  # the last move states the whole expression
            else:
                text = f"{a} {op} {b} = {value} (left: {' '.join(str(v) for v, _ in left)})"
            found.setdefault(tuple(sorted(v for v, _ in left)), (text, left))
    return list(found.values())


@lru_cache(maxsize=None)
def reaches_24(values: tuple[Fraction, ...]) -> bool:
    """Whether some sequence of moves turns ``values`` into 24: the model's own exhaustive search."""
    if len(values) == 1:
        return values[0] == 24
    return any(reaches_24(tuple(sorted(v for v, _ in left))) for _, left in moves([(v, str(v)) for v in values]))


def replay(puzzle: list[int], thoughts: list[str]) -> list[Item]:
    """The numbers left after the moves in ``thoughts`` (each "a op b = c ...")."""
    items: list[Item] = [(Fraction(n), str(n)) for n in puzzle]
    for thought in thoughts:
        match = _STEP.match(thought)
        if match is not None:
            taken = next((m for m in moves(items) if m[0].startswith(match[0])), None)
            items = taken[1] if taken else items
    return items


def good(left: list[Item]) -> bool:
    return reaches_24(tuple(sorted(v for v, _ in left)))


def pick(rng: random.Random, options: list[tuple[str, list[Item]]]) -> tuple[str, list[Item]]:
    """One move, the way the model picks: a good one if it sees one this time, else any."""
    promising = [m for m in options if good(m[1])]
    return rng.choice(promising if promising and rng.random() < SEES_A_GOOD_MOVE else options)


def reply(request: Request, puzzle: list[int]) -> str:
    # The same request gets the same reply; a sampled one (temperature above 0) differs from sample to sample.
    sampled = request.path if request.options.temperature else ""
    rng = random.Random(hashlib.sha256(repr([sampled, *(t.text for t in request.turns)]).encode()).digest())
    properties = (request.options.output_schema or {}).get("properties", {})
    thoughts = [t.text for t in request.turns if t.kind == "thought"]
    items = replay(puzzle, thoughts)
    if "thoughts" in properties:  # propose as many next moves as asked ("up to 3")
        asked = re.search(r"up to (\d+)", next((t.text for t in reversed(request.turns) if t.kind == "propose"), ""))
        options, chosen = moves(items), []
        while options and len(chosen) < (int(asked[1]) if asked else 3):
            chosen.append(pick(rng, options))
            options.remove(chosen[-1])
        return json.dumps({"thoughts": [{"text": text, "final": len(left) == 1} for text, left in chosen]})
    if "score" in properties:  # rate the numbers left: a stated result is checked, the rest judged noisily
        if thoughts and "left:" not in thoughts[-1]:
            return json.dumps({"score": 1.0 if thoughts[-1].endswith("= 24") else 0.0})
        promising = good(items) == (rng.random() < JUDGES_RIGHT)  # the truth, or now and then its opposite
        return json.dumps({"score": round(0.7 + 0.25 * rng.random() if promising else 0.3 * rng.random(), 2)})
    last = request.turns[-1]
    if last.kind == "search_line":  # answer from the line the search chose
        final = last.text.splitlines()[-1].split(". ", 1)[-1]
        return final if "left:" not in final and "=" in final else "I found no way to make 24."
    working = []  # one pass: take one move after another, as noisily as ever
    while len(items) > 1:
        text, items = pick(rng, moves(items))
        working.append(text)
    return "\n".join(working) + f"\nAnswer: {items[0][1][1:-1]} = 24"


def demo_model(request: Request) -> list[Text | Usage]:
    question = next(t.text for t in reversed(request.turns) if t.role is Role.USER)
    puzzle = [int(n) for n in re.findall(r"\d+", question)]
    if len(puzzle) > 4 and 24 in puzzle:
        puzzle.remove(24)  # "make 24 from 3 5 8 9": the target is not one of the numbers
    puzzle = puzzle[:4]
    if len(puzzle) == 4:
        text = reply(request, puzzle)
    elif "thoughts" in (request.options.output_schema or {}).get("properties", {}):
        text = json.dumps({"thoughts": [{"text": "Send four numbers, such as 4 7 8 8, and I will combine them "
                                                 "with + - * / to make 24.", "final": True}]})
    elif "score" in (request.options.output_schema or {}).get("properties", {}):
        text = json.dumps({"score": 1.0})
    else:
        text = "I play the Game of 24: send four numbers, such as 4 7 8 8, and I will combine them to make 24."
    return [Text(text), Usage(loop.approx_tokens(request.turns), max(1, len(text) // 4))]


TOOLS: list[loop.Tool] = []  # what `python -m session serve examples.tree_of_thoughts:make_agent` gives the step


def demo_provider() -> provider.Function:
    return provider.Function(demo_model)


def make_agent(step: Step) -> Pattern:
    """The search, as an agent that answers Game of 24 puzzles."""
    return PATTERNS["tree-of-thoughts"](step)


# -- the checker ----------------------------------------------------------------------------------------------

_OPS = {ast.Add: Fraction.__add__, ast.Sub: Fraction.__sub__, ast.Mult: Fraction.__mul__,
        ast.Div: Fraction.__truediv__}


def value_of(node: ast.AST, used: list[int]) -> Fraction:
    """The value of a parsed expression made only of whole numbers, + - * / and brackets."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = value_of(node.left, used), value_of(node.right, used)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ValueError("division by zero")
        return _OPS[type(node.op)](left, right)
    raise ValueError(f"not allowed in an answer: {ast.dump(node)}")


def solves(answer: str, puzzle: str) -> bool:
    """Whether ``answer`` holds an expression using exactly the puzzle's numbers that makes 24."""
    found = re.search(r"[\d(][\d\s+\-*/()]*", answer.split("=")[0])
    if found is None or len(found[0]) > 200:
        return False
    used: list[int] = []
    try:
        value = value_of(ast.parse(found[0].strip(), mode="eval").body, used)
    except (SyntaxError, ValueError):
        return False
    return value == 24 and sorted(used) == sorted(int(n) for n in puzzle.split())


# -- the comparison -------------------------------------------------------------------------------------------


async def compare(chosen: loop.Provider) -> dict[str, dict[str, int]]:
    """Each pattern on every puzzle: puzzles solved, model calls and tokens."""
    table: dict[str, dict[str, int]] = {}
    for name, build in PATTERNS.items():
        pattern, spend, solved = build(Step(chosen)), Spend(None), 0
        with charging(spend):
            for puzzle in PUZZLES:
                state = await pattern.run(State().append(Role.USER, Text(QUESTION.format(puzzle))))
                solved += solves(state.answer or "", puzzle)
        spent = spend.spent
        table[name] = {"solved": solved, "calls": spent.turns, "input": spent.input_tokens,
                       "output": spent.output_tokens}
    return table


async def main() -> None:
    demo = demo_provider()
    chosen = provider.from_environment(demo)
    print("Running on the offline demo model (provider.Function; no model needed).\n" if chosen is demo
          else f"Running on {chosen!r}.\n")
    puzzle = PUZZLES[12]
    state = await make_agent(Step(chosen)).run(State().append(Role.USER, Text(QUESTION.format(puzzle))))
    search = state.outcome.data["TreeOfThoughts"] if state.outcome else {}
    print(f"puzzle: {puzzle}")
    for number, thought in enumerate(search.get("line", []), 1):
        print(f"  {number}. {thought}")
    print(f"  answer: {state.answer} ({'right' if solves(state.answer or '', puzzle) else 'wrong'}; "
          f"{search.get('nodes')} thoughts, stopped: {search.get('stopped')})\n")
    print(f"{len(PUZZLES)} puzzles:")
    print(f"{'pattern':<18} {'solved':>7} {'calls':>6} {'tokens in':>10} {'tokens out':>11}")
    for name, row in (await compare(chosen)).items():
        print(f"{name:<18} {row['solved']:>4}/{len(PUZZLES)} {row['calls']:>6} {row['input']:>10} "
              f"{row['output']:>11}")


if __name__ == "__main__":
    anyio.run(main)
