"""GraphOfThoughts: declared operations generate, score, prune, merge (several parents) and refine thoughts; the
answer comes from the best scored thought, with its provenance."""

import json
import re
from typing import Any

import anyio
import pytest

from cognitive import (FileCheckpoints, MemoryCheckpoints, SelfConsistency, WithBudget, WithOutput, answer_value,
                       checkpoint_key)
from cognitive.search._got import GraphOfThoughts
from cognitive.search._got_ops import (Aggregate, Generate, KeepBest, Refine, Score, ThoughtGraph,
                                       check_operations)
from cognitive.search._thoughts import Proposal, add_thought
from cognitive.testing import check_pattern
from loop import Budget, Request, Role, State, Step, Text, UsageError
from provider import Function

SCORES = {"a": 0.2, "b": 0.9, "c": 0.6, "b+c": 0.7, "b+c!": 0.95}


def rate(state: State) -> float:
    """A scorer function: the table's score of the thought the line ends in."""
    return SCORES.get(state.last.text if state.last is not None else "", 0.5)


def thoughts(*texts: str) -> str:
    return json.dumps({"thoughts": [{"text": t, "final": False} for t in texts]})


def line_of(request: Request) -> list[str]:
    return [t.text for t in request.turns if t.kind == "thought"]


class Model:
    """Proposes letters going on from the line (``a``, ``b``... then ``b.a``...), merges listed lines with ``+``,
    refines by adding ``!``, rates by ``SCORES`` and answers with the last step of the chosen line. ``bad``
    names the asks ("generate", "merge", "refine") it answers with words that are no proposals; ``empty`` those
    it answers with no thought."""

    def __init__(self, *, bad: tuple[str, ...] = (), empty: tuple[str, ...] = ()) -> None:
        self.bad, self.empty = bad, empty
        self.requests: list[Request] = []

    def kinds(self) -> list[str]:
        return [kind_of(r) for r in self.requests]

    def __call__(self, request: Request) -> str:
        self.requests.append(request)
        kind = kind_of(request)
        if kind in self.bad:
            return "no idea"
        if kind in self.empty:
            return thoughts()
        line = line_of(request)
        if kind == "merge":
            listing = next(t for t in reversed(request.turns) if t.kind == "merged").text
            return thoughts("+".join(re.findall(r"^- (.*)$", listing, re.MULTILINE)))
        if kind == "refine":
            return thoughts(line[-1] + "!")
        if kind == "generate":
            k = int(re.search(r"up to (\d+)", request.turns[-2].text)[1])  # type: ignore[index]
            return thoughts(*((f"{line[-1]}." if line else "") + c for c in "abcdef"[:k]))
        if kind == "score":
            return json.dumps({"score": SCORES.get(line[-1], 0.5), "reason": "as the table says"})
        steps = re.findall(r"^\d+\. (.*)$", request.turns[-1].text, re.MULTILINE)
        answer = f"answer: {steps[-1] if steps else 'none'}"
        schema = request.options.output_schema
        return json.dumps({"answer": answer}) if schema is not None else answer


def kind_of(request: Request) -> str:
    props = (request.options.output_schema or {}).get("properties", {})
    if "thoughts" in props:
        asking = request.turns[-2].text
        return "merge" if asking.startswith("Merge") else "refine" if asking.startswith("Improve") else "generate"
    return "score" if "score" in props else "answer"


def ask(text: str = "Which fruits?") -> State:
    return State().append(Role.USER, Text(text))


def make(**kw: Any) -> tuple[Model, Step]:
    model = Model(**kw)
    return model, Step(Function(model))


async def test_the_default_graph_generates_scores_prunes_merges_refines_and_answers_from_the_best() -> None:
    model, step = make()
    pattern = GraphOfThoughts(step)
    state = await pattern.run(ask())
    assert model.kinds() == ["generate", "score", "score", "score", "merge", "refine", "score", "answer"]
    assert len(model.requests) == pattern.max_calls == 8
    assert state.answer == "answer: b+c!" and state.outcome is not None and state.outcome.ok
    data = state.outcome.data["GraphOfThoughts"]
    assert [op["operation"] for op in data["operations"]] == [
        "Generate(k=3)", "Score()", "KeepBest(n=2)", "Aggregate(k=1)", "Refine(rounds=1)", "Score()"]
    assert [(n["id"], n["parents"], n["thought"], n["score"]) for n in data["nodes"]] == [
        (1, [0], "a", 0.2), (2, [0], "b", 0.9), (3, [0], "c", 0.6), (4, [2, 3], "b+c", None), (5, [4], "b+c!", 0.95)]
    assert data["operations"][2]["pruned"] == [1] and data["operations"][2]["current"] == [2, 3]
    assert (data["best"], data["score"], data["provenance"], data["resumed_from"]) == (5, 0.95, [2, 3, 4], None)
    # The conversation: the question, the chosen line, the answer. The search stays in branches.
    assert [t.role for t in state] == [Role.USER, Role.SYSTEM, Role.ASSISTANT]
    assert state[1].kind == "search_line" and "1. b+c\n2. b+c!" in state[1].text
    assert {r.path.split("/")[1].rsplit(" ", 1)[0] for r in model.requests[:-1]} == {"generate", "score", "aggregate",
                                                                                      "refine"}


async def test_a_merged_thought_has_every_merged_thought_as_a_parent_and_its_state_shows_their_lines() -> None:
    model, step = make()
    ops = [Generate(2), Generate(1), Score(), Aggregate(1), Score()]
    state = await GraphOfThoughts(step, operations=ops, scorer=lambda s: 0.5).run(ask())
    data = state.outcome.data["GraphOfThoughts"]
    merged = data["nodes"][-1]
    assert merged["parents"] == [3, 4] and merged["thought"] == "a+a.a+b+b.a"
    assert data["provenance"] == [1, 2, 3, 4]
    (merging,) = [r for r in model.requests if kind_of(r) == "merge"]
    listing = merging.turns[-3]
    assert listing.kind == "merged" and listing.meta["parents"] == [3, 4]
    assert "Line 1:\n- a\n- a.a\n\nLine 2:\n- b\n- b.a" in listing.text
    assert "up to 1 new steps" in merging.turns[-2].text
    # Its state is the question, the listing and the merged thought: what the next step sees.
    (answering,) = [r for r in model.requests if kind_of(r) == "answer"]
    assert "1. a+a.a+b+b.a" in answering.turns[-1].text


async def test_the_refine_step_sees_the_merged_lines_before_the_thought_it_improves() -> None:
    model, step = make()
    await GraphOfThoughts(step).run(ask())
    (refining,) = [r for r in model.requests if kind_of(r) == "refine"]
    assert [t.kind for t in refining.turns] == [None, "merged", "thought", "propose", "output_format"]
    assert refining.turns[2].text == "b+c" and "Line 2:\n- c" in refining.turns[1].text


async def test_keep_best_prunes_so_only_the_kept_thought_grows() -> None:
    model, step = make()
    ops = [Generate(3), Score(), KeepBest(1), Generate(2), Score()]
    state = await GraphOfThoughts(step, operations=ops, scorer=rate).run(ask())
    generating = [r for r in model.requests if kind_of(r) == "generate"]
    assert [line_of(r) for r in generating] == [[], ["b"]]
    data = state.outcome.data["GraphOfThoughts"]
    assert data["operations"][2]["pruned"] == [3, 1] and data["operations"][2]["current"] == [2]
    assert [n["thought"] for n in data["nodes"]][3:] == ["b.a", "b.b"]
    assert state.answer == "answer: b" and data["best"] == 2  # the pruned-to line scored 0.5: b stays best


async def test_a_scorer_raising_on_some_thoughts_marks_them_failed_and_the_graph_goes_on() -> None:
    model, step = make()

    def scorer(state: State) -> float:
        if state.last.text in ("b", "c"):
            raise ValueError(f"cannot judge {state.last.text}")
        return rate(state)

    state = await GraphOfThoughts(step, operations=[Generate(3), Score(), Refine(1), Score()],
                                  scorer=scorer).run(ask())
    assert state.outcome.ok and state.answer == "answer: a!"
    data = state.outcome.data["GraphOfThoughts"]
    failed = {n["id"]: n["failed"] for n in data["nodes"] if "failed" in n}
    assert failed == {2: "scoring it failed: ValueError: cannot judge b",
                      3: "scoring it failed: ValueError: cannot judge c"}
    assert data["operations"][1]["failed"][0] == "thought 2: scoring it failed: ValueError: cannot judge b"
    assert data["operations"][1]["current"] == [1]
    assert [line_of(r) for r in model.requests if kind_of(r) == "refine"] == [["a"]]


async def test_a_scorer_raising_on_every_thought_answers_from_the_question_degraded() -> None:
    model, step = make()

    def scorer(state: State) -> float:
        raise RuntimeError("the judge is away")

    state = await GraphOfThoughts(step, scorer=scorer).run(ask())
    assert state.answer == "answer: none" and state.degraded
    assert "scored no thought" in state.outcome.reason and "the judge is away" in state.outcome.reason
    assert "(no step of reasoning was found)" in state[1].text
    data = state.outcome.data["GraphOfThoughts"]
    assert data["best"] is None and all(op.get("skipped") == "no current thought" for op in data["operations"][2:])
    assert model.kinds() == ["generate", "answer"]


async def test_proposals_that_never_come_end_the_graph_degraded_from_the_question() -> None:
    model, step = make(bad=("generate",))
    state = await GraphOfThoughts(step).run(ask())
    assert state.degraded and "operation 1, Generate(k=3), left no thought: thought 0: VerificationFailed" \
        in state.outcome.reason
    assert model.kinds() == ["generate", "generate", "answer"]  # asked once more, then given up


async def test_when_a_later_operation_empties_the_graph_the_best_scored_before_answers_degraded() -> None:
    _, step = make()
    calls = 0

    def scorer(state: State) -> float:
        nonlocal calls
        calls += 1
        if calls > 3:
            raise RuntimeError("tired")
        return rate(state)

    state = await GraphOfThoughts(step, operations=[Generate(3), Score(), Generate(1), Score()],
                                  scorer=scorer).run(ask())
    assert state.answer == "answer: b" and state.degraded
    assert "ran out of thoughts (operation 4, Score(), left no thought: thought 4" in state.outcome.reason


async def test_a_merge_or_refinement_that_gives_nothing_keeps_the_thoughts_as_they_were() -> None:
    model, step = make(empty=("merge", "refine"))
    state = await GraphOfThoughts(step).run(ask())
    data = state.outcome.data["GraphOfThoughts"]
    assert state.outcome.ok and state.answer == "answer: b"
    assert data["operations"][3]["current"] == [2, 3] and "the merge gave nothing" in data["operations"][3]["errors"][0]
    assert data["operations"][4]["errors"] == ["thought 2 was kept as it was: the model gave no improved thought",
                                               "thought 3 was kept as it was: the model gave no improved thought"]
    assert model.kinds().count("score") == 3  # the kept thoughts were scored already


async def test_refine_rounds_chain_each_improvement_as_a_child() -> None:
    _, step = make()
    state = await GraphOfThoughts(step, operations=[Generate(1), Refine(3), Score()], scorer=lambda s: 0.5).run(ask())
    nodes = state.outcome.data["GraphOfThoughts"]["nodes"]
    assert [(n["id"], n["parents"], n["thought"]) for n in nodes] == [
        (1, [0], "a"), (2, [1], "a!"), (3, [2], "a!!"), (4, [3], "a!!!")]
    assert state.outcome.data["GraphOfThoughts"]["provenance"] == [1, 2, 3]


BAD_OPERATIONS = {
    "empty": ([], "must not be empty"),
    "text": ("Generate(3)", "must be a list of operations"),
    "class": ([Generate(2), Score], "operation 2 is the class Score; give a value: Score()"),
    "other": ([Generate(2), "score"], "operation 2 is 'score', not one of Generate"),
    "first": ([Score(), Generate(2), Score()], "the first operation must be Generate(k)"),
    "unscored keep": ([Generate(3), KeepBest(1), Score()],
                      ("operation 2 (KeepBest(n=1)) keeps the best of thoughts that are not scored: put Score() "
                       "before it")),
    "lone merge": ([Generate(1), Aggregate(1), Score()], "operation 2 (Aggregate(k=1)) can only ever see one"),
    "no final score": ([Generate(3), Score(), KeepBest(2), Aggregate(1)], "end them with Score()"),
    "too wide": ([Generate(5), Generate(5), Generate(5), Score()], "operation 3 (Generate(k=5)) could leave 125"),
}


@pytest.mark.parametrize("bad", list(BAD_OPERATIONS))
def test_an_operation_list_that_cannot_run_is_refused_at_construction(bad: str) -> None:
    ops, message = BAD_OPERATIONS[bad]
    with pytest.raises(UsageError, match=re.escape(message)):
        GraphOfThoughts(Step(Function(Model())), operations=ops)


def test_operations_and_settings_are_checked() -> None:
    step = Step(Function(Model()))
    for make_op in (lambda: Generate(0), lambda: KeepBest(True), lambda: Aggregate(-1), lambda: Refine(1.5)):
        with pytest.raises(UsageError, match="must be a positive integer"):
            make_op()
    assert check_operations(None) == (Generate(3), Score(), KeepBest(2), Aggregate(1), Refine(1), Score())
    with pytest.raises(UsageError, match="limit must be a positive integer or None"):
        GraphOfThoughts(step, limit=0)
    with pytest.raises(UsageError, match="scorer must be a function"):
        GraphOfThoughts(step, scorer=0.5)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="checkpoints needs a Checkpoints store"):
        GraphOfThoughts(step, checkpoints={})  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"propose_prompt must contain \{k\}"):
        GraphOfThoughts(step, propose_prompt="Propose some.")
    with pytest.raises(UsageError, match=r"merged_prompt must contain \{thoughts\}"):
        GraphOfThoughts(step, merged_prompt="Merge.")
    with pytest.raises(UsageError, match="GraphOfThoughts needs a TurnRunner"):
        GraphOfThoughts(object())  # type: ignore[arg-type]
    assert GraphOfThoughts(step, scorer=rate).max_calls == 4
    assert repr(GraphOfThoughts(step, operations=[Generate(2), Score()], scorer=rate, limit=2)) == \
        "GraphOfThoughts(operations=[Generate(k=2), Score()], scorer=rate, limit=2)"


async def test_a_refine_prompt_is_sent_as_written() -> None:
    model, step = make()
    prompt = "Improve it; keep {braces} as they are."
    await GraphOfThoughts(step, operations=[Generate(1), Refine(1), Score()], scorer=rate,
                          refine_prompt=prompt).run(ask())
    (refining,) = [r for r in model.requests if kind_of(r) == "refine"]
    assert refining.turns[-2].text == prompt


def test_the_graph_is_json_with_each_turn_once_and_reads_back_exactly() -> None:
    start = ask()
    graph = ThoughtGraph(start)
    a = graph.add((0,), 0, "a", add_thought(start, Proposal("a")))
    b = graph.add((0,), 0, "b", add_thought(start, Proposal("b", final=True)))
    listing = start.append(Role.SYSTEM, Text("Line 1: a\nLine 2: b"), meta={"kind": "merged", "parents": [1, 2]})
    merged = graph.add((a.id, b.id), 1, "a+b", add_thought(listing, Proposal("a+b")))
    refined = graph.add((merged.id,), 2, "a+b!", add_thought(merged.state, Proposal("a+b!")).with_meta(x=1))
    a.score, merged.score, b.failed = 0.25, 1.0, "scoring it failed: no"
    data = json.loads(json.dumps(graph.to_dict()))
    assert [len(n["turns"]) for n in data["nodes"]] == [1, 1, 2, 1]  # each turn once; the question not at all
    assert [n["from"] for n in data["nodes"]] == [0, 0, 0, merged.id]
    back = ThoughtGraph.from_dict(data, start)
    for mine, theirs in zip(graph, back):
        assert (mine.id, mine.parents, mine.operation, mine.thought, mine.score, mine.failed) == \
            (theirs.id, theirs.parents, theirs.operation, theirs.thought, theirs.score, theirs.failed)
        assert mine.state == theirs.state and mine.state.meta == theirs.state.meta
    assert back.nodes[refined.id].state.meta == {"x": 1}
    assert graph.ancestors(refined) == [1, 2, 3] and graph.best() is merged
    for broken in ({"format": 2}, {"format": 1, "nodes": [{"parents": [5], "from": 0, "operation": 0, "turns": []}]},
                   {"format": 1, "nodes": [{"parents": [0], "from": 0, "operation": 0, "turns": [], "score": 2}]}):
        with pytest.raises(UsageError):
            ThoughtGraph.from_dict(broken, start)


async def test_it_keeps_the_pattern_contract() -> None:
    await check_pattern(lambda step: GraphOfThoughts(step), reply=Model())
    await check_pattern(lambda step: GraphOfThoughts(step, scorer=rate, limit=1), reply=Model())


async def test_a_budget_running_out_mid_graph_answers_from_the_best_thought_offered() -> None:
    model, step = make()
    state = await WithBudget(GraphOfThoughts(step), Budget(max_turns=5)).run(ask())
    assert model.kinds() == ["generate", "score", "score", "score", "merge"]  # the refinement was refused
    assert state.answer == "b" and state.degraded
    assert "ran out (max_turns=5 reached)" in state.outcome.reason and "best candidate" in state.outcome.reason
    assert state.last.kind == "thought" and state[0] == ask()[0]


async def test_it_nests_in_with_output_and_self_consistency() -> None:
    model, step = make()
    shape = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    state = await WithOutput(GraphOfThoughts(step), step, shape).run(ask())
    assert answer_value(state, shape) == {"answer": "answer: b+c!"}
    assert [r.options.output_schema for r in model.requests if kind_of(r) == "answer"] == [shape]

    model, step = make()
    state = await SelfConsistency(GraphOfThoughts(step, scorer=rate), n=3).run(ask())
    assert state.answer == "answer: b+c!" and state.outcome.data["SelfConsistency"]["confidence"] == 1
    assert model.kinds().count("answer") == 3


async def test_a_cancellation_mid_graph_propagates() -> None:
    started = anyio.Event()
    model = Model()

    async def slow(request: Request) -> str:
        if kind_of(request) == "score":
            started.set()
            await anyio.sleep_forever()
        return model(request)

    returned = False

    async def run() -> None:
        nonlocal returned
        await GraphOfThoughts(Step(Function(slow))).run(ask())
        returned = True

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await started.wait()
            group.cancel_scope.cancel()
    assert not returned and model.kinds() == ["generate"]


async def test_a_run_stopped_by_its_budget_resumes_from_its_checkpoint_without_repeating_operations() -> None:
    saved = MemoryCheckpoints()
    _, step = make()
    stopped = await WithBudget(GraphOfThoughts(step, checkpoints=saved), Budget(max_turns=5)).run(ask())
    assert stopped.degraded and len(saved) == 1
    again, step = make()
    state = await GraphOfThoughts(step, checkpoints=saved).run(ask())
    # Generate, Score, KeepBest and Aggregate were done: only the refinement, its score and the answer run.
    assert again.kinds() == ["refine", "score", "answer"]
    assert state.answer == "answer: b+c!" and state.outcome.ok
    data = state.outcome.data["GraphOfThoughts"]
    assert data["resumed_from"] == 4 and len(data["operations"]) == 6 and data["provenance"] == [2, 3, 4]
    assert len(saved) == 0  # dropped once answered


async def test_file_checkpoints_resume_in_a_new_instance_and_other_settings_start_afresh(tmp_path: Any) -> None:
    saved = FileCheckpoints(tmp_path)
    ops = [Generate(3), Score(), KeepBest(2), Aggregate(1), Score()]
    _, step = make()
    await WithBudget(GraphOfThoughts(step, operations=ops, scorer=rate, checkpoints=saved),
                     Budget(max_turns=1)).run(ask())
    key = checkpoint_key("GraphOfThoughts(operations=[Generate(k=3), Score(), KeepBest(n=2), Aggregate(k=1), "
                         "Score()], scorer=rate)", ask())
    assert (await saved.load(key))["done"] == 3  # type: ignore[index]
    other, step = make()
    await GraphOfThoughts(step, operations=ops, checkpoints=saved).run(ask())  # a model scorer: another search
    assert other.kinds()[:2] == ["generate", "score"]
    again, step = make()
    state = await GraphOfThoughts(step, operations=ops, scorer=rate, checkpoints=saved).run(ask())
    assert again.kinds() == ["merge", "answer"] and state.answer == "answer: b"  # b (0.9) beats b+c (0.7)
    assert await saved.load(key) is None and list(tmp_path.iterdir()) == []


async def test_a_checkpoint_that_cannot_be_read_is_refused_with_the_fix() -> None:
    saved = MemoryCheckpoints()
    _, step = make()
    pattern = GraphOfThoughts(step, scorer=rate, checkpoints=saved)
    await saved.save(checkpoint_key("GraphOfThoughts(operations=[Generate(k=3), Score(), KeepBest(n=2), "
                                    "Aggregate(k=1), Refine(rounds=1), Score()], scorer=rate)", ask()),
                     {"format": 1, "graph": {"format": 1, "nodes": []}, "done": 9, "current": [0], "log": []})
    with pytest.raises(UsageError, match="'done' must count finished operations .* drop it to start afresh"):
        await pattern.run(ask())
    await saved.save(checkpoint_key(repr(pattern), ask()), {"format": 1, "graph": {"format": 3}})
    with pytest.raises(UsageError, match="cannot be read: a graph of thoughts is an object with format 1, got 3"):
        await pattern.run(ask())
