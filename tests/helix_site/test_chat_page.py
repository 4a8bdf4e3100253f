"""The demo chat page in headless Chromium: a streamed answer with tools and a sub-agent,
a reload mid-answer, and the answer completed exactly once."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from tests.helix_site.test_demo_page import _playwright_loop, browser  # noqa: F401 (the module's Chromium fixtures)
from tests.live import serve_site

pytestmark = pytest.mark.django_db(transaction=True)  # the server runs on the test database


ENV = {
    "DJANGO_DEBUG": "1",
    "HELIX_STREAM_BACKEND": "memory",
    "HELIX_ALLOW_ANONYMOUS": "1",
    "HELIX_SCRIPTED_DELAY_MS": "12",
}


@pytest.mark.parametrize("server", ["daphne", "uvicorn"])
def test_reload_mid_answer_completes_it_exactly_once(browser: Browser, test_database: str, server: str) -> None:  # noqa: F811
    env = {**ENV, "DATABASE_URL": test_database}
    with serve_site(env, server) as port:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"http://127.0.0.1:{port}/")
        expect(page.get_by_test_id("agent")).to_contain_text("research")
        page.get_by_test_id("agent").select_option("research")
        page.get_by_placeholder("Ask something").fill("How do streams resume?")
        page.get_by_role("button", name="Send").click()
        expect(page.get_by_test_id("activity")).to_contain_text("sub-agent researcher started", timeout=15_000)
        expect(page.locator(".msg.assistant .tool .state.output-available").first).to_be_visible(timeout=15_000)
        page.wait_for_function(
            "document.querySelector('.msg.assistant')?.innerText.includes('Here is what I found')", timeout=20_000
        )
        url = page.url
        page.reload()  # mid-answer: the final paragraphs are still streaming
        assert page.url == url
        expect(page.get_by_test_id("activity")).to_contain_text("resuming the answer in progress")
        # the page reads 'ready' before the resume starts too: wait for the answer's end, then idle
        page.wait_for_function(
            "document.querySelector('.msg.assistant')?.innerText.includes('That is the whole picture')"
            " && document.querySelector('#status').textContent === 'ready'",
            timeout=30_000,
        )
        assistant = page.locator(".msg.assistant")
        expect(assistant).to_have_count(1)
        text = assistant.inner_text()
        assert text.count("Here is what I found.") == 1 and text.count("That is the whole picture.") == 1
        snapshot = page.evaluate(
            "async () => (await fetch(`/api/chat/${new URLSearchParams(location.search).get('session')}/snapshot`)).json()"
        )
        stored = "".join(p.get("text", "") for p in snapshot["messages"][-1]["parts"] if p["type"] == "text")
        shown = "".join(page.locator(".msg.assistant .part.text").all_inner_texts())
        assert shown == stored
        assert errors == []
        page.close()


@pytest.mark.parametrize("httponly", [False, True], ids=["readable-csrf-cookie", "httponly-csrf-cookie"])
def test_approve_in_the_page_and_a_client_tool_in_the_browser(
    browser: Browser,  # noqa: F811
    test_database: str,
    httponly: bool,
) -> None:
    """With an HttpOnly CSRF cookie the page hands the helpers its token in a meta tag."""
    env = {**ENV, "DATABASE_URL": test_database, "DJANGO_CSRF_COOKIE_HTTPONLY": "1" if httponly else "0"}
    with serve_site(env) as port:
        page = browser.new_page(timezone_id="Europe/Lisbon")
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"http://127.0.0.1:{port}/")
        expect(page.get_by_test_id("agent")).to_contain_text("assistant")
        page.get_by_test_id("agent").select_option("assistant")
        page.get_by_placeholder("Ask something").fill("Email the team the notes")
        page.get_by_role("button", name="Send").click()
        expect(page.locator(".tool .state.approval-requested")).to_be_visible(timeout=15_000)
        page.reload()  # the run waits on us: the approval is still there after a reload
        approve = page.get_by_role("button", name="Approve")
        expect(approve).to_be_visible(timeout=15_000)
        approve.click()
        expect(page.locator(".msg.assistant")).to_contain_text("Sent to team@example.com.", timeout=15_000)
        expect(page.locator(".msg.assistant")).to_have_count(1)

        page.get_by_placeholder("Ask something").fill("Where am I?")
        page.get_by_role("button", name="Send").click()
        expect(page.locator(".msg.assistant").last).to_contain_text("You are in Lisbon.", timeout=15_000)
        assert errors == []
        page.close()


def test_a_run_started_in_one_tab_streams_in_the_other_and_an_approval_leaves_both(
    browser: Browser,  # noqa: F811
    test_database: str,
) -> None:
    """The framework-free page follows the session's feed with the helpers, as the hook does."""
    env = {**ENV, "DATABASE_URL": test_database}
    with serve_site(env) as port:
        context = browser.new_context()
        first, second = context.new_page(), context.new_page()
        errors: list[str] = []
        for page in (first, second):
            page.on("pageerror", lambda error: errors.append(str(error)))
        first.goto(f"http://127.0.0.1:{port}/")
        expect(first.get_by_test_id("agent")).to_contain_text("assistant")
        first.get_by_test_id("agent").select_option("chat")
        first.get_by_placeholder("Ask something").fill("Hello")
        first.get_by_role("button", name="Send").click()
        expect(first.locator(".msg.assistant")).to_have_count(1, timeout=15_000)
        expect(first.get_by_test_id("status")).to_have_text("ready", timeout=15_000)
        second.goto(first.url)
        expect(second.locator(".msg.assistant")).to_have_count(1, timeout=15_000)

        first.get_by_test_id("agent").select_option("assistant")
        first.get_by_placeholder("Ask something").fill("Email the team the notes")
        first.get_by_role("button", name="Send").click()
        for page in (first, second):  # the second tab hears of the run and shows its approval
            expect(page.locator(".tool .state.approval-requested")).to_have_count(1, timeout=15_000)
        expect(second.get_by_test_id("activity")).to_contain_text("caught up with another tab")
        expect(second.get_by_test_id("status")).to_have_text("ready", timeout=15_000)
        second.get_by_role("button", name="Approve").click()
        for page in (first, second):  # answered in the second tab: gone from both
            expect(page.locator(".approval")).to_have_count(0, timeout=5_000)
            expect(page.locator(".msg.assistant").last).to_contain_text("Sent to team@example.com.", timeout=15_000)
            expect(page.get_by_test_id("status")).to_have_text("ready", timeout=15_000)
        snapshot = first.evaluate(
            "async () => (await fetch(`/api/chat/${new URLSearchParams(location.search).get('session')}/snapshot`)).json()"
        )
        stored = [
            "".join(p.get("text", "") for p in m["parts"] if p["type"] == "text")
            for m in snapshot["messages"]
            if m["role"] == "assistant"
        ]
        for page in (first, second):
            assert (
                page.locator(".msg.assistant").all_inner_texts()
                and [
                    "".join(page.locator(f".msg.assistant >> nth={i} >> .part.text").all_inner_texts())
                    for i in range(len(stored))
                ]
                == stored
            )
        assert errors == []
        context.close()
