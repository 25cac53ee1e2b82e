"""TreeOfThoughts: propose, score and keep the best lines breadth- or depth-first, then answer from the best."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from cognitive import (FileCheckpoints, MemoryCheckpoints, SelfConsistency, WithBudget, WithOutput, answer_value,
                       checkpoint_key)
from cognitive.search._tot import TreeOfThoughts
from cognitive.testing import check_pattern
from loop import Budget, Request, Role, State, Step, Text, UsageError
from provider import Function

Line = tuple[str, ...]

# A small tree: each line of thought (the thoughts so far) -> what the model proposes next ("!" marks final).
TREE: dict[Line, list[str]] = {
    (): ["a", "b", "c"],
    ("a",): ["a1", "a2"],
    ("b",): ["b1", "b2!"],
    ("c",): ["c1"],
    ("a", "a1"): ["a1x!"],
    ("a", "a2"): ["a2x!"],
    ("b", "b1"): ["b1x!"],
}
SCORES = {"a": 0.8, "b": 0.6, "c": 0.3, "a1": 0.7, "a2": 0.4, "b1": 0.5, "b2!": 0.6, "c1": 0.9,
          "a1x!": 0.95, "a2x!": 0.5, "b1x!": 0.3}


def line_of(turns: Any) -> Line:
    return tuple(t.text for t in turns if t.role is Role.ASSISTANT and t.kind == "thought")


class Thinker:
    """A model that proposes from ``tree``, rates with ``scores``, and answers from the line it is shown."""

    def __init__(self, tree: dict[Line, list[str]] | None = None, scores: dict[str, float] | None = None) -> None:
        self.tree = TREE if tree is None else tree
        self.scores = SCORES if scores is None else scores
        self.requests: list[tuple[str, Line]] = []

    def kind(self, request: Request) -> str:
        properties = (request.options.output_schema or {}).get("properties", {})
        if "thoughts" in properties:
            return "propose"
        if "score" in properties:
            return "score"
        return "answer"

    def __call__(self, request: Request) -> str:
        kind, line = self.kind(request), line_of(request.turns)
        self.requests.append((kind, line))
        if kind == "propose":
            return json.dumps({"thoughts": [{"text": t, "final": t.endswith("!")} for t in self.tree.get(line, [])]})
        if kind == "score":
            return json.dumps({"score": self.scores[line[-1]], "reason": "looks so"})
        steps = request.turns[-1].text.splitlines()[-1]
        text = f"From {steps.split('. ', 1)[-1]}"
        if "answer" in (request.options.output_schema or {}).get("properties", {}):
            return json.dumps({"answer": text})
        return text

    def asked(self, kind: str) -> list[Line]:
        return [line for k, line in self.requests if k == kind]


def levels(lines: list[Line]) -> list[Line]:
    """Lines in level order: the branches of one level run concurrently, in any order."""
    return sorted(lines, key=lambda line: (len(line), line))


def by_table(state: State) -> float:
    """A function scorer reading the same table."""
    return SCORES[line_of(state.turns)[-1]]


def make(tree: dict[Line, list[str]] | None = None, scores: dict[str, float] | None = None) -> tuple[Thinker, Step]:
    model = Thinker(tree, scores)
    return model, Step(Function(model))


def ask(text: str = "Find the way.") -> State:
    return State().append(Role.USER, Text(text))


def data(state: State) -> dict[str, Any]:
    assert state.outcome is not None
    return dict(state.outcome.data["TreeOfThoughts"])


async def test_bfs_keeps_the_top_beam_and_answers_from_the_best_final_thought() -> None:
    model, step = make()
    state = await TreeOfThoughts(step, scorer=by_table, beam=2).run(ask())
    # Level 1 keeps a (0.8) and b (0.6), not c (0.3); level 2 keeps the best two thoughts that are not final,
    # a1 (0.7) and b1 (0.5); level 3 finds the final a1x! at 0.95.
    assert levels(model.asked("propose")) == [(), ("a",), ("b",), ("a", "a1"), ("b", "b1")]
    assert state.answer == "From a1x!" and state.outcome is not None and state.outcome.ok
    found = data(state)
    assert found["line"] == ["a", "a1", "a1x!"] and found["best_score"] == 0.95 and found["final"]
    assert (found["levels"], found["expansions"], found["stopped"]) == (3, 5, "goal")
    assert found["nodes"] == 9 and found["failed_nodes"] == 0 and not found["resumed"]
    # The conversation gets the chosen line and the answer; the search stayed in branches.
    assert [(t.role, t.kind) for t in state] == [(Role.USER, None), (Role.SYSTEM, "search_line"),
                                                 (Role.ASSISTANT, None)]
    assert state[1].text.endswith("1. a\n2. a1\n3. a1x!")
    assert not model.asked("score"), "a function scorer asks the model nothing"


async def test_a_beam_of_one_follows_only_the_best_thought() -> None:
    model, step = make()
    state = await TreeOfThoughts(step, scorer=by_table, beam=1).run(ask())
    assert model.asked("propose") == [(), ("a",), ("a", "a1")]
    assert state.answer == "From a1x!"


async def test_a_threshold_keeps_every_thought_scoring_at_least_it_and_stops_at_it() -> None:
    model, step = make()
    state = await TreeOfThoughts(step, scorer=by_table, beam=1, threshold=0.55).run(ask())
    # a (0.8) and b (0.6) pass 0.55 whatever the beam; c (0.3) is pruned. Then a1 (0.7) passes; b2! (0.6) is a
    # final thought reaching the threshold: the search stops there.
    assert levels(model.asked("propose")) == [(), ("a",), ("b",)]
    assert data(state)["stopped"] == "goal" and state.answer == "From b2!"


async def test_a_line_that_never_reaches_a_final_thought_still_answers_but_degraded() -> None:
    tree = {(): ["a", "b"], ("a",): ["a1"], ("b",): ["b1"]}
    scores = {"a": 0.8, "b": 0.6, "a1": 0.85, "b1": 0.5}
    model, step = make(tree, scores)
    state = await TreeOfThoughts(step, depth=2).run(ask())
    assert state.answer == "From a1" and state.outcome is not None and state.outcome.degraded
    assert "no line of thought reached a final answer (stopped: depth)" in state.outcome.reason
    found = data(state)
    assert not found["final"] and found["stopped"] == "depth" and found["line"] == ["a", "a1"]
    assert found["confidence"] == 0.0
    assert ("a", "a1") not in model.asked("propose"), "nothing is proposed past the depth"


async def test_dfs_backtracks_after_low_scores_to_the_next_best_thought() -> None:
    tree = {(): ["a", "b", "c"], ("a",): ["a1", "a2"], ("b",): ["b1!"]}
    scores = {"a": 0.8, "b": 0.6, "c": 0.3, "a1": 0.2, "a2": 0.4, "b1!": 0.95}
    model, step = make(tree, scores)
    state = await TreeOfThoughts(step, search="dfs", scorer=lambda s: scores[line_of(s.turns)[-1]]).run(ask())
    # a is tried first; both its children fall below 0.5, so it backs up to b, whose final thought wins.
    assert model.asked("propose") == [(), ("a",), ("b",)]
    assert state.answer == "From b1!"
    found = data(state)
    assert found["stopped"] == "goal" and found["expansions"] == 3 and "levels" not in found


async def test_dfs_stops_after_max_expansions_and_prunes_below_its_threshold() -> None:
    model, step = make()
    state = await TreeOfThoughts(step, search="dfs", scorer=by_table, max_expansions=2).run(ask())
    assert model.asked("propose") == [(), ("a",)]
    # No final thought: the best-scored thought found answers (a, 0.8, over its child a1, 0.7).
    assert data(state)["stopped"] == "max_expansions" and state.answer == "From a"
    model, step = make()
    state = await TreeOfThoughts(step, search="dfs", scorer=by_table, threshold=0.75).run(ask())
    assert model.asked("propose") == [(), ("a",)]  # only a (0.8) passes 0.75, then none of its children
    assert data(state)["stopped"] == "exhausted"


async def test_a_model_scorer_rates_each_thought_in_a_typed_turn() -> None:
    model, step = make()
    state = await TreeOfThoughts(step, beam=2).run(ask())
    assert state.answer == "From a1x!"
    assert sorted(model.asked("score")) == sorted(
        [("a",), ("b",), ("c",), ("a", "a1"), ("a", "a2"), ("b", "b1"), ("b", "b2!"), ("a", "a1", "a1x!"),
         ("b", "b1", "b1x!")])
    # Same search, scores from the model instead of the function: the same line wins.
    fn_model, fn_step = make()
    by_function = await TreeOfThoughts(fn_step, scorer=by_table).run(ask())
    assert data(by_function)["line"] == data(state)["line"]
    assert levels(fn_model.asked("propose")) == levels(model.asked("propose"))


async def test_a_scorer_that_raises_fails_that_thought_and_the_search_goes_on() -> None:
    def scorer(state: State) -> float:
        if line_of(state.turns)[-1] == "a":
            raise RuntimeError("cannot judge a")
        return by_table(state)

    model, step = make()
    state = await TreeOfThoughts(step, scorer=scorer).run(ask())
    assert ("a",) not in model.asked("propose")  # a failed: never expanded
    # b and c go on; c1 (0.9) proposes nothing (noted), b1's final thought scores 0.3: b2! (0.6) is the best.
    assert state.answer == "From b2!" and state.outcome is not None and state.outcome.ok
    assert data(state)["failed_nodes"] == 1 and data(state)["failed_proposals"] == 1


async def test_a_scorer_that_raises_on_every_thought_gives_a_degraded_answer_from_the_question() -> None:
    async def scorer(state: State) -> float:
        raise RuntimeError("no judge today")

    model, step = make()
    state = await TreeOfThoughts(step, scorer=scorer).run(ask())
    assert state.answer == "From (no step of reasoning was found)"
    assert state.degraded and state.outcome is not None
    assert "no thought could be scored (3 thoughts failed, the first: scoring failed: RuntimeError: no judge " \
           "today)" in state.outcome.reason
    assert data(state)["failed_nodes"] == 3 and data(state)["best_score"] is None


async def test_a_scorer_returning_no_score_is_misuse() -> None:
    _, step = make()
    with pytest.raises(UsageError, match="from 0 to 1"):
        await TreeOfThoughts(step, scorer=lambda state: 1.5).run(ask())


async def test_proposals_that_are_never_valid_give_a_degraded_answer() -> None:
    calls: list[str] = []

    def model(request: Request) -> str:
        calls.append("x")
        if "thoughts" in (request.options.output_schema or {}).get("properties", {}):
            return "I would rather not."
        return "An answer without a search."

    state = await TreeOfThoughts(Step(Function(model)), scorer=by_table).run(ask())
    assert state.answer == "An answer without a search." and state.degraded and state.outcome is not None
    assert "proposing from node 0 failed: VerificationFailed" in state.outcome.reason
    assert len(calls) == 3  # the proposal and its one retry, then the answer

    model_none, step = make({})
    state = await TreeOfThoughts(step, scorer=by_table).run(ask())
    assert state.degraded and state.outcome is not None and "the model proposed no thought" in state.outcome.reason


async def test_it_passes_the_pattern_conformance_check() -> None:
    model = Thinker()
    await check_pattern(lambda step: TreeOfThoughts(step), reply=model)
    assert model.asked("propose") and model.asked("score")
    await check_pattern(lambda step: TreeOfThoughts(step, search="dfs", scorer=by_table), reply=Thinker())


async def test_a_budget_that_runs_out_mid_search_answers_from_the_best_final_thought_offered() -> None:
    tree = {(): ["a", "f!", "c"], ("a",): ["a1"], ("c",): ["c1"]}
    scores = {"a": 0.8, "f!": 0.6, "c": 0.3, "a1": 0.5, "c1": 0.5}
    model, step = make(tree, scores)
    pattern = TreeOfThoughts(step, scorer=lambda s: scores[line_of(s.turns)[-1]])
    state = await WithBudget(pattern, Budget(max_turns=2)).run(ask())
    # Level 1 took one turn and found f! (0.6, below the goal): offered. Level 2's second proposal was refused.
    assert state.answer == "f!" and state.degraded and state.outcome is not None
    assert "ran out (max_turns=2 reached); the answer is the best candidate the run had found" in state.outcome.reason
    assert state.last is not None and state.last.kind == "thought"
    assert "answer" not in {k for k, _ in model.requests}


async def test_a_budget_that_is_enough_leaves_the_answer_clean() -> None:
    _, step = make()
    state = await WithBudget(TreeOfThoughts(step, scorer=by_table), Budget(max_turns=20)).run(ask())
    assert state.answer == "From a1x!" and not state.degraded


async def test_it_nests_in_self_consistency_and_with_output() -> None:
    model, step = make()
    state = await SelfConsistency(TreeOfThoughts(step, scorer=by_table), n=3).run(ask())
    assert state.answer == "From a1x!" and state.outcome is not None
    assert state.outcome.data["SelfConsistency"]["confidence"] == 1 and model.asked("propose").count(()) == 3

    model, step = make()
    shape = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    state = await WithOutput(TreeOfThoughts(step, scorer=by_table), step, shape).run(ask())
    assert answer_value(state, shape) == {"answer": "From a1x!"}
    assert model.asked("answer") == [()], "one answer turn, asked in the schema"


async def test_an_interrupt_mid_search_propagates() -> None:
    scoring = anyio.Event()
    returned = False

    async def model(request: Request) -> str:
        if line_of(request.turns) == ("a",) and "thoughts" in (request.options.output_schema or {})["properties"]:
            scoring.set()  # the second level has started
            await anyio.sleep_forever()
        return Thinker()(request)

    async def run() -> None:
        nonlocal returned
        await TreeOfThoughts(Step(Function(model)), scorer=by_table).run(ask())
        returned = True

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await scoring.wait()
            group.cancel_scope.cancel()
    assert not returned


@pytest.mark.parametrize("search", ["bfs", "dfs"])
@pytest.mark.parametrize("store", ["memory", "files"])
async def test_a_search_stopped_by_its_budget_resumes_from_its_checkpoint(search: str, store: str,
                                                                          tmp_path: Path) -> None:
    checkpoints = MemoryCheckpoints() if store == "memory" else FileCheckpoints(tmp_path / "checkpoints")
    full, step = make()
    whole = await TreeOfThoughts(step, search=search, scorer=by_table).run(ask())

    first, step = make()
    stopped = await WithBudget(TreeOfThoughts(step, search=search, scorer=by_table, checkpoints=checkpoints),
                               Budget(max_turns=2)).run(ask())
    assert stopped.degraded
    done = 1 if search == "bfs" else 2  # bfs: level 1 (one proposal); dfs: two expansions, one turn each
    assert levels(first.asked("propose"))[:done] == levels(full.asked("propose"))[:done]
    key = checkpoint_key(repr(TreeOfThoughts(step, search=search, scorer=by_table)), ask())
    assert await checkpoints.load(key) is not None

    second, step = make()  # a new step and pattern, as in another process
    resumed = await TreeOfThoughts(step, search=search, scorer=by_table, checkpoints=checkpoints).run(ask())
    assert levels(second.asked("propose")) == levels(full.asked("propose"))[done:], "no finished unit ran again"
    assert resumed.answer == whole.answer and data(resumed)["resumed"]
    assert {k: v for k, v in data(resumed).items() if k != "resumed"} == \
           {k: v for k, v in data(whole).items() if k != "resumed"}
    assert await checkpoints.load(key) is None, "a run that answered drops its checkpoint"


async def test_another_search_does_not_pick_up_the_checkpoint() -> None:
    checkpoints = MemoryCheckpoints()
    _, step = make()
    await WithBudget(TreeOfThoughts(step, scorer=by_table, checkpoints=checkpoints), Budget(max_turns=2)).run(ask())
    model, step = make()
    state = await TreeOfThoughts(step, scorer=by_table, beam=1, checkpoints=checkpoints).run(ask())
    assert model.asked("propose")[0] == () and not data(state)["resumed"]
    assert len(checkpoints) == 1  # the first search's checkpoint is still there


def test_settings_are_checked() -> None:
    _, step = make()
    bad: list[tuple[Callable[[], Any], str]] = [
        (lambda: TreeOfThoughts(step, breadth=0), "breadth"),
        (lambda: TreeOfThoughts(step, beam=9), "beam is at most 8"),
        (lambda: TreeOfThoughts(step, depth=0), "depth"),
        (lambda: TreeOfThoughts(step, search="astar"), "search must be one of 'bfs', 'dfs'"),
        (lambda: TreeOfThoughts(step, threshold=1.5), "threshold"),
        (lambda: TreeOfThoughts(step, scorer=0.5), "scorer"),  # type: ignore[arg-type]
        (lambda: TreeOfThoughts(step, limit=0), "limit"),
        (lambda: TreeOfThoughts(step, max_expansions=0), "max_expansions"),
        (lambda: TreeOfThoughts(step, checkpoints="here"), "Checkpoints"),  # type: ignore[arg-type]
        (lambda: TreeOfThoughts(step, propose_prompt="Propose some."), "{k}"),
        (lambda: TreeOfThoughts("step"), "TurnRunner"),  # type: ignore[arg-type]
    ]
    for build, message in bad:
        with pytest.raises(UsageError, match=message.replace("{", r"\{").replace("}", r"\}")):
            build()
    assert repr(TreeOfThoughts(step)) == "TreeOfThoughts(search='bfs', breadth=3, beam=2, depth=3)"
    assert repr(TreeOfThoughts(step, search="dfs", threshold=0.6, scorer=by_table)) == \
           "TreeOfThoughts(search='dfs', breadth=3, beam=2, depth=3, threshold=0.6, max_expansions=10, scorer=by_table)"
    assert repr(TreeOfThoughts(step, score_prompt="Rate it.")) != repr(TreeOfThoughts(step))
