"""Session ids: any URL-safe id, one spelling in every store, and sessions the server names."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import AsyncClient

from chat.models import ChatSession, Message, Run
from chat.session_ids import canonical_session_id, is_session_id
from streams.backends import get_stream_manager
from streams.exceptions import ValidationError
from tests.chat.http.requests import read_events

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fast_model(settings: Any) -> None:
    settings.HELIX = {**settings.HELIX, "SCRIPTED_DELAY_MS": "0"}


async def client_of(username: str) -> AsyncClient:
    user = await sync_to_async(User.objects.create_user)(username, password="pw")
    client = AsyncClient()
    await sync_to_async(client.force_login)(user)
    return client


async def send(client: AsyncClient, path: str, body: Any) -> Any:
    return await client.post(path, json.dumps(body), content_type="application/json")


async def counts() -> tuple[int, int, int]:
    return await ChatSession.objects.acount(), await Run.objects.acount(), await Message.objects.acount()


@pytest.mark.parametrize("session_id", ["session-123", "chat_7.v2:main", "a", "x" * 128, "kJ8s0aQ1mZ"])
def test_url_safe_ids_are_kept_as_written(session_id: str) -> None:
    assert canonical_session_id(session_id) == session_id


@pytest.mark.parametrize(
    "spelling",
    [
        "9F1C2B7E-3A4D-4E5F-8A6B-7C8D9E0F1A2B",
        "9f1c2b7e3a4d4e5f8a6b7c8d9e0f1a2b",
        "9f1c2b7e-3a4d-4e5f-8a6b-7c8d9e0f1a2b",
    ],
)
def test_every_spelling_of_a_uuid_is_one_id(spelling: str) -> None:
    assert canonical_session_id(spelling) == "9f1c2b7e-3a4d-4e5f-8a6b-7c8d9e0f1a2b"


@pytest.mark.parametrize(
    "bad", ["", "a/b", "..", ".", "a..b", "x" * 129, "space d", "br{ace}", "é", "a\x00b", "a\n", 42, None]
)
def test_other_ids_are_refused_naming_the_field(bad: Any) -> None:
    assert not is_session_id(bad)
    with pytest.raises(ValidationError, match=r"^sessionId must be"):
        canonical_session_id(bad, "sessionId")


async def test_a_seeds_style_id_chats_and_resumes() -> None:
    alice = await client_of("alice")
    events = await read_events(await send(alice, "/api/chat/session-123", {"message": "hi"}))
    assert events[-1]["type"] == "finish"
    assert (await alice.get("/api/chat/session-123/snapshot")).json()["status"] == "ended"
    assert (await alice.get("/api/chat/session-123/messages")).json()["messages"][0]["role"] == "user"


async def test_an_uppercase_uuid_is_the_same_session_everywhere() -> None:
    alice = await client_of("alice")
    upper = str(uuid.uuid4()).upper()
    response = await send(alice, f"/api/chat/{upper}", {"message": "hi"})
    assert response["X-Session-Id"] == upper.lower()
    await read_events(response)
    run = await Run.objects.aget(session_id=upper.lower())
    assert run.status == "completed"
    assert await get_stream_manager().get_stream_info(upper.lower()) is not None
    assert await get_stream_manager().get_stream_info(upper) is None
    snapshot = await alice.get(f"/api/chat/{upper.replace('-', '')}/snapshot")
    assert snapshot.status_code == 200 and [m["role"] for m in snapshot.json()["messages"]] == ["user", "assistant"]


async def test_a_post_without_an_id_makes_a_session_and_names_it() -> None:
    alice = await client_of("alice")
    response = await send(alice, "/api/chat", {"message": "hi"})
    session_id = response["X-Session-Id"]
    await read_events(response)
    assert is_session_id(session_id) and await ChatSession.objects.filter(pk=session_id).aexists()
    assert (await alice.get(f"/api/chat/{session_id}/messages")).status_code == 200


async def test_a_post_to_chat_uses_the_ai_sdk_chat_id_of_its_body() -> None:
    alice, bob = await client_of("alice"), await client_of("bob")
    body = {"id": "kJ8s0aQ1mZ", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}
    response = await send(alice, "/api/chat", body)
    assert response["X-Session-Id"] == "kJ8s0aQ1mZ"
    await read_events(response)
    before = await counts()
    stolen = await send(bob, "/api/chat", body)  # the id of someone else's session
    assert (stolen.status_code, stolen.json()["code"]) == (404, "SESSION_NOT_FOUND")
    assert await counts() == before
    assert (await alice.get("/api/chat")).status_code == 405


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/chat/" + "x" * 300, {"message": "hi"}, "session id"),
        ("/api/chat/..", {"message": "hi"}, "session id"),
        ("/api/chat/a..b/snapshot", None, "session id"),
        ("/api/chat", {"id": "a/b", "message": "hi"}, "id"),
        ("/api/chat", {"sessionId": "y" * 300, "message": "hi"}, "sessionId"),
        ("/api/chat", {"sessionId": 7, "message": "hi"}, "sessionId"),
    ],
)
async def test_bad_ids_are_a_typed_400_and_store_nothing(path: str, body: Any, field: str) -> None:
    alice = await client_of("alice")
    before = await counts()
    response = await (alice.get(path) if body is None else send(alice, path, body))
    assert (response.status_code, response.json()["code"]) == (400, "VALIDATION_ERROR")
    assert response.json()["error"].startswith(f"{field} must be")
    assert await counts() == before
