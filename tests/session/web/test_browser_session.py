"""The chat page in a browser, on what outlives one request: the token, the stored conversations (a reload, the
list), and an event stream that drops and resumes without showing anything twice."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.session.web.agent import SLOW_ANSWER
from tests.session.web.browsing import enter_token, finished, live, send, start_chat, streamed, watch_streaming

pytestmark = pytest.mark.browser


def test_a_wrong_token_is_refused_and_asked_for_again(page: Page, server: Any) -> None:
    page.goto(server.url + "/")
    enter_token(page, "not-the-token")
    error = page.get_by_test_id("token-error")
    expect(error).to_be_visible()
    expect(error).to_contain_text("refused this token (401")
    expect(page.get_by_test_id("token-dialog")).to_be_visible()
    assert page.evaluate("() => sessionStorage.getItem('chat.token')") is None  # a refused token is not kept
    enter_token(page)
    expect(page.get_by_test_id("token-dialog")).to_be_hidden()
    expect(page.get_by_test_id("list-note")).to_be_hidden()
    assert page.evaluate("() => sessionStorage.getItem('chat.token')") == "page-token"
    assert "page-token" not in page.url


def test_a_server_without_a_token_asks_for_none(page: Page, server: Any) -> None:
    from tests.session.web.server import PageServer

    tokenless = PageServer(server.backend, token=None).start()
    try:
        page.goto(tokenless.url + "/")
        expect(page.get_by_test_id("list-note")).to_be_hidden()  # the list was read, without a token
        expect(page.get_by_test_id("token-dialog")).to_be_hidden()
        page.get_by_test_id("new-conversation").click()
        live(page)
        send(page, "please add 1 and 1")
        expect(page.get_by_test_id("answer-text")).to_have_text("The sum is 2.0.")
        assert page.evaluate("() => sessionStorage.getItem('chat.token')") is None
    finally:
        tokenless.stop()


def test_a_first_visit_asks_for_the_token_without_calling_it_wrong(page: Page, server: Any) -> None:
    page.goto(server.url + "/")
    expect(page.get_by_test_id("token-dialog")).to_be_visible()
    expect(page.get_by_test_id("token-error")).to_be_hidden()


def test_a_reload_shows_the_stored_conversation_and_the_list_reopens_others(page: Page, server: Any) -> None:
    start_chat(page, server)
    send(page, "please add 4 and 5")
    expect(page.get_by_test_id("answer-text")).to_have_text("The sum is 9.0.")
    finished(page)
    first = page.evaluate("() => sessionStorage.getItem('chat.session')")
    pages: list[str] = []

    def small_pages(route: Any) -> None:  # the server's pages of history, two turns each
        pages.append(route.request.url)
        route.continue_(url=route.request.url + ("&" if "?" in route.request.url else "?") + "limit=2")

    page.route("**/turns*", small_pages)
    page.reload()
    expect(page.get_by_test_id("token-dialog")).to_be_hidden()  # the token is kept for the tab
    live(page)
    expect(page.get_by_test_id("user-message")).to_have_text(["please add 4 and 5"])
    expect(page.get_by_test_id("answer-text")).to_have_text(["The sum is 9.0."])
    expect(page.get_by_test_id("tool-card").get_by_test_id("tool-result")).to_have_text("9.0", use_inner_text=False)
    listed = page.locator(f'[data-testid="conversation"][data-session-id="{first}"]')
    expect(listed).to_contain_text("please add 4 and 5")
    expect(listed).to_contain_text("4 turns")
    expect(listed).to_have_attribute("aria-current", "true")
    assert [url.rsplit("/", 1)[1] for url in pages] == ["turns", "turns?after=1"]  # followed "next" to the end
    page.unroute("**/turns*")

    page.get_by_test_id("new-conversation").click()  # another conversation, then back to the first
    expect(page.get_by_test_id("user-message")).to_have_count(0)
    live(page)
    send(page, "please add 1 and 2")
    expect(page.get_by_test_id("answer-text")).to_have_text(["The sum is 3.0."])
    finished(page)
    listed.click()
    expect(page.get_by_test_id("answer-text")).to_have_text(["The sum is 9.0."])
    live(page)
    send(page, "please add 10 and 10")  # live again, with nothing shown twice
    expect(page.get_by_test_id("answer-text")).to_have_text(["The sum is 9.0.", "The sum is 20.0."])
    expect(page.get_by_test_id("user-message")).to_have_count(2)


def test_a_dropped_stream_resumes_where_it_stopped_without_repeating_text(page: Page, server: Any) -> None:
    start_chat(page, server)
    resumed: list[str] = []
    page.on("request", lambda request: resumed.append(request.headers.get("last-event-id", "")) if
            "/events?" in request.url else None)
    watch_streaming(page)
    send(page, "tell it slowly")
    expect(page.get_by_test_id("streaming")).to_contain_text("Once upon")
    page.context.set_offline(True)
    expect(page.get_by_test_id("stream-status")).to_have_attribute("data-state", "reconnecting")
    page.wait_for_timeout(300)  # the answer goes on being written meanwhile
    page.context.set_offline(False)
    live(page)
    expect(page.get_by_test_id("answer-text")).to_have_text(SLOW_ANSWER)
    seen = streamed(page)
    assert all(SLOW_ANSWER.startswith(text) for text in seen), seen  # never a piece shown twice
    assert len({len(text) for text in seen if 0 < len(text) < len(SLOW_ANSWER)}) >= 2
    assert resumed and all(r.isdigit() for r in resumed), resumed  # each new request said where it stopped
    assert int(page.get_by_test_id("stream-status").get_attribute("data-reconnects") or 0) >= 1


def test_a_server_that_cannot_list_conversations_still_chats(page: Page, server: Any) -> None:
    # As the server would: the token is checked first (401 without one), then the store is found unable to list.
    page.route("**/sessions?limit=50", lambda route: route.fulfill(
        status=501, content_type="application/json",
        body='{"error": {"type": "not_supported", "message": "this store cannot list"}}')
        if route.request.headers.get("authorization") else route.continue_())
    start_chat(page, server)
    note = page.get_by_test_id("list-note")
    expect(note).to_be_visible()
    expect(note).to_contain_text("cannot list its conversations")
    send(page, "please add 6 and 7")
    expect(page.get_by_test_id("answer-text")).to_have_text("The sum is 13.0.")
    expect(page.get_by_test_id("conversation")).to_have_count(1)  # the open one, all the page knows of
