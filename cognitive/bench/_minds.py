"""What the simulated model knows how to do with each kind of built-in question: read it, work it (with the
mistakes a noisy solver makes), check an answer, propose next steps of reasoning, and judge a partial line.

Each mind reads only the question's text and what the conversation shows (tool results, earlier working); none
sees a task's expected answer.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Protocol

import attrs

from cognitive.bench import _arithmetic, _game24

_STEP = re.compile(r"(\d+(?:/\d+)?) ([-+*/]) (\d+(?:/\d+)?) = (-?\d+(?:/\d+)?)")
_LEFT = re.compile(r"\(left: ([\d/ ]+)\)")
_MARK = re.compile(r"\bAnswer: ([^\"\n][^\n]*)")  # as the model writes it; never an instruction's "Answer:"
_PUZZLE = re.compile(r"make 24 from the numbers ([\d, ]+)", re.IGNORECASE)
_CHAIN = re.compile(r"^\s*(?:who|what) is the (.+?)\s*\?*\s*$", re.IGNORECASE)

Facts = Mapping[tuple[str, str], str]


@attrs.frozen
class Proposed:
    text: str
    final: bool = False


def marked(text: str) -> str | None:
    """What follows the last ``Answer:`` of ``text``, or ``None``."""
    found = _MARK.findall(text)
    return found[-1].strip().rstrip(".").strip() if found else None


class Mind(Protocol):
    """How the model handles one kind of question."""

    @property
    def kind(self) -> str:
        """The kind of task it is (``arithmetic``, ``game24``, ``lookup``)."""
        ...

    def solve(self, rng: random.Random, skill: float, facts: Facts) -> list[str]:
        """The working, ending in a line ``Answer: ...``; right with probability ``skill``."""
        ...

    def right(self, answer: str, facts: Facts) -> bool | None:
        """The truth about ``answer`` as the model can work it out (``None``: it cannot tell)."""
        ...

    def partial(self, text: str) -> bool:
        """Whether ``text`` is a step of reasoning short of an answer."""
        ...

    def promising(self, line: Sequence[str]) -> bool:
        """Whether a partial line of reasoning can still reach a right answer."""
        ...

    def propose(self, line: Sequence[str], k: int, rng: random.Random, skill: float, facts: Facts) -> list[Proposed]:
        """Up to ``k`` next steps after ``line``; each a good one with probability ``skill``."""
        ...

    def plan(self) -> list[str]:
        ...


@attrs.frozen
class Sums:
    """An arithmetic word problem: a few steps, any of which can slip."""

    problem: _arithmetic.Problem
    kind: str = "arithmetic"

    def solve(self, rng: random.Random, skill: float, facts: Facts) -> list[str]:
        slips = {} if rng.random() < skill else {rng.randrange(self.problem.size): _arithmetic.slip(rng)}
        values = self.problem.values(slips)
        return [self.problem.step_text(i, values) for i in range(self.problem.size)] + [f"Answer: {values[-1]}"]

    def right(self, answer: str, facts: Facts) -> bool | None:
        numbers = re.findall(r"-?\d+", marked(answer) or answer)
        return bool(numbers) and int(numbers[-1]) == self.problem.values()[-1]

    def partial(self, text: str) -> bool:
        return marked(text) is None and _STEP.search(text) is not None

    def _done(self, line: Sequence[str]) -> tuple[int, ...]:
        return tuple(int(m.group(4)) for text in line for m in [_STEP.search(text)] if m)[:self.problem.size]

    def promising(self, line: Sequence[str]) -> bool:
        done = self._done(line)
        return done == self.problem.values()[:len(done)]

    def propose(self, line: Sequence[str], k: int, rng: random.Random, skill: float, facts: Facts) -> list[Proposed]:
        done = self._done(line)
        index = len(done)
        if index >= self.problem.size:
            return [Proposed(f"Answer: {done[-1]}", True)]
        step = skill ** (1 / self.problem.size)
        out: list[Proposed] = []
        for _ in range(k):
            value = self.problem.next_value(index, done)
            if rng.random() >= step:
                value += _arithmetic.slip(rng)
            text = self.problem.step_text(index, done + (value,))
            last = index == self.problem.size - 1
            out.append(Proposed(f"{text}. Answer: {value}" if last else text, last))
        return out

    def plan(self) -> list[str]:
        named = {name: f"the result of step {i + 1}" for i, (name, *_) in enumerate(self.problem.template.steps)}
        named.update({blank: str(value) for blank, value in self.problem.numbers.items()})
        return [f"Work out {named[left]} {op.replace('//', '/')} {named[right]}"
                for _, left, op, right in self.problem.template.steps]


@attrs.frozen
class Puzzle:
    """A Game of 24 puzzle: hard to solve in one go, easy to check, and a partial line is easy to judge."""

    numbers: tuple[int, ...]
    kind: str = "game24"

    def solve(self, rng: random.Random, skill: float, facts: Facts) -> list[str]:
        found = _game24.solve(self.numbers) if rng.random() < skill else None
        if found is None:  # a guess: the numbers in some order with some operators, claimed to make 24
            order = list(self.numbers)
            rng.shuffle(order)
            ops = [rng.choice("+-*/") for _ in order[1:]]
            found = f"({order[0]} {ops[0]} {order[1]}) {ops[1]} ({order[2]} {ops[2]} {order[3]})" \
                if len(order) == 4 else " + ".join(map(str, order))
        return [f"Answer: {found} = 24"]

    def right(self, answer: str, facts: Facts) -> bool | None:
        return _game24.makes_goal(answer, self.numbers)

    def partial(self, text: str) -> bool:
        return marked(text) is None and _LEFT.search(text) is not None

    def _items(self, line: Sequence[str]) -> list[tuple[Fraction, str]]:
        """The numbers left after ``line``'s steps, each with the expression it stands for."""
        items = [(Fraction(n), str(n)) for n in self.numbers]
        for text in line:
            match = _STEP.search(text)
            if match is None or marked(text) is not None and len(items) == 1:
                continue
            a, op, b, c = match.groups()
            first = next((i for i, (v, _) in enumerate(items) if v == Fraction(a)), None)
            second = next((i for i, (v, _) in enumerate(items) if v == Fraction(b) and i != first), None)
            if first is None or second is None:
                continue
            made = (Fraction(c), f"({items[first][1]} {op} {items[second][1]})")
            items = [item for i, item in enumerate(items) if i not in (first, second)] + [made]
        return items

    def promising(self, line: Sequence[str]) -> bool:
        return _game24.reachable(tuple(sorted(v for v, _ in self._items(line))))

    def propose(self, line: Sequence[str], k: int, rng: random.Random, skill: float, facts: Facts) -> list[Proposed]:
        items = self._items(line)
        values = [v for v, _ in items]
        options = _game24.moves(values)
        if not options:
            return [Proposed(f"Answer: {_game24.unwrap(items[0][1])} = 24", True)] if items else []
        good = [m for m in options if _game24.reachable(tuple(sorted(
            [v for i, v in enumerate(values) if i not in m[:2]] + [m[3]])))]
        step = skill ** (1 / max(1, len(self.numbers) - 1))  # good steps all the way make a right attempt
        out: list[Proposed] = []
        for _ in range(k):
            pool = good if good and rng.random() < step else options
            i, j, op, result = rng.choice(pool)
            a, b = _game24.show(values[i]), _game24.show(values[j])
            rest = [v for n, v in enumerate(values) if n not in (i, j)] + [result]
            if len(rest) == 1:
                expression = _game24.unwrap(f"({items[i][1]} {op} {items[j][1]})")
                out.append(Proposed(f"{a} {op} {b} = {_game24.show(result)}. Answer: {expression} = 24", True))
            else:
                left = " ".join(_game24.show(v) for v in sorted(rest))
                out.append(Proposed(f"{a} {op} {b} = {_game24.show(result)} (left: {left})"))
        return out

    def plan(self) -> list[str]:
        return ["Combine two of the numbers so that 24 can still be made from what is left",
                "Combine what is left until one number, 24, remains", "Write the whole expression and check it"]


@attrs.frozen
class Chain:
    """A question that chains facts (the mayor of the capital of X): only a reference book answers it."""

    relations: tuple[str, ...]  # outermost first
    name: str
    kind: str = "lookup"

    def walk(self, facts: Facts) -> tuple[str, str | None]:
        """How far the facts known reach: the last thing found, and the next query (``None``: all found)."""
        current = self.name
        for relation in reversed(self.relations):
            found = facts.get((relation, current))
            if found is None:
                return current, f"{relation} of {current}"
            current = found
        return current, None

    def solve(self, rng: random.Random, skill: float, facts: Facts) -> list[str]:
        reached, missing = self.walk(facts)
        if missing is None:
            return [f"Answer: {reached}"]
        return [f"I cannot tell without looking up the {missing}."]

    def right(self, answer: str, facts: Facts) -> bool | None:
        reached, missing = self.walk(facts)
        if missing is not None:
            return None
        return reached.casefold() in (marked(answer) or answer).casefold()

    def partial(self, text: str) -> bool:
        return False

    def promising(self, line: Sequence[str]) -> bool:
        return False

    def propose(self, line: Sequence[str], k: int, rng: random.Random, skill: float, facts: Facts) -> list[Proposed]:
        reached, missing = self.walk(facts)
        if missing is None:
            return [Proposed(f"Answer: {reached}", True)]
        return [Proposed(f"The {missing} has to be looked up first.")]

    def plan(self) -> list[str]:
        return [f"Look up the {relation} of the last thing found" for relation in reversed(self.relations)] + [
            "Answer with the last thing found"]


def understand(question: str) -> Mind | None:
    """The mind for ``question``, or ``None`` when it is no kind the model knows."""
    puzzle = _PUZZLE.search(question)
    if puzzle:
        return Puzzle(tuple(int(n) for n in re.findall(r"\d+", puzzle.group(1))))
    sums = _arithmetic.read(question)
    if sums is not None:
        return Sums(sums)
    chain = _CHAIN.match(question)
    if chain:
        *outer, last = chain.group(1).split(" of the ")
        relation, sep, name = last.partition(" of ")
        if sep and name.strip():
            return Chain(tuple(r.strip().lower() for r in [*outer, relation]), name.strip())
    return None


_FACT = re.compile(r"The ([a-z][a-z ]*?) of ([A-Z][\w' -]*?) is ([^.\n]+)\.")


def facts_in(texts: Sequence[str]) -> dict[tuple[str, str], str]:
    """The facts ``texts`` state as ``The RELATION of NAME is VALUE.`` (as the reference book words them)."""
    return {(m.group(1), m.group(2)): m.group(3).strip() for text in texts for m in _FACT.finditer(text)}
