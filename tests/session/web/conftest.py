"""The chat page's tests: its routes on asyncio and trio, and the page itself in headless Chromium.

Browser tests need ``/usr/bin/chromium`` (Playwright never downloads a browser here): without it they skip,
except under ``CI=true``, where they fail. A failing browser test leaves a screenshot in ``tests/artifacts``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()


def require_chromium() -> None:
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"the browser tests need Chromium at {CHROMIUM} (apt-get install chromium)")
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium); the browser tests need it")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # Per module: the sync API runs an event loop in this thread while it is open, which async tests after
    # these would find running.
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh browser context's page; its screenshot is saved when the test fails."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(8000)
    opened = context.new_page()
    try:
        yield opened
    finally:
        if request.node.stash.get(_FAILED, False):
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            opened.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
        context.close()


@pytest.fixture(scope="module", params=["asyncio", "trio"])
def server(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The page's server over the test agent (``tests.session.web.agent``), on each backend; one per module,
    so that nothing of it outlives the browser tests."""
    require_chromium()
    from tests.session.web.server import PageServer

    served = PageServer(request.param).start()
    try:
        yield served
    finally:
        served.stop()
