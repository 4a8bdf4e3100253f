"""The HTTP surface: streams, JSON endpoints, ownership on every endpoint, CSRF, tokens, limits."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import AsyncClient, override_settings
from rest_framework.authtoken.models import Token

from chat.models import ChatSession, Run
from tests.chat.http.requests import login, post, read_events, ui_body

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fast_model(settings: Any) -> None:
    settings.HELIX = {**settings.HELIX, "SCRIPTED_DELAY_MS": "0"}


async def test_a_chat_round_trip() -> None:
    alice = await login("alice")
    session_id = str(uuid.uuid4())
    response = await post(alice, session_id, ui_body("What is 6 times 7?", session_id, agent="tools"))
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream" and response["X-Vercel-AI-UI-Message-Stream"] == "v1"
    assert response["X-Session-Id"] == session_id
    events = await read_events(response)
    assert events[0]["type"] == "start" and events[-1] == {"type": "finish"}
    text = "".join(e.get("delta", "") for e in events if e["type"] == "text-delta")
    assert "The result is 42.0" in text
    assert {"tool-input-available", "tool-output-available"} <= {e["type"] for e in events}
    assert (await alice.get(f"/api/chat/{session_id}")).status_code == 204  # ended: nothing to resume
    assert (await alice.get(f"/api/chat/{session_id}/stream")).status_code == 204
    snapshot = (await alice.get(f"/api/chat/{session_id}/snapshot")).json()
    assert snapshot["status"] == "ended" and [m["role"] for m in snapshot["messages"]] == ["user", "assistant"]
    assert snapshot["messages"][1]["id"] == events[0]["messageId"]
    page = (await alice.get(f"/api/chat/{session_id}/messages", {"limit": 1})).json()
    assert page["hasMore"] is True and page["messages"][0]["role"] == "user"
    sessions = (await alice.get("/api/sessions")).json()
    assert [s["id"] for s in sessions["results"]] == [session_id] and sessions["results"][0]["agent"] == "tools"


async def test_another_users_session_answers_as_one_that_does_not_exist() -> None:
    alice, bob = await login("alice"), await login("bob")
    session_id = str(uuid.uuid4())
    await read_events(await post(alice, session_id, {"message": "Mine"}))

    async def answers(target: str) -> list[tuple[int, bytes]]:
        checks = [
            await bob.get(f"/api/chat/{target}"),  # resumes: nothing to stream
            await bob.get(f"/api/chat/{target}/stream"),
            await bob.get(f"/api/chat/{target}/snapshot"),
            await bob.get(f"/api/chat/{target}/messages"),
            await bob.post(f"/api/chat/{target}/stop"),
            await bob.delete(f"/api/chat/{target}"),
        ]
        return [(r.status_code, r.content.replace(target.encode(), b"<id>")) for r in checks]

    foreign, unknown = await answers(session_id), await answers(str(uuid.uuid4()))
    assert foreign == unknown
    assert [status for status, _ in foreign] == [204, 204, 404, 404, 404, 404]
    assert all(b'"SESSION_NOT_FOUND"' in content for _, content in foreign[2:])
    stolen = await post(bob, session_id, {"message": "Steal"})
    assert (stolen.status_code, stolen.json()["code"]) == (404, "SESSION_NOT_FOUND")
    assert (await bob.get("/api/sessions")).json()["results"] == []
    assert await ChatSession.objects.filter(pk=session_id).aexists()


async def test_authentication_csrf_and_tokens() -> None:
    session_id = str(uuid.uuid4())
    assert (await post(AsyncClient(), session_id, {"message": "hi"})).status_code == 401
    user = await sync_to_async(User.objects.create_user)("carol", password="pw-carol")
    browser = AsyncClient(enforce_csrf_checks=True)
    await sync_to_async(browser.force_login)(user)
    refused = await post(browser, session_id, {"message": "hi"})  # no CSRF token
    assert (refused.status_code, refused.json()["code"]) == (403, "CSRF_FAILED")
    assert "X-CSRFToken" in refused.json()["error"] and "helix_csrf_meta" in refused.json()["error"]  # what to do
    token = await sync_to_async(Token.objects.create)(user=user)
    api = AsyncClient(enforce_csrf_checks=True)
    response = await post(api, session_id, {"message": "hi"}, {"Authorization": f"Token {token.key}"})
    assert response.status_code == 200
    await read_events(response)
    assert (
        await api.get(f"/api/chat/{session_id}/snapshot", headers={"Authorization": f"Token {token.key}"})
    ).status_code == 200
    assert (
        await api.get(f"/api/chat/{session_id}/snapshot", headers={"Authorization": "Token nope"})
    ).status_code == 401


def ui_message(text: str, message_id: str = "u1") -> bytes:
    """An AI SDK chat body whose one message is the user's ``text``."""
    parts = [{"type": "text", "text": text}]
    return json.dumps({"messages": [{"id": message_id, "role": "user", "parts": parts}]}).encode()


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "VALIDATION_ERROR"),
        (json.dumps({"message": ""}).encode(), 400, "VALIDATION_ERROR"),
        (json.dumps({"message": "x" * 20_001}).encode(), 400, "VALIDATION_ERROR"),
        (json.dumps({"messages": []}).encode(), 400, "VALIDATION_ERROR"),
        (json.dumps({"message": "hi", "agent": "no-such-agent"}).encode(), 400, "UNKNOWN_AGENT"),
        (json.dumps({"message": "x" * 2_000_000}).encode(), 413, "PAYLOAD_TOO_LARGE"),
        (b"[" * 10_000 + b"]" * 10_000, 400, "VALIDATION_ERROR"),  # nested 10,000 deep
        (b'{"message": "hi", "state": ' + b'{"a": ' * 40 + b"1" + b"}" * 41, 400, "VALIDATION_ERROR"),
        (b'{"message": "hi \\ud800"}', 400, "VALIDATION_ERROR"),  # an unpaired surrogate
        (b'{"message": "hi", "state": {"n": NaN}}', 400, "VALIDATION_ERROR"),
        (b'{"message": "hi", "state": {"n": 1e400}}', 400, "VALIDATION_ERROR"),
        (b'{"message": "caf\xc3"}', 400, "VALIDATION_ERROR"),  # not UTF-8: a sequence cut short
        (b'{"message": "hi"}\xff', 400, "VALIDATION_ERROR"),  # not UTF-8, outside any string
        (ui_message("hi").replace(b"hi", b"\xff"), 400, "VALIDATION_ERROR"),  # not UTF-8: a byte none starts with
        # What PostgreSQL cannot store: a NUL in text or in an id, an id wider than its column.
        (json.dumps({"message": "hi\u0000"}).encode(), 400, "VALIDATION_ERROR"),
        (ui_message("hi\u0000"), 400, "VALIDATION_ERROR"),
        (ui_message("hi", "u1\u0000"), 400, "VALIDATION_ERROR"),
        (ui_message("hi", "u" * 101), 400, "VALIDATION_ERROR"),
    ],
)
async def test_bad_input_gets_typed_errors_and_changes_nothing(body: bytes, status: int, code: str) -> None:
    alice = await login("alice")
    session_id = str(uuid.uuid4())
    response = await alice.post(f"/api/chat/{session_id}", body, content_type="application/json")
    assert (response.status_code, response.json()["code"]) == (status, code)
    assert (await ChatSession.objects.acount(), await Run.objects.acount()) == (0, 0)


async def test_out_of_range_paging_is_a_typed_400() -> None:
    alice = await login("alice")
    session_id = str(uuid.uuid4())
    await read_events(await post(alice, session_id, ui_body("Hello", session_id)))
    for query in ({"offset": str(10**23)}, {"limit": "-1"}, {"offset": "1e3"}):
        response = await alice.get(f"/api/chat/{session_id}/messages", query)
        assert (response.status_code, response.json()["code"]) == (400, "VALIDATION_ERROR"), query


async def test_bad_resume_headers_and_malformed_ids() -> None:
    alice = await login("alice")
    session_id = str(uuid.uuid4())
    await read_events(await post(alice, session_id, {"message": "hi"}))
    response = await alice.get(f"/api/chat/{session_id}", headers={"Last-Event-ID": "-3"})
    assert (response.status_code, response.json()["code"]) == (400, "VALIDATION_ERROR")
    assert (await alice.get("/api/chat/not-a-uuid/snapshot")).status_code == 404  # a fine id, no session
    assert (await alice.get(f"/api/chat/{uuid.uuid4()}/snapshot")).status_code == 404
    assert (await alice.get(f"/api/chat/{uuid.uuid4()}")).status_code == 204


async def test_allow_names_each_views_methods_and_head_reads_the_position_as_get_does() -> None:
    alice = await login("alice")
    session_id = str(uuid.uuid4())
    await read_events(await post(alice, session_id, {"message": "hi"}))
    refused = await alice.put(f"/api/chat/{session_id}")
    assert (refused.status_code, refused["Allow"]) == (405, "GET, POST, DELETE, HEAD")
    assert (await alice.get(f"/api/chat/{session_id}/snapshot"))["Allow"] == "GET, HEAD"
    assert (await alice.post(f"/api/chat/{session_id}/stop"))["Allow"] == "POST"
    bad = await alice.head(f"/api/chat/{session_id}", headers={"Last-Event-ID": "x"})
    assert bad.status_code == 400
    assert (await alice.head(f"/api/chat/{session_id}", headers={"Last-Event-ID": "999999"})).status_code == 400
    assert (await alice.head(f"/api/chat/{session_id}")).status_code == 204  # the run ended: nothing to send


async def test_rate_limit(settings: Any) -> None:
    alice = await login("alice")
    with override_settings(HELIX={**settings.HELIX, "THROTTLE_RATES": {"helix_chat": "2/minute"}}):
        for _ in range(2):
            await read_events(await post(alice, str(uuid.uuid4()), {"message": "hi"}))
        response = await post(alice, str(uuid.uuid4()), {"message": "hi"})
    assert response.status_code == 429 and response.json()["code"] == "RATE_LIMITED"
    assert 0 < int(response["Retry-After"]) <= 60


async def test_conflict_stop_resume_and_delete(settings: Any) -> None:
    settings.HELIX = {**settings.HELIX, "SCRIPTED_DELAY_MS": "10"}
    alice = await login("alice")
    session_id = str(uuid.uuid4())
    first = await post(alice, session_id, {"message": "A long question", "agent": "research"})
    assert first.status_code == 200
    stream = first.streaming_content.__aiter__()
    assert (await anext(stream)).startswith(b": stream-open")
    conflict = await post(alice, session_id, {"message": "Another"})
    assert (conflict.status_code, conflict.json()["code"]) == (409, "RUN_CONFLICT")
    resumed = await alice.get(f"/api/chat/{session_id}/stream")
    assert resumed.status_code == 200
    stop = await alice.post(f"/api/chat/{session_id}/stop")
    assert stop.status_code == 202 and stop.json() == {"stopped": True}
    events = await read_events(resumed)
    assert events[0]["type"] == "start" and events[-1]["type"] == "finish"
    assert any(e["type"] == "data-run-interrupted" for e in events)
    await asyncio.sleep(0.1)
    assert (await Run.objects.filter(session_id=session_id).afirst()).status == "interrupted"  # type: ignore[union-attr]
    assert (await alice.delete(f"/api/chat/{session_id}")).status_code == 204
    assert (await alice.get(f"/api/chat/{session_id}/snapshot")).status_code == 404


async def test_a_failed_run_answers_410_on_resume() -> None:
    alice = await login("alice")
    session_id = str(uuid.uuid4())
    from workers.exceptions import LLMError, RunErrorCode
    from workers.llm.scripted import ScriptedModel, ScriptedTurn
    from workers.runtime.agents import define_agent

    define_agent(
        "broken",
        "x",
        llm=ScriptedModel(
            lambda m: ScriptedTurn(error=LLMError("down", RunErrorCode.PROVIDER_OVERLOADED, True)), delay=(0, 0)
        ),
    )
    events = await read_events(await post(alice, session_id, {"message": "hi", "agent": "broken"}))
    assert {"type": "error", "errorText": "down"} in events
    response = await alice.get(f"/api/chat/{session_id}")
    assert (response.status_code, response.json()["code"]) == (410, "STREAM_FAILED")


async def test_anonymous_mode(settings: Any) -> None:
    session_id = str(uuid.uuid4())
    with override_settings(HELIX={**settings.HELIX, "ALLOW_ANONYMOUS": True}):
        visitor, stranger = AsyncClient(), AsyncClient()
        await read_events(await post(visitor, session_id, {"message": "hi"}))
        assert (await visitor.get(f"/api/chat/{session_id}/snapshot")).status_code == 200
        assert (await stranger.get(f"/api/chat/{session_id}/snapshot")).status_code == 404
        assert [s["id"] for s in (await visitor.get("/api/sessions")).json()["results"]] == [session_id]
        assert (await stranger.get("/api/sessions")).json()["results"] == []
    assert (await visitor.get(f"/api/chat/{session_id}/snapshot")).status_code == 401


async def test_regenerate_replaces_the_last_answer_and_a_continuation_keeps_its_id() -> None:
    alice = await login("alice")
    session_id = str(uuid.uuid4())
    first = ui_body("Hello", session_id)
    events = await read_events(await post(alice, session_id, first))
    old_id = events[0]["messageId"]
    regenerate = {"id": session_id, "messages": first["messages"], "trigger": "regenerate-message", "messageId": old_id}
    events = await read_events(await post(alice, session_id, regenerate))
    new_id = events[0]["messageId"]
    assert new_id != old_id
    snapshot = (await alice.get(f"/api/chat/{session_id}/snapshot")).json()
    assert [(m["role"], m["id"]) for m in snapshot["messages"]] == [
        ("user", first["messages"][0]["id"]),
        ("assistant", new_id),
    ]
    continuation = {
        "id": session_id,
        "messages": [*snapshot["messages"]],
        "trigger": "submit-message",
    }
    events = await read_events(await post(alice, session_id, continuation))
    assert events[0] == {"type": "start", "messageId": new_id}  # one assistant message, continued
    assert await Run.objects.filter(session_id=session_id).acount() == 3


async def test_a_snapshot_at_a_checkpoint_over_http() -> None:
    from chat.models import Checkpoint

    alice = await login("alice")
    session_id = str(uuid.uuid4())
    await read_events(await post(alice, session_id, ui_body("Hello", session_id)))
    checkpoint = await Checkpoint.objects.filter(session_id=session_id).afirst()
    assert checkpoint is not None
    url = f"/api/chat/{session_id}/snapshot"
    snapshot = (await alice.get(url, {"checkpointId": str(checkpoint.pk)})).json()
    assert (snapshot["checkpointId"], snapshot["streamSequence"]) == (str(checkpoint.pk), checkpoint.stream_sequence)
    assert snapshot["stepCount"] == checkpoint.step
    missing = await alice.get(url, {"checkpointId": str(uuid.uuid4())})
    assert (missing.status_code, missing.json()["code"]) == (404, "CHECKPOINT_NOT_FOUND")
