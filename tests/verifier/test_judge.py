"""``JudgeVerifier``: a model judges the answer in a conversation of its own and hands back a typed verdict."""

import itertools
import json
from typing import Any

import pytest

import loop
from cognitive import SingleShot, WithVerification
from loop import (Options, OutputType, Reasoning, Request, Role, State, Step, Text, ToolCall, ToolResult,
                  TurnCompleted, TurnKind, UsageError)
from loop.errors import ProviderError, VerificationError, VerificationFailed
from provider import Function, Scripted
from verifier import Result, Status, Verifier, run_all
from verifier._judge import JUDGE_PROMPT, JudgeVerifier, Verdict
from verifier.testing import check_verifier

CRITERIA = "The answer states the correct sum."
TASK = State().append(Role.USER, Text("What is 2+2?"))
GOOD = TASK.append(Role.ASSISTANT, Text("4"))
BAD = TASK.append(Role.ASSISTANT, Text("5"))


def verdict(passed: bool, severity: float, issues: tuple[str, ...] = (), summary: str = "") -> str:
    return json.dumps({"passed": passed, "severity": severity, "issues": list(issues), "summary": summary})


def reviewed(request: Request) -> str:
    """The answer a judging request presents (the end of its user turn)."""
    return request.turns[1].text.rsplit("## Answer under review\n\n", 1)[1]


def judges_sums(request: Request) -> str:
    if reviewed(request) == "4":
        return verdict(True, 0.0, summary="Correct.")
    return verdict(False, 0.9, ("2+2 is 4, not " + reviewed(request) + ".",), "Wrong sum.")


def judge(provider: Any, **settings: Any) -> JudgeVerifier:
    return JudgeVerifier(Step(provider), criteria=CRITERIA, **settings)


async def test_it_is_a_verifier_that_keeps_the_contract() -> None:
    check = judge(Function(judges_sums))
    assert isinstance(check, Verifier) and check.name == "judge"
    assert JudgeVerifier(Step(Scripted([])), criteria=CRITERIA, name="tone").name == "tone"
    assert await check_verifier(check, passing=GOOD, failing=BAD) is None


async def test_a_passing_verdict_passes_and_the_judge_sees_a_conversation_of_its_own() -> None:
    script = Scripted([verdict(True, 0.1, summary="Correct and short.")])
    result = await judge(script).verify(GOOD)
    assert result == Result("judge", Status.PASS, "The judge passed the answer (severity 0.1 of 1).\n\n"
                                                  "Correct and short.")
    (request,) = script.requests
    assert [t.role for t in request.turns] == [Role.SYSTEM, Role.USER, Role.SYSTEM]
    assert request.turns[0].text == JUDGE_PROMPT.replace("{criteria}", CRITERIA)
    assert request.turns[1].text == "## Task\n\nWhat is 2+2?\n\n## Answer under review\n\n4"
    assert request.turns[2].kind == TurnKind.OUTPUT_FORMAT  # loop.ask's schema turn
    assert request.options.tool_choice == "none"
    assert request.options.output_schema == OutputType.of(Verdict).schema


async def test_a_failing_verdict_fails_with_its_severity_summary_and_issues() -> None:
    script = Scripted([verdict(False, 0.8, ("The sum is wrong.", "  ", "Show the working."), "Not 4.")])
    result = await judge(script).verify(BAD)
    assert result.status is Status.FAIL
    assert result.report == ("The judge failed the answer (severity 0.8 of 1).\n\nNot 4.\n\nIssues:\n\n"
                             "- The sum is wrong.\n- Show the working.")


@pytest.mark.parametrize(
    ("passed", "severity", "threshold", "status"),
    [
        (True, 0.3, 0.3, Status.PASS),  # at the threshold passes
        (True, 0.31, 0.3, Status.FAIL),  # "passed" but too severe
        (True, 0.5, 0.6, Status.PASS),
        (True, 1.0, 1.0, Status.PASS),  # threshold 1 trusts `passed` alone
        (False, 0.0, 1.0, Status.FAIL),  # never passes what the judge failed
        (True, 0.0, 0.0, Status.PASS),
    ],
)
async def test_a_pass_needs_passed_and_a_severity_within_the_threshold(
        passed: bool, severity: float, threshold: float, status: Status) -> None:
    result = await judge(Scripted([verdict(passed, severity)]), threshold=threshold).verify(GOOD)
    assert result.status is status


async def test_passed_but_too_severe_says_what_passing_needs() -> None:
    result = await judge(Scripted([verdict(True, 0.5, ("Too long.",))])).verify(GOOD)
    assert result.report == ("The judge found problems too severe to pass (severity 0.5 of 1; passing needs at "
                             "most 0.3).\n\nIssues:\n\n- Too long.")


async def test_no_answer_fails_saying_so_without_asking_the_model() -> None:
    script = Scripted([])
    result = await judge(script).verify(TASK.append(Role.ASSISTANT, ToolCall("c1", "search", "{}")))
    assert result == Result("judge", Status.FAIL,
                            "There is no answer to judge: the conversation has no assistant reply with text.")
    assert await judge(script).verify(TASK) == result
    assert script.requests == []


async def test_a_malformed_verdict_is_asked_again_and_the_second_counts() -> None:
    script = Scripted(["Looks fine to me.", verdict(True, 1.5), verdict(True, 0.0, summary="Fine.")])
    result = await judge(script).verify(GOOD)
    assert result.status is Status.PASS and result.report.endswith("Fine.")
    _, second, third = script.requests
    correction = second.turns[-1]
    assert correction.role is Role.SYSTEM and correction.kind == TurnKind.VERIFICATION
    assert "cannot be read as `Verdict`" in correction.text
    assert "severity must be a number from 0 to 1, got 1.5" in third.turns[-1].text


async def test_a_verdict_that_never_validates_is_an_error_naming_why() -> None:
    script = Scripted(["no", "still no", "never"])
    result = await judge(script).verify(GOOD)
    assert result.status is Status.ERROR
    assert result.report.startswith("The judge gave no valid verdict, so the answer could not be judged: "
                                    "the model's answer never matched Verdict in 3 attempts: ")
    assert "cannot be read as `Verdict`" in result.report
    assert script.remaining == 0
    once = Scripted(["no"])
    assert (await judge(once, max_retries=0).verify(GOOD)).status is Status.ERROR and once.used == 1


async def test_an_error_verdict_stops_verification_at_once() -> None:
    step = Step(Function(lambda request: "not JSON" if "judge" in request.path else "4"))
    agent = WithVerification(SingleShot(step), step, verifiers=[JudgeVerifier(step, criteria=CRITERIA)])
    with pytest.raises(VerificationError, match="judge could not run: The judge gave no valid verdict"):
        await agent.run(TASK)


async def test_a_failing_model_call_raises_and_run_all_reports_an_error() -> None:
    check = judge(Scripted([ProviderError("the model is down"), ProviderError("the model is down")]))
    with pytest.raises(ProviderError):
        await check.verify(GOOD)
    assert await run_all(check, GOOD) == [Result("judge", Status.ERROR,
                                                 "The verifier raised ProviderError: the model is down")]


async def test_a_judge_that_never_passes_ends_in_verification_failed_and_stays_out_of_the_conversation() -> None:
    drafts = itertools.count(1)

    def model(request: Request) -> str:
        if "judge" in request.path:
            return verdict(False, 0.7, ("Cite a source.",), "Unsupported.")
        return f"draft {next(drafts)}"

    step = Step(Function(model))
    check = JudgeVerifier(step, criteria="Every claim cites a source.")
    agent = WithVerification(SingleShot(step), step, verifiers=[check], max_retries=2)
    with step.events.subscribe(buffer=None, main_line=True) as main:
        with loop.main_line("chat"), pytest.raises(VerificationFailed, match="judge still failing") as caught:
            await agent.run(TASK)
        published = [e.turn for e in main.drain() if isinstance(e, TurnCompleted)]
    final = caught.value.state
    assert [t.role for t in final] == [Role.USER, Role.ASSISTANT, Role.SYSTEM, Role.ASSISTANT, Role.SYSTEM,
                                       Role.ASSISTANT]
    assert final.answer == "draft 3"
    reports = [t.text for t in final if t.role is Role.SYSTEM]
    assert all("## judge: FAIL" in r and "- Cite a source." in r for r in reports)
    # The judge's prompt, schema turn and verdicts are nowhere in the conversation or on its main line.
    for turn in [*final, *published]:
        assert turn.kind != TurnKind.OUTPUT_FORMAT
        assert "You review an answer" not in turn.text and '"severity"' not in turn.text
    assert [r.status for r in caught.value.results] == [Status.FAIL]


async def test_a_judge_on_a_derived_cheap_step_asks_the_cheap_model() -> None:
    seen: list[tuple[str, str | None, float | None]] = []

    def model(request: Request) -> str:
        seen.append((request.path, request.options.model, request.options.temperature))
        return verdict(True, 0.0) if "judge" in request.path else "4"

    step = Step(Function(model), options=Options(model="big", temperature=0.2))
    cheap = JudgeVerifier(step.derive(options=Options(model="cheap")), criteria=CRITERIA)
    state = await WithVerification(SingleShot(step), step, verifiers=[cheap]).run(TASK)
    assert state.answer == "4"
    assert seen == [("WithVerification/SingleShot", "big", 0.2), ("WithVerification/verify:judge/judge", "cheap", 0.2)]


async def test_the_judge_runs_as_a_branch_named_after_it() -> None:
    where: list[tuple[str, bool]] = []

    def model(request: Request) -> str:
        where.append((request.path, loop.current_scope().on_main_line))
        return verdict(True, 0.0)

    step = Step(Function(model))
    with loop.main_line("chat"), loop.scope("Review"):
        await JudgeVerifier(step, criteria=CRITERIA, name="tone").verify(GOOD)
        await JudgeVerifier(step, criteria=CRITERIA, name="a/b").verify(GOOD)
        await run_all([JudgeVerifier(step, criteria=CRITERIA)], GOOD)
    assert where == [("chat/Review/tone", False), ("chat/Review/a_b", False),
                     ("chat/Review/verify:judge/judge", False)]


async def test_settings_reach_the_judges_requests() -> None:
    script = Scripted([verdict(True, 0.0), verdict(True, 0.0)])
    await judge(script, options=Options(temperature=0.0), native=False).verify(GOOD)
    assert script.requests[0].options.temperature == 0.0
    assert script.requests[0].options.output_schema is None
    await judge(script, prompt="Be harsh.\n\n{criteria}").verify(GOOD)
    assert script.requests[1].turns[0].text == f"Be harsh.\n\n{CRITERIA}"


WORK = (State()
        .append(Role.USER, Text("Hello."))
        .append(Role.ASSISTANT, Text("Hi! How can I help?"))
        .append(Role.USER, Text("Weather in Paris?"))
        .append(Role.ASSISTANT, Reasoning("I should look it up."), Text("Checking."),
                ToolCall("c1", "weather", '{"city": "Paris"}'))
        .append(Role.TOOL, ToolResult("c1", "weather", "sunny, 21 C"))
        .append(Role.ASSISTANT, Text("It is sunny and 21 C in Paris.")))


async def test_the_task_is_the_last_user_message_and_context_shows_the_turns_before_the_answer() -> None:
    script = Scripted([verdict(True, 0.0)] * 3)
    await judge(script).verify(WORK)
    await judge(script, context=2).verify(WORK)
    await judge(script, context=10).verify(WORK)
    plain, two, everything = (r.turns[1].text for r in script.requests)
    assert plain == "## Task\n\nWeather in Paris?\n\n## Answer under review\n\nIt is sunny and 21 C in Paris."
    assert two == ("## Task\n\nWeather in Paris?\n\n"
                   "## Conversation before the answer\n\n"
                   '**assistant**: Checking.\ncalled `weather` with {"city": "Paris"}\n\n'
                   "**tool**: `weather` returned: sunny, 21 C\n\n"
                   "## Answer under review\n\nIt is sunny and 21 C in Paris.")
    assert everything.startswith("## Task\n\nWeather in Paris?\n\n## Conversation before the answer\n\n"
                                 "**user**: Hello.\n\n**assistant**: Hi! How can I help?\n\n"
                                 "**user**: (the task above)\n\n**assistant**: Checking.")
    assert "look it up" not in everything  # the author's reasoning is not shown


async def test_a_long_context_turn_is_cut() -> None:
    state = TASK.append(Role.TOOL, ToolResult("c1", "dump", "x" * 10_000)).append(Role.ASSISTANT, Text("4"))
    script = Scripted([verdict(True, 0.0)])
    await judge(script, context=1).verify(state)
    shown = script.requests[0].turns[1].text
    assert "x" * 3_900 in shown and "x" * 4_100 not in shown and "…(cut)" in shown


async def test_no_user_message_is_said_plainly() -> None:
    script = Scripted([verdict(True, 0.0)])
    await judge(script).verify(State().append(Role.ASSISTANT, Text("4")))
    assert script.requests[0].turns[1].text.startswith("## Task\n\n(the conversation holds no user message)")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"criteria": ""}, "criteria"),
        ({"criteria": 3}, "criteria"),
        ({"name": ""}, "name"),
        ({"threshold": 1.5}, "threshold"),
        ({"threshold": -0.1}, "threshold"),
        ({"threshold": True}, "threshold"),
        ({"context": -1}, "context"),
        ({"options": {"model": "x"}}, "options"),
        ({"max_retries": -1}, "max_retries"),
        ({"native": "yes"}, "native"),
        ({"prompt": "Judge it."}, "criteria"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        JudgeVerifier(Step(Scripted([])), **{"criteria": CRITERIA, **kwargs})


def test_the_step_must_run_turns() -> None:
    with pytest.raises(UsageError, match="TurnRunner"):
        JudgeVerifier(object(), criteria=CRITERIA)  # type: ignore[arg-type]


def test_a_verdict_checks_its_severity_and_keeps_issues_as_a_tuple() -> None:
    assert Verdict(True, 0, ["a"], "s").issues == ("a",)
    for bad in (1.5, -0.1, True, "0.2"):
        with pytest.raises(ValueError, match="severity must be a number from 0 to 1"):
            Verdict(True, bad, (), "")
    assert "JudgeVerifier(name='judge', threshold=0.3, context=0)" == repr(judge(Scripted([])))
