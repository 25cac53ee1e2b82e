"""The chat page's documented command (README and web.md), run as written but for a free port, and the page it
serves driven in headless Chromium as the page says to: give the token, start a conversation, ask the pens
question, and watch the answer and the five samples' votes in the run tree. The screenshot the README shows is
taken here (``tests/artifacts/chat-page.png``; the committed copy is ``examples/guide/pages/assets``)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.examples.shell import child_env, command, free_port, substituted

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
PENS = "A shop sells pens at 3 for $2. How much do 12 pens cost?"

pytestmark = pytest.mark.browser


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """The documented line serving on a free port (in the test's folder, whose SQLite file it creates); stopped
    with Ctrl-C, which it must answer by exiting 0."""
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser tests need Chromium at {CHROMIUM} (apt-get install chromium)")
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium); the browser tests need it")
    port = free_port()
    line = substituted(command("serve examples.self_consistency:make_agent --port 8000"), "--port 8000",
                       f"--port {port}")
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(["bash", "-c", line], cwd=tmp_path, env=child_env(tmp_path), stdout=out,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert server.poll() is None, f"the server exited:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"the server did not start:\n{log.read_text()}"
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGINT)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
    assert server.returncode == 0, log.read_text()


def test_the_documented_page_shows_a_vote_as_it_happens(served: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        context.set_default_timeout(15000)
        page = context.new_page()
        try:
            page.goto(served + "/")
            page.get_by_test_id("token-input").fill("change-me")
            page.get_by_test_id("token-submit").click()
            expect(page.get_by_test_id("token-dialog")).to_be_hidden()
            page.get_by_test_id("new-conversation").click()
            expect(page.get_by_test_id("stream-status")).to_have_attribute("data-state", "live")
            page.get_by_test_id("composer").fill(PENS)
            page.get_by_test_id("composer").press("Enter")
            expect(page.get_by_test_id("answer-text").last).to_have_text("12 pens cost $8.")
            expect(page.locator("body")).to_have_attribute("data-running", "false")
            votes = []
            for number in range(1, 6):
                sample = page.locator(f'[data-testid="tree-node"][data-path="SelfConsistency/sample {number}"]')
                expect(sample).to_have_count(1)
                votes.append(sample.get_by_test_id("node-answer").first.inner_text().removeprefix("vote: "))
            # Samples 2 and 4 misread the question (see the example): the vote is 3 to 1 to 1.
            assert votes == ["12 pens cost $8.", "12 pens cost $24.", "12 pens cost $8.", "12 pens cost $18.",
                             "12 pens cost $8."]
            expect(page.get_by_test_id("conversation").first).to_contain_text(PENS[:20])  # listed, titled
            card = page.get_by_test_id("tool-card").first
            card.locator("summary").click()  # opened: the arguments and the result
            expect(card.get_by_test_id("tool-args")).to_contain_text('"a": 12')
            expect(card.get_by_test_id("tool-result")).to_have_text("4.0")
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "chat-page.png"))
        except BaseException:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "test_the_documented_page_fails.png"), full_page=True)
            raise
        finally:
            context.close()
            browser.close()
