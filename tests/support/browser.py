"""A real browser for the console's tests: Debian's chromium, driven by Playwright.

Playwright starts the system browser by its path (``.ci/run`` installs it with apt), so
nothing is downloaded at run time. A test module takes the fixtures by importing them:

    from tests.support.browser import browser, page  # noqa: F401

``browser`` is one chromium per test module; ``page`` is a fresh context (no cookies,
no storage) per test. ``screenshot`` keeps a page's picture as a test artefact: under
``$TIDINGS_SCREENSHOTS`` when set, else in the system's temporary directory, so a test
run leaves the source tree as it was. The README's pictures are refreshed with
``TIDINGS_SCREENSHOTS=docs/console python -m pytest -n 0 tests/e2e/http/test_console_browser.py``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, ViewportSize, sync_playwright

CHROMIUM = os.environ.get("TIDINGS_TEST_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = Path(
    os.environ.get("TIDINGS_SCREENSHOTS")
    or Path(tempfile.gettempdir()) / "tidings-console-screenshots"
)
VIEWPORT: ViewportSize = {"width": 1280, "height": 800}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # One per test module, not per process: Playwright's sync API keeps an event loop
    # running in this thread while it is open, and a later module's ``asyncio.run`` in the
    # same process would fail.
    if not os.access(CHROMIUM, os.X_OK):
        # A missing browser is a broken machine, not a reason to skip: .ci/run installs it.
        raise RuntimeError(f"no chromium at {CHROMIUM}: apt-get install -y chromium")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM,
            # Root in a container has no user namespaces for chromium's sandbox.
            chromium_sandbox=False,
            args=["--disable-dev-shm-usage", "--disable-gpu"],
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(10_000)
    try:
        yield context.new_page()
    finally:
        context.close()


def screenshot(page: Page, name: str) -> Path:
    """Keep the page's picture as ``<SCREENSHOTS>/<name>.png`` (a test artefact)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
