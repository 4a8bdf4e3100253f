"""A site with ``ATOMIC_REQUESTS = True`` (as many have): every Helix endpoint answers, with
nothing for the site to wrap. Django refuses to wrap an async view in the request's transaction,
so Helix's views are non-atomic, and Helix's own writes are atomic each."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connections

from tests.chat.http.requests import login, post, read_events

pytestmark = pytest.mark.django_db(transaction=True)


async def test_every_endpoint_answers_under_atomic_requests(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    for alias in connections:
        monkeypatch.setitem(connections.settings[alias], "ATOMIC_REQUESTS", True)
    settings.HELIX = {**settings.HELIX, "SCRIPTED_DELAY_MS": "1"}
    alice = await login("alice")
    session_id = str(uuid.uuid4())
    events = await read_events(await post(alice, session_id, {"message": "Hello"}))
    assert events[0]["type"] == "start" and events[-1]["type"] == "finish"
    answers = [
        await alice.get(f"/api/chat/{session_id}/stream"),
        await alice.get(f"/api/chat/{session_id}/snapshot"),
        await alice.get(f"/api/chat/{session_id}/messages"),
        await alice.post(f"/api/chat/{session_id}/stop"),
        await alice.get("/api/sessions"),
        await alice.get("/api/agents"),
        await alice.delete(f"/api/chat/{session_id}"),
    ]
    assert [r.status_code for r in answers] == [204, 200, 200, 200, 200, 200, 204]
