"""Arithmetic word problems: the phrasings of the built-in set, read back into the steps that solve them."""

from __future__ import annotations

import random
import re
from collections.abc import Mapping

import attrs

_SYMBOLS = {"+": "+", "-": "-", "*": "*", "//": "/"}


@attrs.frozen
class Template:
    """A word problem with blanks (``{a}``) and the steps that solve it: ``(name, left, op, right)``, where left
    and right name a blank or an earlier step and ``op`` is ``+ - * //``; the last step is the answer."""

    text: str
    steps: tuple[tuple[str, str, str, str], ...]
    blanks: Mapping[str, tuple[int, int]]  # the range each blank is drawn from
    exact: bool = False  # its divisions must come out whole

    @property
    def pattern(self) -> re.Pattern[str]:
        parts = re.split(r"\{(\w+)\}", self.text)
        regex = "".join(re.escape(p) if i % 2 == 0 else rf"(?P<{p}>\d+)" for i, p in enumerate(parts))
        return re.compile(regex)


TEMPLATES: tuple[Template, ...] = (
    Template("A baker bakes {a} trays of {b} rolls each and sells {c} rolls. How many rolls are left?",
             (("t", "a", "*", "b"), ("answer", "t", "-", "c")), {"a": (3, 9), "b": (6, 24), "c": (5, 17)}),
    Template("Mia has {a} stickers. She gives {b} stickers to each of her {c} friends and then buys {d} more. "
             "How many stickers does she have now?",
             (("given", "b", "*", "c"), ("left", "a", "-", "given"), ("answer", "left", "+", "d")),
             {"a": (60, 140), "b": (2, 9), "c": (3, 6), "d": (4, 30)}),
    Template("A train travels at {a} km per hour for {b} hours and then {c} km more. How many km does it travel "
             "in all?", (("t", "a", "*", "b"), ("answer", "t", "+", "c")), {"a": (45, 120), "b": (2, 6),
                                                                              "c": (10, 90)}),
    Template("A school orders {a} boxes of {b} pencils and shares them equally among {c} classes. How many "
             "pencils does each class get?", (("t", "a", "*", "b"), ("answer", "t", "//", "c")),
             {"a": (4, 12), "b": (10, 30), "c": (2, 6)}, exact=True),
    Template("A farmer has {a} hens and each lays {b} eggs a week. He packs the eggs in cartons of {c}. How many "
             "full cartons does he fill in {d} weeks?",
             (("week", "a", "*", "b"), ("all", "week", "*", "d"), ("answer", "all", "//", "c")),
             {"a": (8, 30), "b": (3, 6), "c": (6, 12), "d": (2, 4)}),
    Template("Adult tickets cost {a} dollars and child tickets cost {b} dollars. How much do {c} adults and {d} "
             "children pay in all?",
             (("adults", "a", "*", "c"), ("children", "b", "*", "d"), ("answer", "adults", "+", "children")),
             {"a": (12, 40), "b": (5, 11), "c": (2, 6), "d": (2, 7)}),
)


@attrs.frozen
class Problem:
    """A word problem read: its template and the numbers in its blanks."""

    template: Template
    numbers: Mapping[str, int]

    @property
    def size(self) -> int:
        """How many steps solve it."""
        return len(self.template.steps)

    def values(self, slips: Mapping[int, int] | None = None) -> tuple[int, ...]:
        """The value of each step; ``slips`` adds a mistake to some steps (index -> amount), carried on."""
        known = dict(self.numbers)
        out: list[int] = []
        for index, (name, left, op, right) in enumerate(self.template.steps):
            value = _apply(known[left], op, known[right]) + (slips or {}).get(index, 0)
            known[name] = value
            out.append(value)
        return tuple(out)

    def step_text(self, index: int, values: tuple[int, ...]) -> str:
        """Step ``index`` as a line of working, from the values of the steps before it."""
        _, left, op, right = self.template.steps[index]
        known = dict(self.numbers)
        for (earlier, *_), value in zip(self.template.steps, values):
            known[earlier] = value
        return f"{known[left]} {_SYMBOLS[op]} {known[right]} = {values[index]}"

    def next_value(self, index: int, done: tuple[int, ...]) -> int:
        """Step ``index`` worked correctly from the values ``done`` for the steps before it (right or not)."""
        _, left, op, right = self.template.steps[index]
        known = dict(self.numbers)
        for (earlier, *_), value in zip(self.template.steps, done):
            known[earlier] = value
        return _apply(known[left], op, known[right])


def _apply(left: int, op: str, right: int) -> int:
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    return left // right if right else 0


_PATTERNS = tuple((template, template.pattern) for template in TEMPLATES)


def read(question: str) -> Problem | None:
    """The word problem ``question`` states, or ``None`` when it is none of the known phrasings."""
    text = " ".join(question.split())
    for template, pattern in _PATTERNS:
        match = pattern.search(text)
        if match:
            return Problem(template, {k: int(v) for k, v in match.groupdict().items()})
    return None


def slip(rng: random.Random) -> int:
    """A small arithmetic mistake, as a model makes one."""
    return rng.choice((-10, -3, -2, -1, 1, 2, 3, 10))


def make(template: Template, rng: random.Random) -> Problem:
    """A problem of ``template`` with numbers drawn from ``rng`` whose every step stays a positive whole number."""
    while True:
        numbers = {k: rng.randint(low, high) for k, (low, high) in template.blanks.items()}
        problem = Problem(template, numbers)
        values = problem.values()
        whole = not template.exact or all(_whole(problem, index) for index, step in enumerate(template.steps)
                                          if step[2] == "//")
        if whole and all(v > 0 for v in values):
            return problem


def _whole(problem: Problem, index: int) -> bool:
    _, left, _, right = problem.template.steps[index]
    known = dict(problem.numbers)
    for (name, *_), value in zip(problem.template.steps, problem.values()):
        known[name] = value
    return known[right] != 0 and known[left] % known[right] == 0


def question(problem: Problem) -> str:
    return problem.template.text.format(**problem.numbers)
