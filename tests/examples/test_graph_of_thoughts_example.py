"""The graph-of-thoughts example sorts a list by merging sorted parts, offline, and prints the graph with its
provenance and the answer."""

import subprocess
import sys

import provider
from loop import Request, Role, State, Step, Text
from tests.examples import ROOT, load_example

example = load_example("graph_of_thoughts")
ANSWER = "In order: 3, 7, 7, 9, 15, 19, 23, 30, 42, 54, 61, 88."


def test_runs_from_the_command_line_offline() -> None:
    done = subprocess.run([sys.executable, "examples/graph_of_thoughts.py"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Running on the offline demo model") and not done.stderr
    lines = done.stdout.splitlines()
    assert "  #4 <- 0      0.00  All at once: 3 7 9 15 19 23 30 42 54 88 61  (pruned)" in lines
    assert "  #5 <- 1,2,3  0.92  Merged the sorted parts: 3 7 9 15 19 23 30 42 54 61 88" in lines
    assert "  #6 <- 5      1.00  Put back 7: 3 7 7 9 15 19 23 30 42 54 61 88" in lines
    assert lines[-3:] == ["chosen: #6 (score 1.00), built from #1, #2, #3, #5", f"answer: {ANSWER}",
                          "outcome: ok; at most 4 model calls"]


async def test_the_merge_has_three_parents_and_refining_it_gives_the_whole_sorted_list() -> None:
    requests: list[Request] = []

    def model(request: Request) -> str:
        requests.append(request)
        return example.demo_model(request)

    agent = example.make_agent(Step(provider.Function(model), tools=example.TOOLS))
    state = await agent.run(State().append(Role.USER, Text(example.QUESTION)))
    assert state.answer == ANSWER and state.outcome is not None and state.outcome.ok
    data = state.outcome.data["GraphOfThoughts"]
    assert [n["parents"] for n in data["nodes"]] == [[0], [0], [0], [0], [1, 2, 3], [5]]
    assert [n["score"] for n in data["nodes"]] == [1 / 3, 1 / 3, 1 / 3, 0.0, 11 / 12, 1.0]
    assert (data["best"], data["provenance"]) == (6, [1, 2, 3, 5])
    assert len(requests) == agent.max_calls == 4  # the scorer is a function: no model call scores
    merging = requests[1]
    assert merging.turns[-3].kind == "merged"
    assert [line for line in merging.turns[-3].text.splitlines() if line.startswith("- ")] == [
        "- Part 1 sorted: 3 7 19 42", "- Part 2 sorted: 7 23 61 88", "- Part 3 sorted: 9 15 30 54"]


def test_the_scorer_rewards_sorted_numbers_of_the_question_only() -> None:
    def line(thought: str) -> State:
        return State().append(Role.USER, Text("Sort 3 1 2 2")).append(Role.ASSISTANT, Text(thought))

    assert example.sorted_share(line("all: 1 2 2 3")) == 1.0
    assert example.sorted_share(line("part: 1 2")) == 0.5
    assert example.sorted_share(line("wrong: 2 1")) == 0.0
    assert example.sorted_share(line("invented: 1 2 9")) == 0.0
    assert example.sorted_share(line("too many: 1 1 2")) == 0.0
