"""Game of 24: an answer's expression read safely (``ast`` with a whitelist, exact fractions, never ``eval``), and
a solver for the puzzles and the simulated model."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Sequence
from fractions import Fraction

import attrs

GOAL = 24
MAX_CHARS = 200
"""The longest expression read: four numbers with every bracket and space fit in far less."""

_OPERATORS: dict[type[ast.operator], str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_SPELLED = str.maketrans({"×": "*", "·": "*", "÷": "/", "−": "-", "–": "-", "—": "-"})
_TIMES_X = re.compile(r"(?<=[\d)])\s*[xX]\s*(?=[\d(])")
_RUN = re.compile(r"[\d\s+\-*/().]+")


@attrs.frozen
class Reading:
    """What an expression is: its exact ``value`` and the whole ``numbers`` it uses, in order, or the
    ``problem`` that stops it being read (then ``value`` is ``None``)."""

    value: Fraction | None
    numbers: tuple[int, ...] = ()
    problem: str = ""


def spelled_plainly(text: str) -> str:
    """``text`` with the usual ways of writing times, divide and minus (``×``, ``x``, ``÷``, ``−``) as ``* / -``."""
    return _TIMES_X.sub("*", text.translate(_SPELLED))


def expression_in(text: str) -> str | None:
    """The last run of ``text`` made only of numbers, ``+ - * /``, brackets and spaces that holds an operator:
    the expression of an answer such as ``"Answer: (4 + 4) × (6 − 3) = 24"``; ``None`` when there is none."""
    found = [run.strip() for run in _RUN.findall(spelled_plainly(text))]
    found = [run for run in found if any(op in run for op in "+-*/") and any(c.isdigit() for c in run)]
    return found[-1] if found else None


def read_expression(expression: str) -> Reading:
    """The value of an arithmetic expression of whole numbers, ``+ - * /`` and brackets.

    Parsed with ``ast`` and walked with a whitelist: a name, a call, an attribute, a power, a unary sign, a
    fraction written as a decimal, or anything else is refused with the reason, and so is division by zero and
    an expression longer than ``MAX_CHARS``. Nothing is ever evaluated by Python itself."""
    text = spelled_plainly(expression).strip()
    if not text:
        return Reading(None, problem="there is no expression")
    if len(text) > MAX_CHARS:
        return Reading(None, problem=f"the expression is longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return Reading(None, problem=f"{text!r} is not an arithmetic expression")
    numbers: list[int] = []
    try:
        value = _value(tree.body, numbers)
    except _Refused as refused:
        return Reading(None, problem=str(refused))
    return Reading(value, tuple(numbers))


class _Refused(Exception):
    pass


def _value(node: ast.expr, numbers: list[int]) -> Fraction:
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _value(node.left, numbers), _value(node.right, numbers)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if right == 0:
            raise _Refused("the expression divides by zero")
        return left / right
    if isinstance(node, ast.Constant) and type(node.value) is int:
        numbers.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.Constant):
        raise _Refused(f"{node.value!r} is not a whole number")
    raise _Refused(f"{type(node).__name__} is not allowed: only whole numbers, + - * / and brackets")


def makes_goal(answer: str, numbers: Sequence[int], goal: int = GOAL) -> bool:
    """Whether ``answer`` holds an expression that uses exactly ``numbers`` (each once, in any order) and comes to
    ``goal``."""
    expression = expression_in(answer)
    if expression is None:
        return False
    reading = read_expression(expression)
    return (reading.value == goal and sorted(reading.numbers) == sorted(numbers))


def show(value: Fraction) -> str:
    """``value`` as a thought writes it: ``8`` or ``8/3``."""
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def moves(values: Sequence[Fraction]) -> tuple[tuple[int, int, str, Fraction], ...]:
    """Every way to combine two of ``values`` (by index) into one: ``(i, j, op, result)``, each distinct result
    multiset once, in a fixed order."""
    return _moves(tuple(values))


@functools.lru_cache(maxsize=65536)
def _moves(values: tuple[Fraction, ...]) -> tuple[tuple[int, int, str, Fraction], ...]:
    found: list[tuple[int, int, str, Fraction]] = []
    seen: set[tuple[Fraction, ...]] = set()
    for i in range(len(values)):
        for j in range(len(values)):
            if i == j:
                continue
            a, b = values[i], values[j]
            for op, result in (("+", a + b), ("*", a * b), ("-", a - b), ("/", a / b if b else None)):
                if result is None or result < 0 or (op in "+*" and i > j):
                    continue
                rest = tuple(sorted([v for k, v in enumerate(values) if k not in (i, j)] + [result]))
                if rest not in seen:
                    seen.add(rest)
                    found.append((i, j, op, result))
    return tuple(found)


@functools.lru_cache(maxsize=65536)
def reachable(values: tuple[Fraction, ...], goal: int = GOAL) -> bool:
    """Whether ``values`` (sorted) can still be combined into ``goal``."""
    if len(values) == 1:
        return values[0] == goal
    for i, j, _, result in moves(values):
        rest = tuple(sorted([v for k, v in enumerate(values) if k not in (i, j)] + [result]))
        if reachable(rest, goal):
            return True
    return False


def solve(numbers: Sequence[int], goal: int = GOAL) -> str | None:
    """One expression making ``goal`` from ``numbers`` (the same one every time), or ``None`` when none does."""
    if not reachable(tuple(sorted(Fraction(n) for n in numbers)), goal):
        return None
    found = _solve(tuple((Fraction(n), str(n)) for n in numbers), goal)
    return None if found is None else unwrap(found)


def _solve(items: tuple[tuple[Fraction, str], ...], goal: int) -> str | None:
    if len(items) == 1:
        return items[0][1] if items[0][0] == goal else None
    values = [v for v, _ in items]
    for i, j, op, result in moves(values):
        rest = tuple(item for k, item in enumerate(items) if k not in (i, j))
        if not reachable(tuple(sorted([v for v, _ in rest] + [result])), goal):
            continue
        found = _solve(rest + ((result, f"({items[i][1]} {op} {items[j][1]})"),), goal)
        if found is not None:
            return found
    return None


def unwrap(expression: str) -> str:
    """``expression`` without the brackets around all of it."""
    if expression.startswith("(") and expression.endswith(")"):
        depth = 0
        for index, char in enumerate(expression):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0 and index < len(expression) - 1:
                return expression
        return expression[1:-1]
    return expression
