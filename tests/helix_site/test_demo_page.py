"""The demo page in headless Chromium: start a stream, drop the connection, resume it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect, sync_playwright

from helix_site.stream_demo import DEMO_TEXT
from tests.live import serve_site

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module", autouse=True)
def _playwright_loop() -> Iterator[None]:
    # Playwright's sync API keeps an event loop running in this thread; Django's teardown flush of
    # the test database is plain sync code, which Django would otherwise refuse here.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    if previous is None:
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    assert executable, "Chromium is required (bin/test installs it)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.mark.django_db(transaction=True)
def test_demo_page_resumes_a_dropped_stream_without_gaps_or_repeats(browser: Browser, test_database: str) -> None:
    # bin/run's embedded default lets visitors without an account try it; the stream is theirs.
    env = {"HELIX_STREAM_BACKEND": "memory", "HELIX_ALLOW_ANONYMOUS": "1", "DATABASE_URL": test_database}
    with serve_site(env) as port:
        page = browser.new_page()
        page.goto(f"http://127.0.0.1:{port}/demo/")
        expect(page.get_by_role("heading", name="Helix stream demo")).to_be_visible()
        page.get_by_role("button", name="Start a stream").click()
        page.wait_for_function("Number(document.getElementById('seq').textContent) >= 6")
        page.get_by_role("button", name="Drop connection").click()
        expect(page.locator("#state")).to_have_text("dropped")
        dropped_at = int(page.locator("#seq").inner_text())
        page.wait_for_timeout(600)  # the producer keeps writing while no one listens
        assert int(page.locator("#seq").inner_text()) == dropped_at
        page.get_by_role("button", name="Resume").click()
        expect(page.locator("#state")).to_have_text("ended", timeout=15_000)
        assert page.get_by_test_id("text").inner_text() == DEMO_TEXT
        words = len(DEMO_TEXT.split(" "))
        assert int(page.locator("#seq").inner_text()) == words + 1  # every word, then demo_done
        page.close()
