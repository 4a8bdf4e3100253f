"""The demo chat page in headless Chromium: a streamed answer with tools and a sub-agent,
a reload mid-answer, and the answer completed exactly once."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from tests.live import daphne
from tests.test_demo_page import browser  # noqa: F401 (the module's Chromium fixture)

ENV = {
    "DJANGO_DEBUG": "1",
    "HELIX_STREAM_BACKEND": "memory",
    "HELIX_ALLOW_ANONYMOUS": "1",
    "HELIX_SCRIPTED_DELAY_MS": "12",
}


def test_reload_mid_answer_completes_it_exactly_once(browser: Browser, test_database: str) -> None:  # noqa: F811
    env = {**ENV, "DATABASE_URL": f"sqlite:///{test_database}"}
    with daphne(env) as port:
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
        page.wait_for_function("document.querySelector('#status').textContent === 'ready'", timeout=30_000)
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
