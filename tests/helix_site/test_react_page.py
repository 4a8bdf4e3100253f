"""The React demo page in headless Chromium: ``useResumableChat`` of the packed npm package, built
with Vite on ai 6 with @ai-sdk/react 3 and on ai 7 with @ai-sdk/react 4, rendered under
StrictMode with two components reading the one chat. In each test every page's final messages
equal the session's snapshot, with no part twice."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Request, Response, expect

from tests.helix_site.test_chat_page import ENV  # the demo site, anonymous, in one process
from tests.helix_site.test_demo_page import _playwright_loop, browser  # noqa: F401 (the module's Chromium fixtures)
from tests.live import serve_site
from tooling.servers import free_port

pytestmark = pytest.mark.django_db(transaction=True)  # the server runs on the test database
LINES = pytest.mark.parametrize("line", ["6", "7"], ids=["ai6", "ai7"])


class ReactPage:
    """One tab of the React page, noting its errors and the resumes (GETs of the chat URL) it makes."""

    def __init__(self, browser: Browser | BrowserContext, port: int, line: str, **context: Any) -> None:  # noqa: F811
        """A tab in a browser of its own, or in ``browser`` when it is a context (the tabs of a
        context share their cookies: one visitor)."""
        self.port, self.line = port, line
        self.page: Page = browser.new_page(**context)
        self.errors: list[str] = []
        self.resumes: list[str] = []
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("request", self._note)
        self.page.on("response", self._check)

    def _note(self, request: Request) -> None:
        path = request.url.split(f":{self.port}", 1)[1]
        if request.method == "GET" and path.startswith("/api/chat/") and path.count("/") == 3:
            self.resumes.append(path)

    def _check(self, response: Response) -> None:
        path = response.url.split(f":{self.port}", 1)[1]
        new_session = response.status == 404 and path.endswith("/snapshot")  # a chat not started yet
        if response.status >= 400 and not new_session and path != "/favicon.ico":
            self.errors.append(f"{response.status} {response.request.method} {path}")

    def open(self, session: str | None = None) -> None:
        query = f"ai={self.line}" + (f"&session={session}" if session else "")
        self.page.goto(f"http://127.0.0.1:{self.port}/react/?{query}")
        expect(self.page.get_by_test_id("status")).to_have_text("ready", timeout=15_000)

    @property
    def session(self) -> str:
        return str(self.page.evaluate("new URLSearchParams(location.search).get('session')"))

    def send(self, agent: str, text: str) -> None:
        expect(self.page.get_by_test_id("agent")).to_contain_text(agent)
        self.page.get_by_test_id("agent").select_option(agent)
        self.page.get_by_placeholder("Ask something").fill(text)
        self.page.get_by_role("button", name="Send").click()

    def answering(self, agent: str, text: str, shown: str) -> None:
        """Send ``text`` to ``agent`` and wait until the answer on the page holds ``shown``."""
        self.send(agent, text)
        self.page.wait_for_function(
            f"document.querySelector('.msg.assistant')?.innerText.includes({json.dumps(shown)})", timeout=20_000
        )

    def wait_answered(self, index: int = 0) -> None:
        """Until the ``index``-th assistant message holds the research answer's last sentence and
        the page is idle."""
        self.page.wait_for_function(
            f"document.querySelectorAll('.msg.assistant')[{index}]?.innerText.includes('That is the whole picture')"
            " && document.querySelector('#status').textContent === 'ready'",
            timeout=30_000,
        )

    def wait_ready(self, timeout: float = 30_000) -> None:
        self.page.wait_for_function("document.querySelector('#status').textContent === 'ready'", timeout=timeout)

    def shown(self) -> list[dict[str, Any]]:
        """The messages on the page: role, and each part's kind, text and tool state."""
        return list(
            self.page.evaluate(
                """() => [...document.querySelectorAll('.msg')].map((m) => ({
                    role: m.classList.contains('user') ? 'user' : 'assistant',
                    parts: [...m.querySelectorAll('.part')].map((p) => p.classList.contains('tool')
                      ? {tool: p.dataset.call, state: p.querySelector('.state').textContent}
                      : {text: p.textContent}),
                }))"""
            )
        )

    def snapshot(self) -> dict[str, Any]:
        return dict(self.page.evaluate(f"async () => (await fetch('/api/chat/{self.session}/snapshot')).json()"))

    def assert_equals_snapshot(self) -> None:
        """The page shows exactly the stored messages: each text once, each tool call once in its
        stored state, nothing left streaming."""
        stored = []
        for message in self.snapshot()["messages"]:
            parts = []
            for part in message["parts"]:
                if part["type"] in ("text", "reasoning"):
                    parts.append({"text": part["text"]})
                elif part["type"] == "dynamic-tool" or part["type"].startswith("tool-"):
                    parts.append({"tool": part["toolCallId"], "state": part["state"]})
            stored.append({"role": message["role"], "parts": parts})
        assert self.shown() == stored, json.dumps({"shown": self.shown(), "stored": stored}, indent=1)[:4000]

    def close(self) -> None:
        assert self.errors == [], self.errors
        self.page.close()


@contextmanager
def site(test_database: str, **env: str) -> Iterator[int]:
    with serve_site({**ENV, "DATABASE_URL": test_database, **env}) as port:
        yield port


@LINES
def test_reload_mid_answer_resumes_once_and_completes_it_once(browser: Browser, test_database: str, line: str) -> None:  # noqa: F811
    with site(test_database) as port:
        tab = ReactPage(browser, port, line)
        tab.open()
        tab.answering("research", "How do streams resume?", "Here is what I found")
        tab.resumes.clear()
        tab.page.reload()  # mid-answer: StrictMode runs the effects twice, two components read the chat
        expect(tab.page.get_by_test_id("activity")).to_contain_text("resuming the answer in progress")
        tab.wait_answered()
        assert len(tab.resumes) == 1, tab.resumes
        expect(tab.page.locator(".msg.assistant")).to_have_count(1)
        tab.assert_equals_snapshot()
        tab.close()


@LINES
@pytest.mark.parametrize("replay", ["1", "0"], ids=["replay", "no-replay"])
def test_refresh_while_paused_then_approve_then_a_client_tool(
    browser: Browser,  # noqa: F811
    test_database: str,
    line: str,
    replay: str,
) -> None:
    with site(test_database, HELIX_CONTENT_REPLAY=replay) as port:
        tab = ReactPage(browser, port, line, timezone_id="Europe/Lisbon")
        tab.open()
        tab.send("assistant", "Email the team the notes")
        expect(tab.page.locator(".tool .state.approval-requested")).to_be_visible(timeout=15_000)
        tab.page.reload()  # the run waits on us: the approval is still there, once
        expect(tab.page.locator(".tool .state.approval-requested")).to_have_count(1, timeout=15_000)
        tab.wait_ready()
        expect(tab.page.locator(".msg.assistant")).to_have_count(1)
        tab.page.get_by_role("button", name="Approve").click()
        expect(tab.page.locator(".msg.assistant")).to_contain_text("Sent to team@example.com.", timeout=15_000)
        tab.wait_ready()
        expect(tab.page.locator(".msg.assistant")).to_have_count(1)
        tab.assert_equals_snapshot()

        tab.send("assistant", "Where am I?")
        expect(tab.page.locator(".msg.assistant").last).to_contain_text("You are in Lisbon.", timeout=15_000)
        tab.wait_ready()
        tab.assert_equals_snapshot()
        tab.close()


@LINES
def test_stop_ends_the_run_on_the_server_and_leaves_nothing_streaming(
    browser: Browser,  # noqa: F811
    test_database: str,
    line: str,
) -> None:
    with site(test_database) as port:
        tab = ReactPage(browser, port, line)
        tab.open()
        tab.answering("research", "How do streams resume?", "Here is what I found")
        tab.page.get_by_role("button", name="Stop").click()
        tab.wait_ready()
        snapshot = tab.snapshot()
        assert snapshot["status"] != "active", snapshot["status"]
        stored = "".join(p.get("text", "") for p in snapshot["messages"][-1]["parts"])
        assert "That is the whole picture" not in stored  # the run stopped, not only this tab's stream
        states = tab.page.locator(".tool .state").all_inner_texts()
        assert not any(state.startswith("input-") for state in states), states
        tab.assert_equals_snapshot()
        tab.close()


def two_tabs(browser: Browser, port: int, line: str) -> tuple[ReactPage, ReactPage]:  # noqa: F811
    """Two tabs of one visitor on one session: the first starts it with a short chat, the second
    opens the first's address."""
    context = browser.new_context()
    first = ReactPage(context, port, line)
    first.open()
    first.answering("chat", "Hello", "Hello")
    first.wait_ready()
    second = ReactPage(context, port, line)
    second.open(first.session)
    expect(second.page.locator(".msg.assistant")).to_have_count(1)
    return first, second


@LINES
def test_a_run_started_in_one_tab_streams_in_the_other(browser: Browser, test_database: str, line: str) -> None:  # noqa: F811
    with site(test_database) as port:
        first, second = two_tabs(browser, port, line)
        first.send("research", "How do streams resume?")
        # The second tab hears of the run from the session's feed and streams it as it goes.
        second.page.wait_for_function(
            "document.querySelectorAll('.msg.assistant')[1]?.innerText.includes('Here is what I found')"
            " && !document.querySelectorAll('.msg.assistant')[1]?.innerText.includes('That is the whole picture')",
            timeout=20_000,
        )
        for tab in (first, second):
            tab.wait_answered(1)
            tab.assert_equals_snapshot()
            tab.close()


@LINES
def test_an_approval_answered_in_one_tab_leaves_the_other(browser: Browser, test_database: str, line: str) -> None:  # noqa: F811
    with site(test_database) as port:
        first, second = two_tabs(browser, port, line)
        first.send("assistant", "Email the team the notes")
        for tab in (first, second):
            expect(tab.page.locator(".tool .state.approval-requested")).to_have_count(1, timeout=15_000)
        first.page.get_by_role("button", name="Approve").click()
        for tab in (first, second):
            expect(tab.page.locator(".approval")).to_have_count(0, timeout=5_000)
            expect(tab.page.locator(".msg.assistant").last).to_contain_text("Sent to team@example.com.", timeout=15_000)
            tab.wait_ready()
            tab.assert_equals_snapshot()
            tab.close()


@LINES
def test_a_message_refused_while_a_run_waits_says_why_and_leaves_no_trace(
    browser: Browser,  # noqa: F811
    test_database: str,
    line: str,
) -> None:
    """The run waits on an approval: a message sent meanwhile (here, from the second tab) is
    refused; the page says why in words and shows the server's messages, without it."""
    with site(test_database) as port:
        first, second = two_tabs(browser, port, line)
        first.send("assistant", "Email the team the notes")
        expect(second.page.locator(".tool .state.approval-requested")).to_have_count(1, timeout=15_000)
        second.wait_ready()
        second.send("assistant", "Are you there?")
        expect(second.page.get_by_test_id("status")).to_contain_text("already has a run in flight", timeout=10_000)
        assert "{" not in second.page.get_by_test_id("status").inner_text()
        second.page.wait_for_function("!document.querySelector('#messages').innerText.includes('Are you there?')")
        second.assert_equals_snapshot()
        second.errors.clear()  # the refused POST's 409 is the point of the test
        for tab in (first, second):
            tab.close()


@LINES
def test_the_readme_example_as_written_chats_runs_a_client_tool_and_an_approval_across_a_reload(
    browser: Browser,  # noqa: F811
    test_database: str,
    line: str,
) -> None:
    """The README's ```jsx block, built with Vite as a reader's app would build it."""
    with site(test_database) as port:
        tab = ReactPage(browser, port, line)
        tab.page.goto(f"http://127.0.0.1:{port}/react/readme/?ai={line}")
        box, form = tab.page.locator("form input"), tab.page.locator("form")
        box.fill("Where am I?")
        box.press("Enter")
        expect(form).to_contain_text("You are in Lisbon.", timeout=15_000)  # its client tool ran
        box.fill("Email the team the notes")
        box.press("Enter")
        expect(tab.page.get_by_role("button", name="Approve")).to_be_visible(timeout=15_000)
        tab.page.reload()  # the run waits on the approval
        approve = tab.page.get_by_role("button", name="Approve")
        expect(approve).to_have_count(1, timeout=15_000)
        approve.click()
        expect(form).to_contain_text("Sent to team@example.com.", timeout=15_000)
        expect(approve).to_have_count(0)
        shown = form.inner_text()
        for message in tab.snapshot()["messages"]:
            for part in message["parts"]:
                if part["type"] == "text":
                    assert shown.count(part["text"]) == 1, (part["text"], shown)
        tab.close()


class CuttableLine:
    """A TCP relay from a port of its own to the server's, on a thread of its own: ``cut()``
    drops every connection through it at once, as a network does, and new ones go through."""

    def __init__(self, target: int) -> None:
        self.target, self.port = target, free_port()
        self.writers: set[asyncio.StreamWriter] = set()
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self.thread.start()
        started.wait(5)

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._relay, "127.0.0.1", self.port))
        started.set()
        self.loop.run_forever()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target)
        self.writers |= {writer, upstream_writer}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                sink.close()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))
        self.writers -= {writer, upstream_writer}

    def cut(self) -> None:
        def close_all() -> None:
            for writer in list(self.writers):
                writer.transport.abort()

        self.loop.call_soon_threadsafe(close_all)

    def close(self) -> None:
        async def shutdown() -> None:
            self.server.close()
            for writer in list(self.writers):
                writer.transport.abort()
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@LINES
def test_a_dropped_connection_mid_answer_resumes_by_itself(browser: Browser, test_database: str, line: str) -> None:  # noqa: F811
    with site(test_database) as port:
        network = CuttableLine(port)
        try:
            tab = ReactPage(browser, network.port, line)
            tab.open()
            tab.answering("research", "How do streams resume?", "Here is what I found")
            network.cut()  # the stream (and the feed) drop; the run goes on
            tab.wait_answered()
            expect(tab.page.locator(".msg.assistant")).to_have_count(1)
            tab.assert_equals_snapshot()
            tab.close()
        finally:
            network.close()
