"""The chat page in a browser, on what a run does besides writing: the run tree of a self-consistency vote,
interrupting a slow tool, and a tool call approved from the page."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.session.web.agent import VOTES
from tests.session.web.browsing import answers, finished, send, start_chat

pytestmark = pytest.mark.browser


def node(page: Page, path: str) -> Any:
    return page.locator(f'[data-testid="tree-node"][data-path="{path}"]')


def test_the_run_tree_shows_each_sample_of_a_vote_with_its_vote(page: Page, server: Any) -> None:
    start_chat(page, server)
    send(page, "vote now")
    finished(page)
    for number in range(1, 6):
        sample = node(page, f"SelfConsistency/sample {number}")
        expect(sample).to_have_attribute("data-branch", "true")
        expect(sample.get_by_test_id("node-answer").first).to_have_text(
            f"vote: {VOTES.get(number, 'The answer is 8.')}")
        expect(sample.get_by_test_id("node-meta").first).to_contain_text("20→10 tok")
        expect(node(page, f"SelfConsistency/sample {number}/ReAct")).to_have_count(1)
    vote = node(page, "SelfConsistency")
    expect(vote.get_by_test_id("node-reason").first).to_have_text(
        "votes: the answer is 8 ×3, the answer is 24 ×1, the answer is 18 ×1; kept sample 1")
    expect(vote.get_by_test_id("node-meta").first).to_contain_text("100→50 tok")
    expect(node(page, "")).to_have_attribute("data-status", "ok")
    # Only the kept answer reaches the conversation: the samples' text stays in the tree.
    assert answers(page) == ["The answer is 8."]
    expect(page.get_by_test_id("streaming")).to_have_count(0)
    page.locator('[data-testid="tree-node"][data-path="SelfConsistency/sample 2"] > details > summary').click()
    expect(node(page, "SelfConsistency/sample 2/ReAct")).to_be_hidden()  # folded away


def test_a_slow_tool_is_interrupted_from_the_page(page: Page, server: Any) -> None:
    start_chat(page, server)
    send(page, "take a nap")
    card = page.get_by_test_id("tool-card")
    expect(card.get_by_test_id("tool-status")).to_have_text("running…")
    expect(page.locator("body")).to_have_attribute("data-running", "true")
    page.get_by_test_id("interrupt").click()
    expect(page.get_by_test_id("interrupted")).to_have_text("Interrupted.")
    finished(page)
    expect(card).to_have_attribute("data-status", "error")
    expect(node(page, "")).to_have_attribute("data-status", "interrupted")
    send(page, "please add 1 and 1")  # the conversation goes on
    expect(page.get_by_test_id("answer-text").last).to_have_text("The sum is 2.0.")


def test_a_tool_call_is_approved_from_the_page_even_after_a_reload(page: Page, server: Any) -> None:
    start_chat(page, server)
    send(page, "pay Ada")
    approval = page.get_by_test_id("approval")
    expect(approval.get_by_test_id("approval-tool")).to_have_text("pay")
    expect(approval).to_contain_text('"amount": 250')
    page.reload()  # a request left open is listed again
    expect(approval.get_by_test_id("approval-tool")).to_have_text("pay")
    approval.get_by_test_id("approve").click()
    expect(page.get_by_test_id("answer-text").last).to_have_text("Done: paid Ada 250")
    expect(approval).to_have_count(0)
    card = page.get_by_test_id("tool-card")
    expect(card.get_by_test_id("tool-result")).to_have_text("paid Ada 250", use_inner_text=False)
