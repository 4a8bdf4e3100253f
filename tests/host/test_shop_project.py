"""The second host project: a shop made the way most Django shops start a site, installing the
built wheel and following Helix's README.

The shop (``tests/host/shop``) has a custom user model that signs in by e-mail through allauth,
split settings (``config.settings.production`` here), ``ATOMIC_REQUESTS``, an HttpOnly CSRF
cookie, WhiteNoise for static files, drf-spectacular, its own Celery app with its own default
queue, and serves with gunicorn and uvicorn workers. Under ``bin/test-versions newest`` it runs
on Django 6 and Python 3.13; under ``bin/test`` on the pinned set.

A member signs in on allauth's page in headless Chromium and chats on the shop's support page,
whose script is the real AI SDK chat with Helix's helpers; a reload mid-answer resumes it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.helix_site.test_demo_page import _playwright_loop, browser  # noqa: F401 (Chromium fixtures)
from tests.host.project import HOST, ROOT, Processes, Venv, host_env, listening, run, wait_until
from tooling.servers import GUNICORN_WORKERS, free_port

SHOP = HOST / "shop"
#: The AI SDK bundle bin/test builds (bin/_frontend.sh): the shop serves it as its own front end.
AI_BUNDLE = ROOT / "helix_site" / "static" / "helix_site" / "vendor" / "ai.js"
PASSWORD = "a long shop password 42"
MEMBERS = ("ana@shop.example", "ben@shop.example")
OPENING = "Thank you for asking."
CLOSING = "Is there anything else I can help with?"


@dataclass
class Shop:
    venv: Venv
    env: dict[str, str]
    workdir: Path
    port: int
    worker_log: Path

    def manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return run(
            [self.venv.bin("python"), str(SHOP / "manage.py"), *args], timeout=timeout, cwd=self.workdir, env=self.env
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def shop(venv: Venv, database: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    """The shop migrated, its static files collected, two members, then its Celery worker (its
    default queue and Helix's) and gunicorn with uvicorn workers; all stopped afterwards."""
    if not AI_BUNDLE.is_file():
        pytest.fail(f"{AI_BUNDLE.relative_to(ROOT)} is missing (run the tests with bin/test, which builds it)")
    workdir = tmp_path_factory.mktemp("shop")
    front_end = workdir / "front-end"
    (front_end / "vendor").mkdir(parents=True)
    shutil.copy(AI_BUNDLE, front_end / "vendor" / "ai.js")
    queue = f"shop-helix-{uuid.uuid4().hex[:8]}"
    env = host_env(
        venv,
        SHOP,
        DJANGO_SETTINGS_MODULE="config.settings.production",
        DJANGO_SECRET_KEY=uuid.uuid4().hex * 2,
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        DATABASE_URL=database,
        REDIS_URL=redis_url,
        HELIX_QUEUE=queue,
        SHOP_EXTRA_STATIC=str(front_end),
        SHOP_STATIC_ROOT=str(workdir / "staticfiles"),
    )
    shop = Shop(venv, env, workdir, free_port(), workdir / "worker.log")
    shop.manage("migrate", "--no-input")
    shop.manage("collectstatic", "--no-input")
    for member in MEMBERS:
        shop.manage("add_member", member, PASSWORD)

    processes = Processes(workdir, env)
    start = processes.start
    try:
        worker, log = start(
            "worker",
            [venv.bin("celery"), "-A", "config.celery_app", "worker", "-Q", f"default,{queue}", "-n", f"{queue}@%h",
             "--pool", "threads", "--concurrency", "20", "--loglevel=INFO"],
        )  # fmt: skip
        wait_until(lambda: "ready." in log.read_text(), worker, "the Celery worker", log, 60)
        server, log = start(
            "gunicorn",
            [venv.bin("gunicorn"), "config.asgi:application", "--worker-class", "uvicorn_worker.UvicornWorker",
             "--workers", str(GUNICORN_WORKERS), "--bind", f"127.0.0.1:{shop.port}"],
        )  # fmt: skip
        wait_until(listening(shop.port), server, "gunicorn", log, 30)
        yield shop
    finally:
        processes.stop_all()


def sign_in(browser: Browser, shop: Shop, email: str) -> Page:  # noqa: F811
    """A page signed in as ``email`` on allauth's page, landed on the support page."""
    page = browser.new_page()
    page.goto(f"{shop.url}/accounts/login/")
    page.locator("input[name=login]").fill(email)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("form button[type=submit]").click()
    page.wait_for_url(f"{shop.url}/support/**")
    expect(page.get_by_test_id("user")).to_have_text(email)
    expect(page.get_by_test_id("status")).to_have_text("ready")
    return page


def assistant_text(page: Page) -> str:
    return "".join(page.locator(".msg.assistant").all_inner_texts())


# -- the tests -----------------------------------------------------------------------------------


def test_the_shop_checks_migrates_and_builds_its_schema_without_warnings(shop: Shop) -> None:
    check = shop.manage("check")
    assert "System check identified no issues (0 silenced)." in check.stdout, check.stdout + check.stderr
    assert "No changes detected" in shop.manage("makemigrations", "--check", "--dry-run").stdout
    schema = shop.workdir / "openapi.yaml"
    shop.manage("spectacular", "--fail-on-warn", "--file", str(schema))
    text = schema.read_text()
    assert "/api/users/me/" in text and "/api/helix/" not in text


def test_a_member_signs_in_and_chats_and_a_reload_resumes_the_answer(
    browser: Browser,  # noqa: F811
    shop: Shop,
) -> None:
    page = sign_in(browser, shop, MEMBERS[0])
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    [csrf] = [cookie for cookie in page.context.cookies() if cookie["name"] == "csrftoken"]
    assert csrf["httpOnly"], csrf  # the helpers take the token from the page's meta tag
    page.get_by_placeholder("Ask the concierge").fill("What are your opening hours?")
    page.locator("#composer button[type=submit]").click()
    page.wait_for_function("document.querySelector('.msg.assistant')?.innerText.includes('Gift cards')", timeout=20_000)
    assert CLOSING not in assistant_text(page)
    page.reload()  # mid-answer: the rest of it is still streaming
    page.wait_for_function(
        f"document.querySelector('.msg.assistant')?.innerText.includes({json.dumps(CLOSING)})"
        " && document.querySelector('#status').textContent === 'ready'",
        timeout=30_000,
    )
    shown = assistant_text(page)
    assert shown.count(OPENING) == 1 and shown.count(CLOSING) == 1, shown
    session_id = page.evaluate("new URLSearchParams(location.search).get('session')")
    snapshot = page.evaluate(f"async () => (await fetch('/api/helix/chat/{session_id}/snapshot')).json()")
    assert snapshot["status"] == "ended"
    assert shown == "".join(p.get("text", "") for p in snapshot["messages"][-1]["parts"] if p["type"] == "text")
    assert errors == []
    page.close()


def test_another_member_finds_no_session_and_a_post_without_the_token_says_what_to_do(
    browser: Browser,  # noqa: F811
    shop: Shop,
) -> None:
    ana = sign_in(browser, shop, MEMBERS[0])
    session_id = ana.evaluate("new URLSearchParams(location.search).get('session')")
    ana.get_by_placeholder("Ask the concierge").fill("Do gift cards expire?")
    ana.locator("#composer button[type=submit]").click()
    ana.wait_for_function(f"document.querySelector('.msg.assistant')?.innerText.includes({json.dumps(CLOSING)})")
    ben = sign_in(browser, shop, MEMBERS[1])
    found = ben.evaluate(f"async () => (await fetch('/api/helix/chat/{session_id}/snapshot')).status")
    assert found == 404
    refused = ben.evaluate(
        """async () => {
            const response = await fetch('/api/helix/chat', {method: 'POST', headers: {'Content-Type': 'application/json'},
                                                               body: JSON.stringify({message: 'hi'})});
            return [response.status, await response.json()];
        }"""
    )
    assert refused[0] == 403 and refused[1]["code"] == "CSRF_FAILED", refused
    assert "helix_csrf_meta" in refused[1]["error"]
    ana.close()
    ben.close()


def test_the_shops_own_task_runs_on_its_default_queue_beside_helixs(shop: Shop) -> None:
    sent = shop.manage("shell", "-c", "from shop.users.tasks import count_users; print(count_users.delay().id)")
    task_id = sent.stdout.strip().splitlines()[-1]
    deadline = time.monotonic() + 30
    while f"count_users[{task_id}] succeeded" not in shop.worker_log.read_text():
        assert time.monotonic() < deadline, shop.worker_log.read_text()[-4000:]
        time.sleep(0.2)
