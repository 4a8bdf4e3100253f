"""Workers say which queues they consume; a chat whose queue no live worker consumes is refused
at once (503 EXECUTOR_UNAVAILABLE, nothing stored) instead of spinning until the reaper gives up."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from chat.models import ChatSession, Run
from tests.live import http_request, serve_site, start_celery_worker
from workers.presence import WorkerPresence


def test_a_worker_counts_while_it_speaks_and_not_after(redis_url: str, key_prefix: str) -> None:
    presence = WorkerPresence(redis_url, prefix=f"{key_prefix}workers:", ttl=0.5)
    asker = WorkerPresence(redis_url, prefix=f"{key_prefix}workers:", ttl=0.5)
    assert asker.listening("helix") == 0
    presence.announce(["helix"], "w1@host")
    assert asker.listening("helix") == 1 and asker.listening("other") == 0
    time.sleep(0.6)
    fresh = WorkerPresence(redis_url, prefix=f"{key_prefix}workers:", ttl=0.5)  # no cached answer
    assert fresh.listening("helix") == 0  # silent past its time: gone
    stop = presence.keep_announcing(["helix"], "w1@host")
    time.sleep(0.6)
    assert WorkerPresence(redis_url, prefix=f"{key_prefix}workers:", ttl=0.5).listening("helix") == 1
    stop.set()
    presence.withdraw(["helix"], "w1@host")
    assert WorkerPresence(redis_url, prefix=f"{key_prefix}workers:", ttl=0.5).listening("helix") == 0


@pytest.mark.django_db(transaction=True)
def test_a_chat_whose_queue_no_worker_consumes_is_refused_at_once(
    test_database: str, redis_url: str, tmp_path: Path
) -> None:
    listened, unheard = f"test-{uuid.uuid4().hex[:8]}", f"test-{uuid.uuid4().hex[:8]}"
    worker_env = {
        "DJANGO_SETTINGS_MODULE": "helix_site.settings",
        "REDIS_URL": redis_url,
        "HELIX_STREAM_BACKEND": "redis",
        "DATABASE_URL": test_database,
        "HELIX_CELERY_QUEUE": listened,
        "HELIX_SCRIPTED_DELAY_MS": "3",
    }
    worker = start_celery_worker({**os.environ, **worker_env}, listened, tmp_path / "worker.log")
    user = User.objects.create_user(f"u-{uuid.uuid4().hex[:6]}", password="pw-presence")
    token = Token.objects.create(user=user).key
    try:
        for queue, expected in ((unheard, 503), (listened, 200)):
            site_env = {**worker_env, "HELIX_EXECUTOR": "celery", "HELIX_CELERY_QUEUE": queue}
            with serve_site(site_env) as port:
                session_id = str(uuid.uuid4())
                started = time.monotonic()
                status, headers, body = post(port, token, session_id)
                assert status == expected, body[:300]
                if expected == 503:
                    assert time.monotonic() - started < 5
                    assert json.loads(body)["code"] == "EXECUTOR_UNAVAILABLE" and headers["retry-after"] == "2"
                    assert not ChatSession.objects.filter(pk=session_id).exists() and not Run.objects.exists()
                else:
                    assert b"data: [DONE]" in body
    finally:
        worker.terminate()
        worker.wait(20)


def post(port: int, token: str, session_id: str) -> tuple[int, dict[str, str], bytes]:
    headers = {"Authorization": f"Token {token}"}
    return http_request(port, "POST", f"/api/chat/{session_id}", body={"message": "Hello"}, headers=headers)
