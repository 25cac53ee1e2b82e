"""The chat page in a browser: a message to an agent that calls a tool, the answer streamed as it is written,
verification reports and degraded answers, hostile text shown as text, and the page on a desktop and a phone."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.session.web.agent import HOSTILE, SLOW_ANSWER
from tests.session.web.browsing import finished, problems, send, start_chat, streamed, watch_streaming
from tests.session.web.conftest import ARTIFACTS

pytestmark = pytest.mark.browser


def test_a_tool_call_shows_as_a_card_with_its_arguments_result_and_duration(page: Page, server: Any) -> None:
    errors = problems(page)
    start_chat(page, server)
    composer = page.get_by_test_id("composer")
    composer.fill("please add 2")
    composer.press("Shift+Enter")  # a new line, not a send
    composer.type("and 3")
    assert composer.input_value() == "please add 2\nand 3"
    expect(page.get_by_test_id("user-message")).to_have_count(0)
    composer.press("Enter")
    expect(composer).to_have_value("")
    expect(page.get_by_test_id("answer-text")).to_have_text("The sum is 5.0.")
    expect(page.get_by_test_id("user-message")).to_have_text(["please add 2\nand 3"])
    card = page.get_by_test_id("tool-card")
    expect(card).to_have_count(1)
    expect(card.get_by_test_id("tool-name")).to_have_text("add")
    expect(card.get_by_test_id("tool-status")).to_have_text("done")
    expect(card.get_by_test_id("tool-duration")).to_have_text(re.compile(r"^\d+ ms$"))
    expect(card.get_by_test_id("tool-args")).to_be_hidden()  # collapsed until opened
    card.locator("summary").focus()
    page.keyboard.press("Enter")  # opened from the keyboard
    expect(card.get_by_test_id("tool-args")).to_have_text('{\n  "a": 2,\n  "b": 3\n}')
    expect(card.get_by_test_id("tool-result")).to_have_text("5.0")
    node = page.locator('[data-testid="tree-node"][data-path="ReAct"]')
    expect(node.get_by_test_id("node-meta").first).to_contain_text("40→20 tok")
    assert errors == []


def test_the_answer_is_shown_while_it_streams(page: Page, server: Any) -> None:
    start_chat(page, server)
    watch_streaming(page)
    send(page, "tell it slowly")
    expect(page.get_by_test_id("answer-text")).to_have_text(SLOW_ANSWER)
    seen = streamed(page)
    partial = {len(text) for text in seen if 0 < len(text) < len(SLOW_ANSWER)}
    assert len(partial) >= 2, seen
    assert all(SLOW_ANSWER.startswith(text) for text in seen), seen
    expect(page.get_by_test_id("streaming")).to_have_count(0)  # the stored answer took its place


def test_a_verification_report_and_the_retry_are_shown(page: Page, server: Any) -> None:
    start_chat(page, server)
    send(page, "verify this")
    expect(page.get_by_test_id("answer-text")).to_have_text(["The answer is 41.", "The answer is 42."])
    report = page.get_by_test_id("verification")
    expect(report).to_have_count(1)
    expect(report).to_contain_text("attempt 1")
    expect(report).to_contain_text("_right: FAIL")
    expect(report).to_contain_text("The answer must be 42")
    # The report sits between the answer it failed and the retry.
    order = page.evaluate("""() => [...document.querySelectorAll(
        '[data-testid="answer-text"], [data-testid="verification"]')].map(e => e.dataset.testid)""")
    assert order == ["answer-text", "verification", "answer-text"]
    finished(page)
    expect(page.get_by_test_id("outcome")).to_have_count(1)
    expect(page.get_by_test_id("outcome")).to_be_hidden()  # a clean answer carries no mark
    expect(page.locator('[data-testid="tree-node"][data-path=""]')).to_have_attribute("data-status", "ok")


def test_a_degraded_answer_is_marked_as_such(page: Page, server: Any) -> None:
    start_chat(page, server)
    send(page, "count forever")
    expect(page.get_by_test_id("answer-text")).to_have_text("I stopped counting.")
    bubble = page.get_by_test_id("assistant-message").last
    expect(bubble).to_have_attribute("data-outcome", "degraded")
    outcome = bubble.get_by_test_id("outcome")
    expect(outcome).to_be_visible()
    expect(outcome.locator(".badge")).to_have_text("degraded")
    expect(page.get_by_test_id("message-outcome")).to_contain_text("The answer is degraded")
    expect(page.locator('[data-testid="tree-node"][data-path=""]')).to_have_attribute("data-status", "degraded")


def test_what_a_model_or_tool_wrote_is_shown_as_text(page: Page, server: Any) -> None:
    errors = problems(page)
    start_chat(page, server)
    send(page, "hostile <b>bold</b> " + HOSTILE)
    expect(page.get_by_test_id("answer-text")).to_have_text(f"It said {HOSTILE}")
    card = page.get_by_test_id("tool-card")
    card.locator("summary").click()
    expect(card.get_by_test_id("tool-result")).to_have_text(HOSTILE)
    expect(card.get_by_test_id("tool-args")).to_contain_text(HOSTILE)
    expect(page.get_by_test_id("user-message")).to_have_text("hostile <b>bold</b> " + HOSTILE)
    assert page.locator("img, b").count() == 0  # nothing was parsed as markup
    expect(page.locator('[data-testid="tree-node"][data-path="ReAct"]').get_by_test_id("node-answer").first) \
        .to_have_text(f"It said {HOSTILE}")
    assert errors == []  # no alert() dialog, no script error


def test_a_finished_conversation_on_a_desktop_and_on_a_phone(page: Page, server: Any) -> None:
    start_chat(page, server)
    send(page, "please add 20 and 22")
    expect(page.get_by_test_id("answer-text")).to_have_text("The sum is 42.0.")
    send(page, "verify this")
    expect(page.get_by_test_id("answer-text")).to_have_count(3)
    finished(page)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "chat-desktop.png"))
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()  # the same tab: the token and the open conversation are kept
    expect(page.get_by_test_id("answer-text")).to_have_count(3)
    expect(page.get_by_test_id("tree-panel")).not_to_have_attribute("open", "")  # folded under the chat
    chat = page.get_by_test_id("messages").bounding_box()
    tree = page.get_by_test_id("tree-panel").bounding_box()
    assert chat is not None and tree is not None and tree["y"] > chat["y"] and chat["width"] <= 390
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390  # nothing wider than the phone
    page.get_by_test_id("composer").focus()
    page.screenshot(path=str(ARTIFACTS / "chat-phone.png"))
