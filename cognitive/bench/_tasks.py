"""Tasks: a question, the expected answer and a checker; the built-in set; tasks read from a JSONL file."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import attrs

from cognitive.bench import _arithmetic, _game24
from cognitive import normalise_answer
from loop import Role, State, Text, Tool, UsageError, tool

Checker = Callable[[str, "Task"], bool]
"""Whether an answer's text is right for a task: ``checker(answer_text, task) -> bool``."""

_FINAL = re.compile(r"answer\s*:", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _question(value: Any) -> State:
    if isinstance(value, str):
        if not value.strip():
            raise UsageError("a task's question is empty")
        return State().append(Role.USER, Text(value))
    if isinstance(value, State):
        last = value.last
        if last is None or last.role is not Role.USER:
            raise UsageError("a task's question is a State ending in the user's message (or the message's text)")
        return value
    raise UsageError(f"a task's question is its text or a loop.State ending in it, got {value!r}")


def _name(what: str) -> Callable[[Any, Any, Any], None]:
    def check(_: Any, __: Any, value: Any) -> None:
        if not isinstance(value, str) or not value.strip():
            raise UsageError(f"a task's {what} is a non-empty string, got {value!r}")
    return check


def _checker(_: Any, __: Any, value: Any) -> None:
    if not callable(value):
        raise UsageError(f"a task's checker is a function (answer_text, task) -> bool, got {value!r}")


def _tools(value: Iterable[Tool]) -> tuple[Tool, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise UsageError(f"a task's tools are a list of loop.Tool values, got {value!r}")
    return tuple(value)


@attrs.frozen
class Task:
    """One task of a benchmark: the ``question`` a pattern runs on (a ``State`` ending in the user's message;
    its text is turned into one), the ``answer`` expected, the ``checker`` that says whether an answer's text is
    right (``checker(answer_text, task)``), and the ``tools`` the task needs (the step a pattern runs on gets
    exactly these; none for most tasks). ``kind`` groups tasks for the per-kind accuracy that feeds
    ``Escalation(reliability=...)``."""

    id: str = attrs.field(validator=_name("id"))
    kind: str = attrs.field(validator=_name("kind"))
    question: State = attrs.field(converter=_question)
    answer: str = attrs.field(validator=_name("expected answer"))
    checker: Checker = attrs.field(validator=_checker)
    tools: tuple[Tool, ...] = attrs.field(default=(), converter=_tools)

    @property
    def needs_tools(self) -> bool:
        return bool(self.tools)

    @property
    def text(self) -> str:
        """The question's text (the user's last message)."""
        last = self.question.last
        return "" if last is None else last.text

    def check(self, answer: str) -> bool:
        """Whether ``answer`` is right, by the task's checker."""
        return bool(self.checker(answer, self))


def final_part(answer: str) -> str:
    """What follows the last ``Answer:`` in ``answer``, or all of it when there is none."""
    found = list(_FINAL.finditer(answer))
    return answer[found[-1].end():] if found else answer


def check_exact(answer: str, task: Task) -> bool:
    """The answer (what follows its last ``Answer:``, if any) is the expected one, up to case, spacing and
    trailing punctuation."""
    return normalise_answer(final_part(answer)) == normalise_answer(task.answer)


def check_contains(answer: str, task: Task) -> bool:
    """The expected answer appears in the answer, up to case and spacing."""
    return normalise_answer(task.answer) in " ".join(answer.split()).casefold()


def _last_number(text: str) -> float | None:
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def check_number(answer: str, task: Task) -> bool:
    """The last number of the answer (after its last ``Answer:``, if any; ``1,234`` is one number) equals the
    last number of the expected answer."""
    got, expected = _last_number(final_part(answer)), _last_number(task.answer)
    return got is not None and expected is not None and abs(got - expected) <= 1e-9 * max(1.0, abs(expected))


def check_game24(answer: str, task: Task) -> bool:
    """Game of 24: the answer's expression (its last run of numbers, ``+ - * /`` and brackets) uses exactly the
    whole numbers of the expected answer, each once, and comes to 24. The expected answer lists the numbers
    (``"4 4 6 3"``) or is any solution (``"(4 + 4) * (6 - 3)"``). The expression is read with ``ast`` and a
    whitelist, never evaluated by Python."""
    numbers = [int(n) for n in re.findall(r"\d+", task.answer)]
    return bool(numbers) and _game24.makes_goal(answer, numbers)


CHECKERS: Mapping[str, Checker] = MappingProxyType({
    "exact": check_exact, "number": check_number, "contains": check_contains, "game24": check_game24})
"""The checkers by the names the command line takes (``--checker``)."""


def checker_named(name: str) -> Checker:
    if name not in CHECKERS:
        raise UsageError(f"no checker is named {name!r}; the checkers are: {', '.join(CHECKERS)}")
    return CHECKERS[name]


_KEYS = ("question", "answer", "id", "kind")


def load_tasks(path: str | Path, checker: str | Checker = "exact", *, kind: str | None = None) -> tuple[Task, ...]:
    """The tasks of a JSONL file: one JSON object a line, ``{"question": ..., "answer": ...}`` (the answer a
    string or a number), with an optional ``"id"`` and ``"kind"``; blank lines are skipped. Every task is checked
    by ``checker`` (a name from ``CHECKERS`` or a function); its kind is the line's, else ``kind``, else the
    file's name without its suffix. Raises ``UsageError`` naming the file and line of the first bad one."""
    check = checker_named(checker) if isinstance(checker, str) else checker
    if not callable(check):
        raise UsageError(f"checker is a name ({', '.join(CHECKERS)}) or a function (answer, task) -> bool, "
                         f"got {checker!r}")
    file = Path(path)
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the task file {str(file)!r}: {exc}") from exc
    tasks: list[Task] = []
    ids: set[str] = set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{file}, line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno}); each line is one "
                             'object like {"question": "...", "answer": "..."}') from None
        if not isinstance(row, dict):
            raise UsageError(f'{where}: a line is a JSON object like {{"question": "...", "answer": "..."}}, '
                             f"got {type(row).__name__}")
        unknown = sorted(set(row) - set(_KEYS))
        if unknown:
            raise UsageError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}"
                             f"; a task has {', '.join(_KEYS)}")
        question, answer = row.get("question"), row.get("answer")
        if not isinstance(question, str) or not question.strip():
            raise UsageError(f'{where}: "question" must be a non-empty string, got {question!r}')
        if isinstance(answer, (int, float)) and not isinstance(answer, bool):
            answer = str(answer)
        if not isinstance(answer, str) or not answer.strip():
            raise UsageError(f'{where}: "answer" must be a non-empty string or a number, got {answer!r}')
        ident = row.get("id", f"{file.stem}-{number}")
        task_kind = row.get("kind", kind or file.stem)
        for key, value in (("id", ident), ("kind", task_kind)):
            if not isinstance(value, str) or not value.strip():
                raise UsageError(f'{where}: "{key}" must be a non-empty string, got {value!r}')
        if ident in ids:
            raise UsageError(f"{where}: the id {ident!r} is used by an earlier line")
        ids.add(ident)
        tasks.append(Task(ident, task_kind, question, answer, check))
    if not tasks:
        raise UsageError(f"the task file {str(file)!r} holds no tasks")
    return tuple(tasks)


# The reference book the lookup tool reads: places and people that exist nowhere else, so no model can know them.
COUNTRIES = ("Veloria", "Brastov", "Quenmark", "Ostrela", "Tarnisse", "Delvane", "Mirecourt", "Halvard")
CITIES = ("Marnhold", "Ysselburg", "Corvane", "Pellin", "Arwick", "Sennet", "Lowmere", "Drayholt", "Fennick",
          "Olbrech", "Tessaly", "Caradon")
PEOPLE = ("Ines Calder", "Tomas Reyne", "Aiko Brandt", "Lucan Moray", "Petra Voss", "Emil Sarto", "Nadia Quell",
          "Oren Falk", "Sabine Holt", "Ravi Tennant", "Ilse Marr", "Jonah Pike")
FACTS: Mapping[tuple[str, str], str] = MappingProxyType({
    **{("capital", country): CITIES[i] for i, country in enumerate(COUNTRIES)},
    **{("mayor", city): PEOPLE[i] for i, city in enumerate(CITIES)},
    **{("twin town", city): CITIES[(i + 5) % len(CITIES)] for i, city in enumerate(CITIES)},
    **{("birth year", person): str(1950 + (i * 7) % 40) for i, person in enumerate(PEOPLE)},
})
RELATIONS = ("capital", "mayor", "twin town", "birth year")


@tool
async def lookup(query: str) -> str:
    """Look one fact up in the reference book. Ask for "RELATION of NAME", e.g. "capital of Veloria"; the
    relations are: capital (of a country), mayor and twin town (of a city), birth year (of a person). NAME may
    be a fact the book gave ("The capital of Veloria is Marnhold."): its last words name the thing."""
    relation, _, name = " ".join(query.split()).removeprefix("the ").partition(" of ")
    name = name.rsplit(" is ", 1)[-1].strip().rstrip(".").strip()
    value = FACTS.get((relation.strip().lower(), name))
    if value is None:
        raise LookupError(f"the book has no entry for {query!r}; ask for 'RELATION of NAME' with a relation among "
                          f"{', '.join(RELATIONS)} and a name the book holds")
    return f"The {relation.strip().lower()} of {name} is {value}."


_CHAINS = (("Who is the mayor of the capital of {c}?", ("mayor", "capital"), check_contains),
           ("What is the birth year of the mayor of the capital of {c}?", ("birth year", "mayor", "capital"),
            check_number),
           ("Who is the mayor of the twin town of the capital of {c}?", ("mayor", "twin town", "capital"),
            check_contains))


def _truth(relations: tuple[str, ...], name: str) -> str:
    for relation in reversed(relations):
        name = FACTS[(relation, name)]
    return name


def builtin_tasks(*, quick: bool = False) -> tuple[Task, ...]:
    """The built-in set, the same every time: arithmetic word problems (checked by number), Game of 24 puzzles
    (checked by ``check_game24``) and multi-hop questions about a made-up reference book that only its
    ``lookup`` tool can answer (each such task carries the tool). ``quick``: two of each kind."""
    count = {"arithmetic": 2, "game24": 2, "lookup": 2} if quick else {"arithmetic": 12, "game24": 12, "lookup": 8}
    rng = random.Random(2024)
    tasks: list[Task] = []
    for i in range(count["arithmetic"]):
        problem = _arithmetic.make(_arithmetic.TEMPLATES[i % len(_arithmetic.TEMPLATES)], rng)
        tasks.append(Task(f"arithmetic-{i + 1}", "arithmetic", _arithmetic.question(problem),
                          str(problem.values()[-1]), check_number))
    found = 0
    while found < count["game24"]:
        numbers = sorted(rng.randint(1, 13) for _ in range(4))
        solution = _game24.solve(numbers)
        if solution is None:
            continue
        found += 1
        listed = ", ".join(map(str, numbers))
        tasks.append(Task(f"game24-{found}", "game24", f"Game of 24: make 24 from the numbers {listed}, using "
                          "each number exactly once and only + - * / and brackets. Answer with the expression.",
                          solution, check_game24))
    for i in range(count["lookup"]):
        text, relations, check = _CHAINS[i % len(_CHAINS)]
        country = COUNTRIES[i % len(COUNTRIES)]
        tasks.append(Task(f"lookup-{i + 1}", "lookup", text.format(c=country), _truth(relations, country), check,
                          tools=(lookup,)))
    return tuple(tasks)
