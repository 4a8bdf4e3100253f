"""The host-project test: a Django shop installs the built wheel of Helix into its own site.

The wheel is built from this checkout and installed into a fresh virtualenv with the pins of
``requirements.txt``. The shop's project (``tests/host/site``: its own settings, URLs, ASGI and
Celery apps, an ``X-Api-Key`` DRF authentication class after Helix's DRF token class, its own
agent, and an app of its own labelled ``chat``) then runs from that virtualenv only, on a fresh
PostgreSQL database and the test Redis: ``manage.py check``, ``migrate`` and ``makemigrations
--check``, then Daphne, a Celery worker consuming Helix's queue and Celery beat. The real AI SDK
client chats through ``/assistant/`` with the shop's header, with the Helix helpers the wheel
installed; a resume with a user's DRF token takes the stream route's owner path.

Every process runs outside the checkout (``PYTHONPATH`` is the host site alone), so nothing
can come from the repository by accident. A missing service (Redis, PostgreSQL, Node) fails
the module; it is never skipped.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.chat.ai_sdk.scenario import last_reply, strict_view
from tests.host.project import HOST, ROOT, Processes, Venv, host_env, installed, listening, run, wait_until
from tests.live import http_request
from tooling.servers import free_port

SITE = HOST / "site"
CLIENT = HOST / "client.mjs"
#: How long installing the wheel and its pinned dependencies may take (warm pip cache).
INSTALL_BUDGET_SECONDS = 120
#: A wheel much larger than this carries something that is not the library.
WHEEL_SIZE_LIMIT = 1_000_000
ORDER_QUESTION = "Where is my order 4711?"
ORDER_ANSWER = "Order 4711 has shipped."


@dataclass
class Host:
    """The running host project."""

    venv: Venv
    env: dict[str, str]
    workdir: Path
    database: str
    port: int
    keys: dict[str, str]  # username -> API key
    tokens: dict[str, str]  # username -> DRF token
    worker_log: Path

    def manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return run(
            [self.venv.bin("python"), str(SITE / "manage.py"), *args], timeout=timeout, cwd=self.workdir, env=self.env
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        key: str | None = None,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        source: str = "127.0.0.1",
    ) -> tuple[int, dict[str, str], bytes]:
        """One HTTP request to the host's Daphne from the address ``source``; ``key`` goes in the
        shop's ``X-Api-Key`` header."""
        headers = {**(headers or {}), **({"X-Api-Key": key} if key else {})}
        return http_request(self.port, method, path, body=body, headers=headers, source=source, timeout=15)

    def get_json(self, path: str, key: str) -> Any:
        status, _, body = self.request("GET", path, key=key)
        assert status == 200, (path, status, body)
        return json.loads(body)


@pytest.fixture(scope="module")
def host(venv: Venv, database: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    """The host project migrated, two users with API keys, and Daphne, a Celery worker on
    Helix's queue and Celery beat running from the virtualenv; all stopped afterwards."""
    workdir = tmp_path_factory.mktemp("hostsite")  # every process runs here: outside the checkout
    queue = f"hostsite-{uuid.uuid4().hex[:8]}"
    env = host_env(venv, SITE, DATABASE_URL=database, REDIS_URL=redis_url, HELIX_QUEUE=queue)
    host = Host(venv, env, workdir, database, free_port(), {}, {}, workdir / "worker.log")
    host.manage("migrate", "--no-input")
    for user in ("alice", "bob"):
        host.keys[user] = host.manage("issue_api_key", user).stdout.strip()
        created = re.fullmatch(
            r"Generated token (\w+) for user \w+", host.manage("drf_create_token", user).stdout.strip()
        )
        assert created, f"drf_create_token printed no token for {user}"
        host.tokens[user] = created[1]

    processes = Processes(workdir, env)
    start = processes.start
    try:
        worker, log = start(
            "worker",
            [venv.bin("celery"), "-A", "hostsite", "worker", "-Q", queue, "-n", f"{queue}@%h",
             "--loglevel=INFO", "--without-gossip", "--without-mingle"],
        )  # fmt: skip
        wait_until(lambda: "ready." in log.read_text(), worker, "the Celery worker", log, 60)
        beat, log = start(
            "beat",
            [venv.bin("celery"), "-A", "hostsite", "beat", "--loglevel=INFO", "-s", str(workdir / "beat-schedule")],
        )
        wait_until(lambda: "beat: Starting" in log.read_text(), beat, "Celery beat", log, 60)
        daphne, log = start(
            "daphne", [venv.bin("daphne"), "-b", "127.0.0.1", "-p", str(host.port), "hostsite.asgi:application"]
        )
        wait_until(listening(host.port), daphne, "Daphne", log, 30)
        yield host
    finally:
        processes.stop_all()


def chat(host: Host, user: str, actions: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """A session driven by the real AI SDK client (``client.mjs``) with ``user``'s API key."""
    session_id = str(uuid.uuid4())
    request = {
        "client": "v6",
        "helix": str(installed(host.venv, "chat/static/helix/helix-chat.js")),
        "api": f"http://127.0.0.1:{host.port}/assistant/chat",
        "sessionId": session_id,
        "headers": {"X-Api-Key": host.keys[user]},
        "agent": "helpdesk",
        "actions": actions,
    }
    if not (ROOT / "tests" / "js" / "node_modules" / "ai-v6").is_dir():
        pytest.fail("the ai packages are not installed in tests/js/node_modules (run the tests with bin/test)")
    result = run(["node", str(CLIENT)], timeout=90, input=json.dumps(request))
    answer: dict[str, Any] = json.loads(result.stdout)
    assert "fatal" not in answer, answer.get("fatal")
    return session_id, answer


def assert_matches_the_snapshot(host: Host, user: str, session_id: str, answer: dict[str, Any]) -> dict[str, Any]:
    """The client's conversation is the one the server stored; returns the snapshot."""
    assert answer["error"] is None and answer["errors"] == [], answer
    assert answer["status"] == "ready"
    stored: dict[str, Any] = host.get_json(f"/assistant/chat/{session_id}/snapshot", host.keys[user])
    assert stored["status"] == "ended"
    assert [m["id"] for m in answer["messages"]] == [m["id"] for m in stored["messages"]]
    assert strict_view(last_reply(answer["messages"])) == strict_view(stored["messages"][-1])
    return stored


def text_of(message: dict[str, Any]) -> str:
    return "".join(part["text"] for part in message["parts"] if part["type"] == "text")


@pytest.fixture(scope="module")
def conversation(host: Host) -> tuple[str, dict[str, Any]]:
    """Alice's session: one question to the shop's agent, answered in full."""
    return chat(host, "alice", [{"kind": "send", "text": ORDER_QUESTION}])


# -- the tests -----------------------------------------------------------------------------------


def test_the_wheel_installs_the_library_and_nothing_else(wheel: Path, venv: Venv, tmp_path: Path) -> None:
    assert wheel.stat().st_size < WHEEL_SIZE_LIMIT, f"{wheel.name} is {wheel.stat().st_size} bytes"
    assert venv.install_seconds < INSTALL_BUDGET_SECONDS, f"installing took {venv.install_seconds:.0f} s"
    probe = """
import importlib.metadata, importlib.util, json, sys
dist = importlib.metadata.distribution("helix-django")
print(json.dumps({
    "files": sorted(str(f) for f in dist.files),
    "top": {name: getattr(importlib.util.find_spec(name), "origin", None) for name in
            ("streams", "workers", "chat", "helix_site", "tests", "bench")},
    "prefix": sys.prefix,
}))
"""
    env = host_env(venv, SITE)
    del env["PYTHONPATH"]
    found = json.loads(run([venv.bin("python"), "-c", probe], timeout=60, cwd=tmp_path, env=env).stdout)
    files = set(found["files"])
    for package in ("streams", "workers", "chat"):
        assert found["top"][package].startswith(found["prefix"]), found["top"]  # the venv's, not the checkout's
        assert f"{package}/py.typed" in files
    assert {"chat/migrations/0001_initial.py", "chat/static/helix/helix-chat.js"} <= files
    assert found["top"]["helix_site"] is None and found["top"]["tests"] is None and found["top"]["bench"] is None
    outside = sorted(
        f for f in files if f.split("/")[0] not in ("streams", "workers", "chat") and ".dist-info/" not in f
    )
    assert outside == [], outside


def test_the_host_project_checks_migrates_and_finds_the_static_helpers(host: Host) -> None:
    check = host.manage("check")
    assert "System check identified no issues (0 silenced)." in check.stdout, check.stdout + check.stderr
    # The shop's OpenAPI schema (drf-spectacular, failing on any warning) gains nothing from Helix.
    schema = host.workdir / "openapi.yaml"
    built = host.manage("spectacular", "--fail-on-warn", "--file", str(schema))
    assert built.returncode == 0 and "/assistant/" not in schema.read_text(), built.stdout + built.stderr
    # Every Helix app sets its default_auto_field and ships all its migrations: the host, which
    # sets no DEFAULT_AUTO_FIELD, has nothing to make.
    makemigrations = host.manage("makemigrations", "--check", "--dry-run")
    assert "No changes detected" in makemigrations.stdout
    found = host.manage("findstatic", "helix/helix-chat.js")
    assert str(installed(host.venv, "chat/static/helix/helix-chat.js")) in found.stdout

    import psycopg

    with psycopg.connect(host.database, connect_timeout=5) as connection:
        tables = {row[0] for row in connection.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        applied = {row[0] for row in connection.execute("SELECT DISTINCT app FROM django_migrations")}
    # The shop's own "chat" app and Helix's live side by side: Helix's labels are namespaced.
    assert {"chat_chatsession", "chat_message", "helix_chat_chatsession", "helix_chat_message"} <= tables
    assert {"chat", "helix_chat", "accounts"} <= applied


def test_a_chat_with_the_ai_sdk_client_and_the_shops_api_key(
    host: Host, conversation: tuple[str, dict[str, Any]]
) -> None:
    session_id, answer = conversation
    stored = assert_matches_the_snapshot(host, "alice", session_id, answer)
    assert [m["role"] for m in answer["messages"]] == ["user", "assistant"]
    reply = last_reply(answer["messages"])
    tool = next(part for part in reply["parts"] if part.get("toolName") == "lookup_order")
    assert tool["state"] == "output-available" and tool["output"]["status"] == "shipped"
    assert ORDER_ANSWER in text_of(reply)
    assert stored["state"] == {"lookups": 1}
    sessions = host.get_json("/assistant/sessions", host.keys["alice"])
    assert session_id in [s["id"] for s in sessions["results"]]


def test_a_dropped_stream_resumes_to_the_stored_answer(host: Host) -> None:
    session_id, answer = chat(
        host,
        "alice",
        [{"kind": "send-and-drop", "text": ORDER_QUESTION, "dropWhenText": ORDER_ANSWER}, {"kind": "resume"}],
    )
    final = text_of(last_reply(answer["messages"]))
    dropped = answer["dropped"]["text"]
    assert ORDER_ANSWER in dropped and len(dropped) < len(final), answer["dropped"]  # dropped mid-answer
    assert_matches_the_snapshot(host, "alice", session_id, answer)


def error_code(status: int, body: bytes) -> tuple[int, str]:
    return status, json.loads(body)["code"]


def test_another_users_key_finds_no_session(host: Host, conversation: tuple[str, dict[str, Any]]) -> None:
    session_id, _ = conversation
    bob = host.keys["bob"]
    base = f"/assistant/chat/{session_id}"
    for method, path in [
        ("GET", f"{base}/snapshot"),
        ("GET", f"{base}/messages"),
        ("POST", f"{base}/stop"),
    ]:
        status, _, body = host.request(method, path, key=bob)
        assert error_code(status, body) == (404, "SESSION_NOT_FOUND"), (method, path, body)
    for path in (base, f"{base}/stream"):  # resumes: nothing to stream, as for an id nobody has
        assert host.request("GET", path, key=bob)[::2] == (204, b""), path
        assert host.request("GET", f"/assistant/chat/{uuid.uuid4()}", key=bob)[::2] == (204, b"")
    status, _, body = host.request("POST", base, key=bob, body={"message": "Mine now?"})
    assert error_code(status, body) == (404, "SESSION_NOT_FOUND"), body
    assert session_id not in [s["id"] for s in host.get_json("/assistant/sessions", bob)["results"]]
    # Alice's session is untouched.
    stored = host.get_json(f"{base}/snapshot", host.keys["alice"])
    assert [m["role"] for m in stored["messages"]] == ["user", "assistant"]


def test_without_a_valid_key_the_api_answers_401(host: Host, conversation: tuple[str, dict[str, Any]]) -> None:
    session_id, _ = conversation
    base = f"/assistant/chat/{session_id}"
    for method, path, body in [
        ("GET", f"{base}/snapshot", None),
        ("GET", base, None),
        ("POST", base, {"message": "Hello?"}),
        ("GET", "/assistant/sessions", None),
    ]:
        status, headers, answer = host.request(method, path, body=body)
        assert error_code(status, answer) == (401, "NOT_AUTHENTICATED"), (method, path, answer)
        assert headers.get("www-authenticate") == "Token"  # the first of the shop's classes names its scheme
        status, _, answer = host.request(method, path, key="not-a-key", body=body)
        assert error_code(status, answer) == (401, "AUTHENTICATION_FAILED"), (method, path, answer)


def test_a_resume_with_the_owners_token_answers_as_with_the_shops_key(
    host: Host, conversation: tuple[str, dict[str, Any]]
) -> None:
    """A resume with a user's DRF token gets the same answer, byte for byte, as with the shop's
    API key; a token of another user finds nothing to resume, and a token of nobody is refused."""
    session_id, _ = conversation
    path = f"/assistant/chat/{session_id}"
    snapshot = host.get_json(f"{path}/snapshot", host.keys["alice"])
    for position in ("0", str(snapshot["streamSequence"] // 2)):
        after = {"Last-Event-ID": position}
        status, headers, body = host.request(
            "GET", path, headers={**after, "Authorization": f"Token {host.tokens['alice']}"}
        )
        assert status == 200 and headers["content-type"].startswith("text/event-stream"), (status, body)
        assert headers["x-session-id"] == session_id and ORDER_ANSWER.split()[-1].encode() in body
        assert body.rstrip().endswith(b"data: [DONE]"), body[-200:]
        assert (status, headers, body) == host.request("GET", path, key=host.keys["alice"], headers=after)

    status, _, body = host.request("GET", path, headers={"Authorization": f"Token {host.tokens['bob']}"})
    assert (status, body) == (204, b"")
    status, headers, body = host.request("GET", path, headers={"Authorization": "Token not-a-token"})
    assert error_code(status, body) == (401, "AUTHENTICATION_FAILED"), body
    assert headers.get("www-authenticate") == "Token"


def test_the_site_serves_only_the_api_where_it_mounted_it(host: Host) -> None:
    for path in ("/", "/demo/", f"/api/chat/{uuid.uuid4()}/snapshot"):
        status, _, _ = host.request("GET", path, key=host.keys["alice"])
        assert status == 404, path
    schema = host.get_json("/assistant/schema", host.keys["alice"])
    assert schema["servers"] == [{"url": "/assistant"}]
    agents = host.get_json("/assistant/agents", host.keys["alice"])
    assert [agent["name"] for agent in agents] == ["helpdesk"]  # the shop's agent, no demo agents


def test_beat_sends_the_reaper_to_the_worker_on_helixs_queue(host: Host) -> None:
    reaped = re.compile(r"Task helix\.reap_runs\[[^]]+\] succeeded")
    deadline = time.monotonic() + 15
    while not reaped.search(log := host.worker_log.read_text()):
        assert time.monotonic() < deadline, f"no reaper task reached the worker:\n{log[-3000:]}"
        time.sleep(0.2)


def test_the_shops_gate_sees_every_helix_request_resumes_included(
    host: Host, conversation: tuple[str, dict[str, Any]]
) -> None:
    """Every Helix response passed the shop's own middleware (its header is on it, Django's
    security headers too), and a client the shop's allow-list refuses is refused on every
    endpoint, a resume of a live session included."""
    session_id, _ = conversation
    alice = host.keys["alice"]
    base = f"/assistant/chat/{session_id}"
    endpoints = [
        ("GET", base, {"Last-Event-ID": "0"}),  # a resume that streams
        ("GET", f"{base}/stream", {}),
        ("GET", f"{base}/snapshot", {}),
        ("GET", f"{base}/messages", {}),
        ("POST", f"{base}/stop", {}),
        ("GET", "/assistant/sessions", {}),
        ("GET", "/assistant/agents", {}),
    ]
    for method, path, headers in endpoints:
        status, answer, body = host.request(method, path, key=alice, headers=headers)
        assert status < 400, (method, path, status, body)
        assert answer.get("x-shop-gate") == "passed", (method, path, answer)
        assert answer.get("x-frame-options") == "DENY" and answer.get("x-content-type-options") == "nosniff"
        status, answer, body = host.request(method, path, key=alice, headers=headers, source="127.0.0.2")
        assert (status, body) == (403, b"This shop's API is not served to your address."), (method, path)
    status, _, body = host.request("GET", base, key=alice, headers={"Last-Event-ID": "0", "Host": "evil.example"})
    assert status == 400, body  # ALLOWED_HOSTS applies to resumes too
