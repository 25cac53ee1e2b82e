"""The examples of the guide's pages on cancellation, multi-agent setups and verifiers run as written and print
what their comments say they print."""

from typing import Any

import pytest

from loop import CANCELLED
from tests.examples.docs import PAGES, PYTHON_BLOCKS, block

PAGES_HERE = ("cancellation.md", "multi-agent.md", "verifiers.md")


def run(marker: str, capsys: pytest.CaptureFixture[str]) -> tuple[list[str], dict[str, Any]]:
    """Run the one block holding ``marker`` as its own program: the lines it printed, and the names it left."""
    code = block(PYTHON_BLOCKS, marker)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(code, f"guide block with {marker!r}", "exec"), namespace)
    return capsys.readouterr().out.strip().splitlines(), namespace


def printed(marker: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    return run(marker, capsys)[0]


@pytest.mark.parametrize("page", PAGES_HERE)
def test_the_page_is_written(page: str) -> None:
    assert "(being written)" not in PAGES[page]
    assert "```python" in PAGES[page]


# -- cancellation.md ----------------------------------------------------------------------------------------------


def test_a_tool_past_its_timeout_becomes_a_result_the_model_reads(capsys: pytest.CaptureFixture[str]) -> None:
    assert printed("@tool(timeout=0.1)", capsys) == [
        "No forecast: error: the tool timed out after 0.1 seconds and was stopped"]


def test_a_run_cut_short_by_the_caller_leaves_a_recorded_conversation_to_resume(
        capsys: pytest.CaptureFixture[str]) -> None:
    stopped, result, resumed = printed("main_line(recorder=record)", capsys)
    assert stopped == "True ['user', 'assistant', 'tool']"
    assert result == f"error: {CANCELLED}"
    assert resumed == "The crawl was stopped; nothing yet."


def test_a_deadline_ends_in_a_degraded_answer_written_after_the_cancelled_call(
        capsys: pytest.CaptureFixture[str]) -> None:
    (roles, answer), names = run('Budget(deadline=0.5, name="quick")', capsys)
    assert roles == "['user', 'assistant', 'tool', 'system', 'assistant']"
    assert answer == "I could not finish crawling example.org in time. | degraded"
    state = names["state"]
    assert state[2].tool_results[0].content == f"error: {CANCELLED}"
    assert state.outcome.reason.startswith("budget 'quick' ran out (deadline=0.5s passed); ")


def test_an_interrupted_session_raises_to_the_asker_stores_the_cancelled_call_and_goes_on(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert printed("except SessionClosed:", capsys) == [
        "interrupted", "['user', 'assistant', 'tool']", "The crawl was stopped; ask me again."]


# -- multi-agent.md -----------------------------------------------------------------------------------------------


def test_the_router_sends_each_question_down_its_route(capsys: pytest.CaptureFixture[str]) -> None:
    assert printed('Router({"orders"', capsys) == [
        "orders | Order 42 was shipped on Monday.", "chat | Hello! Ask me about an order."]


def test_the_debate_goes_back_to_the_proposer_once_then_the_judge_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert printed("Debate(step, critic=small, judge=small)", capsys) == [
        "The Eiffel Tower, finished in 1889 for the World's Fair.", "2 [0.6, 0.1] judge"]


def test_an_agent_as_a_tool_stays_out_of_the_conversation_and_is_charged_to_the_budget(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert printed("tools=[AgentTool(researcher", capsys) == [
        "The researcher found 2100000 people.", "['user', 'assistant', 'tool', 'assistant']",
        "{'turns': 4, 'tool_calls': 2}"]


# -- verifiers.md -------------------------------------------------------------------------------------------------


def test_the_gate_sends_the_report_back_once_and_passes(capsys: pytest.CaptureFixture[str]) -> None:
    lines, names = run('name="currency"', capsys)
    assert lines == ["The total is 12 EUR. {'retries': 1, 'results': {'currency': 'pass', 'has-number': 'pass'}}",
                     "['user', 'assistant', 'verification', 'assistant']"]
    report = names["state"][2]
    assert report.role.value == "system" and report.meta["attempt"] == 1
    assert report.text.startswith("# Verification: 1 of 2 checks did not pass\n\n## currency: FAIL\n\nGive the currency")


def test_the_command_verifier_passes_code_that_compiles_and_fails_code_that_does_not(
        capsys: pytest.CaptureFixture[str]) -> None:
    passing, failing, why = printed('CommandVerifier("compiles"', capsys)
    assert (passing, failing) == ("PASS", "FAIL")
    assert why.startswith("SyntaxError")


def test_the_judge_fails_an_unexplained_answer_and_passes_the_revision(capsys: pytest.CaptureFixture[str]) -> None:
    lines, names = run("JudgeVerifier(step.derive", capsys)
    assert lines == ["Paris, because the government sits there. {'iterations': 2, 'passed': True, 'critic': 'judge'}"]
    feedback = names["state"][2].text
    assert "The judge found problems too severe to pass (severity 0.5 of 1; passing needs at most 0.3)." in feedback
    assert "- Say why it is the capital." in feedback


def test_the_verifier_of_your_own_passes_the_conformance_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert printed("class MaxWords", capsys) == ["MaxWords keeps the Verifier contract"]
