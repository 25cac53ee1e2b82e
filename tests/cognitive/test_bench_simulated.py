"""The simulated model: a noisy solver of the built-in tasks that plays every ask honestly and never sees the
expected answers."""

import re
from fractions import Fraction

import pytest

from cognitive import Critique, Proposals, Rating, ReAct, SelfConsistency, SingleShot, Steps, WithBudget
from cognitive.bench import SimulatedModel, builtin_tasks, simulated_provider
from cognitive.bench._game24 import reachable
from cognitive.search._thoughts import PROPOSE, SCORE
from loop import Budget, Request, Role, State, Step, Text, UsageError, ask
from provider import Function

PUZZLE = next(t for t in builtin_tasks() if t.kind == "game24")
SUMS = next(t for t in builtin_tasks() if t.kind == "arithmetic")
CHAIN = next(t for t in builtin_tasks() if t.kind == "lookup")


def asked(text: str, *more: tuple[Role, str]) -> State:
    state = State().append(Role.USER, Text(text))
    for role, said in more:
        state = state.append(role, Text(said))
    return state


def numbers(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", text.split("numbers", 1)[1].split("using")[0])]


async def test_one_request_always_gets_the_same_reply_and_seeds_differ() -> None:
    replies = []
    for seed in (0, 0, 1, 2, 3):
        step = Step(simulated_provider(seed=seed))
        replies.append((await step.turn(PUZZLE.question)).answer)
    assert replies[0] == replies[1]
    assert len(set(replies)) > 1


async def test_it_reports_usage_for_every_reply() -> None:
    state = await Step(simulated_provider()).turn(SUMS.question)
    assert state.usage.input_tokens > 10 and state.usage.output_tokens > 0


async def test_a_sure_solver_gets_every_built_in_reasoning_task_right_and_a_hopeless_one_none() -> None:
    reasoning = [t for t in builtin_tasks() if t.kind != "lookup"]
    for skill, expected in ((1.0, True), (0.0, False)):
        step = Step(simulated_provider(skill={"arithmetic": skill, "game24": skill}))
        for task in reasoning:
            answer = (await SingleShot(step).run(task.question)).answer or ""
            assert task.check(answer) is expected, (task.id, answer)


async def test_it_calls_the_lookup_tool_one_hop_at_a_time_when_offered_it() -> None:
    step = Step(simulated_provider(), tools=CHAIN.tools)
    done = await ReAct(step).run(CHAIN.question)
    calls = [c.arguments for t in done.turns for c in t.tool_calls]
    assert calls == ['{"query": "capital of Veloria"}', '{"query": "mayor of Marnhold"}']
    assert CHAIN.check(done.answer or "")
    without = await SingleShot(Step(simulated_provider())).run(CHAIN.question)
    assert not CHAIN.check(without.answer or "") and "look" in (without.answer or "")


async def test_samples_on_other_run_paths_are_independent_draws() -> None:
    step = Step(simulated_provider())
    done = await SelfConsistency(ReAct(step), n=5).run(PUZZLE.question)
    assert done.outcome is not None
    votes = done.outcome.data["SelfConsistency"]["votes"]
    assert len(votes) > 1  # not five copies of one reply


async def test_proposals_are_real_next_steps_of_the_puzzle() -> None:
    given = numbers(PUZZLE.text)
    step = Step(simulated_provider(skill={"game24": 1.0}))
    state = asked(PUZZLE.text, (Role.SYSTEM, PROPOSE.format(k=3)))
    proposals = (await ask(step, state, Proposals)).value.thoughts
    assert 1 <= len(proposals) <= 3
    for proposal in proposals:
        a, op, b, c, left = re.fullmatch(r"(\S+) ([-+*/]) (\S+) = (\S+) \(left: ([\d/ ]+)\)", proposal.text).groups()
        x, y, z = Fraction(a), Fraction(b), Fraction(c)
        assert z == {"+": x + y, "-": x - y, "*": x * y, "/": x / y if y else None}[op]
        rest = sorted(Fraction(v) for v in left.split())
        expected = list(given)
        expected.remove(int(x))
        expected.remove(int(y))
        assert rest == sorted([Fraction(v) for v in expected] + [z])
        assert reachable(tuple(rest))  # a sure solver only proposes steps that keep 24 within reach
        assert not proposal.final


async def test_ratings_reflect_whether_a_partial_line_can_still_reach_24() -> None:
    step = Step(simulated_provider(check=1.0))
    good = asked("Game of 24: make 24 from the numbers 4, 4, 6, 3, using each number exactly once.",
                 (Role.ASSISTANT, "4 + 4 = 8 (left: 3 6 8)"), (Role.SYSTEM, SCORE))
    dead = asked("Game of 24: make 24 from the numbers 4, 4, 6, 3, using each number exactly once.",
                 (Role.ASSISTANT, "4 * 4 = 16 (left: 3 6 16)"), (Role.ASSISTANT, "16 * 6 = 96 (left: 3 96)"),
                 (Role.SYSTEM, SCORE))
    assert (await ask(step, good, Rating)).value.score >= 0.5
    assert (await ask(step, dead, Rating)).value.score < 0.5
    final = asked("Game of 24: make 24 from the numbers 4, 4, 6, 3, using each number exactly once.",
                  (Role.ASSISTANT, "Answer: (4 + 4) * (6 - 3) = 24"), (Role.SYSTEM, SCORE))
    assert (await ask(step, final, Rating)).value.score >= 0.9


async def test_a_critique_follows_its_own_check_of_the_answer() -> None:
    step = Step(simulated_provider(check=1.0))
    right = asked(PUZZLE.text, (Role.ASSISTANT, f"Answer: {PUZZLE.answer} = 24"))
    wrong = asked(PUZZLE.text, (Role.ASSISTANT, "Answer: 1 + 2 + 3 + 4 = 24"))
    assert (await ask(step, right, Critique)).value.severity == 0
    critique = (await ask(step, wrong, Critique)).value
    assert critique.severity > 0.3 and "does not hold up" in critique.issues[0]
    plan = (await ask(step, asked(CHAIN.text), Steps)).value
    assert any("capital" in s for s in plan.steps)


async def test_native_choices_are_independent_draws_charged_one_prompt() -> None:
    requests: list[Request] = []
    model = SimulatedModel()

    def fn(request: Request) -> object:
        requests.append(request)
        return model(request)

    step = Step(Function(fn))
    done = await WithBudget(SelfConsistency(SingleShot(step), n=5), Budget(max_turns=3)).run(PUZZLE.question)
    assert len({id(r) for r in requests}) == 1  # one request served every sample
    assert done.outcome is not None and len(done.outcome.data["WithBudget/SelfConsistency"]["votes"]) > 1
    one = await WithBudget(SingleShot(Step(simulated_provider())), Budget(max_turns=3)).run(PUZZLE.question)
    assert one.outcome is not None
    spent, alone = done.outcome.data["WithBudget"]["spent"], one.outcome.data["WithBudget"]["spent"]
    assert spent["input_tokens"] == alone["input_tokens"]  # the prompt is paid once for the five choices


def test_its_settings_are_checked() -> None:
    with pytest.raises(UsageError, match="game24 is a probability from 0 to 1"):
        SimulatedModel(skill={"game24": 1.5})
    with pytest.raises(UsageError, match="check is a probability"):
        SimulatedModel(check=-0.1)
    with pytest.raises(UsageError, match="seed is a whole number"):
        SimulatedModel(seed="1")  # type: ignore[arg-type]
