"""Steps the browser tests share: opening the page with the token, starting a conversation, sending a message,
and recording what the streamed answer looked like at each change of the page."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, expect

from tests.session.web.server import TOKEN

# Records the text of the answer being streamed each time the conversation changes.
WATCH_STREAMING = """() => {
  window.streamed = [];
  new MutationObserver(() => {
    const text = document.querySelector('[data-testid="streaming"] .text');
    if (text) window.streamed.push(text.textContent);
  }).observe(document.getElementById("messages"), { subtree: true, childList: true, characterData: true });
}"""


def problems(page: Page) -> list[str]:
    """What goes wrong on the page from now on: script errors, and any dialog (an ``alert`` would be one)."""
    seen: list[str] = []
    page.on("pageerror", lambda error: seen.append(f"script error: {error}"))
    page.on("dialog", lambda dialog: seen.append(f"a dialog opened: {dialog.message}"))
    return seen


def enter_token(page: Page, token: str = TOKEN) -> None:
    dialog = page.get_by_test_id("token-dialog")
    expect(dialog).to_be_visible()
    page.get_by_test_id("token-input").fill(token)
    page.get_by_test_id("token-submit").click()


def live(page: Page) -> None:
    expect(page.get_by_test_id("stream-status")).to_have_attribute("data-state", "live")


def start_chat(page: Page, server: Any) -> None:
    """The page with the token given and a new conversation open, its event stream connected."""
    page.goto(server.url + "/")
    enter_token(page)
    expect(page.get_by_test_id("token-dialog")).to_be_hidden()
    page.get_by_test_id("new-conversation").click()
    live(page)


def send(page: Page, text: str) -> None:
    composer = page.get_by_test_id("composer")
    composer.fill(text)
    composer.press("Enter")


def finished(page: Page) -> None:
    """Wait for the message to be done (the page marks the body while one runs)."""
    expect(page.locator("body")).to_have_attribute("data-running", "false")


def answers(page: Page) -> list[str]:
    return page.get_by_test_id("assistant-message").get_by_test_id("answer-text").all_inner_texts()


def watch_streaming(page: Page) -> None:
    page.evaluate(WATCH_STREAMING)


def streamed(page: Page) -> list[str]:
    seen: list[str] = page.evaluate("() => window.streamed")
    return seen
