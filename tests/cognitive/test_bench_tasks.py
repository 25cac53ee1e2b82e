"""The benchmark's tasks: the checkers (the Game of 24 expression read safely), JSONL task files and their errors,
the built-in set and its lookup tool."""

import json
from pathlib import Path

import pytest

from cognitive.bench import (CHECKERS, Task, builtin_tasks, check_contains, check_exact, check_game24, check_number,
                             load_tasks, lookup)
from cognitive.bench._game24 import read_expression, solve
from loop import Role, State, Text, UsageError


def task(answer: str, kind: str = "test") -> Task:
    return Task("t", kind, "a question", answer, check_exact)


@pytest.mark.parametrize("answer", [
    "(4+4)*(6-3)", "(4 + 4) × (6 − 3) = 24", "Answer: (4 + 4) * (6 - 3) = 24.", "24 = (6 - 3) x (4 + 4)",
    "I would write (3 - 6 + 4 + 4)... no: (4 + 4) * (6 - 3)"])
def test_game24_accepts_an_expression_using_each_number_once_that_makes_24(answer: str) -> None:
    assert check_game24(answer, task("4 4 6 3"))


@pytest.mark.parametrize("answer", [
    "__import__('os').system('echo hacked') + 24",  # a call and a name: refused, never run
    "a + b + c + d",  # names
    "max(4, 4, 6, 3) * 4",  # a call
    "(4 + 4) * (6 - 3).real",  # an attribute
    "4 ** 2 + 6 + 3 - 1",  # a power
    "-(4 - 4) + 6 * 3",  # a unary sign
    "(4.0 + 4) * (6 - 3)",  # not a whole number
    "(4 + 4) * (6 - 2)",  # wrong numbers
    "(4 + 4) * 3",  # a number left out
    "(4 + 4) * (6 - 3) + 4 - 4",  # a number used twice
    "4 * 6 + 4 - 3 - 1",  # does not make 24 with these numbers
    "6 / (4 - 4) + 4 * 3",  # divides by zero
    "24",  # no expression
    "(" * 150 + "4" + ")" * 150,  # too long
])
def test_game24_refuses_anything_but_the_four_numbers_making_24(answer: str) -> None:
    assert not check_game24(answer, task("(4 + 4) * (6 - 3)"))


def test_game24_reads_exact_fractions_and_names_what_it_refuses() -> None:
    assert check_game24("8 / (3 - 8 / 3)", task("3 3 8 8"))
    assert read_expression("__import__('os')").problem.startswith("Call is not allowed")
    assert read_expression("x + 1").problem.startswith("Name is not allowed")
    assert read_expression("1 / 0").problem == "the expression divides by zero"
    assert read_expression("1 +").problem == "'1 +' is not an arithmetic expression"
    reading = read_expression("(1 + 2) * 8")
    assert reading.value == 24 and reading.numbers == (1, 2, 8)


def test_the_solver_finds_a_solution_the_checker_accepts_or_none() -> None:
    found = solve([3, 3, 8, 8])
    assert found is not None and check_game24(found, task("3 3 8 8"))
    assert solve([1, 1, 1, 1]) is None


def test_the_text_checkers() -> None:
    assert check_exact("Answer: Paris.", task("paris")) and not check_exact("Paris, France", task("Paris"))
    assert check_number("7 * 12 = 84. Answer: 1,234", task("1234"))
    assert check_number("It comes to 42.0 km", task("42")) and not check_number("41 or 42?", task("41"))
    assert not check_number("no number here", task("3"))
    assert check_contains("The mayor is  ines calder, I found.", task("Ines Calder"))
    assert set(CHECKERS) == {"exact", "number", "contains", "game24"}


def test_a_task_takes_text_or_a_state_ending_in_the_question() -> None:
    as_text = task("x")
    assert as_text.text == "a question" and as_text.question.last is not None
    state = State().append(Role.SYSTEM, Text("Be brief.")).append(Role.USER, Text("Why?"))
    assert Task("t", "k", state, "x", check_exact).question is state
    with pytest.raises(UsageError, match="ending in the user's message"):
        Task("t", "k", state.append(Role.ASSISTANT, Text("no")), "x", check_exact)
    with pytest.raises(UsageError, match="checker is a function"):
        Task("t", "k", "q", "x", "exact")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="expected answer is a non-empty string"):
        Task("t", "k", "q", "", check_exact)


def write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_jsonl_file_gives_one_task_a_line(tmp_path: Path) -> None:
    path = write(tmp_path, '{"question": "What is 2 + 2?", "answer": 4}', "",
                 '{"question": "Capital of France?", "answer": "Paris", "id": "fr", "kind": "geo"}')
    tasks = load_tasks(path, "number")
    assert [(t.id, t.kind, t.answer, t.text) for t in tasks] == [
        ("mine-1", "mine", "4", "What is 2 + 2?"), ("fr", "geo", "Paris", "Capital of France?")]
    assert tasks[0].check("The answer is 4.") and not tasks[0].check("5")
    assert load_tasks(path, check_contains, kind="quiz")[0].kind == "quiz"


@pytest.mark.parametrize("line, message", [
    ('{"question": "q", "answer": "a"', r"mine.jsonl, line 2: not valid JSON"),
    ('["q", "a"]', r"line 2: a line is a JSON object"),
    ('{"answer": "a"}', r'line 2: "question" must be a non-empty string, got None'),
    ('{"question": "q", "answer": null}', r'line 2: "answer" must be a non-empty string or a number, got None'),
    ('{"question": "q", "answer": true}', r'line 2: "answer" must be a non-empty string or a number'),
    ('{"question": "q", "answer": "a", "hint": "h"}', r"line 2: unknown key 'hint'"),
    ('{"question": "q", "answer": "a", "id": "mine-1"}', r"line 2: the id 'mine-1' is used by an earlier line"),
    ('{"question": "q", "answer": "a", "kind": 3}', r'line 2: "kind" must be a non-empty string'),
])
def test_a_bad_line_is_named_with_its_line_number(tmp_path: Path, line: str, message: str) -> None:
    path = write(tmp_path, '{"question": "q", "answer": "a"}', line)
    with pytest.raises(UsageError, match=message):
        load_tasks(path)


def test_a_file_that_is_missing_or_empty_and_an_unknown_checker_are_clear(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read the task file"):
        load_tasks(tmp_path / "nowhere.jsonl")
    with pytest.raises(UsageError, match="holds no tasks"):
        load_tasks(write(tmp_path, "", "  "))
    with pytest.raises(UsageError, match="no checker is named 'fuzzy'; the checkers are: exact, number"):
        load_tasks(write(tmp_path, '{"question": "q", "answer": "a"}'), "fuzzy")


def test_the_built_in_set_is_fixed_and_each_expected_answer_passes_its_own_checker() -> None:
    tasks = builtin_tasks()
    assert tasks == builtin_tasks()
    assert {t.kind for t in tasks} == {"arithmetic", "game24", "lookup"} and len(tasks) == 32
    assert len(builtin_tasks(quick=True)) == 6
    assert len({t.id for t in tasks}) == len(tasks)
    for t in tasks:
        assert t.check(t.answer), t
        assert t.needs_tools == (t.kind == "lookup")


async def test_the_lookup_tool_answers_chained_queries_and_names_a_bad_one() -> None:
    first = await lookup.call({"query": "capital of Veloria"})
    assert first == "The capital of Veloria is Marnhold."
    assert await lookup.call({"query": f"mayor of {first}"}) == "The mayor of Marnhold is Ines Calder."
    with pytest.raises(LookupError, match="no entry for 'mayor of Atlantis'"):
        await lookup.call({"query": "mayor of Atlantis"})
    assert json.dumps(lookup.spec.parameters)  # a schema a provider can send
